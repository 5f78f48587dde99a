"""Fixed-point emulation of the accelerator datapath: the Dadu-RBD function set (Yang, Chen & Han 2023 Table I:
ID, FD, M, M⁻¹, ΔID, ΔFD, ΔiFD) built from the completely-fused ∇FD kernel of Plancher et al. 2021
(Algorithm 3: RNEA with q̈ as input, ∇RNEA as in Algorithm 5, multiply by −M⁻¹).

Every value the accelerator computes is an :class:`~dynamics.fpga_sim.fixed_point.Fx` (exact int64
words plus a rigorous error bound). What crosses the host–accelerator boundary is converted on the
host (float64 -> fixed, one rounding each):

* per hinge link ``sin θ``, ``cos θ`` (θ = q - ref), per slide link the displacement, per ball/free
  link the joint placement ``(R, p)`` (12 words; the published designs only have hinges);
* ``q̇``, ``q̈`` or ``τ`` per dof, external link forces, and ``M⁻¹`` for ΔiFD;
* model constants (inertias, motion subspaces, transform coefficients, gravity, armature) are
  quantized once, as on-chip constants.

Transforms are formed on chip as in Yang, Chen & Han 2023 §IV-A1: a hinge transform is exactly affine in
``(cos θ, sin θ)``, ``X(θ) = K0 + Kc cos θ + Ks sin θ`` with constant 6×6 matrices (each non-constant
entry is ``c·sin θ`` or ``c·cos θ``), so each entry costs two constant products and a sum.

The only non-fixed-point step is the reciprocal of the articulated inertia ``D_i`` in M⁻¹, done as
Dadu-RBD §IV-B2 describes: fixed -> float32, reciprocal (inverse of the 3×3/6×6 block for ball/free
joints) in float32, -> fixed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..joints import JointType, joint_placements
from ..model import RobotModel
from ..numpy_backend.transforms import link_external_forces
from ..spatial import motion_transform
from .fixed_point import Fx, FxContext, cross_matrix_force, cross_matrix_force_rhs, cross_matrix_motion, skew

FLOAT32_EPS = 2.0 ** -24   # unit roundoff of IEEE single precision


# ------------------------------------------------------------------------------------------ constants
@dataclass(frozen=True)
class LinkConstants:
    """Float64 constants of one link (quantized per format when used)."""
    kind: int                      # JointType
    K: tuple                       # hinge: (K0, Kc, Ks); slide: (K0, Kd); ball/free: ()
    S: np.ndarray                  # (6, nd)
    inertia: np.ndarray            # (6, 6)


def _hinge_coefficients(model: RobotModel, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X(θ) = K0 + Kc cos θ + Ks sin θ`` for hinge link i (exact: X is affine in (cos, sin))."""
    def X_at(theta: float) -> np.ndarray:
        q = model.neutral()[None].copy()
        q[0, model.link_qadr[i]] = model.link_qpos0[i] + theta
        R, p = joint_placements(model, q)
        return motion_transform(R[0, i], p[0, i])
    X0, Xpi, Xh = X_at(0.0), X_at(np.pi), X_at(np.pi / 2)
    K0 = 0.5 * (X0 + Xpi)
    Kc = 0.5 * (X0 - Xpi)
    Ks = Xh - K0
    return K0, Kc, Ks


def _slide_coefficients(model: RobotModel, i: int) -> tuple[np.ndarray, np.ndarray]:
    def X_at(d: float) -> np.ndarray:
        q = model.neutral()[None].copy()
        q[0, model.link_qadr[i]] = model.link_qpos0[i] + d
        R, p = joint_placements(model, q)
        return motion_transform(R[0, i], p[0, i])
    K0 = X_at(0.0)
    return K0, X_at(1.0) - K0


_CONST_CACHE: dict[int, tuple[RobotModel, list[LinkConstants]]] = {}


