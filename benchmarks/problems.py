"""Problems that benchmarks time and tests solve, defined once: the iiwa reaching past a wall with
a joint bound and HyQ standing under a lateral push with hard friction cones (``constrained.py``,
tests/solvers/constraints), and free-base HyQ without contacts (``second_order_ddp.py``,
tests/solvers/test_ddp_second_order_provider.py).

Importing this module has no side effect (unlike the benchmark scripts, which configure libgomp's
worker wait first), so tests may import it.
"""

from __future__ import annotations

import numpy as np

import dynamics
import tasks
from solvers import (
    ActionModel,
    ControlCost,
    FrameHalfSpace,
    FramePositionCost,
    FreeDynamics,
    FrictionCone,
    JointPositionBounds,
    ShootingProblem,
    StateCost,
)
from solvers.costs import ComPositionCost, CostSum, FrictionConeCost

#: the iiwa-wall target [m], past the wall y <= WALL
TARGET = np.array([0.55, 0.25, 0.45])
#: the wall of iiwa-wall: the end effector stays in y <= WALL [m]
WALL = 0.10
#: joint 1 >= JOINT_1_LOWER [rad] in iiwa-wall (unconstrained it would go below)
JOINT_1_LOWER = 0.72


def iiwa_wall(N: int = 10, dt: float = 0.03, backend: str = "numba", constrained: bool = True) -> ShootingProblem:
    """The iiwa end effector reaches for TARGET but must stay in y <= WALL [m]; joint 1 >=
    JOINT_1_LOWER [rad]; both active at the optimum. passive_forces=False (Crocoddyl has none).
    constrained=False: the same costs and dynamics without the constraints (for the unconstrained
    solvers)."""
    task = tasks.get_task("iiwa-reach")
    p0 = task.build_problem(task.initial_state(), N, dt, backend=backend, passive_forces=False)
    m, x0 = p0.model, p0.x0
    ug = p0.gravity_compensation()
    run_cost = 1.0 * FramePositionCost(m, "ee", TARGET) + 0.1 * StateCost(m, x0) + 1e-2 * ControlCost(m, ug)
    term_cost = 10.0 * FramePositionCost(m, "ee", TARGET) + 0.1 * StateCost(m, x0)
    lo = np.full(m.nq, -np.inf)
    lo[1] = JOINT_1_LOWER
    cons = [FrameHalfSpace(m, "ee", [0, 1, 0], WALL), JointPositionBounds(m, lo, np.full(m.nq, np.inf))]
    cons = cons if constrained else []
    dyn = FreeDynamics(passive_forces=False)
    return ShootingProblem(x0, [ActionModel(m, run_cost, dt, dyn, constraints=cons)] * N,
                           ActionModel(m, term_cost, 0.0, dyn, constraints=cons), backend=backend)


def hyq_push(N: int = 10, dt: float = 0.01, push: float = 1.0, backend: str = "numba",
             constrained: bool = True, facets: int = 4) -> tuple[tasks.Task, ShootingProblem]:
    """hyq-stand with a lateral base velocity ``push`` [m/s] at x0 and the friction-cone penalty
    replaced by hard cones (f_min = 0, ``facets`` faces) on every running knot (constrained=False:
    no cones, nor the penalty). Returns (task, problem)."""
    task = tasks.get_task("hyq-stand", cones="penalty")
    m = task.model
    x0 = task.initial_state().copy()
    x0[m.nq + 1] = push
    p0 = task.build_problem(x0, N, dt, backend=backend, passive_forces=False)
    am0 = p0.running_models[0]
    cost = CostSum({k: v for k, v in am0.cost.terms.items() if not isinstance(v[0], FrictionConeCost)})
    cone = FrictionCone(m, task.contacts, task.mu, f_min=0.0, passive_forces=False, facets=facets)
    p = ShootingProblem(x0, [ActionModel(m, cost, am0.dt, am0.dynamics, constraints=[cone] if constrained else [])] * N,
                        p0.terminal_model, backend=backend)
    p.initial_controls = p0.initial_controls
    return task, p


def hyq_free_base(N: int, dt: float, second_order: str | None, backend="numpy") -> ShootingProblem:
    """Free-base HyQ without contacts, 5 cm above "standing" and at rest (it falls; the point is
    the dynamics tensors including the SE(3) base): state regularisation towards "standing", CoM
    height, small control cost. ``second_order``: ``ShootingProblem``'s second-order provider."""
    m = dynamics.load_model("hyq")
    x_ref = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    x0 = x_ref.copy()
    x0[2] += 0.05
    running = CostSum({"x": (StateCost(m, x_ref, np.r_[np.full(6, 10.0), np.ones(12), np.full(18, 0.1)]), 1.0),
                       "u": (ControlCost(m), 1e-4),
                       "com": (ComPositionCost(m, [0.0, 0.0, 0.6]), 1.0)})
    terminal = CostSum({"x": (StateCost(m, x_ref, np.full(2 * m.nv, 10.0)), 1.0)})
    return ShootingProblem.uniform(m, x0, N, dt, running, terminal, backend=backend, second_order=second_order)
