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

from dynamics import RobotModel, default_backend_name, get_backend
from dynamics.backend import Backend
from dynamics.inputs import sum_is_finite

from .action_model import ActionModel, ContactDynamics, FreeDynamics, ImpulseDynamics
from .costs import CostContext, CostDerivatives, CostSum, as_cost, gravity_compensation
from .costs.compiled import CompiledCosts
from .discrete_dynamics import DiscreteDynamics, DynamicsDerivatives
from .problem_data import ProblemData
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


@dataclass(frozen=True)
class KnotGroup:
    """Knots evaluated together: ``knots`` (n,) sorted indices, ``rows`` the same as a slice when
    they are contiguous (cheaper views), ``item`` what they share (a DiscreteDynamics or a Cost)."""

    knots: np.ndarray
    item: object

    @property
    def rows(self):
        k = self.knots
        if k[-1] - k[0] + 1 == k.size:
            return slice(int(k[0]), int(k[-1]) + 1)
        return k

    @property
    def contiguous(self) -> bool:
        return isinstance(self.rows, slice)


def _index(knots: list[int]) -> np.ndarray:
    a = np.asarray(knots, dtype=np.intp)
    a.setflags(write=False)
    return a


def _is_model_list(x) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(a, ActionModel) for a in x)


class ShootingProblem:
    """Discrete-time optimal control problem over N knots, each described by an
    :class:`~solvers.action_model.ActionModel` (its dynamics, cost and dt).

    ``ShootingProblem(x0, running_models, terminal_model=None, backend=None, u_lower=None,
    u_upper=None, second_order="auto")``: running_models is a list of N action models (the
    same object may repeat); terminal_model an ActionModel whose cost is the terminal cost
    (its dt is not used), or None. backend: name or Backend instance (default
    :func:`dynamics.default_backend_name`). u_lower / u_upper: (nu,) control bounds, default the
    model's actuator limits. second_order: source of ``∂²a`` for DDP, ``"auto"`` (analytical
    when the backend supports it, else central differences), ``"analytical"``, ``"fd"`` or
    ``"complex"``.

    Knots with the same dynamics description and dt form one *dynamics group* and knots with the
    same cost object one *cost group*; each group is evaluated with one batched backend call, so
    a problem of a few phases costs a few calls per stage, not N.

    The uniform case is a one-liner, :meth:`uniform` — also reachable as
    ``ShootingProblem(model, x0, horizon, dt, running_cost, terminal_cost=None, ...)``.
    """

    def __init__(self, x0, running_models, terminal_model=None, *uniform_args, backend: str | Backend | None = None,
                 u_lower=None, u_upper=None, second_order: str = "auto", **uniform_kwargs):
        if isinstance(x0, RobotModel) or uniform_args or uniform_kwargs or not _is_model_list(running_models):
            # ShootingProblem(model, x0, horizon, dt, running_cost, terminal_cost=None, ...): the uniform form
            self._init_uniform(x0, running_models, terminal_model, *uniform_args, backend=backend, u_lower=u_lower,
                               u_upper=u_upper, second_order=second_order, **uniform_kwargs)
            return
        self._init_models(x0, running_models, terminal_model, backend, u_lower, u_upper, second_order)

    @classmethod
    def uniform(cls, model: RobotModel, x0, horizon: int, dt: float, running_cost, terminal_cost=None,
                backend: str | Backend | None = None, integrator: str = "euler", u_lower=None, u_upper=None,
                second_order: str = "auto", passive_forces: bool = True) -> "ShootingProblem":
        """``horizon`` identical knots of ``dt`` seconds sharing one running cost (and one dynamics
        description ``FreeDynamics(integrator, passive_forces)``), then the terminal cost."""
        return cls(model, x0, horizon, dt, running_cost, terminal_cost, backend=backend, integrator=integrator,
                   u_lower=u_lower, u_upper=u_upper, second_order=second_order, passive_forces=passive_forces)

    def _init_uniform(self, model, x0, horizon, dt=None, running_cost=None, terminal_cost=None, backend=None,
                      integrator="euler", u_lower=None, u_upper=None, second_order="auto", passive_forces=True):
        if not isinstance(model, RobotModel):
            raise TypeError(f"ShootingProblem: model must be a RobotModel (dynamics.load_model), got "
                            f"{type(model).__name__}")
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer, float)) or int(horizon) != horizon \
                or horizon < 1:
            raise ValueError(f"horizon must be a positive integer number of knots, got {horizon}")
        if dt is None or not (np.isfinite(dt) and dt > 0):
            raise ValueError(f"time step dt must be a positive finite number of seconds, got {dt}")
        if running_cost is None:
            raise TypeError("ShootingProblem: running_cost is required")
        dyn = FreeDynamics(integrator, passive_forces)
        running = ActionModel(model, as_cost(running_cost, name="running"), dt, dyn)
        terminal = None if terminal_cost is None else ActionModel(model, as_cost(terminal_cost, name="terminal"),
                                                                  0.0, dyn)
        self._init_models(x0, [running] * int(horizon), terminal, backend, u_lower, u_upper, second_order)

    def _init_models(self, x0, running_models, terminal_model, backend, u_lower, u_upper, second_order) -> None:
        running_models = tuple(running_models)
        if not running_models:
            raise ValueError("ShootingProblem: running_models is empty; give at least one ActionModel (horizon >= 1)")
        for t, am in enumerate(running_models):
            if not isinstance(am, ActionModel):
                raise TypeError(f"ShootingProblem: running_models[{t}] is a {type(am).__name__}, expected an "
                                f"ActionModel")
        model = running_models[0].model
        for t, am in enumerate(running_models):
            if am.model is not model:
                raise ValueError(f"ShootingProblem: running_models[{t}] describes another RobotModel than knot 0; "
                                 f"every knot must use the same model object")
            if not am.dt > 0 and not isinstance(am.dynamics, ImpulseDynamics):
                raise ValueError(f"time step dt must be a positive finite number of seconds, got {am.dt} at knot {t}")
        if terminal_model is not None:
            if not isinstance(terminal_model, ActionModel):
                raise TypeError(f"ShootingProblem: terminal_model must be an ActionModel or None, got "
                                f"{type(terminal_model).__name__}")
            if terminal_model.model is not model:
                raise ValueError("ShootingProblem: the terminal model describes another RobotModel than the running "
                                 "models")
        self.model = model
        self.backend = get_backend(default_backend_name() if backend is None else backend)
        self.state = StateSpace(model, compiled=None if model.is_euclidean else
                                self.backend.compiled_kinematics(model))
        self.running_models = running_models
        self.terminal_model = terminal_model
        self.horizon = len(running_models)
        self.dts = np.array([am.dt for am in running_models], dtype=float)
        self.dts.setflags(write=False)
        # what each knot's running cost is multiplied by: dt, or 1 on impulse knots
        self.cost_scales = np.array([am.cost_scale for am in running_models], dtype=float)
        self.cost_scales.setflags(write=False)
        self.second_order = second_order
        self.terminal_cost = None if terminal_model is None else terminal_model.cost
        if self.terminal_cost is not None and self.terminal_cost.uses_control:
            raise ValueError("the terminal cost depends on the control (e.g. a ControlCost); controls do not exist "
                             "at the terminal knot — remove that term from the terminal cost")
        self._discrete: dict = {}      # (dynamics description, dt) -> DiscreteDynamics, kept across re-phasing
        self._group_knots()
        self.u_lower = self._bound("u_lower", model.u_lower if u_lower is None else u_lower)
        self.u_upper = self._bound("u_upper", model.u_upper if u_upper is None else u_upper)
        if np.any(self.u_lower > self.u_upper):
            raise ValueError("u_lower must be <= u_upper in every component")
        self.set_initial_state(x0)
        self.initial_controls: np.ndarray | None = None   # see default_controls
        self._knot_cache: dict = {}
        self.revision = 0                                   # set_running_models count
        #: evaluate the library cost terms in one compiled call per stage when the backend offers
        #: compiled kinematics (:mod:`solvers.costs.compiled`); False: every term on the Python path
        self.compile_costs = True
        self._cc = None                                     # CompiledCosts, or (signature, None) when unavailable

    def _group_knots(self) -> None:
        """Groups: knots sharing a dynamics description and dt / a cost object (first-appearance order)."""
        running_models, model = self.running_models, self.model
        dyn_knots: dict = {}
        cost_knots: dict = {}
        for t, am in enumerate(running_models):
            dyn_knots.setdefault((am.dynamics, am.dt), []).append(t)
            cost_knots.setdefault(id(am.cost), (am.cost, []))[1].append(t)
        for (d, dt) in dyn_knots:
            if (d, dt) not in self._discrete:
                self._discrete[(d, dt)] = DiscreteDynamics(
                    model, self.backend, dt, d.integrator, self.second_order, d.passive_forces,
                    contacts=getattr(d, "contacts", None), restitution=getattr(d, "restitution", 0.0))
        self.dynamics_groups = tuple(KnotGroup(_index(ks), self._discrete[key]) for key, ks in dyn_knots.items())
        self.cost_groups = tuple(KnotGroup(_index(ks), cost) for cost, ks in cost_knots.values())
        self._knot_dynamics = np.empty(self.horizon, dtype=object)
        for g in self.dynamics_groups:
            self._knot_dynamics[g.knots] = g.item

    def set_running_models(self, running_models) -> None:
        """Replace the N running action models by another list of N (same robot, same horizon),
        e.g. to re-phase a contact schedule as an MPC horizon slides; x0, bounds,
        ``initial_controls`` and the terminal model are kept, and so is a solver's workspace (its
        warm start is the caller's). The dynamics of a (description, dt) pair seen before are
        reused, not rebuilt. ``revision`` counts the replacements (for caches of the knot structure)."""
        running_models = tuple(running_models)
        if len(running_models) != self.horizon:
            raise ValueError(f"set_running_models: got {len(running_models)} action models, expected {self.horizon} "
                             f"(the problem's horizon; build a new ShootingProblem for another horizon)")
        for t, am in enumerate(running_models):
            if not isinstance(am, ActionModel):
                raise TypeError(f"set_running_models: running_models[{t}] is a {type(am).__name__}, expected an "
                                f"ActionModel")
            if am.model is not self.model:
                raise ValueError(f"set_running_models: running_models[{t}] describes another RobotModel than the "
                                 f"problem's")
            if not am.dt > 0 and not isinstance(am.dynamics, ImpulseDynamics):
                raise ValueError(f"time step dt must be a positive finite number of seconds, got {am.dt} at knot {t}")
        if running_models == self.running_models:
            return
        self.running_models = running_models
        dts = np.array([am.dt for am in running_models], dtype=float)
        dts.setflags(write=False)
        scales = np.array([am.cost_scale for am in running_models], dtype=float)
        scales.setflags(write=False)
        self.dts, self.cost_scales = dts, scales
        self._group_knots()
        self._knot_cache = {}
        self.revision += 1

    # ------------------------------------------------------------ uniform-problem views
    @property
    def dt(self) -> float:
        """The knots' common dt [s]; a problem with per-knot dt raises (use :attr:`dts`)."""
        if np.all(self.dts == self.dts[0]):
            return float(self.dts[0])
        raise ValueError("this problem has per-knot time steps; use problem.dts (N,) instead of problem.dt")

    @property
    def running_cost(self):
        """The running cost shared by every knot; a problem with several running costs raises
        (use :attr:`running_models` or :attr:`cost_groups`)."""
        if len(self.cost_groups) == 1:
            return self.cost_groups[0].item
        raise ValueError(f"this problem has {len(self.cost_groups)} different running costs; reach them through "
                         f"problem.running_models[t].cost")

    @property
    def dynamics(self) -> DiscreteDynamics:
        """The discrete dynamics shared by every knot; a problem with several dynamics groups
        (different dt, integrator or dynamics kind) raises (use :meth:`knot_dynamics`)."""
        if len(self.dynamics_groups) == 1:
            return self.dynamics_groups[0].item
        raise ValueError(f"this problem has {len(self.dynamics_groups)} dynamics groups (different dt or dynamics "
                         f"per knot); use problem.knot_dynamics(t)")

    def knot_dynamics(self, t: int) -> DiscreteDynamics:
        """The discrete dynamics of knot t (0 <= t < N)."""
        return self._knot_dynamics[t]

    @property
    def integrator(self) -> str:
        names = {g.item.integrator for g in self.dynamics_groups}
        return names.pop() if len(names) == 1 else "mixed"

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
        return bool(np.isfinite(self.u_lower).any() or np.isfinite(self.u_upper).any())

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

    def default_controls(self) -> np.ndarray:
        """The controls (nu,) a solve starts from when given none: ``initial_controls`` when set
        (e.g. by a task that knows its equilibrium, such as a standing robot's torques under its
        contact forces), else gravity compensation at x0."""
        u = getattr(self, "initial_controls", None)
        if u is None:
            return self.gravity_compensation()
        u = np.asarray(u, float)
        if u.shape != (self.nu,) or not np.all(np.isfinite(u)):
            raise ValueError(f"problem.initial_controls must be a finite ({self.nu},) array, got shape {u.shape}")
        return u

    def initial_guess(self) -> tuple[np.ndarray, np.ndarray]:
        """Default initialisation: :meth:`default_controls` (clipped to the bounds) held over the
        horizon, and the states they produce from x0."""
        us = np.tile(self.clip_controls(self.default_controls()), (self.horizon, 1))
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
    def step(self, x, u, t: int | None = None) -> np.ndarray:
        """``f_t(x, u)`` (..., nx) with the dynamics of knot t (any knot of a uniform problem when
        t is None)."""
        dyn = self.dynamics if t is None else self._knot_dynamics[t]
        return dyn.step(x, u)    # impulse knots: NaN rows for a rank-deficient impact (rejected candidates)

    def next_states(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """``f_t(xs[t], us[t])`` for every knot, xs (N, nx), us (N, nu): (N, nx), one batched call
        per dynamics group."""
        if len(self.dynamics_groups) == 1:
            return self.dynamics_groups[0].item.step(xs, us)
        out = np.empty((self.horizon, self.nx))
        for g in self.dynamics_groups:
            out[g.rows] = g.item.step(xs[g.rows], us[g.rows])
        return out

    def rollout(self, us, x0=None) -> np.ndarray:
        """States (N+1, nx) from ``x0`` (default the problem's) under controls us (N, nu)."""
        xs = np.empty((self.horizon + 1, self.nx))
        xs[0] = self.x0 if x0 is None else x0
        for t in range(self.horizon):
            xs[t + 1] = self._knot_dynamics[t].step(xs[t], us[t])
        return xs

    # ------------------------------------------------------------ costs
    def _ctx(self, x, u, knots, **kw) -> CostContext:
        return CostContext(self.model, self.backend, self.state, x, u, knots, **kw)

    def _knots(self, key, make) -> np.ndarray:
        """Knot-index arrays, made once per key (the horizon is fixed)."""
        arr = self._knot_cache.get(key)
        if arr is None:
            if len(self._knot_cache) > 256:
                self._knot_cache.clear()
            arr = self._knot_cache[key] = make()
            arr.setflags(write=False)
        return arr

    def _dt_of(self, g: KnotGroup) -> float | np.ndarray:
        """The cost scale (dt, or 1 on impulse knots) of a group's knots: one float when they share
        it, else (n,)."""
        d = self.cost_scales[g.rows]
        return float(d[0]) if np.all(d == d[0]) else d

    @staticmethod
    def _scaled_derivatives(cost, ctx: CostContext, scale) -> CostDerivatives:
        """``cost.derivatives(ctx)`` times ``scale`` (a float or per-knot (B,)); a CostSum's fresh
        arrays are scaled in place."""
        d = cost.derivatives(ctx)
        if isinstance(scale, float):
            if scale == 1.0:
                return d
            if type(cost) is not CostSum:
                return d.scaled(scale)
            for a in (d.l, d.lx, d.lu, d.lxx, d.lxu, d.luu):
                a *= scale
            return d
        w1, w2 = scale[:, None], scale[:, None, None]
        return CostDerivatives(scale * d.l, w1 * d.lx, w1 * d.lu, w2 * d.lxx, w2 * d.lxu, w2 * d.luu)

    def _group_rows(self, g: KnotGroup, S: int, stride: int):
        """Rows of group g's knots in S stacked trajectories of ``stride`` knots: a slice when
        S == 1 and the knots are contiguous, else an index array."""
        if S == 1:
            return g.rows
        return self._knots(("rows", id(g), S, stride), lambda: (np.arange(S)[:, None] * stride + g.knots).ravel())

    def running_costs(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """``dt_t · l_t(x_t, u_t)`` for xs (..., N+1 or N, nx), us (..., N, nu): (..., N)."""
        N = self.horizon
        lead = us.shape[:-2]
        S = int(np.prod(lead, dtype=int))
        X = xs[..., :N, :].reshape(S, N, self.nx)
        U = us.reshape(S, N, self.nu)
        out = np.empty((S, N))
        for g in self.cost_groups:
            x = X[:, g.rows].reshape(-1, self.nx)
            u = U[:, g.rows].reshape(-1, self.nu)
            val = g.item.value(self._ctx(x, u, np.tile(g.knots, S))).reshape(S, -1)
            out[:, g.rows] = self.cost_scales[g.rows] * val
        return out.reshape(lead + (N,))

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

    def _compiled_costs(self):
        """The problem's :class:`~solvers.costs.compiled.CompiledCosts` (rebuilt when the knot
        structure or a cost's terms change), or None: disabled, no compiled kinematics on this
        backend, or no supported term."""
        if not self.compile_costs:
            return None
        sig = CompiledCosts.signature_of(self)
        cc = self._cc
        if isinstance(cc, tuple):
            if cc[0] == sig:
                return None
        elif cc is not None and cc.signature == sig:
            return cc
        kin = self.backend.compiled_kinematics(self.model)
        cc = CompiledCosts(self, kin) if kin is not None else None
        if cc is None or cc.empty:
            self._cc = (sig, None)
            return None
        self._cc = cc
        return cc

    def _cost_batched(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray | None:
        """:meth:`cost` for the usual case — xs (..., N+1, nx) finite, us (..., N, nu) — with the
        kinematics of all S·(N+1) states computed once and shared by every cost group and the
        terminal cost. ``None`` otherwise (the general path then evaluates, or raises)."""
        N, nx = self.horizon, self.nx
        lead = xs.shape[:-2]
        if xs.shape[-2:] != (N + 1, nx) or us.shape != lead + (N, self.nu):
            return None
        S = 1
        for n in lead:
            S *= n
        X = xs.reshape(S * (N + 1), nx)
        if not sum_is_finite(X):
            return None
        cc = self._compiled_costs()
        if cc is not None and cc.covers_all:      # one compiled call, nothing on the Python path
            return cc.values(np.ascontiguousarray(xs.reshape(S, N + 1, nx)),
                             np.ascontiguousarray(us.reshape(S, N, self.nu))).reshape(lead)
        U = us.reshape(S * N, self.nu)
        full = self._ctx(X, None, self._knots(("all", S), lambda: np.tile(np.arange(N + 1), S)), checked=True)
        if cc is None:
            J = np.zeros(S)
        else:
            J = cc.values(np.ascontiguousarray(X.reshape(S, N + 1, nx)), np.ascontiguousarray(U.reshape(S, N, self.nu)))
        for gi, g in enumerate(self.cost_groups):
            item = g.item if cc is None else cc.python_part(gi, g.item)
            if item is None:
                continue
            x_rows = self._group_rows(g, S, N + 1)
            u_rows = self._group_rows(g, S, N)
            contiguous = S == 1 and g.contiguous
            ctx = self._ctx(X[x_rows], U[u_rows], self._knots(("knots", id(g), S), lambda: np.tile(g.knots, S)),
                            checked=True, knot_range=(g.rows.start, g.rows.stop) if contiguous else None,
                            parent=full, rows=x_rows)
            dt = self._dt_of(g)
            J += (dt * item.value(ctx).reshape(S, -1) if isinstance(dt, float)
                  else item.value(ctx).reshape(S, -1) * dt).sum(axis=-1)
        terminal = self.terminal_cost if cc is None or self.terminal_cost is None else \
            cc.python_part(-1, self.terminal_cost)
        if terminal is not None:
            term_rows = slice(N, N + 1) if S == 1 else self._knots(("term_rows", S), lambda: np.arange(S) * (N + 1) + N)
            term = self._ctx(X[term_rows], None, self._knots(("term", S), lambda: np.full(S, N)), checked=True,
                             knot_range=(N, N + 1) if S == 1 else None, parent=full, rows=term_rows)
            J += terminal.value(term)
        return J.reshape(lead)

    def cost_derivatives(self, xs: np.ndarray, us: np.ndarray,
                         _checked: bool = False) -> tuple[CostDerivatives, CostDerivatives]:
        """Running (N knots, each scaled by its dt) and terminal (1 knot) cost derivatives, one
        batched evaluation per cost group. Kinematics are computed once for all N+1 knots and
        shared by every group and the terminal cost."""
        N = self.horizon
        full = self._ctx(xs, None, self._knots("all", lambda: np.arange(N + 1)), checked=_checked,
                         knot_range=(0, N + 1))
        run = None
        for g in self.cost_groups:
            rows = g.rows
            ctx = self._ctx(xs[rows], us[rows], g.knots, checked=_checked,
                            knot_range=(rows.start, rows.stop) if g.contiguous else None, parent=full, rows=rows)
            d = self._scaled_derivatives(g.item, ctx, self._dt_of(g))
            if len(self.cost_groups) == 1:
                run = d
                break
            if run is None:
                run = CostDerivatives.zeros(N, self.ndx, self.nu)
            for name in ("l", "lx", "lu", "lxx", "lxu", "luu"):
                getattr(run, name)[rows] = getattr(d, name)
        if self.terminal_cost is None:
            term = CostDerivatives.zeros(1, self.ndx, self.nu)
        else:
            term_ctx = self._ctx(xs[N:N + 1], None, self._knots("term", lambda: np.array([N])), checked=_checked,
                                 knot_range=(N, N + 1), parent=full, rows=slice(N, N + 1))
            term = self._scaled_derivatives(self.terminal_cost, term_ctx, 1.0)
        return run, term

    def dynamics_derivatives(self, xs: np.ndarray, us: np.ndarray, second_order: bool = False) -> DynamicsDerivatives:
        """Dynamics derivatives at knots xs (N, nx), us (N, nu): one batched call per dynamics group."""
        if len(self.dynamics_groups) == 1:
            return self.dynamics_groups[0].item._derivatives(xs, us, second_order)
        N, nx, ndx, nu = self.horizon, self.nx, self.ndx, self.nu
        parts = [(g.rows, g.item._derivatives(xs[g.rows], us[g.rows], second_order)) for g in self.dynamics_groups]
        out = DynamicsDerivatives(np.empty((N, nx)), np.empty((N, ndx, ndx)), np.empty((N, ndx, nu)))
        if second_order:   # factors of different row counts (e.g. Euler and RK4 groups): pad with zero rows
            R = max(d.T.shape[1] for _, d in parts)
            out.C = np.zeros((N, R, ndx))
            out.T = np.zeros((N, R, ndx + nu, ndx + nu))
        for rows, d in parts:
            out.xnext[rows], out.Fx[rows], out.Fu[rows] = d.xnext, d.Fx, d.Fu
            if second_order:
                r = d.T.shape[1]
                out.C[rows, :r], out.T[rows, :r] = d.C, d.T
        return out

    def derivatives(self, xs, us, second_order: bool = False, data: ProblemData | None = None) -> ProblemDerivatives:
        """Cost and dynamics derivatives along a trajectory; the dynamics derivatives of each
        dynamics group come from one batched backend call (plus one for the second-order terms).
        data: a workspace from :meth:`create_data` to write the results into (no per-knot
        allocation; the returned arrays are its buffers, overwritten by the next call); None:
        fresh arrays."""
        xs, us = self.check_trajectory(xs, us, "derivatives")
        if data is None:
            run, term = self.cost_derivatives(xs, us, _checked=True)
            dyn = self.dynamics_derivatives(xs[:-1], us, second_order)
            return ProblemDerivatives(run, term, dyn)
        if data.horizon != self.horizon or data.nx != self.nx or data.nu != self.nu:
            raise ValueError("derivatives: data was created for another problem; use problem.create_data()")
        # dynamics first: a contact-force cost then reuses the contact solves of its knots
        solves = self._dynamics_derivatives_into(xs[:-1], us, second_order, data.dynamics)
        self._cost_derivatives_into(xs, us, data.running, data.terminal, solves)
        return data.derivatives()

    def create_data(self) -> ProblemData:
        """A workspace for :meth:`derivatives` and the forward pass (one per solver)."""
        return ProblemData.allocate(self.horizon, self.nx, self.ndx, self.nu, self.model.nv)

    def _cost_derivatives_into(self, xs, us, run: CostDerivatives, term: CostDerivatives, solves=()) -> None:
        """:meth:`cost_derivatives` written into ``run`` (N knots) and ``term`` (1 knot). solves:
        the contact solves of :meth:`_dynamics_derivatives_into` at the same (xs, us), handed to
        the cost contexts of the knots they cover (:meth:`CostContext.contact_solve`)."""
        N = self.horizon
        cc = self._compiled_costs()
        if cc is not None and cc.covers_all:      # one compiled call, nothing on the Python path
            run.fill(0.0)
            term.fill(0.0)
            cc.add_derivatives(np.ascontiguousarray(xs), np.ascontiguousarray(us), run, term)
            return
        full = self._ctx(xs, None, self._knots("all", lambda: np.arange(N + 1)), checked=True, knot_range=(0, N + 1))
        for gi, g in enumerate(self.cost_groups):
            rows = g.rows
            item = g.item if cc is None else cc.python_part(gi, g.item)
            dst = run.rows(rows) if g.contiguous else CostDerivatives.zeros(g.knots.size, self.ndx, self.nu)
            if item is None:
                dst.fill(0.0)
            else:
                ctx = self._ctx(xs[rows], us[rows], g.knots, checked=True,
                                knot_range=(rows.start, rows.stop) if g.contiguous else None, parent=full, rows=rows,
                                contact_solves=self._solves_for(rows, solves) if solves and g.contiguous else None)
                self._accumulate_scaled(item, ctx, self._dt_of(g), dst)
            if not g.contiguous:
                run.set_rows(rows, dst)
        terminal = self.terminal_cost if cc is None or self.terminal_cost is None else \
            cc.python_part(-1, self.terminal_cost)
        if terminal is None:
            term.fill(0.0)
        else:
            term_ctx = self._ctx(xs[N:N + 1], None, self._knots("term", lambda: np.array([N])), checked=True,
                                 knot_range=(N, N + 1), parent=full, rows=slice(N, N + 1))
            self._accumulate_scaled(terminal, term_ctx, 1.0, term)
        if cc is not None:
            # the compiled terms, already scaled by their weight and dt, added on top
            cc.add_derivatives(np.ascontiguousarray(xs), np.ascontiguousarray(us), run, term)

    @staticmethod
    def _accumulate_scaled(cost, ctx: CostContext, scale, dst: CostDerivatives) -> None:
        """``dst = scale · cost.derivatives(ctx)`` in place (same operations as
        :meth:`_scaled_derivatives`: the terms accumulated with their weights, then scaled)."""
        dst.fill(0.0)
        cost._accumulate(ctx, dst, 1.0)
        if isinstance(scale, float):
            if scale != 1.0:
                dst.scale(scale)
        else:
            dst.scale_rows(scale)

    @staticmethod
    def _solves_for(rows: slice, solves) -> dict | None:
        """``{id(ContactSet): (dynamics, lam, dlam)}`` for the knots ``rows`` from the contact solves
        ``[(rows, dynamics, ContactDynamicsBuffers)]`` of groups that cover all of them."""
        found = None
        for r, dyn, buf in solves:
            if r.start <= rows.start and rows.stop <= r.stop:
                a, b = rows.start - r.start, rows.stop - r.start
                found = found or {}
                found[id(dyn.contacts)] = (dyn, buf.lam[a:b], buf.dl[:, a:b])
        return found

    def _dynamics_derivatives_into(self, xs, us, second_order: bool, out) -> list:
        """:meth:`dynamics_derivatives` written into ``out`` (:class:`~solvers.problem_data.DynamicsBuffers`).
        Returns the contact solves made on the way, ``[(rows, dynamics, ContactDynamicsBuffers)]``
        (the semi-implicit Euler knots with contacts, whose values and derivatives the buffers hold)."""
        out.C = out.T = None
        solves = []

        def solved(rows, dyn, view) -> None:
            if dyn.contacts is not None and dyn.integrator == "euler":
                solves.append((rows, dyn, view.contact_buffers(dyn.contacts.nc)))
        if len(self.dynamics_groups) == 1:
            dyn = self.dynamics_groups[0].item
            d = dyn._derivatives(xs, us, second_order, out=out)
            out.C, out.T = d.C, d.T
            solved(slice(0, self.horizon), dyn, out)
            return solves
        N, ndx = self.horizon, self.ndx
        parts = []
        for g in self.dynamics_groups:
            rows = g.rows
            if g.contiguous:
                view = out.group_view(rows)
                d = g.item._derivatives(xs[rows], us[rows], second_order, out=view)
                solved(rows, g.item, view)
            else:
                d = g.item._derivatives(xs[rows], us[rows], second_order)
                out.xnext[rows], out.Fx[rows], out.Fu[rows] = d.xnext, d.Fx, d.Fu
            parts.append((rows, d))
        if second_order:   # factors of different row counts (e.g. Euler and RK4 groups): pad with zero rows
            R = max(d.T.shape[1] for _, d in parts)
            out.C, out.T = out.padded_factors(R, ndx + self.nu)
            for rows, d in parts:
                r = d.T.shape[1]
                out.C[rows, :r], out.T[rows, :r] = d.C, d.T
        return solves