def link_constants(model: RobotModel) -> list[LinkConstants]:
    """Per-link constants of ``model`` (cached per model object)."""
    hit = _CONST_CACHE.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    out = []
    for i in range(model.nlinks):
        t = int(model.link_type[i])
        if t == JointType.HINGE:
            K = _hinge_coefficients(model, i)
        elif t == JointType.SLIDE:
            K = _slide_coefficients(model, i)
        else:
            K = ()
        out.append(LinkConstants(t, K, np.asarray(model.link_S[i], float), np.asarray(model.link_inertia[i])))
    _CONST_CACHE[id(model)] = (model, out)
    return out


# ------------------------------------------------------------------------------------------ inputs
def const(x: np.ndarray, ctx: FxContext) -> Fx:
    """A model constant stored on chip in the format (error = its exact quantization error)."""
    return Fx.from_float(np.asarray(x, float), ctx, kind="constant")


def link_transforms_fx(model: RobotModel, q: np.ndarray, ctx: FxContext) -> list[Fx]:
    """On-chip parent-to-child transforms ``^iX_λ`` (B, 6, 6) per link from host-converted joint
    inputs (sin/cos for hinges, displacement for slides, (R, p) for ball/free joints)."""
    consts = link_constants(model)
    B = q.shape[0]
    Xs: list[Fx] = []
    need_placement = any(c.kind in (JointType.BALL, JointType.FREE) for c in consts)
    if need_placement:
        R, p = joint_placements(model, q)
    for i, c in enumerate(consts):
        if c.kind == JointType.HINGE:
            th = q[:, model.link_qadr[i]] - model.link_qpos0[i]
            cs = Fx.from_float(np.cos(th)[:, None, None], ctx)
            sn = Fx.from_float(np.sin(th)[:, None, None], ctx)
            K0, Kc, Ks = (const(k, ctx) for k in c.K)
            X = K0 + Kc.mul(cs) + Ks.mul(sn)
        elif c.kind == JointType.SLIDE:
            d = Fx.from_float((q[:, model.link_qadr[i]] - model.link_qpos0[i])[:, None, None], ctx)
            K0, Kd = (const(k, ctx) for k in c.K)
            X = K0 + Kd.mul(d)
        else:
            Rt = Fx.from_float(np.swapaxes(R[:, i], -1, -2), ctx)
            pf = Fx.from_float(p[:, i], ctx)
            X = Fx.zeros((B, 6, 6), ctx)
            X.set((..., slice(0, 3), slice(0, 3)), Rt)
            X.set((..., slice(3, 6), slice(3, 6)), Rt)
            X.set((..., slice(0, 3), slice(3, 6)), -(Rt @ skew(pf)))
        Xs.append(X)
    return Xs


def _dof_slice(model: RobotModel, i: int) -> slice:
    d0 = int(model.link_dofadr[i])
    return slice(d0, d0 + int(model.link_nv[i]))


# ------------------------------------------------------------------------------------------ RNEA
@dataclass
class RneaState:
    """Per-link results of the fixed-point RNEA (Plancher et al. 2021 Algorithm 1), lists of (B, 6) Fx."""
    X: list
    vel: list
    acc: list
    f: list          # after the backward accumulation
    f_local: list    # before it (each link's own force)
    tau: Fx          # (B, nv)


