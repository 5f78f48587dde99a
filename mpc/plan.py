"""A time-indexed MPC plan and the feedback law applied between controller updates.

A plan computed from the state measured at time ``t0`` has knots at ``t0 + i·dt``
(``i = 0..N``). At a time ``t`` between updates the simulator applies

    u(t, x) = u_ff(t) + K(t) · (x ⊖ x_ref(t))

with ``u_ff``/``K`` held over each knot interval (the solver's zero-order-hold control
parametrisation: the shooting problem keeps ``u_i`` constant on ``[t_i, t_{i+1})``) and
``x_ref(t)`` interpolated between the knot states along the configuration manifold
(``q_i ⊕ s·(q_{i+1} ⊖ q_i)``, ``v`` linearly). The state error is the tangent-space difference the
solver's gains act on: ``dx = concat(difference(q_ref, q), v - v_ref)`` (size 2·nv). Past the end
of the horizon the last control, gain and state are held.

The policy respects the box: the command is saturated at ``[u_lower, u_upper]`` (the bounds the
solver's box QP used, by default the model's actuator limits), so a large feedback term never asks
for more than the actuators give; the solvers zero the gain rows of controls clamped in the box QP.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dynamics.inputs import as_array, sum_is_finite
from dynamics.model import RobotModel
from solvers.state_space import StateSpace


_SHIFTS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}


def _shift_rows(n: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """The row indices ``n..n+N`` (N+1,) of a plan shifted by ``n`` knots, and the first N of them
    (read-only; kept per ``(n, N)``: an MPC controller asks for the same shift at every update)."""
    got = _SHIFTS.get((n, N))
    if got is None:
        if len(_SHIFTS) > 64:
            _SHIFTS.clear()
        rows = np.arange(n, n + N + 1)
        rows.setflags(write=False)
        got = _SHIFTS[(n, N)] = (rows, rows[:-1])
    return got


def checked_bounds(model: RobotModel, u_lower, u_upper) -> tuple[np.ndarray, np.ndarray]:
    """``(u_lower, u_upper)`` as read-only (nu,) float64 copies (None: the model's actuator limits);
    ValueError for a wrong shape, a NaN or ``u_lower > u_upper``."""
    out = []
    for name, b, default in (("u_lower", u_lower, model.u_lower), ("u_upper", u_upper, model.u_upper)):
        b = np.array(default if b is None else b, float)
        if b.shape != (model.nu,) or np.isnan(b).any():
            raise ValueError(f"Plan: {name} must be (nu,) = ({model.nu},) without NaN (±inf: unbounded), got {b}")
        b.setflags(write=False)
        out.append(b)
    if (out[0] > out[1]).any():
        raise ValueError("Plan: u_lower must be <= u_upper in every component")
    return out[0], out[1]


def _check_finite(xs: np.ndarray, us: np.ndarray, K: np.ndarray | None) -> None:
    for name, a in (("xs", xs), ("us", us), ("K", K)):
        if a is not None and not sum_is_finite(a):
            raise ValueError(f"Plan: {name} contains non-finite values; the solver diverged")


@dataclass(frozen=True)
class Plan:
    """A solved horizon, indexed by simulation time.

    model: the robot; t0: time [s] of the measured state the plan starts from; dt: knot spacing [s];
    xs: (N+1, nq+nv) state trajectory; us: (N, nu) feed-forward actuator forces [N m or N];
    K: (N, nu, 2·nv) feedback gains on the tangent-space state error, or None (open loop);
    info: per-update bookkeeping from the controller (timings, iterations, cost);
    u_lower / u_upper: (nu,) bounds the command is saturated at (None: the model's actuator
    limits); saturate: apply that saturation in :meth:`control` by default (False only to study a
    policy that ignores the limits); state: optional :class:`~solvers.state_space.StateSpace` of
    ``model`` (the solver problem's: compiled Lie-group operations where its backend has them),
    through which :meth:`control` interpolates the reference and takes the state error of one
    measured state of a robot with free or ball joints (without one: the model's numpy Lie algebra,
    the same math, equal to round-off)."""

    model: RobotModel
    t0: float
    dt: float
    xs: np.ndarray
    us: np.ndarray
    K: np.ndarray | None = None
    info: dict = field(default_factory=dict)
    u_lower: np.ndarray | None = None
    u_upper: np.ndarray | None = None
    saturate: bool = True
    state: StateSpace | None = None

    def __post_init__(self):
        m = self.model
        nx = m.nq + m.nv
        if not (np.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"Plan: dt must be a positive number of seconds, got {self.dt}")
        xs = np.asarray(self.xs, float)
        us = np.asarray(self.us, float)
        if us.ndim != 2 or us.shape[1] != m.nu or us.shape[0] < 1:
            raise ValueError(f"Plan: us has shape {us.shape}, expected (N, nu={m.nu}) with N >= 1")
        N = us.shape[0]
        if xs.shape != (N + 1, nx):
            raise ValueError(f"Plan: xs has shape {xs.shape}, expected (N+1, nq+nv) = ({N + 1}, {nx})")
        if self.K is not None and np.shape(self.K) != (N, m.nu, 2 * m.nv):
            raise ValueError(f"Plan: K has shape {np.shape(self.K)}, expected (N, nu, 2nv) = ({N}, {m.nu}, {2 * m.nv})")
        K = None if self.K is None else np.asarray(self.K, float)
        _check_finite(xs, us, K)
        if self.state is not None and self.state.model is not m:
            raise ValueError(f"Plan: the state space is of model '{self.state.model.name}', not of the plan's "
                             f"'{m.name}'")
        lower, upper = checked_bounds(m, self.u_lower, self.u_upper)
        object.__setattr__(self, "u_lower", lower)
        object.__setattr__(self, "u_upper", upper)
        object.__setattr__(self, "xs", xs)
        object.__setattr__(self, "us", us)
        object.__setattr__(self, "K", K)

    @classmethod
    def of_solver(cls, model: RobotModel, t0: float, dt: float, xs: np.ndarray, us: np.ndarray, K: np.ndarray | None,
                  info: dict, bounds: tuple[np.ndarray, np.ndarray], states_finite: bool = False,
                  state: StateSpace | None = None, gains_finite: bool = False) -> "Plan":
        """The plan of a solver's own result: xs (N+1, nx), us (N, nu), K (N, nu, 2nv) or None, float64
        arrays of those shapes (a solver's result: shapes not checked again), ``bounds`` from
        :func:`checked_bounds`; dt > 0. Raises ValueError, as the constructor does, when xs, us or K
        has a non-finite entry; states_finite: the solver checked xs and us already
        (``SolverResult.finite``), only K is checked here; gains_finite: the solver checked K too
        (``SolverResult.gains_finite``); state: the plan's :attr:`state` (of ``model``: not checked again)."""
        if states_finite:
            if K is not None and not gains_finite and not sum_is_finite(K):
                _check_finite(None, None, K)        # raises, naming K
        else:
            _check_finite(xs, us, K)
        plan = object.__new__(cls)
        plan.__dict__.update(model=model, t0=t0, dt=dt, xs=xs, us=us, K=K, info=info, u_lower=bounds[0],
                             u_upper=bounds[1], saturate=True, state=state)
        return plan

    @property
    def horizon(self) -> int:
        """Number of control intervals N."""
        return self.us.shape[0]

    @property
    def t_end(self) -> float:
        """Time [s] of the last knot."""
        return self.t0 + self.horizon * self.dt

    def locate(self, t: float) -> tuple[int, float]:
        """Interval index ``i`` in [0, N-1] and fraction ``s`` in [0, 1] of ``t`` within it (clamped
        to the horizon: before ``t0`` → (0, 0); after the end → (N-1, 1))."""
        s = (float(t) - self.t0) / self.dt
        N = self.horizon
        if s <= 0:
            return 0, 0.0
        if s >= N:
            return N - 1, 1.0
        # tolerate round-off when t sits on a knot
        i = int(np.floor(s + 1e-9))
        i = min(i, N - 1)
        return i, float(min(max(s - i, 0.0), 1.0))

    def reference_state(self, t: float) -> np.ndarray:
        """``x_ref(t)`` (nq+nv,): knot states interpolated along the manifold."""
        m = self.model
        i, s = self.locate(t)
        xa, xb = self.xs[i], self.xs[i + 1]
        if s == 0.0:
            return xa.copy()
        if s == 1.0:
            return xb.copy()
        dq = m.difference(xa[:m.nq], xb[:m.nq])
        q = m.integrate(xa[:m.nq], s * dq)
        v = (1.0 - s) * xa[m.nq:] + s * xb[m.nq:]
        return np.concatenate([q, v])

    def state_error(self, x, x_ref) -> np.ndarray:
        """Tangent-space error ``x ⊖ x_ref = concat(difference(q_ref, q), v - v_ref)`` (..., 2nv)."""
        m = self.model
        x = np.asarray(x, float)
        x_ref = np.asarray(x_ref, float)
        return np.concatenate([m.difference(x_ref[..., :m.nq], x[..., :m.nq]),
                               x[..., m.nq:] - x_ref[..., m.nq:]], axis=-1)

    def feedforward(self, t: float) -> np.ndarray:
        """``u_ff(t)`` (nu,) (zero-order hold on the knot controls)."""
        return self.us[self._hold_index(t)].copy()

    def gain(self, t: float) -> np.ndarray | None:
        """``K(t)`` (nu, 2nv) (held over the interval), or None for an open-loop plan."""
        return None if self.K is None else self.K[self._hold_index(t)]

    def _hold_index(self, t: float) -> int:
        i, s = self.locate(t)
        # at s == 1 only when t is at/after the horizon end: hold the last interval
        return i

    def _reference_at(self, i: int, s: float) -> np.ndarray:
        """The reference state a fraction ``s`` of the way from knot ``i`` to knot ``i + 1`` (nx,), for
        :meth:`control`'s one-state path: configurations interpolated in closed form on a hinge/slide
        robot, on the manifold through :attr:`state` otherwise (as :meth:`sample`); velocities blended
        as :meth:`reference_state` does."""
        xa, xb = self.xs[i], self.xs[i + 1]
        if s == 0.0:
            return xa
        if s == 1.0:
            return xb
        nq = self.model.nq
        if self.model.is_euclidean:
            return np.concatenate([xa[:nq] + s * (xb[:nq] - xa[:nq]), (1.0 - s) * xa[nq:] + s * xb[nq:]])
        dx = self.state.difference(xa, xb)
        dx *= s
        x_ref = self.state.integrate(xa, dx)
        x_ref[nq:] = (1.0 - s) * xa[nq:] + s * xb[nq:]
        return x_ref

    def control(self, t: float, x, feedback: bool = True, clip: bool | None = None) -> np.ndarray:
        """Actuator forces ``u_ff(t) + K(t)(x ⊖ x_ref(t))`` (..., nu) for measured state(s) x
        (..., nq+nv), saturated at ``[u_lower, u_upper]`` (clip: None follows :attr:`saturate`;
        True/False forces it on/off)."""
        m = self.model
        st = self.state
        if (type(x) is np.ndarray and x.dtype == np.float64 and x.shape == self.xs.shape[1:]
                and (m.is_euclidean or st is not None) and sum_is_finite(x)):
            # one measured state (every simulator step): the same law without the general path's
            # batching. A hinge/slide robot takes x ⊖ x_ref = x - x_ref (a tenth of the general
            # path's time); a floating base the state space's Lie-group operations (compiled where
            # the backend has them) instead of the model's numpy Lie algebra, the slow general path
            # here (docs/mpc.md, "Speed against Crocoddyl")
            i, s = self.locate(t)
            u = self.us[i].copy()
            if feedback and self.K is not None:
                x_ref = self._reference_at(i, s)
                if m.is_euclidean:
                    u += self.K[i] @ (x - x_ref)
                else:
                    u += np.einsum("ij,...j->...i", self.K[i], st.difference(x_ref, x))  # (the general path's sum)
            if self.saturate if clip is None else clip:
                np.maximum(u, self.u_lower, out=u)      # np.clip, without its overhead
                np.minimum(u, self.u_upper, out=u)
            return u
        x = as_array("x", x, (m.nq + m.nv,), "Plan.control")
        u = np.broadcast_to(self.feedforward(t), x.shape[:-1] + (m.nu,)).copy()
        if feedback and self.K is not None:
            dx = self.state_error(x, self.reference_state(t))
            u += np.einsum("ij,...j->...i", self.gain(t), dx)
        if self.saturate if clip is None else clip:
            u = np.clip(u, self.u_lower, self.u_upper)
        return u

    def exhausted(self, t: float) -> bool:
        """Whether ``t`` is past the last knot (the plan is being extrapolated by holding)."""
        return float(t) > self.t_end + 1e-12

    def resample(self, t_start: float, horizon: int | None = None, dt: float | None = None,
                 out: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Warm start for a plan starting at ``t_start``: ``(xs (N+1, nx), us (N, nu))`` evaluated on
        this plan at ``t_start + j·dt`` (states interpolated on the manifold, controls held; beyond
        the horizon the last knot is repeated). Equals ``shifted(n)`` when ``t_start - t0 = n·dt``.
        out: optional ``(xs, us)`` arrays of those shapes to write the result into (the
        controller's warm-start buffers); they are returned."""
        xs, us, own_dt = self.xs, self.us, self.dt
        M = us.shape[0]
        N = M if horizon is None else int(horizon)
        dt = own_dt if dt is None else float(dt)
        shift = (float(t_start) - self.t0) / own_dt
        n = int(round(shift))
        if dt == own_dt and n >= 0 and abs(shift - n) <= 1e-9:
            # the usual MPC case, an update period of whole knots: an exact shift by n knots, rows
            # n..n+N taken with the indices clipped, so that knots past the end repeat the last one
            # (the general path below evaluates every knot in Python; take's "clip" mode writes
            # straight into ``out``, where "raise" would buffer it)
            rows, controls = _shift_rows(n, N)
            if out is not None:
                X, U = out
                try:
                    xs.take(rows, 0, X, "clip")
                    us.take(controls, 0, U, "clip")
                except (ValueError, TypeError) as e:     # (numpy's message names neither array)
                    raise ValueError(f"Plan.resample: out must be two arrays of shapes ({N + 1}, "
                                     f"{xs.shape[1]}) and ({N}, {us.shape[1]}), got "
                                     f"{[getattr(a, 'shape', type(a).__name__) for a in out]}") from e
                return X, U
            return xs.take(rows, 0, None, "clip"), us.take(controls, 0, None, "clip")   # fresh arrays
        # general case (an update period that is not a whole number of knots)
        xs, us = self.sample(float(t_start) + dt * np.arange(N + 1))
        if out is not None:
            out[0][...], out[1][...] = xs, us
            return out
        return xs, us

    def sample(self, ts, state: StateSpace | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The plan at times ts (K+1,): states (K+1, nx) and held controls (K, nu) at ``ts[:-1]``,
        as :meth:`reference_state` / :meth:`feedforward` give them knot by knot (one batched
        difference/integrate instead of K+1 Python-level ones). state: the problem's
        :class:`~solvers.state_space.StateSpace` of this model, whose ``difference``/``integrate``
        (compiled where the backend has them) then interpolate the configurations; the same
        Lie-group math as the model's, equal to round-off."""
        m, M = self.model, self.horizon
        s = (np.asarray(ts, float) - self.t0) / self.dt
        i = np.minimum(np.floor(s + 1e-9).astype(int), M - 1)
        frac = np.clip(s - i, 0.0, 1.0)
        i = np.where(s <= 0, 0, np.where(s >= M, M - 1, i))
        frac = np.where(s <= 0, 0.0, np.where(s >= M, 1.0, frac))
        xa, xb = self.xs[i], self.xs[i + 1]
        v = (1.0 - frac[:, None]) * xa[:, m.nq:] + frac[:, None] * xb[:, m.nq:]
        if state is not None and not m.is_euclidean:
            if state.model is not m:
                raise ValueError(f"Plan.sample: the state space is of model '{state.model.name}', "
                                 f"not of the plan's '{m.name}'")
            dx = state.difference(xa, xb)
            dx *= frac[:, None]
            xs = state.integrate(xa, dx)
            xs[:, m.nq:] = v            # the velocities as the model path blends them
        else:
            q = m.integrate(xa[:, :m.nq], frac[:, None] * m.difference(xa[:, :m.nq], xb[:, :m.nq]))
            xs = np.concatenate([q, v], axis=-1)
        # knots exactly at an interval's ends take the knot state itself (as reference_state does)
        xs[frac == 0.0] = xa[frac == 0.0]
        xs[frac == 1.0] = xb[frac == 1.0]
        return xs, self.us[i[:-1]].copy()
