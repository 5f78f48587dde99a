"""Costs written in plain Python: any object with batched methods, no base class needed.

Give either

* ``value(x, u)`` -> (B,), optionally ``gradient(x, u)`` -> ``(lx (B, ndx), lu (B, nu))`` and
  ``hessian(x, u)`` -> ``(lxx (B, ndx, ndx), lxu (B, ndx, nu), luu (B, nu, nu))``; or
* ``residual(x, u)`` -> (B, nr), optionally ``residual_jacobian(x, u)`` ->
  ``(rx (B, nr, ndx), ru (B, nr, nu))`` and a ``weights`` attribute (nr,); the cost is then
  ``½ Σ w r²`` with the Gauss–Newton Hessian.

``x`` is (B, nx), ``u`` is (B, nu) or ``None`` at the terminal knot. Derivatives are along the
tangent perturbation ``x ⊕ dx`` (ndx = 2 nv; for hinge-only robots simply ``x + dx``). A method
that accepts a ``knots`` keyword also receives the (B,) knot indices (for time-varying
references), and one that accepts ``ctx`` receives the :class:`~solvers.costs.base.CostContext`:
the problem's backend (``ctx.backend``) and the kinematics shared with the library's cost terms
(``ctx.frame_placement(frame)``, ``ctx.frame_jacobian(frame, reference)``, …). Whatever is missing is computed by central finite differences, with a one-time
warning: gradients with step 1e-6, Hessians from gradients with step 1e-5, Hessians from values
by second-order differences with step 1e-4.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np

from .base import Cost, CostContext, CostDerivatives, check_per_knot, per_knot


def as_cost(obj, name: str | None = None) -> Cost:
    """``obj`` if it already is a :class:`Cost`, else a :class:`CustomCost` wrapping it."""
    if isinstance(obj, Cost):
        return obj
    return CustomCost(obj, name=name)


def _accepts(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class CustomCost(Cost):
    """Adapter from a plain-Python cost object (see the module docstring) to :class:`Cost`."""

    def __init__(self, obj, name: str | None = None):
        has_value = callable(getattr(obj, "value", None))
        has_residual = callable(getattr(obj, "residual", None))
        if not (has_value or has_residual):
            raise TypeError(f"{type(obj).__name__} is not a cost: give it a method value(x, u) -> (B,) or "
                            f"residual(x, u) -> (B, nr) (see solvers.costs.custom)")
        self.obj = obj
        self.name = name or getattr(obj, "name", None) or type(obj).__name__
        self.kind = "residual" if has_residual else "value"
        self.uses_control = bool(getattr(obj, "uses_control", False))  # u is None at the terminal knot
        m = lambda n: getattr(obj, n, None) if callable(getattr(obj, n, None)) else None  # noqa: E731
        if self.kind == "residual":
            self._exact = {"jacobian": m("residual_jacobian")}
            self.hessian = "gauss-newton"
            missing = [] if self._exact["jacobian"] else ["residual_jacobian"]
        else:
            self._exact = {"gradient": m("gradient"), "hessian": m("hessian")}
            self.hessian = "exact" if self._exact["hessian"] else "finite-difference"
            missing = [k for k, f in self._exact.items() if f is None]
        self._missing = missing
        self._warned = False
        methods = [k for k in ("value", "gradient", "hessian", "residual", "residual_jacobian") if m(k)]
        self._knots = {k: _accepts(getattr(obj, k), "knots") for k in methods}
        self._ctx = {k: _accepts(getattr(obj, k), "ctx") for k in methods}

    # ------------------------------------------------------------ calling the user's code
    def _call(self, method: str, x, u, knots, ctx: CostContext | None = None):
        """The user's ``method(x, u[, knots=][, ctx=])``. A method with a ``ctx`` parameter gets the
        problem's :class:`CostContext` (its backend, shared kinematics) — or, when the finite-
        difference fallback evaluates it at perturbed states, a fresh context for those states."""
        fn = getattr(self.obj, method)
        kw = {}
        if self._knots.get(method):
            kw["knots"] = knots
        if self._ctx.get(method):
            if ctx is None or x is not ctx.x or u is not ctx.u:
                ctx = None if ctx is None else CostContext(ctx.model, ctx.backend, ctx.state, x, u, knots)
            kw["ctx"] = ctx
        return fn(x, u, **kw)

    def _checked(self, method: str, out, shape: tuple) -> np.ndarray:
        arr = np.asarray(out, dtype=float)
        if arr.shape != shape:
            raise ValueError(f"custom cost '{self.name}': {method}() returned shape {arr.shape}, expected {shape}")
        return arr

    def _warn(self) -> None:
        if self._missing and not self._warned:
            self._warned = True
            warnings.warn(f"custom cost '{self.name}' does not provide {', '.join(self._missing)}; using finite "
                          f"differences (slower and approximate)", stacklevel=4)

    def _weights(self, nr: int, knots: np.ndarray) -> np.ndarray:
        """The ``weights`` attribute for these knots, (B, nr): constant (nr,) or per knot (K, nr),
        as for the library's residual costs."""
        w = getattr(self.obj, "weights", None)
        if w is None:
            return np.ones((knots.shape[0], nr))
        w = np.broadcast_to(np.asarray(w, float), (nr,)) if np.ndim(w) == 0 else check_per_knot("weights", w, (nr,))
        if w.shape[-1] != nr:
            raise ValueError(f"custom cost '{self.name}': weights must have shape ({nr},) or ({nr},) per knot "
                             f"(K, {nr}), got {w.shape}")
        if np.any(w < 0):
            raise ValueError(f"custom cost '{self.name}': weights must be non-negative")
        return per_knot(f"custom cost '{self.name}' weights", w, np.asarray(knots), (nr,))

    def _residual(self, ctx: CostContext, x=None, u=None, knots=None) -> np.ndarray:
        x = ctx.x if x is None else x
        u = ctx.u if u is None else u
        knots = ctx.knots if knots is None else knots
        r = np.asarray(self._call("residual", x, u, knots, ctx), dtype=float)
        if r.ndim != 2 or r.shape[0] != x.shape[0]:
            raise ValueError(f"custom cost '{self.name}': residual() returned shape {r.shape}, expected (B, nr) "
                             f"with B = {x.shape[0]}")
        return r

    def _value(self, ctx: CostContext, x, u, knots) -> np.ndarray:
        if self.kind == "residual":
            r = self._residual(ctx, x, u, knots)
            return 0.5 * np.sum(self._weights(r.shape[1], knots) * r * r, axis=-1)
        return self._checked("value", self._call("value", x, u, knots, ctx), (x.shape[0],))

    # ------------------------------------------------------------ Cost API
    def value(self, ctx: CostContext) -> np.ndarray:
        return self._value(ctx, ctx.x, ctx.u, ctx.knots)

    def derivatives(self, ctx: CostContext) -> CostDerivatives:
        self._warn()
        B, ndx, nu = ctx.batch, ctx.state.ndx, ctx.model.nu
        if self.kind == "residual":
            return self._residual_derivatives(ctx)
        l = self.value(ctx)
        if self._exact["gradient"]:
            lx, lu = self._gradient(ctx, ctx.x, ctx.u, ctx.knots)
        else:
            lx, lu = self._fd_gradient(ctx)
        if self._exact["hessian"]:
            lxx, lxu, luu = self._call("hessian", ctx.x, ctx.u, ctx.knots, ctx)
            lxx = self._checked("hessian", lxx, (B, ndx, ndx))
            lxu = np.zeros((B, ndx, nu)) if ctx.u is None else self._checked("hessian", lxu, (B, ndx, nu))
            luu = np.zeros((B, nu, nu)) if ctx.u is None else self._checked("hessian", luu, (B, nu, nu))
        elif self._exact["gradient"]:
            lxx, lxu, luu = self._fd_hessian_from_gradient(ctx)
        else:
            lxx, lxu, luu = self._fd_hessian_from_value(ctx)
        return CostDerivatives(l, lx, lu, lxx, lxu, luu)

    # ------------------------------------------------------------ finite differences (tangent space)
    def _nz(self, ctx: CostContext) -> int:
        return ctx.state.ndx + (0 if ctx.u is None else ctx.model.nu)

    def _perturbed(self, ctx: CostContext, Z: np.ndarray):
        """States/controls at ``x ⊕ dz_x, u + dz_u`` for perturbations Z (P, nz): (B*P, ·) arrays."""
        ndx = ctx.state.ndx
        B, P = ctx.batch, Z.shape[0]
        xp = ctx.state.integrate(ctx.x[:, None, :], np.broadcast_to(Z[:, :ndx], (B, P, ndx))).reshape(B * P, -1)
        up = None if ctx.u is None else (ctx.u[:, None, :] + Z[:, ndx:]).reshape(B * P, -1)
        return xp, up, np.repeat(ctx.knots, P)

    def _split(self, ctx: CostContext, g: np.ndarray):
        ndx, nu = ctx.state.ndx, ctx.model.nu
        lu = np.zeros(g.shape[:-1] + (nu,)) if ctx.u is None else g[..., ndx:]
        return g[..., :ndx], lu

    def _gradient(self, ctx, x, u, knots):
        lx, lu = self._call("gradient", x, u, knots, ctx)
        B = x.shape[0]
        lx = self._checked("gradient", lx, (B, ctx.state.ndx))
        lu = np.zeros((B, ctx.model.nu)) if u is None else self._checked("gradient", lu, (B, ctx.model.nu))
        return lx, lu

    def _fd_gradient(self, ctx: CostContext, h: float = 1e-6):
        nz, B = self._nz(ctx), ctx.batch
        Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])
        f = self._value(ctx, *self._perturbed(ctx, Z)).reshape(B, 2 * nz)
        return self._split(ctx, (f[:, :nz] - f[:, nz:]) / (2 * h))

    def _fd_hessian_from_gradient(self, ctx: CostContext, h: float = 1e-5):
        nz, B, ndx = self._nz(ctx), ctx.batch, ctx.state.ndx
        Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])
        xp, up, kp = self._perturbed(ctx, Z)
        gx, gu = self._gradient(ctx, xp, up, kp)
        # the gradient at x ⊕ dx is in the tangent space at x ⊕ dx; transport it back to x
        _, Jint = ctx.state.integrate_jacobians(np.repeat(ctx.x, 2 * nz, axis=0), np.tile(Z[:, :ndx], (B, 1)))
        gx = np.einsum("bji,bj->bi", Jint, gx)
        g = gx if ctx.u is None else np.concatenate([gx, gu], axis=-1)
        g = g.reshape(B, 2 * nz, nz)
        H = (g[:, :nz] - g[:, nz:]) / (2 * h)
        return self._hessian_blocks(ctx, 0.5 * (H + np.swapaxes(H, -1, -2)))

    def _fd_hessian_from_value(self, ctx: CostContext, h: float = 1e-4):
        nz, B = self._nz(ctx), ctx.batch
        E = np.eye(nz) * h
        a, b = np.triu_indices(nz)
        # H_ab ≈ [f(+a+b) - f(+a-b) - f(-a+b) + f(-a-b)] / (4 h²)
        Z = np.concatenate([E[a] + E[b], E[a] - E[b], -E[a] + E[b], -E[a] - E[b]])
        f = self._value(ctx, *self._perturbed(ctx, Z)).reshape(B, 4, a.size)
        vals = (f[:, 0] - f[:, 1] - f[:, 2] + f[:, 3]) / (4 * h * h)
        H = np.zeros((B, nz, nz))
        H[:, a, b] = vals
        H[:, b, a] = vals
        return self._hessian_blocks(ctx, H)

    def _hessian_blocks(self, ctx: CostContext, H: np.ndarray):
        ndx, nu, B = ctx.state.ndx, ctx.model.nu, ctx.batch
        if ctx.u is None:
            return H, np.zeros((B, ndx, nu)), np.zeros((B, nu, nu))
        return H[:, :ndx, :ndx], H[:, :ndx, ndx:], H[:, ndx:, ndx:]

    def _residual_derivatives(self, ctx: CostContext) -> CostDerivatives:
        B, ndx, nu = ctx.batch, ctx.state.ndx, ctx.model.nu
        r = self._residual(ctx)
        nr = r.shape[1]
        w = self._weights(nr, ctx.knots)
        if self._exact["jacobian"]:
            rx, ru = self._call("residual_jacobian", ctx.x, ctx.u, ctx.knots, ctx)
            rx = self._checked("residual_jacobian", rx, (B, nr, ndx))
            ru = np.zeros((B, nr, nu)) if ctx.u is None else self._checked("residual_jacobian", ru, (B, nr, nu))
        else:
            nz, h = self._nz(ctx), 1e-6
            Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])
            xp, up, kp = self._perturbed(ctx, Z)
            rp = self._residual(ctx, xp, up, kp).reshape(B, 2 * nz, nr)
            Jr = np.swapaxes((rp[:, :nz] - rp[:, nz:]) / (2 * h), 1, 2)    # (B, nr, nz)
            rx = Jr[..., :ndx]
            ru = np.zeros((B, nr, nu)) if ctx.u is None else Jr[..., ndx:]
        wr = w * r
        return CostDerivatives(0.5 * np.sum(wr * r, axis=-1), np.einsum("bri,br->bi", rx, wr),
                               np.einsum("bri,br->bi", ru, wr), np.einsum("bri,br,brj->bij", rx, w, rx),
                               np.einsum("bri,br,brj->bij", rx, w, ru), np.einsum("bri,br,brj->bij", ru, w, ru))
