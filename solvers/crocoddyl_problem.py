"""The same shooting problem in Crocoddyl, for comparisons (tests/test_solvers_crocoddyl.py,
benchmarks/solvers.py). Crocoddyl is optional and imported only here.

Mapping (Mastalli et al. 2020; Crocoddyl 3): the robot comes from ``pin.buildModelFromMJCF`` of
the same file (armature included); ``DifferentialActionModelFreeFwdDynamics`` with
``ActuationModelFull`` and ``IntegratedActionModelEuler`` (symplectic Euler, running cost × dt,
terminal model with dt = 0: cost not scaled) — our ``integrator="euler"``. Cost terms map one to
one with ``ActivationModelWeightedQuad`` (½ Σ w r²): :class:`FramePositionCost` →
``ResidualModelFrameTranslation``, :class:`StateCost` → ``ResidualModelState``,
:class:`ControlCost` → ``ResidualModelControl``; a knot's sum weight becomes the
``CostModelSum`` weight; every knot becomes its own action model with its own dt, cost,
references and weights (our per-knot :class:`~solvers.action_model.ActionModel`).

Restrictions (raise ``NotImplementedError``): hinge/slide robots with zero joint reference
(then q and v coincide with Pinocchio's), identity actuation, ``passive_forces=False`` (Crocoddyl's
free forward dynamics has no joint damping), Euler integration, and only the three cost types above.
"""

from __future__ import annotations

import numpy as np

from .costs import ControlCost, CostSum, FramePositionCost, StateCost
from .costs.base import per_knot
from .problem import ShootingProblem


def _check(problem: ShootingProblem) -> None:
    m = problem.model
    if m.ball_adr or m.free_adr:
        raise NotImplementedError("ball/free joints: q layouts of MuJoCo and Pinocchio differ (quaternion order)")
    if np.any(m.link_qpos0 != 0):
        raise NotImplementedError("hinge/slide joints with a MuJoCo 'ref' offset")
    if m.nu != m.nv or not np.array_equal(m.actuation_matrix, np.eye(m.nv)):
        raise NotImplementedError("only identity actuation (ActuationModelFull) is mapped")
    if any(g.item._has_passive for g in problem.dynamics_groups):
        raise NotImplementedError("build the ShootingProblem with passive_forces=False: Crocoddyl's free forward "
                                  "dynamics ignores joint damping and springs")
    if problem.integrator != "euler":
        raise NotImplementedError("only integrator='euler' (IntegratedActionModelEuler) is mapped")


def pinocchio_model(problem: ShootingProblem):
    import pinocchio as pin
    m = problem.model
    if m.path is None:
        raise NotImplementedError("the model has no file path to load into Pinocchio")
    pm = pin.buildModelFromMJCF(m.path)
    pm.armature = np.asarray(m.dof_armature, float).copy()
    pm.gravity.linear = np.asarray(m.gravity, float)
    return pm


def _terms(cost):
    if isinstance(cost, CostSum):
        return [(name, c, w) for name, (c, w) in cost.terms.items()]
    return [(cost.name, cost, np.array(1.0))]


def _cost_model(croc, state, pm, cost, knot: int, nu: int):
    sum_ = croc.CostModelSum(state, nu)
    knots = np.array([knot])
    for name, c, w in _terms(cost):
        weight = float(per_knot(f"weight of '{name}'", w, knots, ())[0])
        cw = per_knot(f"{name} weights", c.weights, knots, (c.nr,))[0]
        act = croc.ActivationModelWeightedQuad(np.asarray(cw, float).copy())
        if isinstance(c, FramePositionCost):
            target = per_knot("target", c.target, knots, (3,))[0]
            res = croc.ResidualModelFrameTranslation(state, pm.getFrameId(c.frame), np.asarray(target).copy(), nu)
        elif isinstance(c, StateCost):
            ref = per_knot("reference", c.reference, knots, (state.nx,))[0]
            res = croc.ResidualModelState(state, np.asarray(ref).copy(), nu)
        elif isinstance(c, ControlCost):
            ref = per_knot("reference", c.reference, knots, (nu,))[0]
            res = croc.ResidualModelControl(state, np.asarray(ref).copy())
        else:
            raise NotImplementedError(f"cost term '{name}' ({type(c).__name__}) has no Crocoddyl counterpart here")
        sum_.addCost(name, croc.CostModelResidual(state, act, res), weight)
    return sum_


def build_crocoddyl_problem(problem: ShootingProblem, bounds: bool = False):
    """``crocoddyl.ShootingProblem`` equivalent to ``problem`` (see module docstring). With
    ``bounds=True`` the control limits are set on the action models (for ``SolverBoxFDDP``)."""
    import crocoddyl as croc
    _check(problem)
    pm = pinocchio_model(problem)
    state = croc.StateMultibody(pm)
    actuation = croc.ActuationModelFull(state)
    nu = problem.nu
    running = []
    for t in range(problem.horizon):
        am = problem.running_models[t]
        dam = croc.DifferentialActionModelFreeFwdDynamics(state, actuation, _cost_model(croc, state, pm, am.cost, t, nu))
        if bounds:
            dam.u_lb, dam.u_ub = problem.u_lower.copy(), problem.u_upper.copy()
        running.append(croc.IntegratedActionModelEuler(dam, am.dt))
    if problem.terminal_cost is None:
        tcost = croc.CostModelSum(state, nu)
    else:
        tcost = _cost_model(croc, state, pm, problem.terminal_cost, problem.horizon, nu)
    terminal = croc.IntegratedActionModelEuler(croc.DifferentialActionModelFreeFwdDynamics(state, actuation, tcost), 0.0)
    return croc.ShootingProblem(problem.x0.copy(), running, terminal)
