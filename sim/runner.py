"""Closed-loop simulation: a controller in the loop of a MuJoCo scene stepped at the physics rate.

Two timing modes:

* ``lockstep`` — the controller is updated every ``update_every`` physics steps from the state
  measured at that step, and its plan is applied from that same step on. Simulated time does not
  depend on compute time, so runs are reproducible (tests use this mode).
* ``realtime`` — the plan computed from the state at time ``t`` is applied only from
  ``t + latency`` on (``latency`` = measured wall-clock compute time of the update, rounded up to
  whole physics steps); until then the previous plan keeps being applied. The controller is busy
  while it computes, so the next update starts at ``max(t + latency, t + update period)``. A slow
  controller therefore acts on older states and applies its plans later, as on a robot.

Between updates the active plan's feedback law (``plan.control(t, x)``) is evaluated at every
physics step. That command is what the controller asks for (an MPC plan saturates it at its box
itself, see :class:`mpc.Plan`); the runner then clips it to the actuator limits, as the actuators
would, and the report counts commands that had to be clipped. The first plan is computed before
the simulation clock starts (``controller.start``). An exception raised by the controller (or by
the task's costs inside it) ends the run: ``aborted`` says why and ``error_traceback`` holds the
traceback.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Protocol

import mujoco
import numpy as np

from dynamics.inputs import sum_is_finite
from dynamics.model import RobotModel
from dynamics.mujoco_state import ActuatorMap, read_state, write_state


MODES = ("lockstep", "realtime")


class ControlLaw(Protocol):
    """What a controller update returns: a control law valid until the next update."""

    info: dict

    def control(self, t: float, x: np.ndarray) -> np.ndarray:
        """The commanded actuator forces (nu,) at simulation time ``t`` [s] for the measured state
        ``x`` (a law that respects the limits saturates them itself)."""


class Controller(Protocol):
    """A receding-horizon controller as the simulator sees it."""

    def start(self, t: float, x: np.ndarray) -> ControlLaw:
        """First plan from the initial state (may iterate to convergence; not timed into the loop)."""

    def update(self, t: float, x: np.ndarray) -> ControlLaw:
        """New plan from the state ``x`` measured at time ``t``."""


@dataclass
class UpdateLog:
    """One controller update. Times in s: ``t_measured`` (sim time of the state it used),
    ``t_applied`` (sim time from which its plan was applied, None if never), ``latency`` (wall time of
    the update call), ``info`` (the plan's bookkeeping: stage timings, iterations, cost)."""

    t_measured: float
    t_applied: float | None
    latency: float
    info: dict = field(default_factory=dict)


@dataclass
class SimResult:
    """Everything a run produced. Arrays are per physics step ``k`` (time ``t[k] = k·physics_dt``):
    ``x`` the measured state (T, nq+nv) at the start of the step, ``u_cmd`` the controller's command
    (T, nu), ``u`` the applied actuator forces (T, nu): the command clipped to the actuator limits,
    ``plan_age`` the time since the state the active plan was computed from (T,) [s].
    ``aborted``: why the run stopped early (None when it completed); ``error_traceback``: the
    formatted traceback when an exception stopped it."""

    model: RobotModel
    mode: str
    physics_dt: float
    update_every: int
    t: np.ndarray
    x: np.ndarray
    u_cmd: np.ndarray
    u: np.ndarray
    plan_age: np.ndarray
    updates: list[UpdateLog]
    initial: UpdateLog
    wall_time: float
    plan_exhausted_steps: int = 0
    aborted: str | None = None
    error_traceback: str | None = None

    @property
    def sim_time(self) -> float:
        """Simulated time covered [s]."""
        return len(self.t) * self.physics_dt

    @property
    def completed(self) -> bool:
        return self.aborted is None


StepCallback = Callable[[int, float, mujoco.MjData], None]


def simulate(model: RobotModel, controller: Controller, x0, duration: float, *, mode: str = "lockstep",
             update_every: int = 10, mj_model: mujoco.MjModel | None = None,
             callbacks: tuple[StepCallback, ...] = (), max_speed: float = 1e3, disturbances=(),
             latency: float | None = None) -> SimResult:
    """Run ``controller`` in closed loop on the MuJoCo scene of ``model`` for ``duration`` seconds.

    x0: initial state (nq+nv,) in model conventions; mode: ``"lockstep"`` or ``"realtime"``;
    update_every: physics steps between update starts (the update period; in ``realtime`` the period
    is stretched when an update takes longer); mj_model: the scene (default ``model.mj_model``);
    callbacks: called as ``cb(step, t, data)`` after each physics step (progress, viewer);
    max_speed: a joint speed [rad/s or m/s] above which the run is declared unstable and stopped;
    disturbances: :class:`tasks.Disturbance` pushes (force at a body's origin, world axes) applied
    through MuJoCo's ``xfrc_applied`` while active; latency: in ``realtime`` mode, charge every
    update this fixed compute time [s] instead of the measured one ("what if an update took X"),
    independent of this machine.

    Ctrl-C (KeyboardInterrupt) ends the run cleanly: the result holds the steps simulated so far
    and ``aborted = "interrupted"``. While no fresh plan is available the last plan keeps running;
    past its horizon it holds its final knot with its final feedback gains (:class:`mpc.plan.Plan`),
    saturated at the actuator limits, and the steps spent so are counted in ``plan_exhausted_steps``."""
    if mode not in MODES:
        raise ValueError(f"unknown mode '{mode}'; choose one of {', '.join(MODES)}")
    if not (isinstance(duration, (int, float)) and math.isfinite(duration) and duration > 0):
        raise ValueError(f"duration must be a positive number of seconds, got {duration!r}")
    if not (isinstance(update_every, (int, np.integer)) and update_every >= 1):
        raise ValueError(f"update_every must be a positive integer number of physics steps, got {update_every!r}")
    m = model.mj_model if mj_model is None else mj_model
    if m.nq != model.nq or m.nv != model.nv:
        raise ValueError(f"MuJoCo scene (nq={m.nq}, nv={m.nv}) does not match the model "
                         f"(nq={model.nq}, nv={model.nv}); load both from the same MJCF")
    h = float(m.opt.timestep)
    d = mujoco.MjData(m)
    write_state(model, d, x0)
    mujoco.mj_forward(m, d)
    act = ActuatorMap.for_model(model, m)
    pushes = []
    for p in disturbances:
        bid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, p.body)
        if bid < 0:
            raise ValueError(f"disturbance on unknown body '{p.body}' of the MuJoCo scene")
        pushes.append((p.t, p.t + p.duration, bid, np.asarray(p.force, float)))
    n_steps = int(round(duration / h))
    nx = model.nq + model.nv
    T_x = np.zeros((n_steps, nx))
    T_ucmd = np.zeros((n_steps, model.nu))
    T_u = np.zeros((n_steps, model.nu))
    T_age = np.zeros(n_steps)
    updates: list[UpdateLog] = []

    x = read_state(model, d)
    w0 = time.perf_counter()
    active = controller.start(0.0, x)
    initial = UpdateLog(0.0, 0.0, time.perf_counter() - w0, dict(getattr(active, "info", {}) or {}))
    active_log, active_t = initial, 0.0
    pending: tuple[object, UpdateLog, int] | None = None
    next_start = update_every
    exhausted = 0
    aborted = None
    error_tb = None
    k = 0
    wall0 = time.perf_counter()
    recorded = 0
    try:
        for k in range(n_steps):
            t = k * h
            x = read_state(model, d)
            if not sum_is_finite(x) or np.abs(x[model.nq:]).max() > max_speed:
                aborted = f"unstable: state non-finite or a joint speed above {max_speed:g} at t = {t:.3f} s"
                break
            try:
                if mode == "lockstep":
                    if k == next_start:
                        w = time.perf_counter()
                        plan = controller.update(t, x)
                        log = UpdateLog(t, t, time.perf_counter() - w, dict(getattr(plan, "info", {}) or {}))
                        updates.append(log)
                        active, active_log, active_t = plan, log, t
                        next_start = k + update_every
                else:
                    if pending is not None and k >= pending[2]:
                        active, active_log = pending[0], pending[1]
                        active_log.t_applied = t
                        active_t = active_log.t_measured
                        pending = None
                    if pending is None and k >= next_start:
                        w = time.perf_counter()
                        plan = controller.update(t, x)
                        lat = time.perf_counter() - w
                        info = dict(getattr(plan, "info", {}) or {})
                        if latency is not None:
                            info["measured_latency_s"] = lat
                            lat = float(latency)
                        elif info.get("simulated_s") is not None:
                            # an emulated accelerator: charge its modelled time, not the host's emulation
                            info["measured_latency_s"] = lat
                            lat = max(0.0, lat - info["emulation_wall_s"] + info["simulated_s"])
                        log = UpdateLog(t, None, lat, info)
                        updates.append(log)
                        ready = k + max(1, math.ceil(lat / h - 1e-9))
                        pending = (plan, log, ready)
                        next_start = max(ready, k + update_every)
                u_cmd = np.asarray(active.control(t, x), float)
            except Exception as e:  # a failing solver or task cost ends the run; the report says why
                aborted = f"controller failed at t = {t:.3f} s: {type(e).__name__}: {e}"
                error_tb = traceback.format_exc()
                break
            if hasattr(active, "exhausted") and active.exhausted(t):
                exhausted += 1
            u = np.minimum(np.maximum(u_cmd, model.u_lower), model.u_upper)   # np.clip, without its overhead
            T_x[k], T_ucmd[k], T_u[k], T_age[k] = x, u_cmd, u, t - active_t
            act.apply(d, u)
            if pushes:
                d.xfrc_applied[:] = 0.0
                for t0, t1, bid, f in pushes:
                    if t0 <= t < t1:
                        d.xfrc_applied[bid, :3] += f
            mujoco.mj_step(m, d)
            recorded = k + 1
            for cb in callbacks:
                cb(k, t + h, d)
    except KeyboardInterrupt:   # Ctrl-C: keep what was simulated; the caller writes it
        aborted = "interrupted"
    wall = time.perf_counter() - wall0
    n = recorded  # steps recorded (state, command and applied control stored)
    return SimResult(model=model, mode=mode, physics_dt=h, update_every=int(update_every),
                     t=np.arange(n) * h, x=T_x[:n], u_cmd=T_ucmd[:n], u=T_u[:n], plan_age=T_age[:n],
                     updates=updates, initial=initial, wall_time=wall, plan_exhausted_steps=exhausted,
                     aborted=aborted, error_traceback=error_tb)
