"""Second-order partial derivatives of inverse dynamics: IDSVA-SO (Singh, Russell & Wensing 2022, Algorithm 1).

Singh, Russell & Wensing 2022 (Singh, Russell, Wensing, *On Second-Order Derivatives of Rigid-Body Dynamics*) §IV-G:
one forward pass computes, in the **ground (world) frame**, every joint's motion subspace ``S_j``,
its time derivative due to the predecessor moving ``ψ̇_j = v_λ(j) × S_j``, its second derivative
``ψ̈_j = a_λ(j) × S_j + v_λ(j) × ψ̇_j``, ``Ṡ_j = v_j × S_j`` and the body-level inertia ``I_i``,
body-Coriolis matrix ``B_i = v_i ×* I_i − I_i v_i× + (I_i v_i)×̄*`` (eq. 14, without the ½ the
seed drops in §IV-G) and force ``f_i = I_i a_i + v_i ×* I_i v_i − f_ext,i``. The backward pass
accumulates the composite ``I^C``, ``B^C``, ``f^C`` and, for every joint ``i`` and every pair of
ancestors ``k ⪯ j ⪯ i``, evaluates the case expressions of the seed's Appendix C (cases A, B, C of
§IV-A) for the dofs of ``i``, ``j`` and ``k`` and writes them, with the Hessian symmetries of
§IV-F, into all index permutations they determine. Entries whose three dofs are not on one
root-to-leaf chain are never written: that is the branch-induced sparsity (§V-C).

The seed's triple loop over dofs is vectorised here: for each joint ``i`` the dofs of ``i`` and the
dofs of the whole ancestor chain of ``i`` (which is totally ordered, so every pair ``(j, k)`` of
chain dofs is an ancestor/descendant pair) are processed at once as small dense arrays with a mask
``k ⪯ j``; the Python loop is over joints only. The expressions follow the seed's reference C++
implementation (Singh, Russell & Wensing 2022 ref. [51], Pinocchio's ``ComputeRNEASecondOrderDerivatives``), re-derived
for batched numpy. External forces given in body frames rotate with their body, so they enter only
through the composite force ``f^C`` (the ``S ×* f^C`` terms), exactly like the first-order IDSVA.

Index order (docs/second_order.md): ``T[..., i, j, k] = ∂_k (∂_j τ_i)`` with the ``k``-perturbation
applied first, ``τ(q ⊕ δ_k e_k ⊕ δ_j e_j)``, as in ``dynamics.second_order_numerical``;
``dM_dq[..., i, j, k] = ∂M_ij/∂q_k``; ``d2tau_dqdv[..., i, j, k] = ∂²τ_i/∂q_j∂v_k``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..spatial import (adjoint, force_cross, force_cross_matrix, force_cross_rhs_matrix, motion_cross,
                       motion_cross_matrix, motion_transform)
from .kinematics import link_placements
from .rnea import rnea_pass
from .transforms import gravity_acceleration


@dataclass(frozen=True)
class WorldFrameState:
    """Forward-pass quantities of IDSVA-SO in the world frame (Singh, Russell & Wensing 2022, Alg. 1 lines 2-11).

    Columns are stored dof-major, (B, nv, 6): ``S`` motion subspace columns, ``psid`` = ψ̇,
    ``psidd`` = ψ̈, ``phid`` = Ṡ = v × S. Composite quantities per link: ``IC`` (B, L, 6, 6)
    inertia [kg, kg m, kg m²], ``BC`` (B, L, 6, 6) body-Coriolis matrix (no ½ factor),
    ``fC`` (B, L, 6) net force transmitted by the joint [N, N m]."""

    S: np.ndarray
    psid: np.ndarray
    psidd: np.ndarray
    phid: np.ndarray
    IC: np.ndarray
    BC: np.ndarray
    fC: np.ndarray


def world_frame_state(model, q, v, a, fext=None) -> WorldFrameState:
    """Forward pass on flattened inputs (B, nq), (B, nv), (B, nv), fext (B, nbody, 6) or None."""
    oR, op, X = link_placements(model, q)
    _, (X, vel, acc, f) = rnea_pass(model, q, v, a, fext, X=X)
    B, L = q.shape[0], model.nlinks
    Ad = adjoint(oR, op)                 # link -> world, motion vectors
    Xw = motion_transform(oR, op)        # world -> link; its transpose maps forces link -> world
    ov = np.einsum("blij,blj->bli", Ad, vel)
    oa = np.einsum("blij,blj->bli", Ad, acc)      # contains the gravity offset a_0 = -g
    fC = np.einsum("blji,blj->bli", Xw, f)        # rnea_pass's f is already the subtree sum
    oI = np.swapaxes(Xw, -1, -2) @ model.link_inertia @ Xw
    h = np.einsum("blij,blj->bli", oI, ov)
    Bb = force_cross_matrix(ov) @ oI - oI @ motion_cross_matrix(ov) + force_cross_rhs_matrix(h)
    IC, BC = oI, Bb
    for i in range(L - 1, -1, -1):
        lam = model.link_parent[i]
        if lam >= 0:
            IC[:, lam] += IC[:, i]
            BC[:, lam] += BC[:, i]
    lk = model.dof_link
    S = np.einsum("bkij,kj->bki", Ad[:, lk], model.dof_S)
    parent = model.link_parent[lk]
    has_parent = parent >= 0
    vpar = np.zeros((B, model.nv, 6), dtype=ov.dtype)
    apar = np.broadcast_to(gravity_acceleration(model, B, oa.dtype)[:, None], (B, model.nv, 6)).copy()
    vpar[:, has_parent] = ov[:, parent[has_parent]]
    apar[:, has_parent] = oa[:, parent[has_parent]]
    psid = motion_cross(vpar, S)
    psidd = motion_cross(apar, S) + motion_cross(vpar, psid)
    phid = motion_cross(ov[:, lk], S)
    return WorldFrameState(S, psid, psidd, phid, IC, BC, fC)


# ------------------------------------------------------------------ scatter plan
# The pair values computed per joint i, stacked in this order (each (B, nd_i, nA, nA) over the
# dofs p of i, and the chain dofs j and k):
_VALUES = ("p1", "p2", "p3", "p4", "p5", "p6", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8")
_TENSORS = ("qq", "vv", "qv", "dM")
# Where each value goes (Singh, Russell & Wensing 2022 Alg. 1 backward pass; §IV-F symmetries): tensor, roles (which of
# p, j, k is the output, first and second index), value, sign, and the case condition on (j, k)
# (k ⪯ j always; "j!=i" is Singh, Russell & Wensing 2022's Case B/C split, "k!=j" its Case A/B split).
_WRITES = (
    ("qq", "pjk", "p2", 1, "all"), ("qv", "pkj", "p1", -1, "all"),
    ("qq", "jkp", "x1", 1, "j!=i"), ("qq", "jpk", "x1", 1, "j!=i"), ("qv", "jkp", "p1", 1, "j!=i"),
    ("qv", "jpk", "x2", 1, "j!=i"), ("vv", "jkp", "p3", -1, "j!=i"), ("vv", "jpk", "p3", -1, "j!=i"),
    # ∂M_{jk}/∂q_i: for k and j on the same joint "kjp" already covers both orders (M is symmetric)
    ("dM", "kjp", "p4", 1, "j!=i"), ("dM", "jkp", "p4", 1, "k!=j,j!=i"),
    ("qq", "pkj", "p2", 1, "k!=j"), ("qq", "kpj", "x3", 1, "k!=j"), ("vv", "pjk", "p3", 1, "k!=j"),
    ("vv", "pkj", "p3", 1, "k!=j"), ("qv", "pjk", "x4", 1, "k!=j"), ("qv", "kjp", "x5", 1, "k!=j"),
    ("dM", "kpj", "p5", 1, "k!=j"), ("dM", "pkj", "p5", 1, "k!=j"),
    ("qq", "kjp", "x3", 1, "k!=j,j!=i"), ("vv", "kpj", "p6", 1, "k!=j,j!=i"),
    ("vv", "kjp", "p6", 1, "k!=j,j!=i"), ("qv", "kpj", "x6", 1, "k!=j,j!=i"),
    ("vv", "kjp", "x7", 1, "k!=j,j==i"),
    ("vv", "pjk", "x8", 1, "k==j"),
)


@dataclass(frozen=True)
class _LinkPlan:
    """Index bookkeeping for joint ``i``: its dofs ``P``, the dofs ``A`` of its ancestor chain
    (root to ``i``; every pair of them is an ancestor/descendant pair), and where each stacked
    value lands: ``src`` (into the flattened (14, nd, nA, nA) stack), ``sign``, ``tensor``, output
    dof ``out`` and the flat (first, second) index ``fs = first * nv + second``."""

    P: np.ndarray
    A: np.ndarray
    src: np.ndarray
    sign: np.ndarray
    tensor: np.ndarray
    out: np.ndarray
    fs: np.ndarray
    # for the contraction: src order sorted by (tensor, fs), segment starts, unique target keys
    order: np.ndarray
    starts: np.ndarray
    keys: np.ndarray


def _link_plan(model, i: int) -> _LinkPlan:
    nv = model.nv
    d0, nd = model.link_dofadr[i], model.link_nv[i]
    P = np.arange(d0, d0 + nd)
    A = np.flatnonzero(model.link_ancestor[i][model.dof_link])
    lA = model.dof_link[A]
    lj, lk = lA[:, None], lA[None, :]
    valid = lk <= lj                     # k ⪯ j: on one chain, ancestors have smaller link indices
    masks = {"all": valid, "j!=i": valid & (lj != i), "k!=j": valid & (lk != lj),
             "k!=j,j!=i": valid & (lk != lj) & (lj != i), "k!=j,j==i": valid & (lk != lj) & (lj == i),
             "k==j": valid & (lk == lj)}
    nA = A.size
    grid_p, grid_j, grid_k = np.meshgrid(P, A, A, indexing="ij")           # (nd, nA, nA) dof ids
    dof = {"p": grid_p, "j": grid_j, "k": grid_k}
    flat = np.arange(nd * nA * nA).reshape(nd, nA, nA)
    src, sign, tensor, out, fs = [], [], [], [], []
    for name, roles, value, sg, cond in _WRITES:
        m = np.broadcast_to(masks[cond], (nd, nA, nA))
        src.append(_VALUES.index(value) * nd * nA * nA + flat[m])
        sign.append(np.full(m.sum(), float(sg)))
        tensor.append(np.full(m.sum(), _TENSORS.index(name)))
        out.append(dof[roles[0]][m])
        fs.append(dof[roles[1]][m] * nv + dof[roles[2]][m])
    src, sign, tensor, out, fs = (np.concatenate(x) for x in (src, sign, tensor, out, fs))
    key = tensor * nv * nv + fs
    order = np.argsort(key, kind="stable")
    keys, starts = np.unique(key[order], return_index=True)
    return _LinkPlan(P, A, src, sign, tensor, out, fs, order, starts, keys)


_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _plan(model) -> tuple[_LinkPlan, ...]:
    """Per-joint plans, built once per model (they depend on the tree only)."""
    plan = _PLANS.get(model)
    if plan is None:
        plan = tuple(_link_plan(model, i) for i in range(model.nlinks))
        _PLANS[model] = plan
    return plan


# ------------------------------------------------------------------ backward pass
def _apply(Ms: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``M_{p,m} t_j`` for stacked matrices (B, nd, m, 6, 6) and columns (B, nA, 6)
    -> (B, nd, m, nA, 6); one batched matmul (einsum is ~10x slower here)."""
    B, nd, m = Ms.shape[:3]
    Y = Ms.reshape(B, nd * m * 6, 6) @ np.swapaxes(cols, 1, 2)
    return np.swapaxes(Y.reshape(B, nd, m, 6, cols.shape[1]), -1, -2)


