"""The same shooting problem in Crocoddyl, for comparisons (tests/solvers/test_solvers_crocoddyl.py,
tests/solvers/test_crocoddyl_contact.py, benchmarks/solvers.py, benchmarks/mpc_rate.py). Crocoddyl is
optional and imported only here.

Mapping (Mastalli et al. 2020; Crocoddyl 3): the robot comes from ``pin.buildModelFromMJCF`` of
the same file (armature and gravity copied from our model); every knot becomes its own
``IntegratedActionModelEuler`` (symplectic Euler, running cost × dt, terminal model with dt = 0:
cost not scaled) — our ``integrator="euler"`` — around a differential model chosen by the knot's
dynamics:

* :class:`~solvers.action_model.FreeDynamics` → ``DifferentialActionModelFreeFwdDynamics``;
* :class:`~solvers.action_model.ContactDynamics` → ``DifferentialActionModelContactFwdDynamics``
  (``enable_force=True``, no inverse damping) with one contact per frame of the
  :class:`dynamics.ContactSet`: point → ``ContactModel3D`` in ``LOCAL_WORLD_ALIGNED``, 6-D →
  ``ContactModel6D`` in ``LOCAL``, Baumgarte gains ``(kp, kd)`` and the ``kp`` reference copied
  (both sides: ``γ = J̇ v + kd ν + kp e``, docs/contacts.md);
* :class:`~solvers.action_model.ImpulseDynamics` (point contacts) → ``ActionModelImpulseFwdDynamics``
  with ``ImpulseModel3D`` per foot (LOCAL_WORLD_ALIGNED) and the restitution; it has no control
  (nu = 0): the knot's :class:`ControlCost` (decoupled, zero at the optimum) is dropped and
  :func:`to_crocoddyl_controls` gives it an empty control.

Actuation: identity ``B`` → ``ActuationModelFull``; a floating base whose joints are all
actuated in order (``B = [0₆; I]``) → ``ActuationModelFloatingBase``.

Cost terms map one to one (a knot's sum weight becomes the ``CostModelSum`` weight):
:class:`StateCost` → ``ResidualModelState``, :class:`ControlCost` → ``ResidualModelControl``,
:class:`FramePositionCost` → ``ResidualModelFrameTranslation``, :class:`FrameHeightCost` → its z row
(weights (0, 0, w)), :class:`FrameVelocityCost` → ``ResidualModelFrameVelocity`` in
LOCAL_WORLD_ALIGNED (weights (w, 0)), :class:`ComPositionCost` →
``ResidualModelCoMPosition`` (all with ``ActivationModelWeightedQuad``, ½ Σ w r²);
:class:`ContactForceCost` → one ``ResidualModelContactForce`` per frame (λ in world axes for
point contacts, both sides); :class:`FrictionConeCost` → one ``ResidualModelContactFrictionCone``
per foot, ``FrictionCone(I, μ, 4 facets)`` with ``ActivationModelWeightedQuadraticBarrier``
(rows ``±f_x − μ f_z``, ``±f_y − μ f_z`` ≤ 0 and ``f_z ≥ f_min`` in the same order as ours; that
activation is ½ Σ (w r)², so it gets the square roots of our weights);
:class:`WrenchConeCost` → one ``ResidualModelContactWrenchCone`` per sole, ``WrenchCone(I, μ,
sole size)`` (the same 17 rows in another order: matched row by row, weights carried along).

States: our q is MuJoCo's qpos (free/ball quaternions (w, x, y, z)), Pinocchio's has (x, y, z, w);
velocities agree (free joint: body-frame twist, docs/conventions.md) when the MJCF reader keeps
MuJoCo's dof order, which is checked. Convert trajectories with :func:`to_pinocchio_states` /
:func:`from_pinocchio_states`; controls with :func:`to_crocoddyl_controls` (empty on impulse knots).

Constraints (``ActionModel(..., constraints=...)``, for ``mim_solvers.SolverCSQP``) go into a
``ConstraintModelManager`` of ``ConstraintModelResidual`` items with our bounds:
:class:`~solvers.constraints.JointPositionBounds` / :class:`~solvers.constraints.JointVelocityBounds`
→ ``ResidualModelState`` around the neutral state (bounds on the bounded rows, ±inf elsewhere);
:class:`~solvers.constraints.FrameHalfSpace` with an axis-aligned normal ±e_i →
``ResidualModelFrameTranslation`` (origin target) bounded on row i;
:class:`~solvers.constraints.ControlBounds` (and, with ``control_box=True``, the problem's
``u_lower``/``u_upper`` on every running knot, as ``CSQP(box=True)`` adds them) →
``ResidualModelControl``; :class:`~solvers.constraints.FrictionCone` → one
``ResidualModelContactFrictionCone`` per foot with ``FrictionCone(I, μ, facets, outer, f_min)``
and its own bounds (the same rows up to order and sign); :class:`~solvers.constraints.WrenchCone`
→ one ``ResidualModelContactWrenchCone`` per sole with ``WrenchCone(I, μ, sole size, 4, outer,
f_min)`` and its bounds (the same 17-row set). Plain-Python constraints are not mapped.

Restrictions (raise ``NotImplementedError``): hinge/slide joints with a MuJoCo ``ref``, free
joints whose Pinocchio placement is not the identity, a dof order that the reader changed,
actuation other than the two above, ``passive_forces=False`` needed (Crocoddyl's forward dynamics
has no joint damping or springs), Euler integration only, point-contact impulses only, contact
sets without proximal damping, and only the cost types above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamics.joints import JointType

from .action_model import ContactDynamics, FreeDynamics, ImpulseDynamics
from .constraints import ControlBounds, FrameHalfSpace, FrictionCone, JointPositionBounds, JointVelocityBounds, \
    WrenchCone
from .costs import ComPositionCost, ContactForceCost, ControlCost, CostSum, FrameHeightCost, FramePositionCost, \
    FrameVelocityCost, FrictionConeCost, StateCost, WrenchConeCost
from .costs.base import per_knot
from .problem import ShootingProblem


@dataclass(frozen=True)
class _PinMap:
    """Pinocchio model of the problem's robot and where each of our free/ball quaternions sits in
    Pinocchio's q: rows ``(our qadr, pin qadr, 'free' | 'ball')``."""

    model: object
    quats: tuple
    nq: int