def rnea_fx(model: RobotModel, q: np.ndarray, v: Fx, a: Fx, fext: np.ndarray | None, ctx: FxContext,
            X: list | None = None, gravity: bool = True) -> RneaState:
    """Fixed-point RNEA (Plancher et al. 2021 Algorithm 1, Dadu-RBD Algorithm 1) with q̈ = ``a`` as input.
    v, a: (B, nv) Fx; fext: (B, nbody, 6) float host input or None. Returns all link quantities."""
    B, L = q.shape[0], model.nlinks
    consts = link_constants(model)
    if X is None:
        X = link_transforms_fx(model, q, ctx)
    a0 = np.zeros((B, 6))
    if gravity:
        a0[:, :3] = -model.gravity
    a0 = const(a0, ctx)
    fl = link_external_forces(model, fext, B, np.float64)
    fl = None if fl is None else Fx.from_float(fl, ctx)
    vel, acc, f = [None] * L, [None] * L, [None] * L
    for i in range(L):
        lam, S, I, cols, vJ = _link_joint(model, consts, i, v, ctx)
        aJ = S.mv(a[:, cols])
        if lam < 0:
            vel[i] = vJ
            acc[i] = X[i].mv(a0) + aJ
        else:
            vel[i] = X[i].mv(vel[lam]) + vJ
            acc[i] = X[i].mv(acc[lam]) + aJ + cross_matrix_motion(vel[i]).mv(vJ)
        h = I.mv(vel[i])
        f[i] = I.mv(acc[i]) + cross_matrix_force(vel[i]).mv(h)
        if fl is not None:
            f[i] = f[i] - fl[:, i]
    f_local = list(f)
    tau_blocks = [None] * L
    arm = model.dof_armature
    for i in range(L - 1, -1, -1):
        S = const(consts[i].S, ctx)
        cols = _dof_slice(model, i)
        t = S.T.mv(f[i])
        if np.any(arm[cols] != 0):
            t = t + a[:, cols].mul(const(arm[cols], ctx))
        tau_blocks[i] = t
        lam = int(model.link_parent[i])
        if lam >= 0:
            f[lam] = f[lam] + X[i].T.mv(f[i])
    tau = Fx.concatenate([tau_blocks[i] for i in _links_in_dof_order(model)], axis=-1)
    return RneaState(X, vel, acc, f, f_local, tau)


def _link_joint(model: RobotModel, consts: list, i: int, v: Fx, ctx: FxContext):
    """Link i's parent (-1 at the root), motion subspace S and inertia as constants, its dof slice
    and its joint velocity ``S q̇_i``."""
    S = const(consts[i].S, ctx)
    cols = _dof_slice(model, i)
    return int(model.link_parent[i]), S, const(consts[i].inertia, ctx), cols, S.mv(v[:, cols])


def _links_in_dof_order(model: RobotModel) -> list[int]:
    return sorted(range(model.nlinks), key=lambda i: int(model.link_dofadr[i]))


