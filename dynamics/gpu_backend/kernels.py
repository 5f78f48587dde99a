"""CUDA kernels of the ``gpu`` backend (Plancher et al. 2021 §IV-B): one thread block per knot point, the
threads of a block over links, dofs / derivative columns and matrix entries.

Every kernel is a plain Python function compiled by :class:`.runtime.Compiler` with the
compile-time constants ``DT`` (float dtype), ``NL`` (links), ``NV`` (dofs), ``NMATS``/``NVECS``
(IDSVA-SO scratch) of one model, so that per-knot work arrays are statically sized **shared
memory**; the O(L·nv) and O(nv²) work arrays (articulated inertias, M⁻¹ sweep columns, derivative
columns) live in a per-knot slice of a global workspace (``ws[b]``), written and read only by
that block. The serial passes are those of :mod:`dynamics.numba_backend`, compiled as device
functions (:func:`.runtime.Compiler.device`); the parallel steps are written here.

Parallel steps (Plancher et al. 2021 Algorithm 4: identical operations regrouped into one step, a
``syncthreads`` between dependent steps; the serial loops shortened where the tree allows):

1. link placements ``(R_i, p_i)`` — threads over links;
2. world placements — one step per tree depth, threads over the links of that depth
   (the serial chain becomes ``depth`` steps: Atlas 31 links, 8 depths);
3. origin shift, world columns ``J_d`` (threads over dofs), world inertias (threads over links),
   joint velocities (links), then world velocities (one step per depth);
4. the ABA sweeps (bias forces, articulated inertias, bias and acceleration passes) and the
   RNEA / IDSVA-SO / frame-Jacobian sweeps on one thread — the remaining serial work;
5. M⁻¹ (:func:`par_minv`): threads over (link, column) pairs, one step per depth, backward then
   forward — every column of the unit-torque sweeps is independent;
6. ∇RNEA (:func:`par_rnea_derivatives_pass`): momenta, forces and inertia rates (threads over
   links), the per-dof derivative columns (threads over dofs), then the backward sweep over links
   with four parallel steps per link (its own columns; the (row, column) entries of its subtree
   block; its ∂f/∂v columns; its block of ∂τ/∂v and the 31 numbers it adds to its parent);
7. the M⁻¹ multiply ``∂a/∂u = -M⁻¹ ∂τ/∂u`` — threads over the 2·nv² output entries.

Argument conventions: model arrays ``li``, ``lf``, ``gv``, ``bl``, ``bf`` (packing layout),
``levl`` (L,) the links sorted by tree depth, ``levs`` (nlev + 1,) where each depth starts in ``levl``,
``nlev`` number of depths, ``dl`` (nv,) link of each dof;
batch arrays have the knot as leading axis; ``has_fext``/``has_minv`` are 0/1 ints (a dummy
array of batch size 1 is passed when 0).
"""

from __future__ import annotations

import inspect
import re

import numpy as np
from numba import cuda

from ..kernels.aba import aba_acceleration_pass, aba_bias_pass, articulated_inertias, bias_forces
from ..kernels.crba import crba_pass
from ..kernels.joints import link_placement
from ..kernels.kinematics import frame_jacobian_knot, frame_world
from ..kernels.packing import LF_COM, LF_MASS, LF_ST, LI_DOFADR, LI_NV, LI_PARENT, LI_SUBEND
from ..kernels.rnea import link_external_forces, rnea_backward, rnea_forward
from ..kernels.rnea_derivatives import doY_mul, inertia_rate
from ..kernels.rnea_second_derivatives import second_order_backward, second_order_forward
from ..kernels.spatial import (force_cross_add, force_to_parent, inertia_mul, inertia_to_parent_add, mot_cross,
                                     mot_to_parent)
from ..kernels.world import world_accelerations
from .runtime import device

# compile-time constants, replaced per model by the Compiler (these values are never used)
DT = np.float64
NL = 1
NV = 1
NMATS = 1
NVECS = 1
LIW = 1
LFW = 1
# per kernel (kernel_constants): M_<X> = 1 keeps the per-knot array X in shared memory, of shape SH_<X>
# (SH_<X> is all ones where X stays in the global workspace)
M_LI = M_LF = M_IA = M_U = M_UD = M_DINV = M_F = M_P = M_COLS = M_DTAU = 0
SH_LI = SH_LF = (1, 1)
SH_IA = SH_U = SH_UD = SH_DINV = SH_F = SH_P = SH_COLS = SH_DTAU = (1, 1, 1)

#: static shared memory one block may declare [bytes] (48 KiB), less room for alignment padding
SHARED_BUDGET = 48 * 1024 - 512
#: per kernel, the per-knot arrays kept in shared memory instead of global memory when they fit
#: beside the kernel's own shared arrays, in this order (first the articulated inertias that the
#: serial ABA sweep reads and writes, then the model's index table read everywhere). A
#: GPU thread waits hundreds of cycles for each dependent global load; the one-thread ABA sweeps
#: issue thousands (measured on an H200: Atlas ``k_aba`` sweeps 340 -> 170 µs with the four ABA
#: workspaces in shared memory)
SHARED_CANDIDATES = {
    "k_aba": ("IA", "LI", "U", "UD", "DINV", "LF"),
    "k_minv": ("IA", "LI", "U", "UD", "DINV", "F", "P", "LF"),
    "k_aba_derivatives": ("IA", "LI", "U", "UD", "DINV", "COLS", "DTAU", "F", "P", "LF"),
    "k_rnea_derivatives": ("LI", "COLS", "LF"),
}