def _pin_map(problem: ShootingProblem) -> _PinMap:
    import pinocchio as pin
    m = problem.model
    if m.path is None:
        raise NotImplementedError("the model has no file path to load into Pinocchio")
    pm = pin.buildModelFromMJCF(m.path)
    if pm.nq != m.nq or pm.nv != m.nv:
        raise NotImplementedError(f"Pinocchio's MJCF reader built nq={pm.nq}, nv={pm.nv} from '{m.path}', "
                                  f"ours has nq={m.nq}, nv={m.nv}")
    quats = []
    for i, name in enumerate(m.joint_names):
        jt = JointType(int(m.link_type[i]))
        if not pm.existJointName(name):
            raise NotImplementedError(f"joint '{name}' has no Pinocchio joint of that name")
        jid = pm.getJointId(name)
        qa, va = int(m.link_qadr[i]), int(m.link_dofadr[i])
        if pm.idx_vs[jid] != va:
            raise NotImplementedError(f"Pinocchio's reader reordered the dofs (joint '{name}': dof {pm.idx_vs[jid]}, "
                                      f"ours {va}); only the same dof order is mapped")
        if jt in (JointType.HINGE, JointType.SLIDE):
            if m.link_qpos0[i] != 0:
                raise NotImplementedError(f"joint '{name}' has a MuJoCo 'ref' offset; not mapped")
            if pm.idx_qs[jid] != qa:
                raise NotImplementedError(f"joint '{name}': Pinocchio q index {pm.idx_qs[jid]}, ours {qa}")
        else:
            if jt == JointType.FREE and not pm.jointPlacements[jid].isIdentity():
                raise NotImplementedError(f"free joint '{name}': Pinocchio's reader placed it off the identity "
                                          f"(a body 'quat' and 'pos' together); not MuJoCo's convention")
            quats.append((qa, int(pm.idx_qs[jid]), "free" if jt == JointType.FREE else "ball"))
    if m.has_floating_base and m.free_adr and m.free_adr[0] == (0, 0):
        # Crocoddyl's ActuationModelFloatingBase finds the base by the name Pinocchio's URDF
        # reader gives it ("root_joint"; otherwise it takes joint 0, the universe)
        pm.names[pm.getJointId(m.joint_names[0])] = "root_joint"
    pm.armature = np.asarray(m.dof_armature, float).copy()
    pm.gravity.linear = np.asarray(m.gravity, float)
    return _PinMap(pm, tuple(quats), m.nq)


