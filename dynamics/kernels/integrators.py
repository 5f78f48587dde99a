"""The semi-implicit (symplectic) Euler step of the solvers' dynamics, compiled for one state::

    v⁺ = v + dt a,    q⁺ = q ⊕ dt v⁺

(``⊕``: the configuration manifold's integration, :func:`.lie.integrate_q`; ``q + dt v⁺`` on
hinge/slide joints). The numpy reference is :meth:`solvers.integrators.euler.EulerModel.step`;
this is the one compiled definition, used by the solvers' compiled rollouts and Euler-derivative
stage (tests/dynamics/kernels/test_kernels_passive_euler.py compares both).
"""

from __future__ import annotations

import numpy as np

from .jit import jit
from .lie import integrate_q


@jit
def all_finite(x) -> bool:
    """Whether every entry of the 1-D array x is finite."""
    for i in range(x.shape[0]):
        if not np.isfinite(x[i]):
            return False
    return True


@jit
def euler_velocity(v, a, dt, vn, w):
    """``v⁺ = v + dt a`` into vn and the configuration step ``w = dt v⁺`` into w (nv,)."""
    for i in range(v.shape[0]):
        x = v[i] + dt * a[i]
        vn[i] = x
        w[i] = dt * x


@jit
def euler_step(joints, nq, x, a, dt, w, out) -> bool:
    """``x⁺ = (q ⊕ dt v⁺, v⁺)`` into out (nq + nv,) for x = (q, v) and the acceleration a (nv,);
    joints: the model's joint table (:func:`.lie.joint_rows`); w (nv,) receives ``dt v⁺``; out must
    not overlap x. Returns whether x⁺ is finite; where ``dt v⁺`` is not, ``q⁺`` is left unwritten
    (the reference makes that row NaN; a caller rejects the step either way)."""
    euler_velocity(x[nq:], a, dt, out[nq:], w)
    if not all_finite(w):
        return False
    integrate_q(joints, x, w, out)
    return all_finite(out)