def _candidate_shape(name: str, c: dict) -> tuple[int, ...]:
    nl, nv = c["NL"], c["NV"]
    return {"LI": (nl, c["LIW"]), "LF": (nl, c["LFW"]), "IA": (nl, 6, 6), "U": (nl, 6, 6), "UD": (nl, 6, 6),
            "DINV": (nl, 6, 6), "F": (nl, nv, 6), "P": (nl, nv, 6), "COLS": (8, nv, 6), "DTAU": (2, nv, nv)}[name]


_SHARED_DECL = re.compile(r"cuda\.shared\.array\(\s*(\([^()]*\)|\w+)\s*,\s*([\w.]+)\s*\)")


def declared_shared_bytes(f, consts: dict) -> int:
    """Static shared memory [bytes] of the arrays kernel ``f`` always declares (not the candidates)."""
    item = np.dtype(consts["DT"]).itemsize
    total = 0
    for shape, dtype in _SHARED_DECL.findall(inspect.getsource(f)):
        if "SH_" in shape:
            continue
        dims = eval(shape, {}, dict(consts))  # noqa: S307 (a shape expression of this module's kernels)
        n = int(np.prod(dims if isinstance(dims, tuple) else (dims,)))
        total += n * (8 if "int64" in dtype else item)
    return total


def kernel_constants(f, consts: dict, budget: int | None = None) -> dict:
    """The per-kernel constants (``M_<X>``, ``SH_<X>``) of kernel ``f`` for the model constants
    ``consts``: the candidates of :data:`SHARED_CANDIDATES` taken in order while the block's static
    shared memory stays within ``budget`` (default :data:`SHARED_BUDGET`). Read by
    :meth:`.runtime.Compiler.consts_for`."""
    budget = SHARED_BUDGET if budget is None else budget
    item = np.dtype(consts["DT"]).itemsize
    out: dict = {}
    for name in ("LI", "LF"):
        out["M_" + name], out["SH_" + name] = 0, (1, 1)
    for name in ("IA", "U", "UD", "DINV", "F", "P", "COLS", "DTAU"):
        out["M_" + name], out["SH_" + name] = 0, (1, 1, 1)
    cands = SHARED_CANDIDATES.get(f.__name__, ())
    if not cands:
        return out
    used = declared_shared_bytes(f, consts) + sum(int(np.prod(v)) * (8 if k == "SH_LI" else item)
                                                  for k, v in out.items() if k.startswith("SH_"))
    for name in cands:
        shape = _candidate_shape(name, consts)
        nbytes = int(np.prod(shape)) * (8 if name == "LI" else item)
        small = int(np.prod(out["SH_" + name])) * (8 if name == "LI" else item)
        if used - small + nbytes <= budget:
            out["M_" + name], out["SH_" + name] = 1, shape
            used += nbytes - small
    return out


# ------------------------------------------------------------------------ parallel building blocks
@device
def par_placements(tid, nt, li, lf, q, R, p):
    """Step 1: ``(R_i, p_i)`` of every link in its parent, threads over links."""
    for i in range(tid, li.shape[0], nt):
        link_placement(li, lf, i, q, R, p)
    cuda.syncthreads()


@device
def par_world_placements(tid, nt, li, levl, levs, nlev, R, p, oR, op):
    """Step 2: world placements, one parallel step per tree depth."""
    for lev in range(nlev):
        for x in range(levs[lev] + tid, levs[lev + 1], nt):
            i = levl[x]
            lam = li[i, LI_PARENT]
            if lam < 0:
                for r in range(3):
                    op[i, r] = p[i, r]
                    for c in range(3):
                        oR[i, r, c] = R[i, r, c]
            else:
                for r in range(3):
                    op[i, r] = op[lam, r] + (oR[lam, r, 0] * p[i, 0] + oR[lam, r, 1] * p[i, 1]
                                             + oR[lam, r, 2] * p[i, 2])
                    for c in range(3):
                        oR[i, r, c] = (oR[lam, r, 0] * R[i, 0, c] + oR[lam, r, 1] * R[i, 1, c]
                                       + oR[lam, r, 2] * R[i, 2, c])
        cuda.syncthreads()


