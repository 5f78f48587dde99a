"""The optimal-control shooting problem: robot, initial state, horizon, costs, dynamics, bounds.

Total cost of a trajectory ``xs`` (N+1, nx), ``us`` (N, nu):

    J = Σ_{t<N} dt · l(x_t, u_t, t) + l_N(x_N)

(the running cost is integrated over each interval, as in Crocoddyl's integrated action
models). Every evaluation is batched over the knots — and over leading dims of ``xs``/``us``,
which the parallel line search uses to score several rollouts at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dynamics import RobotModel, get_backend
from dynamics.backend import Backend
from dynamics.inputs import sum_is_finite

from .costs import CostContext, CostDerivatives, CostSum, as_cost, gravity_compensation
from .discrete_dynamics import DiscreteDynamics, DynamicsDerivatives
from .state_space import StateSpace


@dataclass
class ProblemDerivatives:
    """Everything a backward pass needs at a trajectory: running cost derivatives (already scaled
    by dt) over the N knots, terminal cost derivatives (B = 1), and the dynamics derivatives."""

    running: CostDerivatives
    terminal: CostDerivatives
    dynamics: DynamicsDerivatives

    @property
    def cost(self) -> float:
        return float(self.running.l.sum() + self.terminal.l.sum())


class ShootingProblem:
    """Discrete-time optimal control problem over ``horizon`` knots of ``dt`` seconds.

    running_cost / terminal_cost: :class:`solvers.costs.Cost` (or plain-Python cost objects, see
    :mod:`solvers.costs.custom`); terminal_cost may be None. backend: name or Backend instance.
    integrator: ``"euler"`` (semi-implicit) or ``"rk4"``. u_lower / u_upper: (nu,) control
    bounds, default the model's actuator limits. second_order: source of ``∂²a`` for DDP,
    ``"auto"`` (analytical when the backend supports it, else central differences),
    ``"analytical"``, ``"fd"`` or ``"complex"``. passive_forces: include joint damping and
    hinge/slide springs from the model in the dynamics.
    """

    def __init__(self, model: RobotModel, x0, horizon: int, dt: float, running_cost, terminal_cost=None,
                 backend: str | Backend = "numpy", integrator: str = "euler", u_lower=None, u_upper=None,
                 second_order: str = "auto", passive_forces: bool = True):
        if not isinstance(model, RobotModel):
            raise TypeError(f"ShootingProblem: model must be a RobotModel (dynamics.load_model), got "
                            f"{type(model).__name__}")
        if int(horizon) != horizon or horizon < 1:
            raise ValueError(f"horizon must be a positive integer number of knots, got {horizon}")
        self.model = model
        self.backend = get_backend(backend)
        self.state = StateSpace(model)
        self.dynamics = DiscreteDynamics(model, self.backend, dt, integrator, second_order, passive_forces)
        self.horizon = int(horizon)
        self.dt = float(dt)
        self.integrator = integrator
        self.second_order = second_order
        self.running_cost = as_cost(running_cost, name="running")
        self.terminal_cost = None if terminal_cost is None else as_cost(terminal_cost, name="terminal")
        for c in (self.running_cost, self.terminal_cost):
            if c is not None:
                c.check_model(model)
        if self.terminal_cost is not None and self.terminal_cost.uses_control:
            raise ValueError("the terminal cost depends on the control (e.g. a ControlCost); controls do not exist "
                             "at the terminal knot — remove that term from the terminal cost")
        self.u_lower = self._bound("u_lower", model.u_lower if u_lower is None else u_lower)
        self.u_upper = self._bound("u_upper", model.u_upper if u_upper is None else u_upper)
        if np.any(self.u_lower > self.u_upper):
            raise ValueError("u_lower must be <= u_upper in every component")
        self.set_initial_state(x0)
        self._knot_cache: dict = {}

    def _bound(self, name: str, b) -> np.ndarray:
        b = np.array(b, dtype=float)
        if b.shape != (self.model.nu,):
            raise ValueError(f"{name} has shape {b.shape}, expected ({self.model.nu},) (nu)")
        if np.any(np.isnan(b)):
            raise ValueError(f"{name} contains NaN; use ±inf for no bound")
        return b

    # ------------------------------------------------------------ sizes and state
    @property
    def nx(self) -> int:
        return self.state.nx

    @property
    def ndx(self) -> int:
        return self.state.ndx

    @property
    def nu(self) -> int:
        return self.model.nu

    @property
    def has_bounds(self) -> bool:
        return bool(np.any(np.isfinite(self.u_lower)) or np.any(np.isfinite(self.u_upper)))

    def set_initial_state(self, x0) -> None:
        """Set the initial state (nx,) = (q, v)."""
        x0 = self.state.check(x0, "x0", "set_initial_state")
        if x0.shape != (self.nx,):
            raise ValueError(f"set_initial_state: x0 has shape {x0.shape}, expected ({self.nx},)")
        self.x0 = x0.copy()

    def clip_controls(self, u: np.ndarray) -> np.ndarray:
        return np.clip(u, self.u_lower, self.u_upper)

    def gravity_compensation(self, q=None) -> np.ndarray:
        """Controls (nu,) that best cancel gravity at ``q`` (default: the initial configuration)."""
        q = self.x0[:self.model.nq] if q is None else q
        return gravity_compensation(self.model, self.backend, q)

    def initial_guess(self) -> tuple[np.ndarray, np.ndarray]:
        """Default initialisation: gravity-compensation controls at x0 (clipped to the bounds)
        held over the horizon, and the states they produce from x0."""
        us = np.tile(self.clip_controls(self.gravity_compensation()), (self.horizon, 1))
        return self.rollout(us), us

    def check_trajectory(self, xs, us, func: str) -> tuple[np.ndarray, np.ndarray]:
        xs = self.state.check(xs, "xs", func)
        us = np.asarray(us, dtype=float)
        N = self.horizon
        if xs.shape != (N + 1, self.nx):
            raise ValueError(f"{func}: xs has shape {xs.shape}, expected ({N + 1}, {self.nx}) = (horizon+1, nx)")
        if us.shape != (N, self.nu):
            raise ValueError(f"{func}: us has shape {us.shape}, expected ({N}, {self.nu}) = (horizon, nu)")
        if not np.all(np.isfinite(us)):
            raise ValueError(f"{func}: us contains non-finite values (NaN or inf)")
        return xs, us

    # ------------------------------------------------------------ dynamics
    def step(self, x, u) -> np.ndarray:
        """``f(x, u)`` (..., nx)."""
        return self.dynamics.step(x, u)

    def rollout(self, us, x0=None) -> np.ndarray:
        """States (N+1, nx) from ``x0`` (default the problem's) under controls us (N, nu)."""
        xs = np.empty((self.horizon + 1, self.nx))
        xs[0] = self.x0 if x0 is None else x0
        for t in range(self.horizon):
            xs[t + 1] = self.step(xs[t], us[t])
        return xs

    # ------------------------------------------------------------ costs
    def _ctx(self, x, u, knots, **kw) -> CostContext:
        return CostContext(self.model, self.backend, self.state, x, u, knots, **kw)

    def _knots(self, key, make) -> np.ndarray:
        """Knot-index arrays, made once per key (the horizon is fixed)."""
        arr = self._knot_cache.get(key)
        if arr is None:
            if len(self._knot_cache) > 64:
                self._knot_cache.clear()
            arr = self._knot_cache[key] = make()
            arr.setflags(write=False)
        return arr

    @staticmethod
    def _scaled_derivatives(cost, ctx: CostContext, scale: float) -> CostDerivatives:
        """``cost.derivatives(ctx).scaled(scale)``; a CostSum's fresh arrays are scaled in place."""
        d = cost.derivatives(ctx)
        if scale == 1.0:
            return d
        if type(cost) is not CostSum:
            return d.scaled(scale)
        for a in (d.l, d.lx, d.lu, d.lxx, d.lxu, d.luu):
            a *= scale
        return d

    def running_costs(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """``dt · l(x_t, u_t)`` for xs (..., N+1 or N, nx), us (..., N, nu): (..., N)."""
        N = self.horizon
        lead = us.shape[:-2]
        x = xs[..., :N, :].reshape(-1, self.nx)
        u = us.reshape(-1, self.nu)
        knots = np.tile(np.arange(N), int(np.prod(lead, dtype=int)))
        return self.dt * self.running_cost.value(self._ctx(x, u, knots)).reshape(lead + (N,))

    def terminal_costs(self, xN: np.ndarray) -> np.ndarray:
        """``l_N(x_N)`` for xN (..., nx): (...)."""
        lead = xN.shape[:-1]
        if self.terminal_cost is None:
            return np.zeros(lead)
        x = xN.reshape(-1, self.nx)
        knots = np.full(x.shape[0], self.horizon)
        return self.terminal_cost.value(self._ctx(x, None, knots)).reshape(lead)

    def cost(self, xs, us) -> np.ndarray:
        """Total cost J (...) of trajectories xs (..., N+1, nx), us (..., N, nu)."""
        xs, us = np.asarray(xs, float), np.asarray(us, float)
        fast = self._cost_batched(xs, us)
        if fast is not None:
            return fast
        return self.running_costs(xs, us).sum(axis=-1) + self.terminal_costs(xs[..., -1, :])

    def _cost_batched(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray | None:
        """:meth:`cost` for the usual case — xs (..., N+1, nx) finite, us (..., N, nu) — with the
        kinematics of all S·(N+1) states computed once and shared by the running and terminal
        costs. ``None`` otherwise (the general path then evaluates, or raises, as it always did)."""
        N, nx = self.horizon, self.nx
        lead = xs.shape[:-2]
        if xs.shape[-2:] != (N + 1, nx) or us.shape != lead + (N, self.nu):
            return None
        S = int(np.prod(lead, dtype=int))
        X = xs.reshape(S * (N + 1), nx)
        if not sum_is_finite(X):
            return None
        full = self._ctx(X, None, self._knots(("all", S), lambda: np.tile(np.arange(N + 1), S)), checked=True)
        if S == 1:   # one trajectory: the running and terminal knots are slices
            run_rows, term_rows = slice(0, N), slice(N, N + 1)
        else:
            run_rows = self._knots(("run_rows", S), lambda: (np.arange(S)[:, None] * (N + 1) + np.arange(N)).ravel())
            term_rows = self._knots(("term_rows", S), lambda: np.arange(S) * (N + 1) + N)
        run = self._ctx(X[run_rows], us.reshape(S * N, self.nu), self._knots(("run", S), lambda: np.tile(np.arange(N), S)),
                        checked=True, knot_range=(0, N) if S == 1 else None, parent=full, rows=run_rows)
        J = (self.dt * self.running_cost.value(run)).reshape(S, N).sum(axis=-1)
        if self.terminal_cost is not None:
            term = self._ctx(X[term_rows], None, self._knots(("term", S), lambda: np.full(S, N)), checked=True,
                             knot_range=(N, N + 1) if S == 1 else None, parent=full, rows=term_rows)
            J += self.terminal_cost.value(term)
        return J.reshape(lead)

    def cost_derivatives(self, xs: np.ndarray, us: np.ndarray,
                         _checked: bool = False) -> tuple[CostDerivatives, CostDerivatives]:
        """Running (N knots, scaled by dt) and terminal (1 knot) cost derivatives. Kinematics are
        computed once for all N+1 knots and shared by the running and terminal costs."""
        N = self.horizon
        full = self._ctx(xs, None, self._knots("all", lambda: np.arange(N + 1)), checked=_checked,
                         knot_range=(0, N + 1))
        run_ctx = self._ctx(xs[:N], us, self._knots("run", lambda: np.arange(N)), checked=_checked,
                            knot_range=(0, N), parent=full, rows=slice(0, N))
        run = self._scaled_derivatives(self.running_cost, run_ctx, self.dt)
        if self.terminal_cost is None:
            term = CostDerivatives.zeros(1, self.ndx, self.nu)
        else:
            term_ctx = self._ctx(xs[N:N + 1], None, self._knots("term", lambda: np.array([N])), checked=_checked,
                                 knot_range=(N, N + 1), parent=full, rows=slice(N, N + 1))
            term = self._scaled_derivatives(self.terminal_cost, term_ctx, 1.0)
        return run, term

    def derivatives(self, xs, us, second_order: bool = False) -> ProblemDerivatives:
        """Cost and dynamics derivatives along a trajectory; the dynamics derivatives of all N
        knots come from one batched backend call (plus one for the second-order terms)."""
        xs, us = self.check_trajectory(xs, us, "derivatives")
        run, term = self.cost_derivatives(xs, us, _checked=True)
        dyn = self.dynamics._derivatives(xs[:-1], us, second_order)
        return ProblemDerivatives(run, term, dyn)