def pinocchio_model(problem: ShootingProblem):
    """``pin.Model`` of the problem's robot (same file, armature, gravity; dof order checked)."""
    return _pin_map(problem).model


def _q_perm(pmap: _PinMap, to_pin: bool) -> np.ndarray:
    """Index array p with ``q_out = q_in[p]`` (a permutation: quaternions reordered)."""
    p = np.arange(pmap.nq)
    for qa, pa, kind in pmap.quats:
        o = 3 if kind == "free" else 0          # a free joint's position comes first, in the same place
        ours, pins = qa + o, pa + o
        if to_pin:                              # pin (x, y, z, w) <- ours (w, x, y, z)
            p[pins:pins + 4] = [ours + 1, ours + 2, ours + 3, ours]
        else:
            p[ours:ours + 4] = [pins + 3, pins, pins + 1, pins + 2]
    return p


def to_pinocchio_states(problem: ShootingProblem, xs) -> np.ndarray:
    """Our states (..., nx) in Pinocchio's (and Crocoddyl's) layout (quaternions (x, y, z, w))."""
    xs = np.asarray(xs, float)
    pmap = _pin_map(problem)
    return np.concatenate([xs[..., :pmap.nq][..., _q_perm(pmap, True)], xs[..., pmap.nq:]], axis=-1)


def from_pinocchio_states(problem: ShootingProblem, xs) -> np.ndarray:
    """Pinocchio/Crocoddyl states (..., nx) in our layout (MuJoCo qpos)."""
    xs = np.asarray(xs, float)
    pmap = _pin_map(problem)
    return np.concatenate([xs[..., :pmap.nq][..., _q_perm(pmap, False)], xs[..., pmap.nq:]], axis=-1)


def to_crocoddyl_controls(problem: ShootingProblem, us) -> list:
    """Our controls (N, nu) as Crocoddyl's list: an empty control on impulse knots (nu = 0 there)."""
    us = np.asarray(us, float)
    return [np.zeros(0) if isinstance(am.dynamics, ImpulseDynamics) else us[t].copy()
            for t, am in enumerate(problem.running_models)]


def _check(problem: ShootingProblem) -> None:
    for g in problem.dynamics_groups:
        if g.item.integrator not in ("euler", "impulse"):
            raise NotImplementedError(f"integrator '{g.item.integrator}': only 'euler' (IntegratedActionModelEuler) "
                                      f"and impulse knots are mapped")
        if g.item._has_passive:
            raise NotImplementedError("build the ShootingProblem with passive_forces=False: Crocoddyl's forward "
                                      "dynamics ignores joint damping and springs")
    for am in list(problem.running_models) + [problem.terminal_model]:
        if am is not None and not isinstance(am.dynamics, (FreeDynamics, ContactDynamics, ImpulseDynamics)):
            raise NotImplementedError(f"{type(am.dynamics).__name__} knots have no Crocoddyl counterpart here")


def _actuation(croc, state, problem: ShootingProblem):
    m = problem.model
    B = np.asarray(m.actuation_matrix, float)
    if m.nu == m.nv and np.array_equal(B, np.eye(m.nv)):
        return croc.ActuationModelFull(state)
    if m.has_floating_base and m.nu == m.nv - 6 and np.array_equal(B, np.vstack([np.zeros((6, m.nu)), np.eye(m.nu)])):
        return croc.ActuationModelFloatingBase(state)
    raise NotImplementedError("only identity actuation (ActuationModelFull) or a floating base with every joint "
                              "actuated in dof order (ActuationModelFloatingBase) is mapped")


def _frame_id(pm, name: str) -> int:
    import pinocchio as pin
    for kind in (pin.OP_FRAME, pin.BODY):     # a site wins over a body of the same name (our convention)
        if pm.existFrame(name, kind):
            return int(pm.getFrameId(name, kind))
    raise NotImplementedError(f"frame '{name}' is not in Pinocchio's model of the file")


