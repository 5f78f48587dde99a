"""Compiled Recursive Newton-Euler inverse dynamics (Plancher et al. 2021 Algorithm 1, with external forces;
Featherstone RBDA Table 5.1): body-frame recursion, gravity as the base acceleration ``a_0 = -g``.

Every compiled module follows the same pattern (Plancher et al. 2021 Sec. IV-A, CPU design): the passes of
one state work on preallocated scratch; ``*_range(..., start, stop)`` allocates the scratch once
and runs a contiguous slice of the batch on the calling thread (the whole batch for serial calls;
one slice per worker thread through :mod:`.threaded_batch`). Scalars passed between compiled
functions are never literals, so that each function is compiled exactly once.
"""

from __future__ import annotations

from .jit import jit
from .joints import all_placements
from .packing import FR_P, FR_R, LF_ARM, LF_ST, LI_DOFADR, LI_NV, LI_PARENT
from .scratch import LINKS, buffer, view2
from .spatial import force_cross, force_to_parent, inertia_mul, mot_cross_add, mot_to_child
from .state_scratch import PLACEMENTS, placement_views


@jit
def link_external_forces(bl, bf, fext, fl):
    """Per-link external forces ``fl`` (L, 6) in link frames from per-body forces ``fext``
    (nbody, 6) in body frames (row 0, the world, and bodies welded to the world are ignored)."""
    for i in range(fl.shape[0]):
        for r in range(6):
            fl[i, r] = 0.0
    for b in range(1, fext.shape[0]):
        lk = bl[b]
        if lk < 0:
            continue
        f0 = bf[b, FR_R + 0] * fext[b, 0] + bf[b, FR_R + 1] * fext[b, 1] + bf[b, FR_R + 2] * fext[b, 2]
        f1 = bf[b, FR_R + 3] * fext[b, 0] + bf[b, FR_R + 4] * fext[b, 1] + bf[b, FR_R + 5] * fext[b, 2]
        f2 = bf[b, FR_R + 6] * fext[b, 0] + bf[b, FR_R + 7] * fext[b, 1] + bf[b, FR_R + 8] * fext[b, 2]
        n0 = bf[b, FR_R + 0] * fext[b, 3] + bf[b, FR_R + 1] * fext[b, 4] + bf[b, FR_R + 2] * fext[b, 5]
        n1 = bf[b, FR_R + 3] * fext[b, 3] + bf[b, FR_R + 4] * fext[b, 4] + bf[b, FR_R + 5] * fext[b, 5]
        n2 = bf[b, FR_R + 6] * fext[b, 3] + bf[b, FR_R + 7] * fext[b, 4] + bf[b, FR_R + 8] * fext[b, 5]
        px = bf[b, FR_P]
        py = bf[b, FR_P + 1]
        pz = bf[b, FR_P + 2]
        fl[lk, 0] += f0
        fl[lk, 1] += f1
        fl[lk, 2] += f2
        fl[lk, 3] += n0 + py * f2 - pz * f1
        fl[lk, 4] += n1 + pz * f0 - px * f2
        fl[lk, 5] += n2 + px * f1 - py * f0


@jit
def joint_motion(lf, i, d0, nd, x, out):
    """``out = S_i x[d0:d0+nd]`` (6,): a joint velocity/acceleration as a spatial motion vector."""
    for r in range(6):
        out[r] = 0.0
    for k in range(nd):
        xk = x[d0 + k]
        for r in range(6):
            out[r] += lf[i, LF_ST + 6 * k + r] * xk


@jit
def rnea_forward(li, lf, gv, v, a, has_fext, fl, R, p, vel, acc, f, tmp):
    """Forward sweep: link velocities ``vel``, accelerations ``acc`` (gravity included) and the
    net forces ``f = I a + v x* I v - f_ext`` (L, 6), given the link placements ``R``, ``p``."""
    vJ = tmp[0]
    aJ = tmp[1]
    t2 = tmp[2]
    for i in range(li.shape[0]):
        lam = li[i, LI_PARENT]
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        joint_motion(lf, i, d0, nd, v, vJ)
        joint_motion(lf, i, d0, nd, a, aJ)
        if lam < 0:
            for r in range(6):
                vel[i, r] = vJ[r]
            for r in range(3):
                t2[r] = -gv[r]
                t2[3 + r] = 0.0
            mot_to_child(R[i], p[i], t2, acc[i])
            for r in range(6):
                acc[i, r] += aJ[r]
        else:
            mot_to_child(R[i], p[i], vel[lam], vel[i])
            for r in range(6):
                vel[i, r] += vJ[r]
            mot_to_child(R[i], p[i], acc[lam], acc[i])
            for r in range(6):
                acc[i, r] += aJ[r]
            mot_cross_add(vel[i], vJ, acc[i])
        inertia_mul(lf, i, vel[i], t2)
        force_cross(vel[i], t2, f[i])
        inertia_mul(lf, i, acc[i], t2)
        for r in range(6):
            f[i, r] += t2[r]
        if has_fext:
            for r in range(6):
                f[i, r] -= fl[i, r]


@jit
def rnea_backward(li, lf, a, R, p, f, tmp, tau):
    """Backward sweep: ``tau_i = S_i^T f_i + armature a_i``, ``f_λ += X_i^T f_i`` (f becomes the
    force transmitted by each joint)."""
    t = tmp[0]
    for i in range(li.shape[0] - 1, -1, -1):
        d0 = li[i, LI_DOFADR]
        nd = li[i, LI_NV]
        for k in range(nd):
            s = 0.0
            for r in range(6):
                s += lf[i, LF_ST + 6 * k + r] * f[i, r]
            tau[d0 + k] = s + lf[i, LF_ARM + k] * a[d0 + k]
        lam = li[i, LI_PARENT]
        if lam >= 0:
            force_to_parent(R[i], p[i], f[i], t)
            for r in range(6):
                f[lam, r] += t[r]


#: scratch of :func:`rnea_range`: one state's work arrays
RNEA_SCRATCH = PLACEMENTS.then(
    ("vel", (LINKS, 6)),
    ("acc", (LINKS, 6)),
    ("f", (LINKS, 6)),
)
_RNEA = RNEA_SCRATCH.spec


@jit
def rnea_range(li, lf, gv, bl, bf, q, v, a, fext, tau, start, stop):
    """``tau`` (B, nv) for q (B, nq), v, a (B, nv); fext (B, nbody, 6), or (0, nbody, 6) for none.
    States ``start`` to ``stop - 1``, on the calling thread."""
    L = li.shape[0]
    nv = tau.shape[1]
    _rnea_range(buffer(_RNEA.total, L, nv), li, lf, gv, bl, bf, q, v, a, fext, tau, start, stop)


@jit
def _rnea_range(buf, li, lf, gv, bl, bf, q, v, a, fext, tau, start, stop):
    """:func:`rnea_range` in the scratch ``buf`` it allocated (:mod:`.scratch`)."""
    L = li.shape[0]
    nv = tau.shape[1]
    R, p, _, _, fl, tmp = placement_views(buf, L, nv)
    vel = view2(buf, _RNEA.vel, L, nv)
    acc = view2(buf, _RNEA.acc, L, nv)
    f = view2(buf, _RNEA.f, L, nv)
    has_fext = fext.shape[0] > 0
    for b in range(start, stop):
        if has_fext:
            link_external_forces(bl, bf, fext[b], fl)
        all_placements(li, lf, q[b], R, p)
        rnea_forward(li, lf, gv, v[b], a[b], has_fext, fl, R, p, vel, acc, f, tmp)
        rnea_backward(li, lf, a[b], R, p, f, tmp, tau[b])