# ------------------------------------------------------------------------------------------ ∇RNEA
def rnea_derivatives_fx(model: RobotModel, st: RneaState, v: Fx, ctx: FxContext) -> tuple[Fx, Fx]:
    """Fixed-point ∇RNEA (Plancher et al. 2021 Algorithm 2 in the Algorithm 5 arrangement) on the outputs of
    :func:`rnea_fx`: returns ``(∂c/∂q, ∂c/∂q̇)``, each (B, nv, nv), rows = torque, columns = variable."""
    B, L, nv = v.shape[0], model.nlinks, model.nv
    consts = link_constants(model)
    X = st.X
    a0 = np.zeros((B, 6))
    a0[:, :3] = -model.gravity
    a0 = const(a0, ctx)
    Z = Fx.zeros((B, 6, nv), ctx)
    dvq, dvv, daq, dav, dfq, dfv = ([None] * L for _ in range(6))
    for i in range(L):
        lam, S, I, cols, vJ = _link_joint(model, consts, i, v, ctx)
        if lam >= 0:
            Xv = X[i].mv(st.vel[lam])
            Xa = X[i].mv(st.acc[lam])
            dvq[i] = X[i] @ dvq[lam]
            dvv[i] = X[i] @ dvv[lam]
            daq[i] = X[i] @ daq[lam]
            dav[i] = X[i] @ dav[lam]
            dvq[i].set((..., cols), dvq[i][..., cols] + cross_matrix_motion(Xv) @ S)
        else:
            Xa = X[i].mv(a0)
            dvq[i], dvv[i], daq[i], dav[i] = Z.copy(), Z.copy(), Z.copy(), Z.copy()
        dvv[i].set((..., cols), dvv[i][..., cols] + S[None])
        daq[i].set((..., cols), daq[i][..., cols] + cross_matrix_motion(Xa) @ S)
        cvJ = cross_matrix_motion(vJ)
        daq[i] = daq[i] - cvJ @ dvq[i]
        dav[i] = dav[i] - cvJ @ dvv[i]
        dav[i].set((..., cols), dav[i][..., cols] + cross_matrix_motion(st.vel[i]) @ S)
        # Algorithm 5 lines 2-4: α = I v, β = ∂v ×* α, γ = I ∂v, ∂f = I ∂a + β + v ×* γ
        alpha = I.mv(st.vel[i])
        rhs = cross_matrix_force_rhs(alpha)
        vx = cross_matrix_force(st.vel[i])
        dfq[i] = I @ daq[i] + rhs @ dvq[i] + vx @ (I @ dvq[i])
        dfv[i] = I @ dav[i] + rhs @ dvv[i] + vx @ (I @ dvv[i])
    blocks_q, blocks_v = [None] * L, [None] * L
    for i in range(L - 1, -1, -1):
        S = const(consts[i].S, ctx)
        cols = _dof_slice(model, i)
        blocks_q[i] = S.T @ dfq[i]
        blocks_v[i] = S.T @ dfv[i]
        lam = int(model.link_parent[i])
        if lam >= 0:
            Xt = X[i].T
            dfq[lam] = dfq[lam] + Xt @ dfq[i]
            dfv[lam] = dfv[lam] + Xt @ dfv[i]
            zeta = Xt @ (cross_matrix_force_rhs(st.f[i]) @ S)          # Algorithm 5 line 6: ζ
            dfq[lam].set((..., cols), dfq[lam][..., cols] + zeta)
    order = _links_in_dof_order(model)
    return (Fx.concatenate([blocks_q[i] for i in order], axis=-2),
            Fx.concatenate([blocks_v[i] for i in order], axis=-2))


# ------------------------------------------------------------------------------------------ M, M⁻¹
def crba_fx(model: RobotModel, X: list, ctx: FxContext) -> Fx:
    """Fixed-point mass matrix M(q) (B, nv, nv) by composite inertias (the ``out_M`` path of
    Dadu-RBD's MMinvGen, Yang, Chen & Han 2023 Algorithm 2 lines 8-9/15-17), armature on the diagonal."""
    L, nv = model.nlinks, model.nv
    consts = link_constants(model)
    B = X[0].shape[0]
    Ic = [const(np.broadcast_to(consts[i].inertia, (B, 6, 6)), ctx) for i in range(L)]
    for i in range(L - 1, -1, -1):
        lam = int(model.link_parent[i])
        if lam >= 0:
            Ic[lam] = Ic[lam] + X[i].T @ (Ic[i] @ X[i])
    M = Fx.zeros((B, nv, nv), ctx)
    arm = model.dof_armature
    for i in range(L):
        S = const(consts[i].S, ctx)
        ci = _dof_slice(model, i)
        F = Ic[i] @ S
        blk = S.T @ F
        if np.any(arm[ci] != 0):
            blk = blk + const(np.diag(arm[ci]), ctx)
        M.set((..., ci, ci), blk)
        j = i
        while int(model.link_parent[j]) >= 0:
            F = X[j].T @ F
            j = int(model.link_parent[j])
            cj = _dof_slice(model, j)
            b = const(consts[j].S, ctx).T @ F
            M.set((..., cj, ci), b)
            M.set((..., ci, cj), b.T)
    return M