def _contact_models(croc, state, pm, contacts, nu: int):
    import pinocchio as pin
    if contacts.damping != 0:
        raise NotImplementedError("contact sets with proximal damping (redundant contacts) are not mapped")
    kp, kd = contacts.baumgarte
    multi = croc.ContactModelMultiple(state, nu)
    for i, f in enumerate(contacts.frames):
        fid = _frame_id(pm, f)
        gains = np.array([kp, kd], float)
        if contacts.kind == "point":
            ref = np.zeros(3) if contacts.reference is None else np.asarray(contacts.reference[i], float)
            c = croc.ContactModel3D(state, fid, ref.copy(), pin.LOCAL_WORLD_ALIGNED, nu, gains)
        else:
            H = np.eye(4) if contacts.reference is None else np.asarray(contacts.reference[i], float)
            c = croc.ContactModel6D(state, fid, pin.SE3(H[:3, :3].copy(), H[:3, 3].copy()), pin.LOCAL, nu, gains)
        multi.addContact(f"contact_{f}", c)
    return multi


def _match_rows(A, b, Ac, lb, ub, name: str) -> np.ndarray:
    """perm with Crocoddyl's row j == our row perm[j], both as ``g ≤ 0`` (ours ``A w + b``,
    Crocoddyl's ``lb ≤ Ac w ≤ ub``, one finite bound per row); NotImplementedError if they differ."""
    perm = []
    for j in range(len(Ac)):
        if np.isfinite(ub[j]) and not np.isfinite(lb[j]):
            row, off = Ac[j], -ub[j]
        elif np.isfinite(lb[j]) and not np.isfinite(ub[j]):
            row, off = -Ac[j], lb[j]
        else:
            raise NotImplementedError(f"cost term '{name}': Crocoddyl's row {j} has two finite bounds")
        hit = np.flatnonzero(np.all(np.abs(A - row) < 1e-12, axis=1) & (np.abs(b - off) < 1e-9))
        if len(hit) != 1:
            raise NotImplementedError(f"cost term '{name}': Crocoddyl's cone row {j} has no unique counterpart")
        perm.append(int(hit[0]))
    if sorted(perm) != list(range(len(A))):
        raise NotImplementedError(f"cost term '{name}': the cone rows do not match one to one")
    return np.array(perm)


def _terms(cost):
    if isinstance(cost, CostSum):
        return [(name, c, w) for name, (c, w) in cost.terms.items()]
    return [(cost.name, cost, np.array(1.0))]


