"""Discrete-time robot dynamics ``x⁺ = f(x, u)`` on the state manifold, with exact tangent-space
Jacobians and second-order tensors, all evaluated for a whole horizon in batched backend calls.

Continuous dynamics: ``a = ABA(q, v, τ)`` with ``τ = B u + τ_passive(q, v)``, ``B`` the model's
actuation matrix and ``τ_passive = -D v - K (q - q_spring)`` (joint damping ``D`` and hinge/slide
stiffness ``K`` from the model, as MuJoCo applies them; friction loss is not modelled).

Integrators (``x ⊕ dx`` as in :mod:`solvers.state_space`):

* ``"euler"`` (default): semi-implicit (symplectic) Euler, ``v⁺ = v + dt a``,
  ``q⁺ = q ⊕ (dt v⁺)`` — Crocoddyl's ``IntegratedActionModelEuler``.
* ``"rk4"``: classical Runge–Kutta on the tangent space, stages ``x_i = x ⊕ c_i dt k_{i-1}``,
  ``k_i = (v_i, a_i)``, ``x⁺ = x ⊕ dt/6 (k_1 + 2k_2 + 2k_3 + k_4)`` (Crocoddyl's
  ``IntegratedActionModelRK`` on Lie groups).

Derivatives are those of the tangent map ``F(dx, du) = f(x ⊕ dx, u + du) ⊖ f(x, u)`` at zero:
``Fx = ∂F/∂dx`` (ndx, ndx), ``Fu = ∂F/∂du`` (ndx, nu) and the second-order tensor
``F2[i, a, b] = ∂²F_i/∂z_a∂z_b`` over ``z = (dx, du)`` (ndx, nz, nz), ``nz = ndx + nu``.
DDP contracts ``F2`` with the next value-function gradient ``V'_x`` (Tassa et al. 2012, eq. 4).

First order: the backend's ``aba_derivatives`` over all knots in one call (seed 000, Algorithm 3)
plus the model's ``integrate_jacobians``. Second order (Euler): the backend's
``aba_second_derivatives`` over all knots in one call (FDSVA-SO, seed 004 eq. 46) — or the
numerical provider ``dynamics.second_order_numerical`` — plus the exact second-order terms of the
SO(3)/SE(3) integration, derived from the Baker–Campbell–Hausdorff formula (see
:func:`_lie_integration_terms`); these vanish for hinge/slide-only robots. For RK4 the
second-order tensor is obtained by central differences of the exact Jacobians (transported to the
nominal tangent space), also in one batched call.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from dynamics import RobotModel
from dynamics.backend import Backend
from dynamics.inputs import sum_is_finite
from dynamics.joints import JointType
from dynamics.second_order_numerical import aba_second_derivatives_numerical, contact_second_derivatives_numerical
from dynamics.spatial import motion_cross_matrix, skew

from .contact_rows import contact_dynamics_rows, impulse_dynamics_rows
from .state_space import StateSpace

INTEGRATORS = ("euler", "rk4")
SECOND_ORDER_MODES = ("auto", "analytical", "fd", "complex")


@dataclass
class DynamicsDerivatives:
    """Derivatives of ``f`` at N knots. ``xnext`` (N, nx) = f(x, u); ``Fx`` (N, ndx, ndx);
    ``Fu`` (N, ndx, nu); the second-order tensor, when requested, in factored form:

        F2[n, i] = Σ_r C[n, r, i] T[n, r]      C (N, R, ndx), T (N, R, nz, nz), nz = ndx + nu

    so DDP's curvature ``V'_x · F2[n] = Σ_r (C[n] V'_x)_r T[n, r]`` never needs the full
    (N, ndx, nz, nz) tensor. For the Euler integrator ``T`` is the acceleration Hessian (R = nv
    rows) plus, for ball/free joints, the SO(3)/SE(3) integration terms of their tangent rows, so
    R = nv (+ the Lie dofs) instead of ndx = 2 nv (see docs/second_order.md); for RK4, C = I and
    T = F2. :attr:`F2` assembles the full tensor on demand (tests, diagnostics)."""

    xnext: np.ndarray
    Fx: np.ndarray
    Fu: np.ndarray
    C: np.ndarray | None = None
    T: np.ndarray | None = None

    @property
    def has_second_order(self) -> bool:
        return self.T is not None

    @property
    def F2(self) -> np.ndarray | None:
        """The full second-order tensor (N, ndx, nz, nz), assembled from the factors (None when
        not requested)."""
        if self.T is None:
            return None
        return np.einsum("nri,nrab->niab", self.C, self.T)

    def curvature(self, t: int, Vx_next: np.ndarray) -> np.ndarray:
        """``V'_x · F2[t]`` (nz, nz) from the factors."""
        lam = self.C[t] @ Vx_next
        return np.tensordot(lam, self.T[t], axes=(0, 0))


class DiscreteDynamics:
    """``x⁺ = f(x, u)`` for one robot, integrator and time step; batched over leading dims."""

    def __init__(self, model: RobotModel, backend: Backend, dt: float, integrator: str = "euler",
                 second_order: str = "auto", passive_forces: bool = True, contacts=None, restitution: float = 0.0):
        if integrator == "impulse":
            if contacts is None:
                raise ValueError("integrator='impulse' (an impact knot) needs the contacts that touch down")
        elif integrator not in INTEGRATORS:
            raise ValueError(f"unknown integrator '{integrator}'; use one of {', '.join(INTEGRATORS)}")
        if second_order not in SECOND_ORDER_MODES:
            raise ValueError(f"unknown second_order '{second_order}'; use one of {', '.join(SECOND_ORDER_MODES)}")
        if contacts is not None and second_order in ("analytical", "complex"):
            raise ValueError(f"second_order='{second_order}' is not available for contact dynamics (no analytical "
                             f"second-order contact derivatives yet); use second_order='auto' or 'fd' (central "
                             f"differences of the analytical first-order ones)")
        if second_order == "analytical" and not backend.supports("aba_second_derivatives"):
            raise ValueError(f"second_order='analytical' but backend '{backend.name}' does not implement "
                             f"aba_second_derivatives; use second_order='auto' or 'fd'")
        if second_order == "complex" and not backend.complex_step_safe:
            raise ValueError(f"second_order='complex' needs a complex-step-safe backend (the 'numpy' reference), not "
                             f"'{backend.name}'; use second_order='fd'")
        if integrator != "impulse" and not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"time step dt must be a positive finite number of seconds, got {dt}")
        self.model, self.backend, self.dt = model, backend, float(dt)
        self.integrator, self.second_order = integrator, second_order
        self.contacts = contacts
        self.restitution = float(restitution)
        self.state = StateSpace(model)
        nv = model.nv
        self.B = np.asarray(model.actuation_matrix, dtype=float)
        # passive generalised forces tau_p = -D v - K (q - q_spring) (hinge/slide stiffness only)
        self.damping = np.asarray(model.dof_damping, float) if passive_forces else np.zeros(nv)
        self.stiffness = np.zeros(nv)
        self._spring_q = np.zeros(0, dtype=int)
        if passive_forces:
            scalar_links = np.flatnonzero(np.isin(model.link_type, (JointType.HINGE, JointType.SLIDE)))
            other = np.setdiff1d(np.arange(model.nlinks), scalar_links)
            if np.any(model.link_stiffness[other] != 0):
                raise NotImplementedError("joint stiffness on ball/free joints is not modelled; remove it from the "
                                          "model or pass passive_forces=False")
            self.stiffness[model.link_dofadr[scalar_links]] = model.link_stiffness[scalar_links]
            self._spring_links = scalar_links[model.link_stiffness[scalar_links] != 0]
            if np.any(model.dof_frictionloss != 0):
                warnings.warn(f"model '{model.name}' has joint friction loss; the solver's dynamics ignore it",
                              stacklevel=3)
        else:
            self._spring_links = np.zeros(0, dtype=int)
        self._has_passive = bool(np.any(self.damping) or np.any(self.stiffness))
        self._has_damping = bool(np.any(self.damping))
        self._has_stiffness = bool(np.any(self.stiffness))
        # B = I (one actuator per dof, in order, gear 1): B u = u and M^-1 B = M^-1, exactly
        self._B_identity = self.B.shape == (nv, nv) and bool(np.array_equal(self.B, np.eye(nv)))
        # hinge/slide-only robots: q ⊕ w = q + w, integration Jacobians are identities
        self._euclidean = model.is_euclidean
        # tangent blocks of ball/free joints (where integration has second-order terms)
        self._lie_blocks = [(va, 3, "ball") for _, va in model.ball_adr] + [(va, 6, "free") for _, va in model.free_adr]
        self._lie_dofs = (np.concatenate([np.arange(va, va + n) for va, n, _ in self._lie_blocks])
                          if self._lie_blocks else np.zeros(0, dtype=int))
        self._dof_range = np.arange(nv)

    # ------------------------------------------------------------ sizes
    @property
    def nx(self) -> int:
        return self.state.nx

    @property
    def ndx(self) -> int:
        return self.state.ndx

    @property
    def nu(self) -> int:
        return self.model.nu

    # ------------------------------------------------------------ continuous dynamics
    def torques(self, q: np.ndarray, v: np.ndarray, u: np.ndarray, out: np.ndarray | None = None,
                tmp: np.ndarray | None = None) -> np.ndarray:
        """Generalised force ``τ = B u + τ_passive(q, v)`` (..., nv). out, tmp: optional float64
        arrays of that shape for the result and a temporary (a solver's workspace)."""
        if self._B_identity and np.shape(u)[-1:] == (self.B.shape[1],):
            if out is None:
                tau = np.array(u, dtype=float)
            else:
                out[...] = u
                tau = out
        else:
            tau = np.matmul(u, self.B.T, out=out)
        if self._has_passive:
            if self._has_damping:      # in place: tau is this call's own array (fresh or out)
                tau -= np.multiply(self.damping, v, out=tmp)
            for li in self._spring_links:
                qa, va = self.model.link_qadr[li], self.model.link_dofadr[li]
                tau[..., va] -= self.stiffness[va] * (q[..., qa] - self.model.qpos_spring[qa])
        return tau

    def acceleration(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        q, v = self._split(x)
        return self._acc(q, v, self.torques(q, v, u))

    def _acc(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """``a(q, v, τ)``: ABA, or the constrained acceleration of the contact set."""
        if self.contacts is None:
            return self.backend.aba(self.model, q, v, tau)
        return contact_dynamics_rows(self.backend, self.model, q, v, tau, self.contacts)[0]

    @property
    def second_order_source(self) -> str:
        """Where DDP's ``∂²a`` comes from on these knots, in words (reported by the solvers)."""
        mode = self.second_order
        if self.integrator == "rk4":
            return "central differences of the exact RK4 Jacobians"
        if self.integrator == "impulse":
            return "central differences of the analytical first-order impulse-dynamics derivatives"
        if self.contacts is not None:
            return "central differences of the analytical first-order contact-dynamics derivatives"
        if mode == "auto":
            mode = "analytical" if self.backend.supports("aba_second_derivatives") else "fd"
        return {"analytical": "analytical (FDSVA-SO, seed 004)",
                "fd": "central differences of the analytical first-order ABA derivatives",
                "complex": "complex step of the analytical first-order ABA derivatives"}[mode]

    def _split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(q, v)`` as C-contiguous arrays (what the backends take without copying or checks)."""
        nq = self.state.nq
        return np.ascontiguousarray(x[..., :nq]), np.ascontiguousarray(x[..., nq:])

    # ------------------------------------------------------------ f(x, u)
    def step(self, x: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``f(x, u)`` (..., nx) for x (..., nx), u (..., nu).

        Rows whose result is not finite (a diverging rollout) or cannot be evaluated (a contact or
        impact Jacobian that lost rank) come back as NaN rather than raising, so a batched rollout
        can drop them."""
        x = np.asarray(x, float)
        u = np.asarray(u, float)
        if self.integrator == "impulse":
            q, v = self._split(x)
            vp = impulse_dynamics_rows(self.backend, self.model, q, v, self.contacts, self.restitution)[0]
            return np.concatenate([q, vp], axis=-1)
        if self.integrator == "euler":
            q, v = self._split(x)
            vn = v + self.dt * self._acc(q, v, self.torques(q, v, u))
            w = self.dt * vn
            if self._euclidean and sum_is_finite(w):
                nq = q.shape[-1]
                out = np.empty(vn.shape[:-1] + (nq + vn.shape[-1],))
                np.add(q, w, out=out[..., :nq])                   # q ⊕ w = q + w
                out[..., nq:] = vn
                return out
            return np.concatenate([self._safe(self.model.integrate, q, w), vn], axis=-1)
        X, K = self._rk4_stages(x, u)
        return self._safe(self.state.integrate, x, self.dt / 6.0 * (K[0] + 2 * K[1] + 2 * K[2] + K[3]))

    @staticmethod
    def _safe(integrate, a: np.ndarray, d: np.ndarray) -> np.ndarray:
        """``integrate(a, d)`` with NaN rows where ``d`` is not finite (the model rejects NaN input)."""
        bad = ~np.all(np.isfinite(d), axis=-1)
        if not bad.any():
            return integrate(a, d)
        out = integrate(a, np.where(bad[..., None], 0.0, d))
        out[bad] = np.nan
        return out

    def _rk4_stages(self, x, u):
        """Stage states and stage tangents ``k_i = (v_i, a_i)`` (lists of 4)."""
        c = (0.0, 0.5 * self.dt, 0.5 * self.dt, self.dt)
        X, K = [], []
        bad = np.zeros(x.shape[:-1], dtype=bool)
        for i in range(4):
            if i == 0:
                xi = x
            else:
                d = c[i] * K[-1]
                bad = bad | ~np.all(np.isfinite(d), axis=-1)   # diverged rows: keep the batch finite
                xi = self.state.integrate(x, np.where(bad[..., None], 0.0, d))
            ki = np.concatenate([xi[..., self.state.nq:], self.acceleration(xi, u)], axis=-1)
            ki[bad] = np.nan
            X.append(xi)
            K.append(ki)
        return X, K

    # ------------------------------------------------------------ derivatives
    def derivatives(self, x: np.ndarray, u: np.ndarray, second_order: bool = False) -> DynamicsDerivatives:
        """First (and optionally second) derivatives at knots x (N, nx), u (N, nu)."""
        return self._derivatives(np.asarray(x, float), np.asarray(u, float), second_order)

    def _derivatives(self, x: np.ndarray, u: np.ndarray, second_order: bool,
                     out: DynamicsDerivatives | None = None) -> DynamicsDerivatives:
        """:meth:`derivatives` for float64 arrays x (N, nx), u (N, nu). out: C-contiguous buffers
        ``xnext`` (N, nx), ``Fx`` (N, ndx, ndx), ``Fu`` (N, ndx, nu) (and ``acceleration`` /
        ``partials`` scratch, see :class:`solvers.problem_data.ProblemData`) that the first-order
        results are written into instead of fresh arrays (the solver's workspace); the
        second-order factors C, T are always fresh arrays."""
        if self.integrator == "euler":
            return self._euler_derivatives(x, u, second_order, out)
        xn, Fx, Fu = self._first_order(x, u)
        if out is not None:
            out.xnext[...], out.Fx[...], out.Fu[...] = xn, Fx, Fu
            xn, Fx, Fu = out.xnext, out.Fx, out.Fu
        if not second_order:
            return DynamicsDerivatives(xn, Fx, Fu)
        F2 = self._second_order_by_differences(x, u, xn)
        return DynamicsDerivatives(xn, Fx, Fu, np.broadcast_to(np.eye(self.ndx), (x.shape[0], self.ndx, self.ndx)), F2)

    def _accel_partials(self, q, v, tau, scratch=None, contact_out=None):
        """``(a, ∂a/∂dq, ∂a/∂v, ∂a/∂u, M^-1)`` including the passive-force terms, (N, nv[, nv|nu]).
        scratch: optional ``(a (N, nv), D (4, N, nv, nv))`` buffers for the free-dynamics call
        (D[3]: a temporary); contact_out: optional
        :class:`~dynamics.contact.ContactDynamicsBuffers` for the contact-dynamics call."""
        if self.contacts is None:
            if scratch is None:
                a, daq, dav, Minv = self.backend.aba_derivatives(self.model, q, v, tau, return_acceleration=True)
            else:
                a, daq, dav, Minv = self.backend.aba_derivatives(self.model, q, v, tau, return_acceleration=True,
                                                                 out=scratch[1][:3], acceleration_out=scratch[0])
        else:   # Minv stands for ∂a/∂τ below (= M⁻¹ without contacts); a from the same solve
            (a, _), d = self.backend.contact_dynamics_derivatives(self.model, q, v, tau, self.contacts,
                                                                   return_values=True, out=contact_out)
            daq, dav, Minv = d[:3]
        # τ depends on q and v through τ_passive: chain rule with ∂a/∂τ = M^-1
        # in place: daq, dav are this call's own arrays (fresh or workspace); the product goes
        # through the workspace's fourth slot when there is one
        tmp = None if scratch is None else scratch[1][3]
        if self._has_stiffness:
            daq -= np.multiply(Minv, self.stiffness, out=tmp)
        if self._has_damping:
            dav -= np.multiply(Minv, self.damping, out=tmp)
        return a, daq, dav, (Minv if self._B_identity else Minv @ self.B), Minv

    def _compiled_euler(self):
        """:mod:`solvers.euler_numba` and the arguments it takes for these dynamics, or None where
        it does not apply (contacts, ball/free joints, a backend that does not prefer compiled
        solver kernels); made on the first call."""
        ce = self.__dict__.get("_euler_kernels", False)
        if ce is False:
            ce = None
            if self.contacts is None and self._euclidean and self.backend.prefers_compiled_solver:
                from . import euler_numba
                m = self.model
                sl = np.asarray(self._spring_links, dtype=np.int64)
                springs = np.stack([np.asarray(m.link_qadr)[sl], np.asarray(m.link_dofadr)[sl]],
                                   axis=-1).astype(np.int64).reshape(-1, 2)
                ce = (euler_numba, np.ascontiguousarray(self.B, dtype=float), bool(self._B_identity),
                      np.ascontiguousarray(self.damping, dtype=float), springs,
                      np.ascontiguousarray(self.stiffness, dtype=float), np.ascontiguousarray(m.qpos_spring, dtype=float))
            self._euler_kernels = ce
        return ce

    def _euler_derivatives(self, x, u, second_order, out: DynamicsDerivatives | None = None):
        m, dt, nv, nu, nq = self.model, self.dt, self.model.nv, self.model.nu, self.model.nq
        N = x.shape[0]
        ndx, nz = 2 * nv, 2 * nv + nu
        state = out.state_scratch(nq) if hasattr(out, "state_scratch") else None
        ce = self._compiled_euler() if state is not None and getattr(out, "scratch", None) is not None else None
        if ce is not None:
            # the same step in two compiled calls around the backend's (the workspace's buffers throughout)
            kern, B, b_identity, damping, springs, stiffness, qspring = ce
            q, V = state
            v, tau = V[0], V[1]
            kern.euler_inputs(x, u, B, b_identity, damping, springs, stiffness, qspring, q, v, tau)
            a, D = out.scratch
            # the entry keeps self, the model and q alive, so the ids in its key are not reused
            run = out.memo(("aba_derivatives", id(self), id(m), id(q)),
                           lambda: (self.backend.prepare_aba_derivatives(m, q, v, tau, D[:3], a), self, m))[0]
            run()       # a, ∂a/∂q, ∂a/∂v, M⁻¹ into the workspace
            xn, Fx, Fu = out.xnext, out.Fx, out.Fu
            kern.euler_jacobians(q, v, a, D[0], D[1], D[2], B, b_identity, damping, stiffness, dt, xn, Fx, Fu)
            if not second_order:
                return DynamicsDerivatives(xn, Fx, Fu)
            return self._euler_second_order(q, v, tau, None, None, None, None, dt, xn, Fx, Fu, out)
        if state is None:
            q, v = self._split(x)               # contiguous: the backends take these without copies
            tau = self.torques(q, v, u)
        else:                                   # the same, in the workspace: q (N, nq), v, τ, v⁺, w (N, nv)
            q, V = state
            q[...] = x[:, :nq]
            v = V[0]
            v[...] = x[:, nq:]
            tau = self.torques(q, v, u, out=V[1], tmp=V[2])
        scratch = None if out is None else getattr(out, "scratch", None)
        cout = out.contact_buffers(self.contacts.nc) if self.contacts is not None and hasattr(out, "contact_buffers") \
            else None
        a, Aq, Av, Au, _ = self._accel_partials(q, v, tau, scratch, cout)
        if state is None:
            vn = v + dt * a
            w = dt * vn
        else:
            vn = np.multiply(a, dt, out=state[1][2])
            vn += v
            w = np.multiply(vn, dt, out=state[1][3])
        # Fx = ∂x⁺/∂x (N, ndx, ndx), Fu = ∂x⁺/∂u (N, ndx, nu), rows (q⁺, v⁺), each C-contiguous
        # (what the compiled backward pass takes without a copy)
        if out is None:
            xn, Fx, Fu = np.empty((N, nq + nv)), np.empty((N, ndx, ndx)), np.empty((N, ndx, nu))
        else:
            xn, Fx, Fu = out.xnext, out.Fx, out.Fu
        dvx, dvu = Fx[:, nv:], Fu[:, nv:]                                   # ∂v⁺/∂z = dt [Aq, Av, Au] + [0, I, 0]
        np.multiply(Aq, dt, out=dvx[..., :nv])
        np.multiply(Av, dt, out=dvx[..., nv:])
        np.multiply(Au, dt, out=dvu)
        flat = Fx.reshape(N, ndx * ndx)
        flat[:, nv * ndx + nv::ndx + 1] += 1.0                               # + I on the ∂v⁺/∂v block
        xn[:, nq:] = vn
        if self._euclidean:
            # q⁺ = q + w, w = dt v⁺: ∂q⁺/∂z = dt ∂v⁺/∂z + [I, 0, 0] = dt² [Aq, Av, Au] + [I, dt I, 0],
            # from the partials (reading dvx while writing Fx would make numpy copy Fx first)
            dt2 = dt * dt
            np.multiply(Aq, dt2, out=Fx[:, :nv, :nv])
            np.multiply(Av, dt2, out=Fx[:, :nv, nv:])
            np.multiply(Au, dt2, out=Fu[:, :nv])
            flat[:, 0:nv * ndx:ndx + 1] += 1.0                               # + I on ∂q⁺/∂q
            flat[:, nv:nv * ndx:ndx + 1] += dt                               # + dt I on ∂q⁺/∂v
            np.add(q, w, out=xn[:, :nq])
            Jq = Jw = None
        else:
            Jq, Jw = m.integrate_jacobians(q, w)
            np.matmul(Jw, dt * dvx, out=Fx[:, :nv])                         # ∂q⁺/∂z through w = dt v⁺
            np.matmul(Jw, dt * dvu, out=Fu[:, :nv])
            Fx[:, :nv, :nv] += Jq
            xn[:, :nq] = m.integrate(q, w)
        if not second_order:
            return DynamicsDerivatives(xn, Fx, Fu)
        dvn = np.concatenate([dvx, dvu], axis=-1) if self._lie_dofs.size else None   # (N, nv, nz)
        return self._euler_second_order(q, v, tau, w, Jq, Jw, dvn, dt, xn, Fx, Fu, out)

    def _euler_second_order(self, q, v, tau, w, Jq, Jw, dvn, dt, xn, Fx, Fu, out) -> DynamicsDerivatives:
        """The first-order results xn, Fx, Fu completed with DDP's factored second-order terms
        (in ``out``'s buffers when it has them). w, Jq, Jw, dvn (N, nv, nz): the step, the
        integration Jacobians and ∂v⁺/∂z, needed with ball/free joints only (None on Euclidean robots)."""
        nv, nu = self.model.nv, self.model.nu
        ndx, nz = 2 * nv, 2 * nv + nu
        N = q.shape[0]
        # F2 = (∂²q⁺, ∂²v⁺) with v⁺ = v + dt a and q⁺ = q ⊕ w, w = dt v⁺:
        #   F2_v = dt Ha,   F2_q = Jw (dt² Ha) + G (the SO(3)/SE(3) integration terms, Lie rows only)
        # factored as F2[i] = Σ_r C[r, i] T[r] with T = (Ha, G_lie) and C = ([dt² Jwᵀ | dt I], [E_lie | 0])
        lie = self._lie_dofs
        R = nv + lie.size
        so = out.second_order_scratch(R, nz) if hasattr(out, "second_order_scratch") else None
        A2, C, T = (None, np.empty((N, R, ndx)), np.empty((N, R, nz, nz))) if so is None else so
        self._acceleration_hessian(q, v, tau, out=T[:, :nv], scratch=A2)   # Ha (N, nv, nz, nz)
        C.fill(0.0)
        ar = self._dof_range
        if self._euclidean:
            C[:, ar, ar] = dt * dt
        else:
            C[:, :nv, :nv] = dt * dt * np.swapaxes(Jw, -1, -2)
        C[:, ar, nv + ar] = dt
        if lie.size:
            T[:, nv:] = self._lie_integration_terms(q, w, Jq, Jw, dt * dvn)[:, lie]
            C[:, nv + np.arange(lie.size), lie] = 1.0
        return DynamicsDerivatives(xn, Fx, Fu, C, T)

    def _second_order_acceleration_tensors(self, q, v, tau, scratch=None):
        """``(∂²a/∂q², ∂²a/∂v², ∂²a/∂q∂v, ∂²a/∂q∂τ)`` (N, nv, nv, nv) by the configured method;
        scratch: optional (4, N, nv, nv, nv) buffer the analytical backend call writes into."""
        mode = self.second_order
        if self.contacts is not None:
            return contact_second_derivatives_numerical(self.backend, self.model, q, v, tau, self.contacts)
        if mode == "auto":
            mode = "analytical" if self.backend.supports("aba_second_derivatives") else "fd"
        if mode == "analytical":
            return self.backend.aba_second_derivatives(self.model, q, v, tau, out=scratch)
        method = "central" if mode == "fd" else "complex"
        return aba_second_derivatives_numerical(self.backend, self.model, q, v, tau, method=method)

    def _acceleration_hessian(self, q, v, tau, out=None, scratch=None):
        """Hessian of ``a(q ⊕ dq, v + dv, τ(q ⊕ dq, v + dv, u + du))`` over z, (N, nv, nz, nz),
        written into ``out`` when given (e.g. the rows of the workspace's ``T``); scratch: buffer
        for the backend's second-order tensors (see :meth:`_second_order_acceleration_tensors`).

        The backend's ``d2a_dq2[i, j, k]`` differentiates along ``e_k`` then ``e_j`` (right
        perturbations), which differs from the Hessian of ``dq -> a(q ⊕ dq)`` by an
        antisymmetric Lie-bracket term; the Hessian is its symmetric part."""
        nv, nu = self.model.nv, self.model.nu
        a_qq, a_vv, a_qv, a_qt = self._second_order_acceleration_tensors(q, v, tau, scratch)
        N = q.shape[0]
        nz = 2 * nv + nu
        H = np.empty((N, nv, nz, nz)) if out is None else out
        ce = self._compiled_euler() if scratch is not None and a_qq.base is scratch else None
        if ce is not None:      # the backend wrote the four tensors into scratch: assembled in one call
            kern, B, b_identity, damping, _, stiffness, _ = ce
            kern.acceleration_hessian(scratch, B, b_identity, damping, stiffness, H)
            return H
        Hqq, Hqv, Hvq, Hvv = H[..., :nv, :nv], H[..., :nv, nv:2 * nv], H[..., nv:2 * nv, :nv], H[..., nv:2 * nv, nv:2 * nv]
        Hqu, Huq = H[..., :nv, 2 * nv:], H[..., 2 * nv:, :nv]
        np.add(a_qq, np.swapaxes(a_qq, -1, -2), out=Hqq)
        Hqq *= 0.5
        if self._has_stiffness:
            # τ_passive is linear with diagonal ∂τ/∂q = -K, ∂τ/∂v = -D, and ∂²a/∂τ², ∂²a/∂v∂τ vanish;
            # Hvq (set below) holds kq = -∂²a/∂q∂τ K meanwhile
            np.multiply(a_qt, -self.stiffness, out=Hvq)
            Hqq += Hvq
            Hqq += np.swapaxes(Hvq, -1, -2)
        if self._has_damping:
            np.multiply(a_qt, -self.damping, out=Hqv)
            Hqv += a_qv
        else:
            Hqv[...] = a_qv
        Hvq[...] = np.swapaxes(Hqv, -1, -2)
        Hvv[...] = a_vv
        if self._B_identity:
            Hqu[...] = a_qt
        else:
            np.matmul(a_qt, self.B, out=Hqu)
        Huq[...] = np.swapaxes(Hqu, -1, -2)
        H[..., nv:2 * nv, 2 * nv:] = 0.0
        H[..., 2 * nv:, nv:] = 0.0
        return H

    def _lie_integration_terms(self, q, w, Jq, Jw, W):
        """Second-order terms of ``G(dq, w) = ((q ⊕ dq) ⊕ w) ⊖ (q ⊕ w₀)`` for ball/free joints,
        mapped to z through ``w = w₀ + W z + …`` (W = ∂w/∂z, (N, nv, nz)).

        With ``A = ∂G/∂dq`` (= Ad of exp(-w₀)) and ``Jr = ∂G/∂w`` (right Jacobian of exp), the
        BCH formula ``log(exp(a) exp(b)) = a + b + ½[a, b] + …`` applied to
        ``exp(-w₀) exp(dq) exp(w₀ + Δw) = exp(A dq) · exp(η(Δw))`` gives
        ``∂²G/∂dq∂w = ½ [A e_j, Jr e_k]`` (Lie bracket: cross product on SO(3), ``ad`` on SE(3)),
        ``∂²G/∂dq² = 0`` and ``∂²G/∂w² = sym(∂Jr/∂w)``; the derivative of the closed-form right
        Jacobian is taken by complex step (exact to rounding). Returns (N, nv, nz, nz)."""
        m = self.model
        N, nv, nz = q.shape[0], m.nv, W.shape[-1]
        lie_dofs = np.concatenate([np.arange(va, va + n) for va, n, _ in self._lie_blocks])
        h = 1e-30
        wc = np.repeat(w[:, None, :].astype(complex), lie_dofs.size, axis=1)
        wc[:, np.arange(lie_dofs.size), lie_dofs] += 1j * h
        _, Jw_c = m.integrate_jacobians(np.repeat(q[:, None, :], lie_dofs.size, axis=1), wc)
        dJr = np.zeros((N, nv, nv, nv))                       # [n, i, j, k] = ∂Jr[i, j]/∂w_k
        dJr[..., lie_dofs] = np.moveaxis(Jw_c.imag / h, 1, -1)
        Gww = 0.5 * (dJr + np.swapaxes(dJr, -1, -2))
        Gqw = np.zeros((N, nv, nv, nv))                       # [n, i, j, k] = ∂²G_i/∂dq_j∂w_k
        for va, n, kind in self._lie_blocks:
            sl = slice(va, va + n)
            A = Jq[:, sl, sl]                                 # columns A e_j
            J = Jw[:, sl, sl]                                 # columns Jr e_k
            if kind == "ball":
                # [x, y] = x × y ; out[n, :, j, k] = A[:, j] × J[:, k]
                ad = skew(np.swapaxes(A, -1, -2))             # (N, j, 3, 3): ad(A e_j)
            else:
                ad = motion_cross_matrix(np.swapaxes(A, -1, -2))  # (N, j, 6, 6)
            Gqw[:, sl, sl, sl] = 0.5 * np.einsum("njil,nlk->nijk", ad, J)
        # G(dq, w(z)) with dq = E z, w = w0 + W z: Hessian over z (w's own curvature is handled by the caller)
        GqwW = np.einsum("nijk,nkb->nijb", Gqw, W)            # (N, nv, nv(dq_j), nz)
        cross = np.zeros((N, nv, nz, nz))
        cross[:, :, :nv, :] = GqwW                            # E^T (Gqw W)
        return cross + np.swapaxes(cross, -1, -2) + np.swapaxes(W, -1, -2)[:, None] @ (Gww @ W[:, None])

    def _first_order(self, x, u):
        """``(f(x, u), Fx, Fu)`` of the RK4 or impulse knots (the Euler path is fused above)."""
        if self.integrator == "impulse":
            return self._impulse_first_order(x, u)
        return self._rk4_first_order(x, u)

    def _impulse_first_order(self, x, u):
        """Impact: ``q⁺ = q``, ``v⁺ = v⁺(q, v)``; Fx = [[I, 0], [∂v⁺/∂q, ∂v⁺/∂v]], Fu = 0 (analytical
        impulse-dynamics derivatives, one batched call)."""
        nv = self.model.nv
        q, v = self._split(x)
        vp = self.backend.impulse_dynamics(self.model, q, v, self.contacts, self.restitution)[0]
        dvq, dvv = self.backend.impulse_dynamics_derivatives(self.model, q, v, self.contacts, self.restitution)[:2]
        N = x.shape[0]
        Fx = np.zeros((N, 2 * nv, 2 * nv))
        Fx[:, np.arange(nv), np.arange(nv)] = 1.0
        Fx[:, nv:, :nv] = dvq
        Fx[:, nv:, nv:] = dvv
        return np.concatenate([q, vp], axis=-1), Fx, np.zeros((N, 2 * nv, self.nu))

    def _rk4_first_order(self, x, u):
        """RK4 Jacobians by the chain rule through the stages, one batched aba_derivatives call."""
        ss, dt, nv, nu = self.state, self.dt, self.model.nv, self.model.nu
        N = x.shape[0]
        ndx, nz = 2 * nv, 2 * nv + nu
        X, K = self._rk4_stages(x, u)
        Xs = np.stack(X)                                       # (4, N, nx)
        q, v = ss.split(Xs)
        tau = self.torques(q, v, np.broadcast_to(u, (4,) + u.shape))
        _, Aq, Av, Au, _ = self._accel_partials(q, v, tau)     # one call over 4N points
        c = (0.0, 0.5 * dt, 0.5 * dt, dt)
        I0 = np.zeros((ndx, nz))
        I0[:, :ndx] = np.eye(ndx)
        dK = []
        for i in range(4):
            if i == 0:
                dXi = np.broadcast_to(I0, (N, ndx, nz))
            else:
                Jx, Jd = ss.integrate_jacobians(x, c[i] * K[i - 1])
                dXi = Jx @ I0 + Jd @ (c[i] * dK[-1])
            dk = np.zeros((N, ndx, nz))
            dk[:, :nv] = dXi[:, nv:]                           # k_v = v_i
            dk[:, nv:] = np.concatenate([Aq[i], Av[i]], axis=-1) @ dXi
            dk[:, nv:, ndx:] += Au[i]
            dK.append(dk)
        s = dt / 6.0 * (K[0] + 2 * K[1] + 2 * K[2] + K[3])
        Jx, Jd = ss.integrate_jacobians(x, s)
        dS = dt / 6.0 * (dK[0] + 2 * dK[1] + 2 * dK[2] + dK[3])
        Fz = Jx @ I0 + Jd @ dS
        return ss.integrate(x, s), Fz[..., :ndx], Fz[..., ndx:]

    def _second_order_by_differences(self, x, u, xn, h: float = 1e-5):
        """``F2`` (RK4 and impulse knots) by central differences of the exact Jacobians of ``F(z) = f(x ⊕ dx, u + du) ⊖ f(x, u)``:
        ``∂F/∂z (z) = Jd(f0, f(z)) [Fx(z) Jint(x, dx), Fu(z)]``, all perturbations in one batch."""
        ss = self.state
        N, ndx, nu = x.shape[0], self.ndx, self.nu
        nz = ndx + nu
        Z = np.concatenate([np.eye(nz) * h, -np.eye(nz) * h])           # (2nz, nz)
        xp = ss.integrate(x[:, None, :], np.broadcast_to(Z[:, :ndx], (N, 2 * nz, ndx)))
        up = u[:, None, :] + Z[:, ndx:]
        xnp, Fx, Fu = self._first_order(xp.reshape(-1, self.nx), up.reshape(-1, nu))
        _, Jint = ss.integrate_jacobians(np.repeat(x, 2 * nz, axis=0), np.tile(Z[:, :ndx], (N, 1)))
        _, Jd = ss.difference_jacobians(np.repeat(xn, 2 * nz, axis=0), xnp)
        Jz = Jd @ np.concatenate([Fx @ Jint, Fu], axis=-1)
        Jz = Jz.reshape(N, 2 * nz, ndx, nz)
        D = (Jz[:, :nz] - Jz[:, nz:]) / (2 * h)                          # [n, b, i, a] = ∂/∂z_b (∂F_i/∂z_a)
        F2 = np.moveaxis(D, 1, -1)
        return 0.5 * (F2 + np.swapaxes(F2, -1, -2))