def reciprocal_fx(D: Fx) -> Fx:
    """``D⁻¹`` for (B, nd, nd) Fx by the float path of Dadu-RBD §IV-B2: fixed -> float32,
    reciprocal (nd = 1) or float32 inverse, -> fixed. Error bound (first order, factor 2 safety):
    ``|D̂⁻¹| e_D |D̂⁻¹|`` from the input error, plus float32 rounding of the conversion and of the
    reciprocal (``(nd+2)·κ·2⁻²⁴ |D⁻¹|`` with κ the condition number of D̂), plus the output rounding."""
    ctx = D.ctx
    Df = D.to_float().astype(np.float32)
    if D.shape[-1] == 1:
        inv32 = (np.float32(1.0) / Df).astype(np.float32)
    else:
        inv32 = np.linalg.inv(Df).astype(np.float32)
    inv = inv32.astype(np.float64)
    ai = np.abs(inv)
    nd = D.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        kappa = np.linalg.norm(D.to_float(), ord=2, axis=(-2, -1)) * np.linalg.norm(inv, ord=2, axis=(-2, -1))
        e_in = ai @ D.e @ ai
        e_fl = (nd + 2) * kappa[..., None, None] * FLOAT32_EPS * np.max(ai, axis=(-2, -1), keepdims=True)
        e = 2.0 * (e_in + e_fl)
    out = Fx.from_float(inv, ctx, kind="reciprocal")
    return Fx(out.v, out.e + e, ctx)


@dataclass
class MinvState:
    Minv: Fx            # (B, nv, nv)
    reciprocals: int    # number of float reciprocal/inverse operations (per knot)


def minv_fx(model: RobotModel, X: list, ctx: FxContext) -> MinvState:
    """Fixed-point analytical ``M⁻¹`` (B, nv, nv): Dadu-RBD's MMinvGen (Yang, Chen & Han 2023 Algorithm 2,
    ``out_Minv`` path): a backward sweep of articulated inertias ``I^A``, ``U = I^A S``,
    ``D = Sᵀ U`` (+ armature) with the float reciprocal of ``D``, and the projected columns ``F``;
    then a forward sweep of ``P`` that completes the rows (same recursion as the numpy reference
    ``numpy_backend.minv``)."""
    L, nv = model.nlinks, model.nv
    consts = link_constants(model)
    B = X[0].shape[0]
    IA = [const(np.broadcast_to(consts[i].inertia, (B, 6, 6)), ctx) for i in range(L)]
    F = [Fx.zeros((B, 6, nv), ctx) for _ in range(L)]
    U, Dinv, rows = [None] * L, [None] * L, [None] * L
    arm = model.dof_armature
    for i in range(L - 1, -1, -1):
        S = const(consts[i].S, ctx)
        ci = _dof_slice(model, i)
        nd = ci.stop - ci.start
        U[i] = IA[i] @ S
        D = S.T @ U[i]
        if np.any(arm[ci] != 0):
            D = D + const(np.diag(arm[ci]), ctx)
        Dinv[i] = reciprocal_fx(D)
        u = -(S.T @ F[i])
        E = np.zeros((nd, nv))
        E[:, ci] = np.eye(nd)
        u = u + const(E, ctx)
        rows[i] = Dinv[i] @ u
        lam = int(model.link_parent[i])
        if lam >= 0:
            UD = U[i] @ Dinv[i]
            Ia = IA[i] - UD @ U[i].T
            pa = F[i] + UD @ u
            Xt = X[i].T
            IA[lam] = IA[lam] + Xt @ (Ia @ X[i])
            F[lam] = F[lam] + Xt @ pa
    P = [None] * L
    for i in range(L):
        lam = int(model.link_parent[i])
        S = const(consts[i].S, ctx)
        if lam >= 0:
            Pi = X[i] @ P[lam]
            rows[i] = rows[i] - Dinv[i] @ (U[i].T @ Pi)
            P[i] = Pi + S @ rows[i]
        else:
            P[i] = S @ rows[i]
    order = _links_in_dof_order(model)
    return MinvState(Fx.concatenate([rows[i] for i in order], axis=-2), L)


# ------------------------------------------------------------------------------------------ Table I
def make_inputs(ctx: FxContext, **arrays) -> dict[str, Fx]:
    """Host-side conversion of per-dof float64 inputs (q̇, q̈, τ, M⁻¹) to fixed point."""
    return {k: Fx.from_float(x, ctx) for k, x in arrays.items()}