def _cost_model(croc, state, pm, cost, knot: int, nu: int, x_perm: np.ndarray, contacts=None):
    """``CostModelSum`` of knot ``knot``; x_perm reorders our states into Pinocchio's layout."""
    import pinocchio as pin
    sum_ = croc.CostModelSum(state, nu)
    knots = np.array([knot])
    for name, c, w in _terms(cost):
        weight = float(per_knot(f"weight of '{name}'", w, knots, ())[0])
        cw = np.asarray(per_knot(f"{name} weights", c.weights, knots, (c.nr,))[0], float).copy()
        if isinstance(c, (ContactForceCost, FrictionConeCost, WrenchConeCost)):
            cs = c._cf.contacts
            if contacts is None or tuple(cs.frames) != tuple(contacts.frames) or cs.kind != contacts.kind:
                raise NotImplementedError(f"cost term '{name}' is on contacts {cs.frames} but the knot's dynamics "
                                          f"has {None if contacts is None else contacts.frames}")
            if c._cf.passive and (np.any(c._cf.damping) or np.any(c._cf.stiffness)):
                raise NotImplementedError(f"cost term '{name}': build it with passive_forces=False")
            dim = cs.dim
            if isinstance(c, ContactForceCost):
                ref = np.asarray(per_knot("reference", c.reference, knots, (c.nr,))[0], float)
                for i, f in enumerate(cs.frames):
                    fr = ref[i * dim:(i + 1) * dim]
                    force = pin.Force(fr[:3].copy(), fr[3:6].copy() if dim == 6 else np.zeros(3))
                    res = croc.ResidualModelContactForce(state, _frame_id(pm, f), force, dim, nu, True)
                    act = croc.ActivationModelWeightedQuad(cw[i * dim:(i + 1) * dim].copy())
                    sum_.addCost(f"{name}_{f}", croc.CostModelResidual(state, act, res), weight)
            elif isinstance(c, WrenchConeCost):
                for i, f in enumerate(cs.frames):
                    # same 17 rows as Crocoddyl's WrenchCone (Caron et al. 2015) in another order:
                    # match them, and carry our per-row weights to Crocoddyl's rows
                    cone = croc.WrenchCone(np.eye(3), c.mu, np.array([2 * c.half_length[i], 2 * c.half_width[i]]), 4,
                                           False, c.f_min)
                    perm = _match_rows(c._A[17 * i:17 * i + 17, 6 * i:6 * i + 6], c._b[17 * i:17 * i + 17],
                                       np.asarray(cone.A), np.asarray(cone.lb), np.asarray(cone.ub), name)
                    res = croc.ResidualModelContactWrenchCone(state, _frame_id(pm, f), cone, nu, True)
                    act = croc.ActivationModelWeightedQuadraticBarrier(croc.ActivationBounds(cone.lb, cone.ub),
                                                                       np.sqrt(cw[17 * i:17 * i + 17][perm]))
                    sum_.addCost(f"{name}_{f}", croc.CostModelResidual(state, act, res), weight)
            else:
                # our c.mu is the pyramid's slope (already scaled when inscribed): Crocoddyl's outer
                # approximation uses its μ unscaled, with the same facets in the same order
                cone = croc.FrictionCone(np.eye(3), c.mu, c.facets, False, c.f_min)
                bounds = croc.ActivationBounds(cone.lb, cone.ub)
                r = c.facets + 1
                for i, f in enumerate(cs.frames):
                    res = croc.ResidualModelContactFrictionCone(state, _frame_id(pm, f), cone, nu, True)
                    act = croc.ActivationModelWeightedQuadraticBarrier(bounds, np.sqrt(cw[r * i:r * i + r]))
                    sum_.addCost(f"{name}_{f}", croc.CostModelResidual(state, act, res), weight)
            continue
        act = croc.ActivationModelWeightedQuad(cw)
        if isinstance(c, FramePositionCost):
            target = per_knot("target", c.target, knots, (3,))[0]
            res = croc.ResidualModelFrameTranslation(state, _frame_id(pm, c.frame), np.asarray(target).copy(), nu)
        elif isinstance(c, FrameHeightCost):          # the z row of a frame translation
            h = float(per_knot("target", c.target, knots, ())[0])
            act = croc.ActivationModelWeightedQuad(np.array([0.0, 0.0, cw[0]]))
            res = croc.ResidualModelFrameTranslation(state, _frame_id(pm, c.frame), np.array([0.0, 0.0, h]), nu)
        elif isinstance(c, FrameVelocityCost):        # linear rows of the LOCAL_WORLD_ALIGNED frame velocity
            target = np.asarray(per_knot("target", c.target, knots, (3,))[0], float)
            act = croc.ActivationModelWeightedQuad(np.r_[cw, np.zeros(3)])
            res = croc.ResidualModelFrameVelocity(state, _frame_id(pm, c.frame), pin.Motion(target.copy(), np.zeros(3)),
                                                  pin.LOCAL_WORLD_ALIGNED, nu)
        elif isinstance(c, ComPositionCost):
            target = per_knot("target", c.target, knots, (3,))[0]
            res = croc.ResidualModelCoMPosition(state, np.asarray(target, float).copy(), nu)
        elif isinstance(c, StateCost):
            ref = per_knot("reference", c.reference, knots, (state.nx,))[0]
            res = croc.ResidualModelState(state, np.asarray(ref, float)[x_perm].copy(), nu)
        elif isinstance(c, ControlCost):
            ref = per_knot("reference", c.reference, knots, (nu,))[0]
            res = croc.ResidualModelControl(state, np.asarray(ref).copy())
        else:
            raise NotImplementedError(f"cost term '{name}' ({type(c).__name__}) has no Crocoddyl counterpart here")
        sum_.addCost(name, croc.CostModelResidual(state, act, res), weight)
    return sum_