@device
def par_world_kinematics(tid, nt, li, lf, levl, levs, nlev, dl, v, with_v, oR, op, J, oY, ov, vJ):
    """Step 3: origin moved to link 0 (as :func:`dynamics.kernels.world.world_kinematics`),
    world columns ``J`` (threads over dofs), world inertias ``oY`` (threads over links) and, if
    ``with_v``, joint and world velocities ``vJ``, ``ov`` (links, then one step per depth)."""
    L = li.shape[0]
    nv = J.shape[0]
    t = cuda.local.array(6, DT)
    o0 = op[0, 0]
    o1 = op[0, 1]
    o2 = op[0, 2]
    cuda.syncthreads()
    for i in range(tid, L, nt):
        op[i, 0] -= o0
        op[i, 1] -= o1
        op[i, 2] -= o2
    cuda.syncthreads()
    for d in range(tid, nv, nt):
        i = dl[d]
        k = d - li[i, LI_DOFADR]
        for r in range(6):
            t[r] = lf[i, LF_ST + 6 * k + r]
        mot_to_parent(oR[i], op[i], t, J[d])
    for i in range(tid, L, nt):
        for k in range(13):
            oY[i, k] = 0.0
        inertia_to_parent_add(lf, i, oR[i], op[i], oY, i)
    cuda.syncthreads()
    if with_v:
        for i in range(tid, L, nt):
            d0 = li[i, LI_DOFADR]
            nd = li[i, LI_NV]
            for r in range(6):
                s = 0.0
                for k in range(nd):
                    s += J[d0 + k, r] * v[d0 + k]
                vJ[i, r] = s
        cuda.syncthreads()
        for lev in range(nlev):
            for x in range(levs[lev] + tid, levs[lev + 1], nt):
                i = levl[x]
                lam = li[i, LI_PARENT]
                for r in range(6):
                    ov[i, r] = vJ[i, r] if lam < 0 else ov[lam, r] + vJ[i, r]
            cuda.syncthreads()


@device
def par_neg_product(tid, nt, Mi, X, out):
    """Step 5: ``out = -Mi X`` (nv, nv), threads over output entries."""
    n = out.shape[0]
    for e in range(tid, n * n, nt):
        r = e // n
        c = e - r * n
        s = 0.0
        for k in range(n):
            s += Mi[r, k] * X[k, c]
        out[r, c] = -s


@device
def par_copy2(tid, nt, src, dst):
    """``dst[:] = src`` for 2-D arrays, threads over entries."""
    n1 = src.shape[1]
    for e in range(tid, src.shape[0] * n1, nt):
        r = e // n1
        dst[r, e - r * n1] = src[r, e - r * n1]


@device
def par_stage(tid, nt, m_li, li, lis, m_lf, lf, lfs):
    """Copy the model tables ``li`` / ``lf`` into their shared-memory copies (where the kernel keeps
    them there: ``m_li`` / ``m_lf``), threads over entries."""
    if m_li:
        par_copy2(tid, nt, li, lis)
    if m_lf:
        par_copy2(tid, nt, lf, lfs)
    cuda.syncthreads()