def inverse_dynamics(model, q, v, a, fext, ctx) -> Fx:
    """ID: ``τ = RNEA(q, q̇, q̈, f_ext)`` (B, nv)."""
    x = make_inputs(ctx, v=v, a=a)
    return rnea_fx(model, q, x["v"], x["a"], fext, ctx).tau


def mass_matrix(model, q, ctx) -> Fx:
    """M: ``M(q)`` (B, nv, nv)."""
    return crba_fx(model, link_transforms_fx(model, q, ctx), ctx)


def mass_matrix_inverse(model, q, ctx) -> Fx:
    """M⁻¹: ``M(q)⁻¹`` (B, nv, nv) (MMinvGen with the float reciprocal)."""
    return minv_fx(model, link_transforms_fx(model, q, ctx), ctx).Minv


def forward_dynamics(model, q, v, tau, fext, ctx, minv: Fx | None = None) -> tuple[Fx, Fx, list]:
    """FD as Dadu-RBD computes it (Yang, Chen & Han 2023 eq. 2, no ABA instance): ``q̈ = M⁻¹ (τ - c)`` with
    ``c = RNEA(q, q̇, 0)``. Returns ``(q̈, M⁻¹, X)``."""
    X = link_transforms_fx(model, q, ctx)
    x = make_inputs(ctx, v=v, tau=tau)
    c = rnea_fx(model, q, x["v"], Fx.zeros(x["v"].shape, ctx), fext, ctx, X=X).tau
    Mi = minv_fx(model, X, ctx).Minv if minv is None else minv
    qdd = Mi.mv(x["tau"] - c)
    return qdd, Mi, X


def id_derivatives(model, q, v, a, fext, ctx) -> tuple[Fx, Fx]:
    """ΔID: ``(∂τ/∂q, ∂τ/∂q̇)`` (B, nv, nv) each: RNEA then ∇RNEA (Plancher et al. 2021 Algorithms 1-2)."""
    x = make_inputs(ctx, v=v, a=a)
    st = rnea_fx(model, q, x["v"], x["a"], fext, ctx)
    return rnea_derivatives_fx(model, st, x["v"], ctx)


def fd_derivatives(model, q, v, tau, fext, ctx, minv: np.ndarray | None = None,
                   return_acceleration: bool = False) -> tuple[Fx, ...]:
    """ΔFD (``minv`` None: FD on the accelerator, then ΔID at the resulting q̈, then ``-M⁻¹ ·``;
    Dadu-RBD Fig. 14f) or ΔiFD (``minv`` given: Plancher et al. 2021 Algorithm 3 completely fused, whose inputs
    are q, q̇, q̈ and M⁻¹ from the host; the host's q̈ is the float64 forward dynamics of the numpy
    reference, converted like every other input). Returns ``(∂q̈/∂q, ∂q̈/∂q̇, ∂q̈/∂τ = M⁻¹)``,
    each (B, nv, nv); with ``return_acceleration`` the q̈ used, (B, nv), comes first."""
    if minv is None:
        qdd, Mi, X = forward_dynamics(model, q, v, tau, fext, ctx)
    else:
        from ..numpy_backend.aba import aba as host_fd
        Mi = Fx.from_float(minv, ctx)
        qdd = Fx.from_float(host_fd(model, q, v, tau, fext), ctx)
        X = link_transforms_fx(model, q, ctx)
    xv = Fx.from_float(v, ctx)
    st = rnea_fx(model, q, xv, qdd, fext, ctx, X=X)
    dq, dv = rnea_derivatives_fx(model, st, xv, ctx)
    nMi = -Mi
    out = (nMi @ dq, nMi @ dv, Mi)
    return (qdd, *out) if return_acceleration else out


__all__ = ["rnea_fx", "rnea_derivatives_fx", "crba_fx", "minv_fx", "reciprocal_fx", "link_transforms_fx",
           "inverse_dynamics", "mass_matrix", "mass_matrix_inverse", "forward_dynamics", "id_derivatives",
           "fd_derivatives"]
