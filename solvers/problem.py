"""The optimal-control shooting problem: robot, initial state, horizon, costs, dynamics, bounds.

Total cost of a trajectory ``xs`` (N+1, nx), ``us`` (N, nu):

    J = Σ_{t<N} dt · l(x_t, u_t, t) + l_N(x_N)

(the running cost is integrated over each interval, as in Crocoddyl's integrated action
models). Every evaluation is batched over the knots — and over leading dims of ``xs``/``us``,
which the parallel line search uses to score several rollouts at once. The knot grouping is
:mod:`solvers.knots`, the cost evaluation :mod:`solvers.problem_costs`, the buffers an
evaluation writes :mod:`solvers.problem_data`.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel, default_backend_name, get_backend
from dynamics.backend import Backend
from dynamics.inputs import sum_is_finite

from .action_model import ActionModel, FreeDynamics
from .costs import CostDerivatives, as_cost, gravity_compensation
from .integrators import IntegratedModel
from .knots import KnotStructure, check_running_models
from .problem_costs import ProblemCosts
from .problem_data import ProblemData, ProblemDerivatives
from .state_space import StateSizes, StateSpace


class ShootingProblem(StateSizes):
    """Discrete-time optimal control problem over N knots, each described by an
    :class:`~solvers.action_model.ActionModel` (its dynamics, cost and dt).

    running_models: a list of N action models (the same object may repeat); terminal_model: an
    ActionModel whose cost is the terminal cost (its dt is not used), or None. backend: name or
    Backend instance (default :func:`dynamics.default_backend_name`). u_lower / u_upper: (nu,)
    control bounds, default the model's actuator limits. second_order: source of ``∂²a`` for DDP,
    ``"auto"`` (analytical when the backend supports it, else central differences),
    ``"analytical"``, ``"fd"`` or ``"complex"``.

    Knots with the same dynamics description and dt form one *dynamics group* and knots with the
    same cost object one *cost group*; each group is evaluated with one batched backend call, so
    a problem of a few phases costs a few calls per stage, not N. The uniform case is a
    one-liner, :meth:`uniform`.
    """

    def __init__(self, x0, running_models, terminal_model: ActionModel | None = None, *,
                 backend: str | Backend | None = None, u_lower=None, u_upper=None, second_order: str = "auto"):
        running_models = check_running_models(running_models, "ShootingProblem")
        model = running_models[0].model
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
        self.terminal_model = terminal_model
        self.horizon = len(running_models)
        self.second_order = second_order
        self.terminal_cost = None if terminal_model is None else terminal_model.cost
        if self.terminal_cost is not None and self.terminal_cost.uses_control:
            raise ValueError("the terminal cost depends on the control (e.g. a ControlCost); controls do not exist "
                             "at the terminal knot — remove that term from the terminal cost")
        self._integrated: dict = {}      # (dynamics description, dt) -> IntegratedModel, kept across re-phasing
        self._structures: dict = {}      # ids of a running-model sequence -> its KnotStructure (re-phasing)
        self.structure = KnotStructure.build(running_models, self._integrated_model)
        self.u_lower = self._bound("u_lower", model.u_lower if u_lower is None else u_lower)
        self.u_upper = self._bound("u_upper", model.u_upper if u_upper is None else u_upper)
        if np.any(self.u_lower > self.u_upper):
            raise ValueError("u_lower must be <= u_upper in every component")
        self.set_initial_state(x0)
        self.initial_controls: np.ndarray | None = None   # see default_controls
        self.revision = 0                                   # set_running_models count
        #: evaluate the library cost terms in one compiled call per stage when the backend offers
        #: compiled kinematics (:mod:`solvers.costs.compiled`); False: every term on the Python path
        self.compile_costs = True
        self.costs = ProblemCosts(self)

    @classmethod
    def uniform(cls, model: RobotModel, x0, horizon: int, dt: float, running_cost, terminal_cost=None,
                backend: str | Backend | None = None, integrator: str = "euler", u_lower=None, u_upper=None,
                second_order: str = "auto", passive_forces: bool = True) -> "ShootingProblem":
        """``horizon`` identical knots of ``dt`` seconds sharing one running cost (and one dynamics
        description ``FreeDynamics(integrator, passive_forces)``), then the terminal cost."""
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
        return cls(x0, [running] * int(horizon), terminal, backend=backend, u_lower=u_lower, u_upper=u_upper,
                   second_order=second_order)

    def _integrated_model(self, description, dt: float) -> IntegratedModel:
        """The integrated model of a dynamics description over dt, made once per (description, dt)."""
        key = (description, dt)
        if key not in self._integrated:
            self._integrated[key] = description.integrated(self.model, self.backend, dt, self.second_order)
        return self._integrated[key]

    def set_running_models(self, running_models) -> None:
        """Replace the N running action models by another list of N (same robot, same horizon),
        e.g. to re-phase a contact schedule as an MPC horizon slides; x0, bounds,
        ``initial_controls`` and the terminal model are kept, and so is a solver's data (its
        warm start is the caller's). The integrated model of a (description, dt) pair seen before
        is reused, not rebuilt. ``revision`` counts the replacements (for what depends on the
        knot structure)."""
        running_models = tuple(running_models)
        if len(running_models) != self.horizon:
            raise ValueError(f"set_running_models: got {len(running_models)} action models, expected {self.horizon} "
                             f"(the problem's horizon; build a new ShootingProblem for another horizon)")
        if running_models == self.running_models:
            return
        # a sequence of (frozen) action models met before (a gait's phases come round every cycle)
        # has its checked, grouped structure kept: the structure holds the models, so their ids
        # stay theirs while it is kept
        key = tuple(map(id, running_models))
        structure = self._structures.get(key)
        if structure is None:
            running_models = check_running_models(running_models, "set_running_models", self.model)
            structure = KnotStructure.build(running_models, self._integrated_model)
            if len(self._structures) >= 256:        # a few gait cycles' phases in practice
                self._structures.clear()
            self._structures[key] = structure
        self.structure = structure
        self.costs.restructured()
        self.revision += 1

    # ------------------------------------------------------------ knot structure
    running_models = property(lambda self: self.structure.running_models)
    dts = property(lambda self: self.structure.dts, doc="time steps (N,) [s] of the knots")
    cost_scales = property(lambda self: self.structure.cost_scales,
                           doc="what each knot's running cost is multiplied by (N,): its dt, or 1 on impulse knots")
    dynamics_groups = property(lambda self: self.structure.dynamics_groups)
    cost_groups = property(lambda self: self.structure.cost_groups)

    @property
    def dt(self) -> float:
        """The knots' common dt [s]; a problem with per-knot dt raises (use :attr:`dts`)."""
        dt = self.structure.common_dt
        if dt is not None:
            return dt
        raise ValueError("this problem has per-knot time steps; use problem.dts (N,) instead of problem.dt")

    @property
    def running_cost(self):
        """The running cost shared by every knot; a problem with several running costs raises
        (use :attr:`running_models` or :attr:`cost_groups`)."""
        groups = self.structure.cost_groups
        if len(groups) == 1:
            return groups[0].item
        raise ValueError(f"this problem has {len(groups)} different running costs; reach them through "
                         f"problem.running_models[t].cost")

    @property
    def dynamics(self) -> IntegratedModel:
        """The integrated model shared by every knot; a problem with several dynamics groups
        (different dt, integrator or dynamics kind) raises (use :meth:`knot_dynamics`)."""
        if len(self.dynamics_groups) == 1:
            return self.dynamics_groups[0].item
        raise ValueError(f"this problem has {len(self.dynamics_groups)} dynamics groups (different dt or dynamics "
                         f"per knot); use problem.knot_dynamics(t)")

    def knot_dynamics(self, t: int) -> IntegratedModel:
        """The integrated model of knot t (0 <= t < N)."""
        return self.structure.knot_dynamics[t]

    @property
    def integrator(self) -> str:
        names = {g.item.integrator for g in self.dynamics_groups}
        return names.pop() if len(names) == 1 else "mixed"

    # ------------------------------------------------------------ state, bounds (sizes: StateSizes)

    def _bound(self, name: str, b) -> np.ndarray:
        b = np.array(b, dtype=float)
        if b.shape != (self.model.nu,):
            raise ValueError(f"{name} has shape {b.shape}, expected ({self.model.nu},) (nu)")
        if np.any(np.isnan(b)):
            raise ValueError(f"{name} contains NaN; use ±inf for no bound")
        b.setflags(write=False)     # replaced, never changed in place: a solver keys what it derives on identity
        return b

    @property
    def has_bounds(self) -> bool:
        return bool(np.isfinite(self.u_lower).any() or np.isfinite(self.u_upper).any())

    def set_initial_state(self, x0) -> None:
        """Set the initial state (nx,) = (q, v)."""
        if type(x0) is np.ndarray and x0.dtype == np.float64 and x0.ndim == 1 and x0.shape[0] == self.nx \
                and sum_is_finite(x0):
            self.x0 = x0.copy()         # (what the checks below pass: a measured state every MPC update)
            return
        x0 = self.state.check(x0, "x0", "set_initial_state")
        if x0.shape != (self.nx,):
            raise ValueError(f"set_initial_state: x0 has shape {x0.shape}, expected ({self.nx},)")
        self.x0 = x0.copy()

    def clip_controls(self, u: np.ndarray) -> np.ndarray:
        """``u`` (..., nu) clipped to the bounds, a new array (np.clip's result, without its Python wrappers)."""
        return np.minimum(np.maximum(u, self.u_lower), self.u_upper)

    def gravity_compensation(self, q=None) -> np.ndarray:
        """Controls (nu,) that best cancel gravity at ``q`` (default: the initial configuration)."""
        q = self.x0[:self.model.nq] if q is None else q
        return gravity_compensation(self.model, self.backend, q)

    def default_controls(self) -> np.ndarray:
        """The controls (nu,) a solve starts from when given none: ``initial_controls`` when set
        (e.g. by a task that knows its equilibrium, such as a standing robot's torques under its
        contact forces), else gravity compensation at x0."""
        u = self.initial_controls
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
        t is None); NaN states where a candidate diverged or an impact lost rank."""
        dyn = self.dynamics if t is None else self.knot_dynamics(t)
        return dyn.step(x, u)

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
            xs[t + 1] = self.knot_dynamics(t).step(xs[t], us[t])
        return xs

    # ------------------------------------------------------------ costs
    def cost(self, xs, us) -> np.ndarray:
        """Total cost J (...) of trajectories xs (..., N+1, nx), us (..., N, nu)."""
        return self.costs.total(np.asarray(xs, float), np.asarray(us, float))

    def running_costs(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray:
        """``dt_t · l_t(x_t, u_t)`` for xs (..., N+1 or N, nx), us (..., N, nu): (..., N)."""
        return self.costs.running(xs, us)

    def terminal_costs(self, xN: np.ndarray) -> np.ndarray:
        """``l_N(x_N)`` for xN (..., nx): (...)."""
        return self.costs.terminal(xN)

    def _compiled_costs(self):
        return self.costs.compiled()

    def _cost_batched(self, xs: np.ndarray, us: np.ndarray) -> np.ndarray | None:
        return self.costs.total_batched(xs, us)

    def cost_derivatives(self, xs, us) -> tuple[CostDerivatives, CostDerivatives]:
        """Running (N knots, each scaled by its dt) and terminal (1 knot) cost derivatives in fresh
        arrays (the evaluation :meth:`derivatives` writes into a data object)."""
        xs, us = self.check_trajectory(xs, us, "cost_derivatives")
        run, term = CostDerivatives.zeros(self.horizon, self.ndx, self.nu), CostDerivatives.zeros(1, self.ndx, self.nu)
        self.costs.derivatives_into(xs, us, run, term)
        return run, term

    # ------------------------------------------------------------ derivatives
    def create_data(self, second_order: bool = True, max_candidates: int = 1) -> ProblemData:
        """The buffers for :meth:`derivatives` and the forward pass (one per solver), all
        allocated here. second_order: with DDP's second-order buffers (large: (N, R, nz, nz)
        factors); max_candidates: the most step sizes a forward pass rolls out at once."""
        return ProblemData(self, second_order, max_candidates)

    def derivatives(self, xs, us, second_order: bool = False, data: ProblemData | None = None,
                    checked: bool = False) -> ProblemDerivatives:
        """Cost and dynamics derivatives along a trajectory, written into ``data`` (from
        :meth:`create_data`; the returned arrays are its buffers, overwritten by the next call);
        None: into a data object made for this call. The dynamics derivatives of each dynamics
        group come from one batched backend call (plus one for the second-order terms).
        checked: xs (N+1, nx) and us (N, nu) are known to be finite float64 arrays of those shapes
        (a solver's own iterate, checked when the solve started): no re-check."""
        if not checked:
            xs, us = self.check_trajectory(xs, us, "derivatives")
        if data is None:
            data = self.create_data(second_order=second_order)
        elif data.problem is not self:
            raise ValueError("derivatives: data was created for another problem; use problem.create_data()")
        # dynamics first: a contact-force cost then reuses the contact solves of its knots
        solves = data.calc_dynamics(xs[:-1], us, second_order)
        self.costs.derivatives_into(xs, us, data.running, data.terminal, solves)
        return data.derivatives()
