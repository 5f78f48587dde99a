"""Optimal-control solvers on top of the dynamics layer.

>>> from solvers import ActionModel, ShootingProblem, DDP
>>> problem = ShootingProblem.uniform(model, x0, horizon=32, dt=0.01, running_cost=cost, terminal_cost=tcost)
>>> # or knot by knot: ShootingProblem(x0, [ActionModel(model, cost, 0.01)] * 32, ActionModel(model, tcost, 0.0))
>>> res = DDP(problem, box=True).solve(max_iter=50, tol=1e-6)

:class:`ILQR` (Gauss–Newton), :class:`DDP` (with second-order dynamics terms), :class:`FDDP`
(feasibility-driven multiple shooting), :class:`CSQP` and :class:`ALDDP` (hard constraints); costs in
:mod:`solvers.costs`. See docs/solvers.md.
"""

from .action_model import ActionModel, ContactDynamics, FreeDynamics, ImpulseDynamics
from .augmented_lagrangian import ALDDP
from .box_qp import BoxQPResult, box_qp
from .constraints import (Constraint, ControlBounds, CustomConstraint, FrameHalfSpace, FrictionCone,
                          JointPositionBounds, JointVelocityBounds, WrenchCone, as_constraint)
from .costs import (ComPositionCost, ControlCost, Cost, CostSum, CustomCost, FramePlacementCost, FramePositionCost,
                    FrameRotationCost, JointLimitCost, ResidualCost, StateCost, as_cost, gravity_compensation)
from .csqp import CSQP
from .ddp import DDP
from .discrete_dynamics import DiscreteDynamics, DynamicsDerivatives
from .fddp import FDDP
from .ilqr import ILQR
from .integrators import EulerModel, ImpulseModel, IntegratedModel, RK4Model
from .problem import ProblemDerivatives, ShootingProblem
from .problem_data import ProblemData
from .result import ConstrainedResult, SolverResult
from .sampling import CEM, MPPI, PredictiveSampling
from .state_space import StateSpace

SOLVERS = {"ilqr": ILQR, "ddp": DDP, "fddp": FDDP, "csqp": CSQP, "alddp": ALDDP,
           "sampling": PredictiveSampling, "mppi": MPPI, "cem": CEM}

__all__ = ["ActionModel", "ContactDynamics", "FreeDynamics", "ImpulseDynamics", "ShootingProblem", "ILQR", "DDP",
           "FDDP", "SolverResult", "SOLVERS", "ProblemDerivatives", "ProblemData", "DiscreteDynamics",
           "DynamicsDerivatives", "IntegratedModel", "EulerModel", "RK4Model", "ImpulseModel", "StateSpace", "box_qp",
           "BoxQPResult",
           "Cost", "CostSum", "ResidualCost", "CustomCost", "as_cost", "StateCost", "ControlCost",
           "FramePositionCost", "FrameRotationCost", "FramePlacementCost", "ComPositionCost", "JointLimitCost",
           "gravity_compensation", "CSQP", "ALDDP", "ConstrainedResult", "Constraint", "ControlBounds",
           "CustomConstraint",
           "FrameHalfSpace", "FrictionCone", "JointPositionBounds", "JointVelocityBounds", "WrenchCone",
           "as_constraint",
           "PredictiveSampling", "MPPI", "CEM"]