@device
def par_minv(tid, nt, li, levl, levs, nlev, J, U, UD, Dinv, F, P, Mi):
    """Analytical M⁻¹ (the unit-torque sweeps of :mod:`dynamics.kernels.minv`) with threads over
    (link, column) pairs and one step per tree depth: the links of one depth are independent, and
    each column of a sweep is independent of the others (sibling subtrees own disjoint column
    ranges, so the accumulation into the parent's ``F`` never collides)."""
    L = li.shape[0]
    nv = Mi.shape[0]
    w = cuda.local.array(6, DT)
    for e in range(tid, L * nv, nt):
        i = e // nv
        c = e - i * nv
        for r in range(6):
            F[i, c, r] = 0.0
    for e in range(tid, nv * nv, nt):
        Mi[e // nv, e % nv] = 0.0
    cuda.syncthreads()
    # backward: deepest links first; row block of link i on its subtree columns, F_λ += ...
    for lev in range(nlev - 1, -1, -1):
        for e in range(tid, (levs[lev + 1] - levs[lev]) * nv, nt):
            i = levl[levs[lev] + e // nv]
            c = e % nv
            d0 = li[i, LI_DOFADR]
            if c < d0 or c >= li[i, LI_SUBEND]:
                continue
            nd = li[i, LI_NV]
            lam = li[i, LI_PARENT]
            for k in range(nd):
                s = 1.0 if c == d0 + k else 0.0
                for r in range(6):
                    s -= J[d0 + k, r] * F[i, c, r]
                w[k] = s
            for k in range(nd):
                s = 0.0
                for j in range(nd):
                    s += Dinv[i, k, j] * w[j]
                Mi[d0 + k, c] = s
            if lam >= 0:
                for r in range(6):
                    s = F[i, c, r]
                    for k in range(nd):
                        s += UD[i, k, r] * w[k]
                    F[lam, c, r] += s
        cuda.syncthreads()
    # forward: root first; columns c >= dofadr_i
    for lev in range(nlev):
        for e in range(tid, (levs[lev + 1] - levs[lev]) * nv, nt):
            i = levl[levs[lev] + e // nv]
            c = e % nv
            d0 = li[i, LI_DOFADR]
            if c < d0:
                continue
            nd = li[i, LI_NV]
            lam = li[i, LI_PARENT]
            if lam >= 0:
                for k in range(nd):
                    s = 0.0
                    for r in range(6):
                        s += U[i, k, r] * P[lam, c, r]
                    w[k] = s
                for k in range(nd):
                    s = Mi[d0 + k, c]
                    for j in range(nd):
                        s -= Dinv[i, k, j] * w[j]
                    Mi[d0 + k, c] = s
            for r in range(6):
                s = P[lam, c, r] if lam >= 0 else 0.0
                for k in range(nd):
                    s += J[d0 + k, r] * Mi[d0 + k, c]
                P[i, c, r] = s
        cuda.syncthreads()
    # lower triangle by symmetry (reads only the upper triangle: no ordering needed)
    for i in range(L):
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        for e in range(tid, nd * d0, nt):
            k = e // d0
            c = e - k * d0
            Mi[d0 + k, c] = Mi[c, d0 + k]
    cuda.syncthreads()


@device
def par_rnea_derivatives_pass(tid, nt, li, dl, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols, dtau_dq,
                              dtau_dv):
    """∇RNEA (:func:`dynamics.kernels.rnea_derivatives.rnea_derivatives_pass`) regrouped into
    parallel steps (Plancher et al. 2021 Algorithm 4): momenta, net forces and inertia rates (threads over
    links), the per-dof columns ∂v/∂q, ∂a/∂q, ∂a/∂v (threads over dofs), then the backward sweep
    over links, each link's step split into four parallel steps over its dofs, the (row, column)
    entries of its subtree block, and the 31 numbers it adds to its parent."""
    L = li.shape[0]
    nv = dtau_dq.shape[0]
    oh = ws[0]
    of = ws[1]
    dVdq = cols[0]
    dAdq = cols[1]
    dAdv = cols[2]
    dFda = cols[3]
    dFdq = cols[4]
    dFdv = cols[5]
    dYtJ = cols[6]
    t = cuda.local.array(6, DT)
    g0 = cuda.local.array(6, DT)
    for r in range(3):
        g0[r] = -gv[r]
        g0[3 + r] = 0.0
    for e in range(tid, nv * nv, nt):
        dtau_dq[e // nv, e % nv] = 0.0
        dtau_dv[e // nv, e % nv] = 0.0
    for i in range(tid, L, nt):
        inertia_mul(oY, i, ov[i], oh[i])
        inertia_mul(oY, i, oa[i], of[i])
        force_cross_add(ov[i], oh[i], of[i])
        if has_fext:
            force_to_parent(oR[i], op[i], fl[i], t)
            for r in range(6):
                of[i, r] -= t[r]
        inertia_rate(oY, i, ov[i], oh[i], dY)
    for d in range(tid, nv, nt):
        i = dl[d]
        lam = li[i, LI_PARENT]
        if lam < 0:
            mot_cross(g0, J[d], dAdq[d])
            mot_cross(ov[i], J[d], dAdv[d])
            for r in range(6):
                dVdq[d, r] = 0.0
        else:
            mot_cross(oa[lam], J[d], dAdq[d])
            mot_cross(ov[lam], J[d], dVdq[d])
            mot_cross(ov[lam], dVdq[d], t)
            mot_cross(ov[i], J[d], dAdv[d])
            for r in range(6):
                dAdq[d, r] += t[r]
                dAdv[d, r] += dVdq[d, r]
    cuda.syncthreads()
    for i in range(L - 1, -1, -1):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        e = li[i, LI_SUBEND]
        # (1) this link's force columns from its composite inertia and inertia rate
        for d in range(d0 + tid, d0 + nd, nt):
            inertia_mul(oY, i, J[d], dFda[d])
            inertia_mul(oY, i, dAdq[d], dFdq[d])
            doY_mul(dY, i, dVdq[d], t)
            for r in range(6):
                dFdq[d, r] += t[r]
            h0 = dY[i, 0]
            h1 = dY[i, 1]
            h2 = dY[i, 2]
            dYtJ[d, 0] = 2.0 * (h1 * J[d, 2] - h2 * J[d, 1])
            dYtJ[d, 1] = 2.0 * (h2 * J[d, 0] - h0 * J[d, 2])
            dYtJ[d, 2] = 2.0 * (h0 * J[d, 1] - h1 * J[d, 0])
            for c in range(3):
                dYtJ[d, c] += dY[i, 3 + c] * J[d, 3] + dY[i, 6 + c] * J[d, 4] + dY[i, 9 + c] * J[d, 5]
        cuda.syncthreads()
        # (2) strict-subtree rows x this joint's columns, and this joint's rows x subtree columns (∂/∂q)
        ns = e - d0 - nd
        for x in range(tid, nd * ns + nd * (e - d0), nt):
            if x < nd * ns:
                d = d0 + x // ns
                r = d0 + nd + x % ns
                s = 0.0
                u = 0.0
                for k in range(6):
                    s += dFda[r, k] * dAdq[d, k]
                    u += dFda[r, k] * dAdv[d, k]
                for k in range(3):
                    s += dYtJ[r, k] * dVdq[d, 3 + k]
                    u += dYtJ[r, k] * J[d, 3 + k]
                dtau_dq[r, d] = s
                dtau_dv[r, d] = u
            else:
                y = x - nd * ns
                d = d0 + y // (e - d0)
                c = d0 + y % (e - d0)
                s = 0.0
                for k in range(6):
                    s += J[d, k] * dFdq[c, k]
                dtau_dq[d, c] = s
        cuda.syncthreads()
        # (3) the J x* f term of this joint's ∂f/∂q columns, and its ∂f/∂v columns
        for d in range(d0 + tid, d0 + nd, nt):
            force_cross_add(J[d], of[i], dFdq[d])
            inertia_mul(oY, i, dAdv[d], dFdv[d])
            doY_mul(dY, i, J[d], t)
            for r in range(6):
                dFdv[d, r] += t[r]
        cuda.syncthreads()
        # (4) this joint's rows x subtree columns (∂/∂v); composite sums into the parent
        for x in range(tid, nd * (e - d0) + 31, nt):
            if x < nd * (e - d0):
                d = d0 + x // (e - d0)
                c = d0 + x % (e - d0)
                s = 0.0
                for k in range(6):
                    s += J[d, k] * dFdv[c, k]
                dtau_dv[d, c] = s
            elif lam >= 0:
                k = x - nd * (e - d0)
                if k < 13:
                    oY[lam, k] += oY[i, k]
                elif k < 25:
                    dY[lam, k - 13] += dY[i, k - 13]
                else:
                    of[lam, k - 25] += of[i, k - 25]
        cuda.syncthreads()


# ------------------------------------------------------------------------ dynamics
def k_rnea(li, lf, gv, bl, bf, q, v, a, fext, has_fext, tau):
    """``tau`` (B, nv): RNEA (Plancher et al. 2021 Algorithm 1) in link frames; placements in parallel."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    vel = cuda.shared.array((NL, 6), DT)
    acc = cuda.shared.array((NL, 6), DT)
    f = cuda.shared.array((NL, 6), DT)
    fl = cuda.shared.array((NL, 6), DT)
    tmp = cuda.shared.array((4, 6), DT)
    par_placements(tid, nt, li, lf, q[b], R, p)
    if tid == 0:
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        rnea_forward(li, lf, gv, v[b], a[b], has_fext, fl, R, p, vel, acc, f, tmp)
        rnea_backward(li, lf, a[b], R, p, f, tmp, tau[b])


def k_crba(li, lf, levl, levs, nlev, dl, q, M):
    """``M`` (B, nv, nv): CRBA on world-frame composite inertias."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    J = cuda.shared.array((NV, 6), DT)
    F = cuda.shared.array((NV, 6), DT)
    oY = cuda.shared.array((NL, 13), DT)
    par_placements(tid, nt, li, lf, q[b], R, p)
    par_world_placements(tid, nt, li, levl, levs, nlev, R, p, oR, op)
    par_world_kinematics(tid, nt, li, lf, levl, levs, nlev, dl, q[b], 0, oR, op, J, oY, F, F)
    if tid == 0:
        crba_pass(li, lf, oY, J, F, M[b])


def k_aba(li, lf, gv, bl, bf, levl, levs, nlev, dl, q, v, tau, fext, has_fext, IA, U, UD, Dinv, qdd):
    """``qdd`` (B, nv): ABA (world frame); ``IA``, ``U``, ``UD``, ``Dinv`` (B, L, 6, 6) workspace."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    J = cuda.shared.array((NV, 6), DT)
    ov = cuda.shared.array((NL, 6), DT)
    vJ = cuda.shared.array((NL, 6), DT)
    oY = cuda.shared.array((NL, 13), DT)
    cb = cuda.shared.array((NL, 6), DT)
    pA = cuda.shared.array((NL, 6), DT)
    oa = cuda.shared.array((NL, 6), DT)
    fl = cuda.shared.array((NL, 6), DT)
    u = cuda.shared.array(NV, DT)
    tmp = cuda.shared.array((4, 6), DT)
    tmp66 = cuda.shared.array((6, 6), DT)
    chol = cuda.shared.array((6, 6), DT)
    lis = cuda.shared.array(SH_LI, np.int64)
    lfs = cuda.shared.array(SH_LF, DT)
    IAs = cuda.shared.array(SH_IA, DT)
    Us = cuda.shared.array(SH_U, DT)
    UDs = cuda.shared.array(SH_UD, DT)
    Dis = cuda.shared.array(SH_DINV, DT)
    par_stage(tid, nt, M_LI, li, lis, M_LF, lf, lfs)
    lik = lis if M_LI else li
    lfk = lfs if M_LF else lf
    IAk = IAs if M_IA else IA[b]
    Uk = Us if M_U else U[b]
    UDk = UDs if M_UD else UD[b]
    Dik = Dis if M_DINV else Dinv[b]
    par_placements(tid, nt, lik, lfk, q[b], R, p)
    par_world_placements(tid, nt, lik, levl, levs, nlev, R, p, oR, op)
    par_world_kinematics(tid, nt, lik, lfk, levl, levs, nlev, dl, v[b], 1, oR, op, J, oY, ov, vJ)
    if tid == 0:
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        bias_forces(lik, oY, ov, vJ, has_fext, fl, oR, op, cb, pA, tmp)
        articulated_inertias(lik, lfk, oY, J, IAk, Uk, UDk, Dik, tmp66, chol)
        aba_bias_pass(lik, J, tau[b], IAk, Uk, UDk, cb, pA, u)
        aba_acceleration_pass(lik, gv, J, Uk, Dik, cb, u, qdd[b], oa)


def k_minv(li, lf, levl, levs, nlev, dl, q, IA, U, UD, Dinv, F, P, Mi):
    """``Mi`` (B, nv, nv): analytical M⁻¹ (Carpentier 2018); ``F``, ``P`` (B, L, nv, 6) workspace."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    J = cuda.shared.array((NV, 6), DT)
    oY = cuda.shared.array((NL, 13), DT)
    tmp66 = cuda.shared.array((6, 6), DT)
    chol = cuda.shared.array((6, 6), DT)
    lis = cuda.shared.array(SH_LI, np.int64)
    lfs = cuda.shared.array(SH_LF, DT)
    IAs = cuda.shared.array(SH_IA, DT)
    Us = cuda.shared.array(SH_U, DT)
    UDs = cuda.shared.array(SH_UD, DT)
    Dis = cuda.shared.array(SH_DINV, DT)
    Fs = cuda.shared.array(SH_F, DT)
    Ps = cuda.shared.array(SH_P, DT)
    par_stage(tid, nt, M_LI, li, lis, M_LF, lf, lfs)
    lik = lis if M_LI else li
    lfk = lfs if M_LF else lf
    IAk = IAs if M_IA else IA[b]
    Uk = Us if M_U else U[b]
    UDk = UDs if M_UD else UD[b]
    Dik = Dis if M_DINV else Dinv[b]
    Fk = Fs if M_F else F[b]
    Pk = Ps if M_P else P[b]
    par_placements(tid, nt, lik, lfk, q[b], R, p)
    par_world_placements(tid, nt, lik, levl, levs, nlev, R, p, oR, op)
    par_world_kinematics(tid, nt, lik, lfk, levl, levs, nlev, dl, q[b], 0, oR, op, J, oY, oY, oY)
    if tid == 0:
        articulated_inertias(lik, lfk, oY, J, IAk, Uk, UDk, Dik, tmp66, chol)
    cuda.syncthreads()
    par_minv(tid, nt, lik, levl, levs, nlev, J, Uk, UDk, Dik, Fk, Pk, Mi[b])


def k_rnea_derivatives(li, lf, gv, bl, bf, levl, levs, nlev, dl, q, v, a, fext, has_fext, cols, out):
    """``out[b, 0] = ∂τ/∂q``, ``out[b, 1] = ∂τ/∂v`` (B, 2, nv, nv) — the *fused* kernel (Plancher et al. 2021
    §IV-B: RNEA quantities v', a', f' and ∂c'/∂u on the device); ``cols`` (B, 8, nv, 6) workspace."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    J = cuda.shared.array((NV, 6), DT)
    ov = cuda.shared.array((NL, 6), DT)
    vJ = cuda.shared.array((NL, 6), DT)
    oY = cuda.shared.array((NL, 13), DT)
    oa = cuda.shared.array((NL, 6), DT)
    fl = cuda.shared.array((NL, 6), DT)
    ws = cuda.shared.array((4, NL, 6), DT)
    dY = cuda.shared.array((NL, 12), DT)
    t = cuda.shared.array(6, DT)
    lis = cuda.shared.array(SH_LI, np.int64)
    lfs = cuda.shared.array(SH_LF, DT)
    colss = cuda.shared.array(SH_COLS, DT)
    par_stage(tid, nt, M_LI, li, lis, M_LF, lf, lfs)
    lik = lis if M_LI else li
    lfk = lfs if M_LF else lf
    colk = colss if M_COLS else cols[b]
    par_placements(tid, nt, lik, lfk, q[b], R, p)
    par_world_placements(tid, nt, lik, levl, levs, nlev, R, p, oR, op)
    par_world_kinematics(tid, nt, lik, lfk, levl, levs, nlev, dl, v[b], 1, oR, op, J, oY, ov, vJ)
    if tid == 0:
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        world_accelerations(lik, gv, J, a[b], ov, vJ, oa, t)
    cuda.syncthreads()
    par_rnea_derivatives_pass(tid, nt, lik, dl, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, colk, out[b, 0],
                              out[b, 1])


def k_rnea_derivative_columns(li, dl, gv, J_in, ov_in, oa_in, oY_in, oR_in, op_in, fl_in, has_fext, cols, out):
    """The *split* kernel (Plancher et al. 2021 §IV-B): only ∂c'/∂u on the device, from the RNEA quantities the
    host computed (world columns ``J_in`` (B, nv, 6), ``ov_in``/``oa_in``/``fl_in`` (B, L, 6), rigid
    inertias ``oY_in`` (B, L, 13), placements ``oR_in`` (B, L, 3, 3), ``op_in`` (B, L, 3)), staged
    into shared memory by all threads; ``out`` (B, 2, nv, nv)."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    J = cuda.shared.array((NV, 6), DT)
    ov = cuda.shared.array((NL, 6), DT)
    oa = cuda.shared.array((NL, 6), DT)
    oY = cuda.shared.array((NL, 13), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    fl = cuda.shared.array((NL, 6), DT)
    ws = cuda.shared.array((4, NL, 6), DT)
    dY = cuda.shared.array((NL, 12), DT)
    par_copy2(tid, nt, J_in[b], J)
    par_copy2(tid, nt, ov_in[b], ov)
    par_copy2(tid, nt, oa_in[b], oa)
    par_copy2(tid, nt, oY_in[b], oY)
    par_copy2(tid, nt, op_in[b], op)
    par_copy2(tid, nt, fl_in[b], fl)
    L = oR.shape[0]
    for e in range(tid, L * 9, nt):
        i = e // 9
        r = (e - 9 * i) // 3
        oR[i, r, e - 9 * i - 3 * r] = oR_in[b, i, r, e - 9 * i - 3 * r]
    cuda.syncthreads()
    par_rnea_derivatives_pass(tid, nt, li, dl, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, cols[b], out[b, 0],
                              out[b, 1])


def k_aba_derivatives(li, lf, gv, bl, bf, levl, levs, nlev, dl, q, v, tau, fext, has_fext, minv_in, has_minv,
                      IA, U, UD, Dinv, F, P, cols, dtau, out):
    """The *completely fused* kernel (Plancher et al. 2021 Algorithm 3 and §IV-B): ABA → q̈, M⁻¹ (or the given
    ``minv_in``), ∇RNEA at q̈, then ``out[b] = (∂a/∂q, ∂a/∂v, ∂a/∂τ)`` (B, 3, nv, nv) with
    ``∂a/∂u = -M⁻¹ ∂τ/∂u``. Workspace: ``IA``…``Dinv`` (B, L, 6, 6), ``F``, ``P`` (B, L, nv, 6),
    ``cols`` (B, 8, nv, 6), ``dtau`` (B, 2, nv, nv)."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    J = cuda.shared.array((NV, 6), DT)
    ov = cuda.shared.array((NL, 6), DT)
    vJ = cuda.shared.array((NL, 6), DT)
    oY = cuda.shared.array((NL, 13), DT)
    cb = cuda.shared.array((NL, 6), DT)
    pA = cuda.shared.array((NL, 6), DT)
    oa = cuda.shared.array((NL, 6), DT)
    fl = cuda.shared.array((NL, 6), DT)
    u = cuda.shared.array(NV, DT)
    qdd = cuda.shared.array(NV, DT)
    tmp = cuda.shared.array((4, 6), DT)
    tmp66 = cuda.shared.array((6, 6), DT)
    chol = cuda.shared.array((6, 6), DT)
    ws = cuda.shared.array((4, NL, 6), DT)
    dY = cuda.shared.array((NL, 12), DT)
    lis = cuda.shared.array(SH_LI, np.int64)
    lfs = cuda.shared.array(SH_LF, DT)
    IAs = cuda.shared.array(SH_IA, DT)
    Us = cuda.shared.array(SH_U, DT)
    UDs = cuda.shared.array(SH_UD, DT)
    Dis = cuda.shared.array(SH_DINV, DT)
    Fs = cuda.shared.array(SH_F, DT)
    Ps = cuda.shared.array(SH_P, DT)
    colss = cuda.shared.array(SH_COLS, DT)
    dtaus = cuda.shared.array(SH_DTAU, DT)
    par_stage(tid, nt, M_LI, li, lis, M_LF, lf, lfs)
    lik = lis if M_LI else li
    lfk = lfs if M_LF else lf
    IAk = IAs if M_IA else IA[b]
    Uk = Us if M_U else U[b]
    UDk = UDs if M_UD else UD[b]
    Dik = Dis if M_DINV else Dinv[b]
    Fk = Fs if M_F else F[b]
    Pk = Ps if M_P else P[b]
    colk = colss if M_COLS else cols[b]
    dtk = dtaus if M_DTAU else dtau[b]
    par_placements(tid, nt, lik, lfk, q[b], R, p)
    par_world_placements(tid, nt, lik, levl, levs, nlev, R, p, oR, op)
    par_world_kinematics(tid, nt, lik, lfk, levl, levs, nlev, dl, v[b], 1, oR, op, J, oY, ov, vJ)
    Mi = out[b, 2]
    nv = Mi.shape[0]
    if has_minv:
        for e in range(tid, nv * nv, nt):
            Mi[e // nv, e % nv] = minv_in[b, e // nv, e % nv]
    if tid == 0:
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        bias_forces(lik, oY, ov, vJ, has_fext, fl, oR, op, cb, pA, tmp)
        articulated_inertias(lik, lfk, oY, J, IAk, Uk, UDk, Dik, tmp66, chol)
        aba_bias_pass(lik, J, tau[b], IAk, Uk, UDk, cb, pA, u)
        aba_acceleration_pass(lik, gv, J, Uk, Dik, cb, u, qdd, oa)
    cuda.syncthreads()
    if not has_minv:
        par_minv(tid, nt, lik, levl, levs, nlev, J, Uk, UDk, Dik, Fk, Pk, Mi)
    par_rnea_derivatives_pass(tid, nt, lik, dl, gv, J, ov, oa, oY, has_fext, fl, oR, op, ws, dY, colk, dtk[0],
                              dtk[1])
    par_neg_product(tid, nt, Mi, dtk[0], out[b, 0])
    par_neg_product(tid, nt, Mi, dtk[1], out[b, 1])


def k_rnea_second_derivatives(li, lf, gv, bl, bf, levl, levs, nlev, dl, q, v, a, fext, has_fext, mats, vecs,
                              clink, out):
    """``out[b] = (∂²τ/∂q², ∂²τ/∂v², ∂²τ/∂q∂v, ∂M/∂q)`` (B, 4, nv, nv, nv), IDSVA-SO (Singh, Russell & Wensing 2022
    Algorithm 1); kinematics in parallel, the second-order sweeps on one thread."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    J = cuda.shared.array((NV, 6), DT)
    psid = cuda.shared.array((NV, 6), DT)
    psidd = cuda.shared.array((NV, 6), DT)
    phid = cuda.shared.array((NV, 6), DT)
    ov = cuda.shared.array((NL, 6), DT)
    vJ = cuda.shared.array((NL, 6), DT)
    oa = cuda.shared.array((NL, 6), DT)
    oY = cuda.shared.array((NL, 13), DT)
    dY = cuda.shared.array((NL, 12), DT)
    of = cuda.shared.array((NL, 6), DT)
    fl = cuda.shared.array((NL, 6), DT)
    t = cuda.shared.array((4, 6), DT)
    par_placements(tid, nt, li, lf, q[b], R, p)
    par_world_placements(tid, nt, li, levl, levs, nlev, R, p, oR, op)
    par_world_kinematics(tid, nt, li, lf, levl, levs, nlev, dl, v[b], 1, oR, op, J, oY, ov, vJ)
    nv = J.shape[0]
    for m in range(4):
        T = out[b, m]
        for e in range(tid, nv * nv * nv, nt):
            x = e // (nv * nv)
            y = (e // nv) % nv
            T[x, y, e % nv] = 0.0
    if tid == 0:
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        world_accelerations(li, gv, J, a[b], ov, vJ, oa, t[0])
        second_order_forward(li, gv, J, ov, oa, oY, has_fext, fl, oR, op, psid, psidd, phid, dY, of, t)
    cuda.syncthreads()
    if tid == 0:
        second_order_backward(li, J, psid, psidd, phid, oY, dY, of, mats[b], vecs[b], clink[b], out[b, 0],
                              out[b, 1], out[b, 2], out[b, 3])


# ------------------------------------------------------------------------ kinematics
def k_placements(li, lf, levl, levs, nlev, q, flink, ff, oRf, opf):
    """World placements ``oRf`` (B, nf, 3, 3), ``opf`` (B, nf, 3) of frames; threads over links,
    depths, then frames."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    par_placements(tid, nt, li, lf, q[b], R, p)
    par_world_placements(tid, nt, li, levl, levs, nlev, R, p, oR, op)
    for f in range(tid, flink.shape[0], nt):
        frame_world(oR, op, flink[f], ff, f, oRf[b, f], opf[b, f])


def k_frame_jacobian(li, lf, levl, levs, nlev, q, v, flink, ff, ref, with_dJ, Jw, dJw, chain, J, dJ):
    """Frame Jacobian ``J`` (B, 6, nv) in reference ``ref`` (0 local, 1 world, 2 local-world-aligned)
    and, if ``with_dJ``, its time variation ``dJ`` along ``v``; ``Jw``, ``dJw`` (B, nv, 6) and
    ``chain`` (B, L) int workspace."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    oRf = cuda.shared.array((3, 3), DT)
    opf = cuda.shared.array(3, DT)
    tmp = cuda.shared.array((4, 6), DT)
    par_placements(tid, nt, li, lf, q[b], R, p)
    par_world_placements(tid, nt, li, levl, levs, nlev, R, p, oR, op)
    if tid == 0:
        frame_jacobian_knot(li, lf, oR, op, flink[0], ff, v[b], ref, with_dJ, Jw[b], dJw[b], chain[b], oRf, opf,
                            tmp, J[b], dJ[b])


def k_com(li, lf, gv, levl, levs, nlev, dl, q, with_J, com, Jc, mx):
    """Centre of mass ``com`` (B, 3) and, if ``with_J``, its Jacobian ``Jc`` (B, 3, nv): subtree mass
    moments on one thread, then threads over dofs. ``mx`` (B, L, 4) workspace (m, m x)."""
    b = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    R = cuda.shared.array((NL, 3, 3), DT)
    p = cuda.shared.array((NL, 3), DT)
    oR = cuda.shared.array((NL, 3, 3), DT)
    op = cuda.shared.array((NL, 3), DT)
    par_placements(tid, nt, li, lf, q[b], R, p)
    par_world_placements(tid, nt, li, levl, levs, nlev, R, p, oR, op)
    L = li.shape[0]
    M = gv[3]
    m = mx[b]
    for i in range(tid, L, nt):
        m[i, 0] = lf[i, LF_MASS]
        for r in range(3):
            m[i, 1 + r] = lf[i, LF_MASS] * (op[i, r] + (oR[i, r, 0] * lf[i, LF_COM] + oR[i, r, 1] * lf[i, LF_COM + 1]
                                                        + oR[i, r, 2] * lf[i, LF_COM + 2]))
    cuda.syncthreads()
    if tid == 0:
        for r in range(3):
            s = 0.0
            for i in range(L):
                s += m[i, 1 + r]
            com[b, r] = s / M
        if with_J:
            for i in range(L - 1, -1, -1):
                lam = li[i, LI_PARENT]
                if lam >= 0:
                    for r in range(4):
                        m[lam, r] += m[i, r]
    cuda.syncthreads()
    if with_J:
        t = cuda.local.array(6, DT)
        jc = cuda.local.array(6, DT)
        for d in range(tid, dl.shape[0], nt):
            i = dl[d]
            k = d - li[i, LI_DOFADR]
            for r in range(6):
                t[r] = lf[i, LF_ST + 6 * k + r]
            mot_to_parent(oR[i], op[i], t, jc)
            Jc[b, 0, d] = (m[i, 0] * jc[0] + (jc[4] * m[i, 3] - jc[5] * m[i, 2])) / M
            Jc[b, 1, d] = (m[i, 0] * jc[1] + (jc[5] * m[i, 1] - jc[3] * m[i, 3])) / M
            Jc[b, 2, d] = (m[i, 0] * jc[2] + (jc[3] * m[i, 2] - jc[4] * m[i, 1])) / M


#: every kernel, by name
KERNELS = {f.__name__: f for f in (k_rnea, k_crba, k_aba, k_minv, k_rnea_derivatives, k_rnea_derivative_columns,
                                   k_aba_derivatives, k_rnea_second_derivatives, k_placements, k_frame_jacobian,
                                   k_com)}