def _constraint_manager(croc, state, pm, terms, knot: int, nu: int, box=None, contacts=None):
    """``ConstraintModelManager`` of knot ``knot``'s constraint terms (None when it has none);
    box: (lower, upper) control bounds added as one more constraint."""
    if not terms and box is None:
        return None
    man = croc.ConstraintModelManager(state, nu)
    knots = np.array([knot])
    ndx = state.ndx
    for i, c in enumerate(terms):
        lo, hi = (np.asarray(b[0], float) for b in c.bounds(knots))
        name = f"{c.name}_{i}"
        if isinstance(c, (JointPositionBounds, JointVelocityBounds)):
            rows = c.v_index if isinstance(c, JointPositionBounds) else state.nv + c.v_index
            L, U = np.full(ndx, -np.inf), np.full(ndx, np.inf)
            L[rows], U[rows] = lo, hi
            res = croc.ResidualModelState(state, state.zero(), nu)
            man.addConstraint(name, croc.ConstraintModelResidual(state, res, L, U))
        elif isinstance(c, FrameHalfSpace):
            axis = np.flatnonzero(np.abs(c.normal) > 1e-15)
            if axis.size != 1:
                raise NotImplementedError(f"constraint '{c.name}': only an axis-aligned normal maps to Crocoddyl's "
                                          f"frame translation residual, got {c.normal}")
            a = int(axis[0])
            L, U = np.full(3, -np.inf), np.full(3, np.inf)
            if c.normal[a] > 0:
                U[a] = c.offset / c.normal[a]
            else:
                L[a] = c.offset / c.normal[a]
            res = croc.ResidualModelFrameTranslation(state, _frame_id(pm, c.frame), np.zeros(3), nu)
            man.addConstraint(name, croc.ConstraintModelResidual(state, res, L, U))
        elif isinstance(c, ControlBounds):
            res = croc.ResidualModelControl(state, np.zeros(nu))
            man.addConstraint(name, croc.ConstraintModelResidual(state, res, lo.copy(), hi.copy()))
        elif isinstance(c, FrictionCone):
            if contacts is None or tuple(c.contacts.frames) != tuple(contacts.frames):
                raise NotImplementedError(f"constraint '{c.name}' is on contacts {c.contacts.frames} but the knot's "
                                          f"dynamics has {None if contacts is None else contacts.frames}")
            if c._cf.passive and (np.any(c._cf.damping) or np.any(c._cf.stiffness)):
                raise NotImplementedError(f"constraint '{c.name}': build it with passive_forces=False")
            cone = croc.FrictionCone(np.eye(3), c.mu, c.facets, False, c.f_min)
            for f in c.contacts.frames:
                res = croc.ResidualModelContactFrictionCone(state, _frame_id(pm, f), cone, nu, True)
                man.addConstraint(f"{name}_{f}", croc.ConstraintModelResidual(state, res, np.asarray(cone.lb).copy(),
                                                                              np.asarray(cone.ub).copy()))
        elif isinstance(c, WrenchCone):
            if contacts is None or tuple(c.contacts.frames) != tuple(contacts.frames) or contacts.kind != "6d":
                raise NotImplementedError(f"constraint '{c.name}' is on contacts {c.contacts.frames} but the knot's "
                                          f"dynamics has {None if contacts is None else contacts.frames}")
            if c._cf.passive and (np.any(c._cf.damping) or np.any(c._cf.stiffness)):
                raise NotImplementedError(f"constraint '{c.name}': build it with passive_forces=False")
            for i, f in enumerate(c.contacts.frames):
                # the same 17 rows as ours in another order and sign (Caron et al. 2015): the same set
                cone = croc.WrenchCone(np.eye(3), c.mu, np.array([2 * c.half_length[i], 2 * c.half_width[i]]), 4,
                                       False, c.f_min)
                res = croc.ResidualModelContactWrenchCone(state, _frame_id(pm, f), cone, nu, True)
                man.addConstraint(f"{name}_{f}", croc.ConstraintModelResidual(state, res, np.asarray(cone.lb).copy(),
                                                                              np.asarray(cone.ub).copy()))
        else:
            raise NotImplementedError(f"constraint '{c.name}' ({type(c).__name__}) has no Crocoddyl counterpart here")
    if box is not None:
        res = croc.ResidualModelControl(state, np.zeros(nu))
        man.addConstraint("control_box", croc.ConstraintModelResidual(state, res, box[0].copy(), box[1].copy()))
    return man