def _dots(U: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``u_{p,m,j} · w_k`` for (B, nd, m, nA, 6) and (B, nA, 6) -> (B, nd, m, nA, nA)."""
    B, nd, m, nA = U.shape[:4]
    return (U.reshape(B, nd * m * nA, 6) @ np.swapaxes(cols, 1, 2)).reshape(B, nd, m, nA, cols.shape[1])


def _mat_vec(M: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(B, 1, 6, 6) @ (B, nd, 6) -> (B, nd, 6)."""
    return (M @ x[..., None])[..., 0]


def _pair_values(st: WorldFrameState, i: int, lp: _LinkPlan) -> np.ndarray:
    """The 14 pair values of joint ``i`` (Singh, Russell & Wensing 2022 Alg. 1, the bodies of the j- and k-loops),
    stacked and flattened: (B, 14 * nd * nA * nA)."""
    P, A = lp.P, lp.A
    Ic, Bc = st.IC[:, i, None], st.BC[:, i, None]                       # (B, 1, 6, 6)
    s, ps, pss, phs = st.S[:, P], st.psid[:, P], st.psidd[:, P], st.phid[:, P]
    # the cross-product matrices are built in two batched calls (they dominate for small B)
    sx, psx = np.moveaxis(motion_cross_matrix(np.stack([s, ps], axis=2)), 2, 0)   # (B, nd, 6, 6)
    sxs, psxs = -np.swapaxes(sx, -1, -2), -np.swapaxes(psx, -1, -2)                # v ×* = -(v×)ᵀ
    Bct = np.swapaxes(Bc, -1, -2)
    g5 = _mat_vec(Bc, ps) + force_cross(s, st.fC[:, i, None]) + _mat_vec(Ic, pss)
    g7 = _mat_vec(Bc, s) + _mat_vec(Ic, ps + phs)
    Is, Ips = _mat_vec(Ic, s), _mat_vec(Ic, ps)
    r0, cIps, r4, r5, r7 = np.moveaxis(
        force_cross_rhs_matrix(np.stack([Is, Ips, _mat_vec(Bct, s), g5, g7], axis=2)), 2, 0)
    # r0 = (I^C s)×̄*, r4 = (B^Cᵀ s)×̄*, r5 = (B^C ψ̇ + s ×* f^C + I^C ψ̈)×̄*, r7 = (B^C s + I^C(ψ̇ + Ṡ))×̄*
    r1 = sxs @ Ic - Ic @ sx                                             # s ×* I^C − I^C s×
    Bic = r1 + r0                                                       # body-Coriolis of I^C along s
    r2 = r0 - r1
    r3 = psxs @ Ic - Ic @ psx + cIps + sxs @ Bc - Bc @ sx
    r6 = sxs @ Ic + r0

    t, pt, ptt, pht = st.S[:, A], st.psid[:, A], st.psidd[:, A], st.phid[:, A]
    r5t, r6t, r7t, r3t, r4t, r0t, Bict, r1t = np.moveaxis(
        _apply(np.stack([r5, r6, r7, r3, r4, r0, Bic, r1], axis=2), t), 2, 0)
    r3p, r2p, Bicp = np.moveaxis(_apply(np.stack([r3, r2, Bic], axis=2), pt), 2, 0)
    r1pp, r1ps = np.moveaxis(_apply(r1[:, :, None], np.concatenate([ptt, pt + pht], axis=1))[:, :, 0]
                             .reshape(r1.shape[0], r1.shape[1], 2, A.size, 6), 2, 0)
    u1, u2, u11 = np.moveaxis(_apply(np.swapaxes(np.stack([r3, r1, Bic], axis=2), -1, -2), t), 2, 0)
    u12 = _apply(np.swapaxes(Bic, -1, -2)[:, :, None], pt)[:, :, 0]    # ψ̇_jᵀ B_ic
    u3 = r3p + r1pp + r5t
    u58 = r2p + r4t
    u6 = Bicp + r7t
    u7 = r3t + r1ps
    # (u4, u8, u9, u10, u13) = (r6t, r4t, r0t, Bict, r1t)
    Dt = _dots(np.stack([u11, r1t, r0t, Bict, u1, u3, u58, u6, u7, r6t, u2], axis=2), t)
    Dp = _dots(np.stack([u11, r4t - u12, u1], axis=2), pt)
    Dpp = _dots(np.stack([r0t, u2], axis=2), ptt)
    Dps = _dots(np.stack([u2, r0t], axis=2), pt + pht)
    vals = np.stack([
        Dp[:, :, 0],                    # p1 = u11·ψ̇_k
        Dpp[:, :, 0] + Dp[:, :, 1],     # p2 = u9·ψ̈_k + (u8 − u12)·ψ̇_k
        -Dt[:, :, 0],                   # p3 = −u11·S_k
        Dt[:, :, 1],                    # p4 = u13·S_k
        Dt[:, :, 2],                    # p5 = u9·S_k
        Dt[:, :, 3],                    # p6 = u10·S_k
        Dp[:, :, 2] + Dpp[:, :, 1],     # x1 = u1·ψ̇_k + u2·ψ̈_k
        Dt[:, :, 4] + Dps[:, :, 0],     # x2 = u1·S_k + u2·(ψ̇_k + Ṡ_k)
        Dt[:, :, 5],                    # x3 = u3·S_k
        Dt[:, :, 6] + Dps[:, :, 1],     # x4 = (u5 + u8)·S_k + u9·(ψ̇_k + Ṡ_k)
        Dt[:, :, 7],                    # x5 = u6·S_k
        Dt[:, :, 8],                    # x6 = u7·S_k
        Dt[:, :, 9],                    # x7 = u4·S_k
        -Dt[:, :, 10],                  # x8 = −u2·S_k
    ], axis=1)
    return vals.reshape(vals.shape[0], -1)


def rnea_second_derivatives(model, q, v, a, fext=None):
    """``(d2tau_dq2, d2tau_dv2, d2tau_dqdv, dM_dq)``, each (B, nv, nv, nv).

    ``T[b, i, j, k]``: output ``τ_i``, first variable ``j``, second variable ``k`` (the
    ``k``-perturbation is applied first); ``dM_dq[b, i, j, k] = ∂M_ij/∂q_k``. Entries that the tree
    structure forces to zero are exactly zero."""
    st = world_frame_state(model, q, v, a, fext)
    B, nv = q.shape[0], model.nv
    out = np.zeros((4, B, nv * nv * nv), dtype=st.IC.dtype)
    for i, lp in reversed(tuple(enumerate(_plan(model)))):
        vals = _pair_values(st, i, lp)
        # every entry is written exactly once (the plans are built so; tests check it), so one
        # fancy-index assignment per joint is the whole scatter
        out[lp.tensor, :, lp.out * nv * nv + lp.fs] = (vals[:, lp.src] * lp.sign).T
    out = out.reshape(4, B, nv, nv, nv)
    return out[0], out[1], out[2], out[3]


def rnea_second_derivatives_contracted(model, q, v, a, mu, fext=None):
    """``Σ_i μ_i T[:, i, :, :]`` for the four tensors of :func:`rnea_second_derivatives`, each
    (B, nv, nv), accumulated inside the backward pass (no nv³ tensor is formed).

    mu: (B, nv) weights on the output (torque) index. For ``dM_dq`` this is
    ``Σ_i μ_i ∂M_ij/∂q_k``."""
    st = world_frame_state(model, q, v, a, fext)
    B, nv = q.shape[0], model.nv
    mu = np.asarray(mu)
    C = np.zeros((B, 4 * nv * nv), dtype=np.result_type(mu, st.IC.dtype))
    for i, lp in reversed(tuple(enumerate(_plan(model)))):
        vals = _pair_values(st, i, lp)
        # weighted accumulation == contraction because no entry is written twice
        contrib = vals[:, lp.src] * lp.sign * mu[:, lp.out]
        C[:, lp.keys] += np.add.reduceat(contrib[:, lp.order], lp.starts, axis=1)
    C = C.reshape(B, 4, nv, nv)
    return C[:, 0], C[:, 1], C[:, 2], C[:, 3]
