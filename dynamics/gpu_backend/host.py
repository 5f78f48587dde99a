"""The CPU side of the *split* and *fused* partitions of ∇FD (Plancher et al. 2021 §IV-B, Fig. 2).

* fused: the host computes q̈ (ABA) and M⁻¹; the device computes v', a', f' and ∂c'/∂u; the host
  multiplies ``-M⁻¹ ∂c'/∂u``.
* split: as fused, but the host also computes the RNEA quantities at q̈ (here their world-frame
  form: columns ``J``, velocities, accelerations, rigid inertias, placements and link external
  forces, :func:`rnea_quantities`), which are sent to the device with the state.

The host work runs on the compiled CPU passes of the kernel library (:mod:`dynamics.kernels`),
multi-threaded over the batch as the CPU side of the experiments of Plancher et al. 2021, always in float64.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..kernels.jit import jit_parallel
from ..kernels.rnea import link_external_forces
from ..kernels.world import world_accelerations, world_inertias, world_kinematics


@jit_parallel
def _rnea_quantities(li, lf, gv, bl, bf, q, v, a, fext, J, ov, oa, oY, oR, op, fl):  # pragma: no cover - compiled
    B = q.shape[0]
    L = li.shape[0]
    for b in prange(B):
        R = np.empty((L, 3, 3))
        p = np.empty((L, 3))
        vJ = np.empty((L, 6))
        t = np.empty(6)
        if fext.shape[0] > 0:
            link_external_forces(bl, bf, fext[b], fl[b])
        else:
            fl[b, :, :] = 0.0
        world_kinematics(li, lf, q[b], v[b], R, p, oR[b], op[b], J[b], ov[b], vJ, t)
        world_accelerations(li, gv, J[b], a[b], ov[b], vJ, oa[b], t)
        world_inertias(li, lf, oR[b], op[b], oY[b])


def rnea_quantities(pm, q: np.ndarray, v: np.ndarray, a: np.ndarray, fext: np.ndarray | None) -> dict[str, np.ndarray]:
    """World-frame RNEA quantities of every knot (float64): ``J`` (B, nv, 6), ``ov``, ``oa``, ``fl``
    (B, L, 6), ``oY`` (B, L, 13), ``oR`` (B, L, 3, 3), ``op`` (B, L, 3); ``pm`` a packed model."""
    B, L, nv = q.shape[0], pm.nlinks, pm.nv
    out = dict(J=np.empty((B, nv, 6)), ov=np.empty((B, L, 6)), oa=np.empty((B, L, 6)), oY=np.empty((B, L, 13)),
               oR=np.empty((B, L, 3, 3)), op=np.empty((B, L, 3)), fl=np.empty((B, L, 6)))
    fe = pm.no_fext if fext is None else np.ascontiguousarray(fext, dtype=np.float64)
    _rnea_quantities(pm.li, pm.lf, pm.gv, pm.bl, pm.bf, np.ascontiguousarray(q, dtype=np.float64),
                     np.ascontiguousarray(v, dtype=np.float64), np.ascontiguousarray(a, dtype=np.float64), fe,
                     out["J"], out["ov"], out["oa"], out["oY"], out["oR"], out["op"], out["fl"])
    return out
