"""The state manifold ``x = (q, v)`` of a robot and its tangent space (size ``ndx = 2 nv``).

``x ⊕ dx = (q ⊕ dq, v + dv)`` with the right (local) perturbations of docs/conventions.md, and
``x1 ⊖ x0 = (q1 ⊖ q0, v1 - v0)``. Jacobians are in tangent coordinates (rows = output,
columns = variable), block-diagonal: the configuration block comes from
``RobotModel.integrate_jacobians`` / ``difference_jacobians``, the velocity block is the identity.
Every function takes leading batch dimensions ``(..., nx)`` / ``(..., ndx)``.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel
from dynamics.inputs import sum_is_finite

_F64 = np.dtype(np.float64)


def _plain_finite(a: np.ndarray, b: np.ndarray, n: int) -> bool:
    """Whether ``a`` and ``b`` are float64 ndarrays ``(n,)`` or ``(B, n)`` whose batch shapes are
    equal or one of them empty, and every value is finite: then ``a ± b`` is what the general
    (validating, broadcasting) path computes for a Euclidean configuration space."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.dtype != _F64 or b.dtype != _F64:
        return False
    if not (1 <= a.ndim <= 2 and 1 <= b.ndim <= 2 and a.shape[-1] == n and b.shape[-1] == n):
        return False
    if a.ndim == 2 and b.ndim == 2 and a.shape[0] != b.shape[0]:
        return False
    return sum_is_finite(a) and sum_is_finite(b)


def _ro(x: np.ndarray) -> np.ndarray:
    """``x`` as a read-only C-contiguous view (one compiled signature for every caller)."""
    x = np.ascontiguousarray(x)
    if x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x