def build_crocoddyl_problem(problem: ShootingProblem, bounds: bool = False, control_box: bool = False):
    """``crocoddyl.ShootingProblem`` equivalent to ``problem`` (see module docstring), its x0 in
    Pinocchio's layout. With ``bounds=True`` the control limits are set on the action models
    (for ``SolverBoxFDDP``); with ``control_box=True`` they are constraints of every running knot
    (for ``mim_solvers.SolverCSQP``, as :class:`solvers.CSQP` with ``box=True``). The knots'
    constraints map to constraint managers (module docstring)."""
    import crocoddyl as croc
    import pinocchio as pin
    _check(problem)
    pmap = _pin_map(problem)
    pm = pmap.model
    state = croc.StateMultibody(pm)
    actuation = _actuation(croc, state, problem)
    nu = problem.nu
    perm = np.concatenate([_q_perm(pmap, True), pmap.nq + np.arange(problem.model.nv)])

    def impulse(am, knot: int):
        contacts = am.dynamics.contacts
        if am.constraints:
            raise NotImplementedError(f"constraints on the impulse knot {knot} are not mapped")
        if contacts.kind != "point":
            raise NotImplementedError("only point-contact impulses (ImpulseModel3D) are mapped")
        # Crocoddyl's impulse knot has no control (nu = 0): our knot's control only enters its
        # control regularisation, which is decoupled and zero at the optimum; it is dropped
        items = am.cost.terms.items() if isinstance(am.cost, CostSum) else [(am.cost.name, (am.cost, 1.0))]
        terms = {k: v for k, v in items if not isinstance(v[0], ControlCost)}
        if any(getattr(c, "uses_control", False) for c, _ in terms.values()):
            raise NotImplementedError("impulse knots with control-dependent costs other than ControlCost")
        cost = _cost_model(croc, state, pm, CostSum(terms), knot, 0, perm)
        multi = croc.ImpulseModelMultiple(state)
        for f in contacts.frames:
            multi.addImpulse(f"impulse_{f}", croc.ImpulseModel3D(state, _frame_id(pm, f), pin.LOCAL_WORLD_ALIGNED))
        return croc.ActionModelImpulseFwdDynamics(state, multi, cost, float(am.dynamics.restitution), 0.0, True)

    box = (problem.u_lower, problem.u_upper) if control_box and problem.has_bounds else None

    def differential(am, knot: int):
        contacts = getattr(am.dynamics, "contacts", None)
        cost = _cost_model(croc, state, pm, am.cost, knot, nu, perm, contacts)
        cons = _constraint_manager(croc, state, pm, am.constraints, knot, nu,
                                   box if knot < problem.horizon else None, contacts)
        if contacts is None:
            if cons is None:
                return croc.DifferentialActionModelFreeFwdDynamics(state, actuation, cost)
            return croc.DifferentialActionModelFreeFwdDynamics(state, actuation, cost, cons)
        cm = _contact_models(croc, state, pm, contacts, nu)
        if cons is None:
            return croc.DifferentialActionModelContactFwdDynamics(state, actuation, cm, cost, 0.0, True)
        return croc.DifferentialActionModelContactFwdDynamics(state, actuation, cm, cost, cons, 0.0, True)

    running = []
    for t in range(problem.horizon):
        am = problem.running_models[t]
        if isinstance(am.dynamics, ImpulseDynamics):
            running.append(impulse(am, t))
            continue
        dam = differential(am, t)
        if bounds:
            dam.u_lb, dam.u_ub = problem.u_lower.copy(), problem.u_upper.copy()
        running.append(croc.IntegratedActionModelEuler(dam, am.dt))
    tm = problem.terminal_model
    if tm is None or problem.terminal_cost is None:
        dyn = problem.running_models[-1]
        contacts = dyn.dynamics.contacts if isinstance(dyn.dynamics, ContactDynamics) else None
        tcost = croc.CostModelSum(state, nu)
        tdam = (croc.DifferentialActionModelFreeFwdDynamics(state, actuation, tcost) if contacts is None else
                croc.DifferentialActionModelContactFwdDynamics(
                    state, actuation, _contact_models(croc, state, pm, contacts, nu), tcost, 0.0, True))
    else:
        tdam = differential(tm, problem.horizon)
    terminal = croc.IntegratedActionModelEuler(tdam, 0.0)
    return croc.ShootingProblem(problem.x0[perm].copy(), running, terminal)
