"""What the sampled spline drives in a rollout: the controls themselves (open loop), or the
set-point or offset of a state feedback evaluated at each rollout's own state.

Sampled open-loop torques leave a torque-controlled robot without a stable default: beyond the
horizon a plan holds a stale torque and the arm drifts or falls, so every update must re-stabilise
the tail by chance (docs/solvers.md, sampling section). With a feedback inside the rollouts the
spline's default is a stable hold, as the position actuators of MuJoCo MPC's tasks give its
planners:

* :class:`PDSetpoints` (``policy="pd"``): the knots are joint position set-points,
  ``u = b(q) + Kp (θ − q_a) − Kd v_a`` per actuated joint, b the torques that hold the rollout's
  configuration still: gravity compensation (fixed base, one actuator per dof) or the standing
  torques on the problem's rigid contacts (a floating base on contact dynamics), linearised at x0;
  else the problem's default controls. Holding still is ``θ = q``.
* :class:`GravityDampingFeedback` (``policy="gravity_damping"``): the knots are torque offsets on
  ``B⁻¹ (g(q) − D v)``.

Each policy maps spline values s (K, nu) at a knot and the rollouts' states to the applied
controls (:meth:`controls`), recovers the spline values of applied controls along a trajectory
(:meth:`offsets`, used for warm starts) and gives the feedback's gains ``∂u/∂x`` (:meth:`gains`,
applied by the MPC plan between updates).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..action_model import ContactDynamics
from ..problem import ShootingProblem


def _fixed_base_square(problem: ShootingProblem) -> bool:
    m = problem.model
    B = np.asarray(m.actuation_matrix, float)
    return (not m.has_floating_base) and B.shape == (m.nv, m.nv) and abs(np.linalg.det(B)) >= 1e-12


class GravityDampingFeedback:
    """``feedback(q, v) = B⁻¹ (g(q) − D v)`` (K, nu) on the problem's backend, and its gains; the
    applied control is ``s + feedback(q, v)``. damping: κ in [0, 1], the fraction of each joint's
    velocity the damping alone removes in one knot: ``D = diag(κ M_ii(q0) / dt)`` [N m s/rad] from
    M at the problem's x0 and its smallest knot spacing (scaled by the joint's inertia because
    explicit damping is unstable beyond ``D dt / M_ii = 2``). Needs a fixed base and one actuator
    per dof (``B`` square and invertible)."""

    def __init__(self, problem: ShootingProblem, damping: float):
        m = problem.model
        if not _fixed_base_square(problem):
            raise ValueError(f"policy 'gravity_damping' needs a fixed-base robot with one actuator per dof; model "
                             f"'{m.name}' has nv={m.nv}, nu={m.nu}{', a floating base' if m.has_floating_base else ''}"
                             f"; use policy='pd' or 'open_loop'")
        if isinstance(damping, bool) or not isinstance(damping, (int, float, np.number)) or not (0 <= damping <= 1):
            raise ValueError(f"damping must be a number in [0, 1] (velocity fraction removed per knot), got {damping!r}")
        self.problem, self.damping = problem, float(damping)
        self.Binv = np.linalg.inv(np.asarray(m.actuation_matrix, float))
        dt = float(np.min(problem.dts[problem.dts > 0]))
        self.D = self.damping * np.diag(problem.backend.crba(m, problem.x0[:m.nq])) / dt      # (nv,)

    def __call__(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        p = self.problem
        return (p.backend.gravity_torques(p.model, q) - self.D * v) @ self.Binv.T

    def controls(self, s: np.ndarray, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Applied controls (K, nu) (before clipping) of spline values s (K, nu) at states (q, v)."""
        return s + self(q, v)

    def prepare(self) -> None:
        """Nothing to refresh (D is set at construction)."""

    def linear_form(self, s: np.ndarray) -> None:
        """None: the exact gravity torques make this feedback nonlinear in the state (the rollouts
        run through the problem's dynamics step by step)."""
        return None

    def default(self) -> np.ndarray:
        """The spline value (nu,) that holds still: no offset."""
        return np.zeros(self.problem.nu)

    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Bounds of the spline values (the applied controls are clipped instead): none."""
        return None

    def scale(self) -> np.ndarray:
        """What the relative exploration noise multiplies (nu,): the controls' half ranges."""
        return control_scale(self.problem)

    def offsets(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """The knots' view of applied controls us (N, nu) along states xs (N+1, nx): ``us − feedback``."""
        nq = self.problem.model.nq
        return us - self(xs[:-1, :nq], xs[:-1, nq:])

    def gains(self, xs: np.ndarray) -> np.ndarray:
        """``∂u/∂x`` (N, nu, 2 nv) of the feedback at xs[:-1]: ``B⁻¹ [∂g/∂q, −D I]`` (the plan's
        gains between updates; ∂g/∂q is ∂RNEA/∂q at v = a = 0)."""
        p = self.problem
        m, nq, nv = p.model, p.model.nq, p.model.nv
        q = xs[:-1, :nq]
        zero = np.zeros((q.shape[0], nv))
        dg = p.backend.rnea_derivatives(m, q, zero, zero)[0]
        K = np.empty((q.shape[0], p.nu, 2 * nv))
        K[:, :, :nv] = self.Binv @ dg
        K[:, :, nv:] = -self.Binv * self.D
        return K


class PDSetpoints:
    """Joint position set-points θ (K, nu) [rad or m], one per actuator:
    ``u = b(q) + G⁻¹ Λ (ω² (θ − q_a) − 2 ζ ω v_a)`` with q_a, v_a the positions and velocities of
    the joints the actuators drive, G the actuators' gears (their entries of B). b: the torques
    that hold the configuration q still, linearised at the problem's current x0,
    ``b(q) = b0 + ∂b/∂q (q ⊖ q0)`` (a rollout then costs no dynamics per knot for it, and the PD
    absorbs the remainder):

    * fixed base, one actuator per dof: gravity compensation ``B⁻¹ g(q)``;
    * floating base whose first knot has :class:`~solvers.ContactDynamics`: the standing torques
      on those contacts, :func:`standing_torques` (the static solution closest to the problem's
      default controls, and its derivative). Without it the sag of a loaded leg raises the torque
      it needs faster than a PD of flight-inertia gains raises its torque (the knee of HyQ:
      gravity through the feet acts as a negative stiffness), and the robot folds: in MuJoCo at
      1 kHz with a constant ``b``, HyQ holding ``θ = q0`` at ``stiffness`` 0.5–1.0 sinks from 0.63
      m to 0.11–0.17 m under a 150 N × 0.2 s lateral push, and with this ``b`` it keeps 0.57–0.62 m;
    * else the problem's default controls (constant).

    Λ = ``((M⁻¹)_aa)⁻¹`` is the actuated joints' effective inertia at the problem's current x0
    (M itself on a fixed base), refreshed at every solve (:meth:`prepare`): with it every joint
    responds as one critically damped oscillator of frequency ω near x0, whatever the inertial
    coupling. Per-joint gains (``M_ii ω²``) are not enough: a wrist under a heavy shoulder sees
    ``(M⁻¹)_ii ≫ 1/M_ii``, and the semi-implicit Euler rollout at the knot spacing blows up. ω =
    ``stiffness / dt`` (dt: the smallest knot spacing; the rollout of such an oscillator is stable
    for ``ω dt`` below about 1 with ζ = 1, so ``stiffness`` is that product; default (None) 0.2 on
    a fixed base, 1.0 on a floating base, where Λ is the legs' inertia in flight and ignores the
    weight they carry through the contacts: at 0.2 HyQ's knees get 3 N m/rad and its trunk rose 5
    cm in a 1-s MuJoCo rollout holding θ = q0, at 0.5–1.5 it stood) and ζ = ``damping_ratio``. Every actuator must drive its own hinge or slide joint."""

    def __init__(self, problem: ShootingProblem, stiffness: float | None = None, damping_ratio: float = 1.0):
        m = problem.model
        if stiffness is None:
            stiffness = 1.0 if m.has_floating_base else 0.2
        for name, value, hi in (("pd_stiffness", stiffness, 2.0), ("pd_damping_ratio", damping_ratio, 10.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not (0 < value <= hi):
                raise ValueError(f"{name} must be a number in (0, {hi:g}], got {value!r}")
        B = np.asarray(m.actuation_matrix, float)
        dof = np.asarray(m.actuator_dof, int)
        qidx = dict(zip(np.asarray(m.scalar_v_index, int).tolist(), np.asarray(m.scalar_q_index, int).tolist()))
        single = np.count_nonzero(B, axis=0) == 1
        if m.nu == 0 or not single.all() or not all(d in qidx for d in dof.tolist()) \
                or len(set(dof.tolist())) != m.nu:
            raise ValueError(f"policy 'pd' needs every actuator of '{m.name}' to drive its own hinge or slide joint; "
                             f"use policy='open_loop'")
        self.problem = problem
        self.stiffness, self.damping_ratio = float(stiffness), float(damping_ratio)
        self.dof = dof                                        # (nu,) velocity index of each actuated joint
        self.qa = np.array([qidx[d] for d in dof.tolist()])   # (nu,) its position index
        self.gear = B[dof, np.arange(m.nu)]                   # (nu,)
        self.omega = self.stiffness / float(np.min(problem.dts[problem.dts > 0]))     # [rad/s]
        self.gravity = _fixed_base_square(problem)
        self.Binv = np.linalg.inv(B) if self.gravity else None
        self.contacts = None if self.gravity else _stance_contacts(problem)
        #: b(q) is affine in q ⊖ q0 (gravity or standing torques), else the constant default controls
        self.affine_bias = self.gravity or self.contacts is not None
        self.u_bias = np.asarray(problem.default_controls(), float).copy()
        self.prepare()

    def prepare(self) -> None:
        """Gains at the problem's current x0: Kp, Kd (nu, nu) [control units per rad, per rad/s],
        ``u = b + Kp (θ − q_a) − Kd v_a``."""
        p = self.problem
        m = p.model
        q0 = p.x0[:m.nq]
        self._q0 = q0.copy()
        if self.gravity:
            zero = np.zeros(m.nv)
            self._b0 = self.Binv @ p.backend.gravity_torques(m, q0)
            self._dbdq = self.Binv @ p.backend.rnea_derivatives(m, q0, zero, zero)[0]      # (nu, nv)
        elif self.contacts is not None:
            self._b0, self._dbdq = standing_torques(p, self.contacts, q0, self.u_bias)
        Minv = p.backend.minv(m, q0)
        lam = np.linalg.inv(Minv[np.ix_(self.dof, self.dof)])
        lam = 0.5 * (lam + lam.T) / self.gear[:, None]
        self.Kp = self.omega ** 2 * lam
        self.Kd = 2.0 * self.damping_ratio * self.omega * lam
        self._Kp_inv = np.linalg.inv(self.Kp)

    def linear_form(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`controls` as ``u = offsets + G (x ⊖ x_ref)`` for set-points s (K, N, nu):
        ``(offsets (K, N, nu), G (nu, ndx), x_ref (nx,))``, with x_ref the problem's current x0 at
        rest. Exact: b is affine in q, and each actuated joint is a hinge or slide, whose position
        difference is its tangent component."""
        p = self.problem
        m = p.model
        nv = m.nv
        xref = np.concatenate([p.x0[:m.nq], np.zeros(nv)])
        G = np.zeros((p.nu, 2 * nv))
        if self.affine_bias:
            b_ref = self.bias(xref[:m.nq])
            G[:, :nv] = self._dbdq
        else:
            b_ref = self.u_bias
        G[:, self.dof] -= self.Kp
        G[:, nv + self.dof] -= self.Kd
        offsets = b_ref + (s - xref[self.qa]) @ self.Kp.T
        return offsets, G, xref

    def bias(self, q: np.ndarray) -> np.ndarray:
        """b(q) (K, nu): the linearised holding torques (gravity or standing) at q, or the constant
        default controls."""
        p = self.problem
        if self.affine_bias:
            m = p.model
            dq = q - self._q0 if m.is_euclidean else m.difference(self._q0, q)
            return self._b0 + dq @ self._dbdq.T
        return np.broadcast_to(self.u_bias, q.shape[:-1] + (p.nu,))

    def controls(self, s: np.ndarray, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Applied controls (K, nu) (before clipping) of set-points s (K, nu) at states (q, v)."""
        return self.bias(q) + (s - q[..., self.qa]) @ self.Kp.T - v[..., self.dof] @ self.Kd.T

    def default(self) -> np.ndarray:
        """The set-points (nu,) that hold x0 still: its joint positions."""
        return self.problem.x0[self.qa].copy()

    def bounds(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Set-points stay inside the joint ranges (where finite)."""
        m = self.problem.model
        return np.asarray(m.q_lower, float)[self.qa], np.asarray(m.q_upper, float)[self.qa]

    def scale(self) -> np.ndarray:
        """What the relative exploration noise multiplies (nu,): each joint's half range, 1 rad (or
        m) where unlimited."""
        lo, hi = self.bounds()
        half = 0.5 * (hi - lo)
        return np.where(np.isfinite(half) & (half > 0), half, 1.0)

    def offsets(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """The set-points (N, nu) that give applied controls us (N, nu) along states xs (N+1, nx)."""
        nq = self.problem.model.nq
        q, v = xs[:-1, :nq], xs[:-1, nq:]
        return q[:, self.qa] + (us - self.bias(q) + v[:, self.dof] @ self.Kd.T) @ self._Kp_inv.T

    def gains(self, xs: np.ndarray) -> np.ndarray:
        """``∂u/∂x`` (N, nu, 2 nv) at xs[:-1]: ``−Kp`` / ``−Kd`` on the actuated joints, plus
        ``∂b/∂q`` at x0 (gravity compensation: ``B⁻¹`` ∂RNEA/∂q at v = a = 0; standing torques)."""
        p = self.problem
        nv = p.model.nv
        n = xs.shape[0] - 1
        K = np.zeros((n, p.nu, 2 * nv))
        if self.affine_bias:
            K[:, :, :nv] = self._dbdq
        K[:, :, self.dof] -= self.Kp     # the tangent index of a hinge/slide joint's position is its dof index
        K[:, :, nv + self.dof] -= self.Kd
        return K


def _stance_contacts(problem: ShootingProblem):
    """The contact set of the problem's first knot when it is a floating base on
    :class:`~solvers.ContactDynamics` (without Baumgarte terms, which are not statics), else None."""
    dyn = problem.running_models[0].dynamics
    if not (problem.model.has_floating_base and isinstance(dyn, ContactDynamics)):
        return None
    c = dyn.contacts
    if tuple(c.baumgarte) != (0.0, 0.0):
        c = dataclasses.replace(c, baumgarte=(0.0, 0.0), reference=None)
    return c


def standing_torques(problem: ShootingProblem, contacts, q: np.ndarray, u_guess: np.ndarray,
                     rcond: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Controls ``u`` (nu,) that hold configuration q (nq,) still on the rigid ``contacts`` — the
    constrained acceleration ``a(q, 0, B u)`` (:meth:`dynamics.Backend.contact_dynamics`) is zero
    — closest to ``u_guess`` (the contact forces are then whatever the contacts transmit), and
    ``∂u/∂q`` (nu, nv) in tangent coordinates, by the implicit function theorem at that solution:
    ``∂u/∂q = −A⁺ ∂a/∂q``, ``A = ∂a/∂τ B``. a is affine in u, so one least-squares step is exact;
    when no u holds q still (A's range misses a), the least-squares residual is left. Actuated
    torques only: the action model's passive forces (springs) are not part of this balance.
    rcond: of the pseudo-inverse (A has rank ≤ nv − constrained directions)."""
    p = problem
    m, be = p.model, p.backend
    zero = np.zeros(m.nv)
    B = np.asarray(m.actuation_matrix, float)
    u = np.asarray(u_guess, float)
    (a, _), d = be.contact_dynamics_derivatives(m, q, zero, B @ u, contacts, return_values=True)
    Apinv = np.linalg.pinv(d[2] @ B, rcond=rcond)                                          # (nu, nv)
    u = u - Apinv @ a
    da_dq = be.contact_dynamics_derivatives(m, q, zero, B @ u, contacts)[0]
    return u, -Apinv @ da_dq


def control_scale(problem: ShootingProblem) -> np.ndarray:
    """Each control's half range ``(u_upper − u_lower)/2`` where finite, else ``max(1, |default|)``."""
    half = 0.5 * (problem.u_upper - problem.u_lower)
    fallback = np.maximum(1.0, np.abs(problem.default_controls()))
    return np.where(np.isfinite(half) & (half > 0), half, fallback)