class StateSpace:
    """Operations on ``x = (q, v)`` (nx = nq + nv) with tangent vectors ``dx = (dq, dv)`` (ndx = 2 nv)."""

    def __init__(self, model: RobotModel, compiled=None):
        """compiled: a backend's :class:`~dynamics.backend.CompiledKinematics` for ``model`` (or None):
        its compiled ``difference_batch`` and ``integrate_batch`` then compute :meth:`difference` and
        :meth:`integrate` of (nx,) states or (B, nx) batches on robots with ball or free joints (the
        numpy Lie algebra costs ~0.3 ms per call there)."""
        if not isinstance(model, RobotModel):
            raise TypeError(f"StateSpace: expected a RobotModel (dynamics.load_model), got {type(model).__name__}")
        self.model = model
        self.nq, self.nv = model.nq, model.nv
        self.nx, self.ndx = model.nq + model.nv, 2 * model.nv
        # hinge/slide-only robots: x ⊕ dx = x + dx, x1 ⊖ x0 = x1 - x0 (see RobotModel.is_euclidean)
        self.euclidean = model.is_euclidean
        self._compiled = None if self.euclidean else compiled

    # ------------------------------------------------------------ helpers
    def check(self, x, name: str = "x", func: str = "state") -> np.ndarray:
        """``x`` as a float64 array (..., nx), with a clear error for a wrong shape or NaN/inf."""
        x = np.asarray(x, dtype=float)
        if x.ndim < 1 or x.shape[-1] != self.nx:
            raise ValueError(f"{func}: {name} has shape {x.shape}, expected (..., {self.nx}) = (..., nq + nv) "
                             f"for model '{self.model.name}' (nq={self.nq}, nv={self.nv})")
        if not sum_is_finite(x):
            raise ValueError(f"{func}: {name} contains non-finite values (NaN or inf)")
        return x

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x[..., :self.nq], x[..., self.nq:]

    def neutral(self) -> np.ndarray:
        """``(model.neutral(), 0)`` (nx,)."""
        return np.concatenate([self.model.neutral(), np.zeros(self.nv)])

    # ------------------------------------------------------------ group operations
    def integrate(self, x: np.ndarray, dx: np.ndarray) -> np.ndarray:
        """``x ⊕ dx`` (..., nx)."""
        if self.euclidean and _plain_finite(x, dx, self.nx):
            return x + dx
        ck = self._compiled
        if (ck is not None and ck.integrate_batch is not None and type(x) is np.ndarray and type(dx) is np.ndarray
                and x.dtype == _F64 and dx.dtype == _F64 and x.ndim == dx.ndim and 1 <= x.ndim <= 2
                and x.shape[:-1] == dx.shape[:-1] and x.shape[-1] == self.nx and dx.shape[-1] == self.ndx
                and sum_is_finite(x) and sum_is_finite(dx)):
            one = x.ndim == 1
            out = np.empty((1 if one else x.shape[0], self.nx))
            ck.integrate_batch(ck.joint_rows, self.nq, _ro(x[None] if one else x), _ro(dx[None] if one else dx), out)
            return out[0] if one else out
        q, v = x[..., :self.nq], x[..., self.nq:]
        qn = self.model.integrate(q, dx[..., :self.nv])
        vn = v + dx[..., self.nv:]
        shape = np.broadcast_shapes(qn.shape[:-1], vn.shape[:-1])
        return np.concatenate([np.broadcast_to(qn, shape + (self.nq,)), np.broadcast_to(vn, shape + (self.nv,))],
                              axis=-1)

    def difference(self, x0: np.ndarray, x1: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``x1 ⊖ x0`` (..., ndx); out: optional float64 array of that shape to write it into."""
        if self.euclidean and _plain_finite(x0, x1, self.nx):
            return np.subtract(x1, x0, out=out)
        ck = self._compiled
        if ck is not None and _plain_finite(x0, x1, self.nx) and x0.ndim == x1.ndim:
            one = x0.ndim == 1
            a, b = _ro(x0[None] if one else x0), _ro(x1[None] if one else x1)
            direct = out is not None and not one and out.flags.c_contiguous and out.shape == (a.shape[0], self.ndx)
            res = out if direct else np.empty((a.shape[0], self.ndx))
            ck.difference_batch(ck.joint_rows, self.nq, a, b, res)
            res = res[0] if one else res
            if out is not None and not direct:
                out[...] = res
                return out
            return res
        dq = self.model.difference(x0[..., :self.nq], x1[..., :self.nq])
        dv = x1[..., self.nq:] - x0[..., self.nq:]
        shape = np.broadcast_shapes(dq.shape[:-1], dv.shape[:-1])
        res = np.concatenate([np.broadcast_to(dq, shape + (self.nv,)), np.broadcast_to(dv, shape + (self.nv,))],
                             axis=-1)
        if out is not None:
            out[...] = res
            return out
        return res

    def integrate_jacobians(self, x: np.ndarray, dx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(∂(x⊕dx)/∂x, ∂(x⊕dx)/∂dx)``, each (..., ndx, ndx)."""
        Jq, Jv = self.model.integrate_jacobians(x[..., :self.nq], dx[..., :self.nv])
        return self._blockdiag(Jq), self._blockdiag(Jv)

    def difference_jacobians(self, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(∂(x1⊖x0)/∂x0, ∂(x1⊖x0)/∂x1)``, each (..., ndx, ndx)."""
        J0, J1 = self.model.difference_jacobians(x0[..., :self.nq], x1[..., :self.nq])
        return self._blockdiag(J0, -1.0), self._blockdiag(J1)

    def _blockdiag(self, Jq: np.ndarray, vel_sign: float = 1.0) -> np.ndarray:
        nv = self.nv
        out = np.zeros(Jq.shape[:-2] + (2 * nv, 2 * nv), dtype=Jq.dtype)
        out[..., :nv, :nv] = Jq
        idx = np.arange(nv, 2 * nv)
        out[..., idx, idx] = vel_sign
        return out


class StateSizes:
    """Mix-in: ``nx``, ``ndx`` (from the attribute ``state``, a :class:`StateSpace`) and ``nu`` (from
    the attribute ``model``) of an object defined over a robot's state space."""

    @property
    def nx(self) -> int:
        return self.state.nx

    @property
    def ndx(self) -> int:
        return self.state.ndx

    @property
    def nu(self) -> int:
        return self.model.nu
