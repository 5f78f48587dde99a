"""``mpc-accel``: run a receding-horizon controller on a task in MuJoCo and report how fast the
control loop runs and how well it tracks.

Subcommands: ``run`` (closed-loop simulation), ``study`` (sweep tasks × backends × horizons × solvers ×
latencies × seeds, one run per subprocess, resumable; see :mod:`mpc.study`), ``report`` (show a run's
summary or rebuild a study's table and plots), ``tasks`` (list tasks), ``backends`` (list dynamics
backends and whether each is available here). Also callable as ``python -m mpc``.
Exit codes: 0 success; 1 the run aborted (instability or solver failure) or failed at runtime;
2 bad arguments; 3 the run completed but the task's success criteria were not met (with
``--strict``). Bad arguments give a one-line message; an exception raised inside a task's or a
cost's code (or the solver) is shown with its traceback.

The report is built from the documented :class:`tasks.Task` interface only (``metrics``,
``metric_info``, ``evaluate``, ``events``, ``markers``), so every task gets the same table, JSON
and plots.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import traceback
from pathlib import Path

import numpy as np

import tasks
from dynamics import available_backends, default_backend_name, get_backend
from dynamics.backend import parse_backend_spec
from sim import plots, report
from sim.progress import make_progress
from sim.runner import MODES, simulate
from sim.video import render_video, sample_frames, video_unavailable
from sim.viewer import PassiveViewer, ViewerUnavailable, check_display

from .args import (latency_arg, nonnegative_float, nonnegative_int, positive_float, positive_int, push_arg,
                   task_arg)
from .controller import INTEGRATORS, LINE_SEARCHES, MPC, SECOND_ORDER, SOLVER_CLASSES, SOLVERS
from .study import ConfigError, StudyConfig, build_config, load_config, plan_runs, run_study, store
from .study.runner import write_outputs

EPILOG_MAIN = """\
examples:
  mpc-accel run iiwa-reach                         # the iiwa reaching demo, default settings
  mpc-accel run iiwa-reach --solver fddp --horizon 16 --mode realtime --out runs/iiwa --plot
  mpc-accel run my_module:MyTask                   # a task class you wrote (subclass of tasks.Task)
  mpc-accel run path/to/my_task.py:MyTask --duration 4
  mpc-accel tasks                                  # what can be run
  mpc-accel backends                               # which dynamics backends work on this machine
  mpc-accel study --tasks iiwa-reach,hyq-stand --backends numpy,numba,fpga-sim --horizons 16,32,64 \\
      --solvers ilqr,ddp --duration 4 --seeds 3 --out runs/study   # the MPC-rate study (resumable)
  mpc-accel study study.toml                       # the same, described in a TOML file
  mpc-accel report runs/study                      # rebuild a study's table and plots (or show a run)

Run 'mpc-accel run --help' / 'mpc-accel study --help' for every option."""

EPILOG_RUN = """\
timing modes:
  lockstep  the controller is updated every --update-every physics steps, whatever its compute
            time: reproducible, independent of the machine (default).
  realtime  a plan computed from the state at time t is applied only at t + (its measured compute
            time); meanwhile the previous plan keeps running. A slow solver/backend hurts control.

outputs (in --out): summary.json (control-loop rate, latency and per-stage split, constraint
violations, the task's metrics and its criteria with pass/fail), trajectory.npz, and with --plot
tracking.png (the task's metrics), torques.png, latency.png; with --video an MP4 (or GIF) rendered
offscreen.

the policy: between updates the command u = u_ff + K (x - x_ref) is saturated at the control
bounds, and the box-QP solvers zero the gains of controls clamped at a bound (--no-box: an
unconstrained QP, the command is still saturated).

examples:
  mpc-accel run iiwa-reach --solver ddp --backend numba --horizon 32 --mode lockstep --duration 8 \\
      --out runs/iiwa --plot --video
  mpc-accel run iiwa-reach --mode realtime --update-every 5 --iterations 2
  mpc-accel run iiwa-reach --solver ddp --second-order analytical --integrator rk4 --max-iter 3 --tol 1e-8
  mpc-accel run my_module:MyTask --dt 0.02 --horizon 25"""


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (and exit code 2) instead of usage + error."""
    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


#: the seeded initial-state noise of ``run --seed N`` (N > 0): σ of the hinge/slide joint positions
#: [rad or m] and velocities [rad/s or m/s]. The tasks themselves are deterministic, so this is what
#: a study's seeds vary.
SEED_SIGMA_Q = 0.01
SEED_SIGMA_V = 0.05


def perturbed_initial_state(model, x0, seed: int):
    """``x0`` (nq+nv,) with seeded noise on the hinge/slide joints (see :data:`SEED_SIGMA_Q`,
    :data:`SEED_SIGMA_V`); seed 0 returns ``x0`` unchanged. A free base keeps its pose and velocity
    (moving it would put a legged robot's feet into or above the ground)."""
    x = np.array(x0, dtype=float)
    if seed == 0:
        return x
    rng = np.random.default_rng(seed)
    qi, vi = np.asarray(model.scalar_q_index, int), np.asarray(model.scalar_v_index, int)
    q = x[:model.nq]
    q[qi] = np.clip(q[qi] + rng.normal(0.0, SEED_SIGMA_Q, qi.size), model.q_lower[qi], model.q_upper[qi])
    x[model.nq + vi] += rng.normal(0.0, SEED_SIGMA_V, vi.size)
    return x


def task_run_defaults(task) -> "tasks.RunDefaults":
    """The controller settings a task (class or instance) is tuned for: its ``defaults``, the
    base :class:`tasks.Task`'s for a user task that declares none."""
    d = getattr(task, "defaults", None)
    if not isinstance(d, tasks.RunDefaults):
        raise TypeError(f"task '{getattr(task, 'name', task)}': 'defaults' must be a tasks.RunDefaults, got "
                        f"{type(d).__name__}")
    return d


def _task_defaults_text() -> str:
    """The 'task defaults' block of ``run --help``: each registered task's tuned settings."""
    rows = []
    for name in tasks.list_tasks():
        try:
            rows.append(f"  {name:<17} {_defaults_line(tasks.resolve_task(name))}")
        except TypeError as e:
            rows.append(f"  {name:<17} ({e})")
    return ("task defaults (what --solver, --horizon, --dt and --update-every are when not given; the update\n"
            "period goes with the task's dt: with --dt alone the controller updates once per knot):\n"
            + "\n".join(rows))


def run_settings(a: argparse.Namespace, task, physics_dt: float) -> tuple[str, int, float, int, list[str]]:
    """``(solver, horizon, dt, update_every, from_task)``: the options given on the command line, the
    task's :class:`tasks.RunDefaults` for the others (``from_task`` names those; a missing
    ``--iterations`` is set on ``a`` from the task's). The task's update
    period is used only with its own dt (a given ``--dt`` means one update per knot, as before)."""
    d = task_run_defaults(task)
    from_task = [k for k in ("solver", "horizon", "dt") if getattr(a, k) is None]
    solver = a.solver if a.solver is not None else d.solver
    horizon = a.horizon if a.horizon is not None else d.horizon
    dt = a.dt if a.dt is not None else d.dt
    if a.update_every is not None:
        update_every = a.update_every
    elif a.dt is None:
        update_every = max(1, int(round(d.period / physics_dt)))
        from_task.append("update period")
    else:
        update_every = max(1, int(round(dt / physics_dt)))
    if solver not in SOLVERS:
        raise ValueError(f"task '{getattr(task, 'name', task)}' declares solver '{solver}' as its default; "
                         f"choose one of {', '.join(SOLVERS)}")
    if getattr(a, "iterations", 1) is None:      # the namespace carries it on (summary, controller)
        a.iterations = d.iterations
        from_task.append("iterations")
    return solver, horizon, dt, update_every, from_task


def build_parser() -> argparse.ArgumentParser:
    default_backend = default_backend_name()

    p = _Parser(prog="mpc-accel", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_MAIN,
                description="Real-time nonlinear MPC (DDP/iLQR/FDDP) on MuJoCo robots, with batched rigid-body "
                            "dynamics derivatives. Runs a controller in closed loop and reports how fast the "
                            "control loop runs and how well it tracks.")
    sub = p.add_subparsers(dest="command", metavar="{run,study,report,tasks,backends}")
    r = sub.add_parser("run", help="run a task in closed loop (MPC + MuJoCo) and report",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=EPILOG_RUN + "\n\n" + _task_defaults_text(),
                       description="Simulate a task with the MPC controller in the loop and write a report.")
    r.add_argument("task", help="registered task name (see 'mpc-accel tasks'), 'module:Class' or 'file.py:Class'")
    r.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE", type=task_arg,
                   help="keyword argument for the task's constructor (repeatable), e.g. --task-arg reach_time=1.0")
    r.add_argument("--robot", default=None, metavar="NAME_OR_MJCF",
                   help="robot of a task that takes one (arm-reach, quadruped-stand, ...): a bundled name or an "
                        "MJCF path")
    r.add_argument("--ee", default=None, metavar="FRAME",
                   help="end-effector frame (a site or body) of a reaching task (arm-reach)")
    r.add_argument("--feet", default=None, metavar="F1,F2,...",
                   help="contact frames (sites or bodies) of a legged task, comma-separated")
    r.add_argument("--push", action="append", default=[], metavar="T,BODY,FX,FY,FZ,DURATION", type=push_arg,
                   help="push a body in the simulator (repeatable): at T s, force (FX, FY, FZ) N in world axes "
                        "for DURATION s, for tasks that take pushes (e.g. --push 2.5,trunk,0,200,0,0.2)")
    g = r.add_argument_group("controller")
    g.add_argument("--solver", choices=list(SOLVERS), default=None,
                   help="optimal-control solver (default: the task's, see 'task defaults' below)")
    g.add_argument("--backend", default=default_backend,
                   help=f"dynamics backend (see 'mpc-accel backends'; default here: {default_backend} — numba, "
                        f"compiled, when numba imports, else numpy, the slow reference); options as "
                        f"NAME:key=value,..., e.g. fpga-sim:emulate=gradients or gpu:host=python")
    g.add_argument("--horizon", type=positive_int, default=None, help="number of knots N (default: the task's)")
    g.add_argument("--dt", type=positive_float, default=None, help="knot spacing in seconds (default: the task's)")
    g.add_argument("--iterations", "--max-iter", dest="iterations", type=positive_int, default=None,
                   help="solver iterations per update: the most a solve runs (it stops earlier when --tol is "
                        "met; the maximum with --time-budget; default: the task's, 1 for most)")
    g.add_argument("--time-budget", type=positive_float, default=None, metavar="SECONDS",
                   help="wall-clock budget per update; stop iterating when the next iteration would exceed it")
    g.add_argument("--initial-iterations", type=positive_int, default=50,
                   help="iterations of the first solve, before the clock starts (default: 50)")
    g.add_argument("--tol", type=nonnegative_float, default=1e-6,
                   help="a solve stops when the projected gradient norm of the cost is below this (0: always "
                        "run every iteration; default: 1e-6)")
    g.add_argument("--no-feedback", action="store_true",
                   help="apply only the feed-forward plan between updates (no Riccati gains), for comparison")
    g.add_argument("--refresh-gains", action="store_true",
                   help="after the last iteration of an update, re-linearise at the accepted trajectory and "
                        "recompute the gains (one more derivative stage and backward pass per update; default "
                        "off: the gains of the update's last backward pass, as in Crocoddyl-based MPC)")
    g.add_argument("--no-box", action="store_true",
                   help="solve without the control bounds (unconstrained QP in the backward pass); the command "
                        "is still saturated at the actuator limits")
    g.add_argument("--line-search", choices=list(LINE_SEARCHES), default="backtracking",
                   help="backtracking: one rollout per step size, largest first; parallel: all step sizes "
                        "rolled out as one batch (default: backtracking)")
    g.add_argument("--integrator", choices=list(INTEGRATORS), default="euler",
                   help="discretisation of the dynamics in the problem: euler (semi-implicit) or rk4 "
                        "(default: euler)")
    g.add_argument("--second-order", choices=list(SECOND_ORDER), default="auto",
                   help="where DDP gets the second derivatives of the dynamics: analytical, fd (central "
                        "differences), complex (complex step; numpy backend only) or auto (analytical when the backend has them, "
                        "else fd); ignored by ilqr and fddp (default: auto)")
    g.add_argument("--samples", type=positive_int, default=None, metavar="K",
                   help="sampling planners (sampling, mppi, cem): rollouts per iteration (default: 64)")
    g.add_argument("--noise", type=positive_float, default=None, metavar="SIGMA",
                   help="sampling planners: exploration noise relative to each control's half range, or to each "
                        "joint's half range with the default PD set-point policy (default: 0.02)")
    g.add_argument("--rollout", choices=("model", "mujoco"), default=None,
                   help="sampling planners: roll samples out with the problem's dynamics (model, default) or "
                        "with MuJoCo and its contacts (mujoco; no contact schedule needed, e.g. hyq-stand)")
    g.add_argument("--rollout-threads", type=positive_int, default=None, metavar="N",
                   help="sampling planners with --rollout mujoco: MuJoCo rollouts stepped on N threads (default: 1)")
    s = r.add_argument_group("simulation")
    s.add_argument("--mode", choices=list(MODES), default="lockstep", help="timing mode (default: lockstep)")
    s.add_argument("--no-latency-compensation", action="store_true",
                   help="realtime mode: plan from the measured state as is (default: predict the state at "
                        "the time the plan will be applied, with the model, and plan from there)")
    s.add_argument("--latency", type=latency_arg, default=None, metavar="measured|fixed:20ms",
                   help="realtime mode: charge each update its measured compute time (default), or a fixed one "
                        "(fixed:20ms, fixed:0.05s) to ask 'what if an update took X' on any machine")
    s.add_argument("--update-every", type=positive_int, default=None, metavar="STEPS",
                   help="physics steps between controller updates (default: the task's update period with the "
                        "task's dt; one knot, dt / physics step, when --dt is given)")
    s.add_argument("--duration", type=positive_float, default=None, metavar="SECONDS",
                   help="simulated seconds (default: the task's duration)")
    s.add_argument("--seed", type=nonnegative_int, default=0, metavar="N",
                   help="perturb the initial state: seed 0 (default) is the task's own initial state; seed N "
                        f"> 0 adds seeded normal noise to the hinge/slide joints (positions σ = {SEED_SIGMA_Q:g} "
                        f"rad or m, clipped to the joint limits; velocities σ = {SEED_SIGMA_V:g} rad/s or m/s; "
                        "a free base is left as is)")
    o = r.add_argument_group("output")
    o.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder (default: runs/<task>)")
    o.add_argument("--plot", action="store_true", help="write PNG plots (needs matplotlib)")
    o.add_argument("--video", action="store_true", help="render an MP4/GIF offscreen (needs OpenGL: EGL/OSMesa)")
    o.add_argument("--fps", type=positive_float, default=30.0, help="video frame rate (default: 30)")
    o.add_argument("--viewer", action="store_true", help="show the simulation in MuJoCo's viewer (needs a display)")
    o.add_argument("--json", action="store_true", help="print the JSON summary instead of the table")
    o.add_argument("--quiet", action="store_true", help="no progress display")
    o.add_argument("--strict", action="store_true", help="exit with code 3 when the task's success criteria fail")
    _add_study_parser(sub)
    rp = sub.add_parser("report", help="show a run's summary, or rebuild a study's table and plots",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_REPORT,
                        description="Read stored results: a run folder (summary.json) prints its summary table; "
                                    "a study folder (study.json, runs/) rebuilds results.csv/json/md and the plots.")
    rp.add_argument("path", type=Path, metavar="DIR", help="a run's --out folder or a study's --out folder")
    rp.add_argument("--no-plots", action="store_true", help="study: do not write the plots")
    sub.add_parser("tasks", help="list the registered tasks", description="List the registered tasks.")
    sub.add_parser("backends", help="list dynamics backends and whether each is available here",
                   description="List dynamics backends and whether each is available on this machine.")
    return p


EPILOG_STUDY = """\
every combination of --tasks x --backends x --solvers x --horizons x --latency x seeds is run, one
run per subprocess ('mpc-accel run ... --seed K' in a fresh Python), --jobs at a time (default 1:
timing fidelity), each with its thread pools pinned (--threads). Backends that are not available
here are skipped with the reason ('mpc-accel backends'). Finished runs are kept in OUT/runs/ and
not redone: run the same command again to resume (after Ctrl-C, a crash or a new axis value).

seeds: the tasks are deterministic; seed 0 is the task's initial state, seed K > 0 adds seeded
noise to the joint positions/velocities (see 'mpc-accel run --help', --seed).

outputs (in --out): results.csv, results.json, results.md (one row per run: its configuration and
the measured control-loop frequency, per-stage update times, tracking error, success, ...; see
docs/study.md), plots/rate_vs_horizon.png, plots/tracking_vs_rate.png, plots/stages.png (needs
matplotlib), runs/<run id>/ (each run's summary.json and trajectory.npz).

a TOML file takes the same keys as the flags (tasks, backends, horizons, solvers, mode, duration,
seeds, latency, dt, iterations, initial-iterations, out, jobs, threads, executor, address, plots);
flags given on the command line override it.

examples:
  mpc-accel study --tasks iiwa-reach,hyq-stand --backends numpy,numba,fpga-sim --horizons 16,32,64 \\
      --solvers ilqr,ddp --duration 4 --seeds 3 --out runs/study
  mpc-accel study --tasks iiwa-reach --backends numba --horizons 16,32 --mode realtime \\
      --latency measured,fixed:20ms,fixed:60ms --out runs/latency
  mpc-accel study study.toml --jobs 2               # a TOML file; two runs at once, each on its own core
  mpc-accel study study.toml --executor ray --address ray://head:10001   # on a Ray cluster
  mpc-accel study study.toml --dry-run              # what would run (and what is already done)
  mpc-accel report runs/study                       # rebuild the table and plots"""

EPILOG_REPORT = """\
examples:
  mpc-accel report runs/iiwa          # a run folder: print its summary table
  mpc-accel report runs/study         # a study folder: rebuild results.csv/json/md and plots/"""


def _add_study_parser(sub) -> None:
    st = sub.add_parser("study", help="sweep tasks x backends x horizons x solvers (resumable), table + plots",
                        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG_STUDY,
                        description="The MPC-rate study: run every combination of tasks, backends, horizons, "
                                    "solvers, latencies and seeds in closed loop and collect one table and plots.")
    st.add_argument("config", nargs="?", type=Path, default=None, metavar="CONFIG.toml",
                    help="a study described in a TOML file (same keys as the flags)")
    g = st.add_argument_group("what to sweep (comma-separated lists)")
    g.add_argument("--tasks", default=None, metavar="T1,T2", help="tasks (see 'mpc-accel tasks')")
    g.add_argument("--backends", default=None, metavar="B1,B2", help="dynamics backends (see 'mpc-accel backends')")
    g.add_argument("--horizons", default=None, metavar="N1,N2", help="horizons in knots, e.g. 16,32,64")
    g.add_argument("--solvers", default=None, metavar="S1,S2", help="ilqr, ddp, fddp (default: ilqr)")
    g.add_argument("--latency", default=None, metavar="L1,L2",
                   help="realtime mode: measured (default) and/or fixed:<time>, e.g. measured,fixed:20ms")
    g.add_argument("--seeds", default=None, metavar="K", help="seeds per combination: 0..K-1 (default: 1)")
    r = st.add_argument_group("each run")
    r.add_argument("--mode", default=None, metavar="lockstep|realtime", help="timing mode (default: lockstep)")
    r.add_argument("--duration", default=None, metavar="SECONDS", help="simulated seconds (default: the task's)")
    r.add_argument("--dt", default=None, metavar="SECONDS", help="knot spacing (default: 0.01)")
    r.add_argument("--iterations", default=None, metavar="K", help="solver iterations per update (default: 1)")
    r.add_argument("--initial-iterations", default=None, metavar="K",
                   help="iterations of the first solve, before the clock starts (default: 50)")
    e = st.add_argument_group("execution and output")
    e.add_argument("--out", default=None, metavar="DIR", help="study folder (default: runs/study)")
    e.add_argument("--jobs", default=None, metavar="J", help="runs at once (default: 1, for timing fidelity)")
    e.add_argument("--threads", default=None, metavar="T", help="threads per run (default: cores // jobs)")
    e.add_argument("--executor", default=None, metavar="local|ray",
                   help="local subprocesses (default) or a Ray cluster (pip install 'mpc-accel[cluster]')")
    e.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address (default: a local Ray)")
    e.add_argument("--no-plots", dest="plots", action="store_const", const=False, default=None,
                   help="do not write the plots")
    e.add_argument("--dry-run", action="store_true", help="list the runs still to do, run nothing")


def cmd_study(a: argparse.Namespace) -> int:
    flags = {k: getattr(a, k) for k in ("tasks", "backends", "horizons", "solvers", "latency", "seeds", "mode",
                                        "duration", "dt", "iterations", "initial_iterations", "out", "jobs",
                                        "threads", "executor", "address", "plots")}
    try:
        cfg = load_config(a.config, flags)
    except ConfigError as e:
        return _fail(str(e).removeprefix("study: "))
    try:
        res = run_study(cfg, dry_run=a.dry_run)
    except (ValueError, RuntimeError) as e:   # unknown task/backend, Ray missing: before any run
        return _fail(str(e).removeprefix("study: "))
    except KeyboardInterrupt:                  # while planning: nothing started
        print("\nmpc-accel: study interrupted before any run started", file=sys.stderr)
        return 130
    if a.dry_run:
        return 0
    md = Path(cfg.out) / "results.md"
    if md.is_file() and not res.interrupted:
        print(md.read_text(), end="")
    for n in res.notes:
        print(f"note: {n}")
    if res.files:
        print("files: " + ", ".join(str(f) for f in res.files))
    if res.interrupted:
        return 130
    done = len(res.already) + len(res.ran)
    print(f"study: {done} of {len(res.planned)} runs done ({len(res.ran)} now, {len(res.already)} before)"
          + (f"; {len(res.failed)} failed (run again to retry)" if res.failed else "")
          + (f"; skipped backends: {', '.join(res.skipped)}" if res.skipped else ""), file=sys.stderr)
    return 1 if res.failed else 0


def cmd_report(a: argparse.Namespace) -> int:
    path = a.path
    if (path / "summary.json").is_file():
        print(report.format_summary(json.loads((path / "summary.json").read_text())))
        return 0
    if not store.is_study_dir(path):
        return _fail(f"'{path}' holds neither a run (summary.json) nor a study (study.json, runs/)")
    config, skipped, specs = None, {}, None
    if (path / "study.json").is_file():
        meta = json.loads((path / "study.json").read_text())
        config = meta.get("config")
        skipped = {s["backend"]: s["reason"] for s in meta.get("skipped", [])}
        try:
            cfg: StudyConfig = build_config({k: v for k, v in config.items() if v is not None})
            specs = plan_runs(cfg, tuple(b for b in cfg.backends if b not in skipped))
        except Exception:  # noqa: BLE001 — an older or hand-edited study.json: take every finished run
            specs = None
    files, notes = write_outputs(path, specs, skipped, plots=not a.no_plots, config=config)
    print((path / "results.md").read_text(), end="")
    for n in notes:
        print(f"note: {n}")
    print("files: " + ", ".join(str(f) for f in files))
    return 0


def _fail(message: str, code: int = 2) -> int:
    print(f"mpc-accel: error: {message}", file=sys.stderr)
    return code


def _defaults_line(task_class) -> str:
    """The task's tuned settings followed by the solvers that task options switch to (the class's
    ``solver_switches()`` rows), e.g. ``fddp, horizon 20 x 20 ms, ... (solver csqp with cones=hard)``."""
    text = task_run_defaults(task_class).describe()
    switches = getattr(task_class, "solver_switches", None)
    rows = tuple(switches()) if callable(switches) else ()
    if not rows:
        return text
    alt = ", ".join(f"solver {solver} with {option}" for option, solver in rows)
    return f"{text} ({alt})"


def cmd_tasks() -> int:
    for name, desc in tasks.list_tasks().items():
        print(f"{name:<16} {desc}")
        try:
            print(f"{'':<16}   defaults: {_defaults_line(tasks.resolve_task(name))}")
        except TypeError as e:
            print(f"{'':<16}   defaults: ({e})")
    print("\nuser tasks: mpc-accel run module:Class  or  mpc-accel run path/to/file.py:Class "
          "(a subclass of tasks.Task)")
    return 0


def cmd_backends() -> int:
    default = default_backend_name()
    for name, (ok, why) in available_backends().items():
        mark = "*" if name == default else " "
        print(f"{mark} {name:<10} {'available  ' if ok else 'unavailable'}  {why}")
    print(f"\n* default: {default} (used by 'mpc-accel run', mpc.MPC and Task.build_problem when no backend is "
          f"named: numba when it imports here, else numpy)")
    return 0


def _task_class(spec: str) -> type:
    """The task class a spec names. One that names nothing usable raises :class:`_ArgError` (one
    line); an error importing the task's own module, :class:`_UserCodeError` with its traceback."""
    try:
        return tasks.resolve_task(spec)
    except tasks.TaskCodeError as e:
        raise _UserCodeError(str(e)) from e.__cause__
    except (KeyError, ValueError, FileNotFoundError, AttributeError, TypeError, ImportError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise _ArgError(msg if spec in msg else f"task '{spec}': {msg}") from e


def _load_task(spec: str, kwargs: dict | None = None):
    """Build the task. A spec that names nothing usable, or --task-arg keys the constructor does
    not take, raise :class:`_ArgError` (one line); what the task's own code raises (importing its
    module, its constructor) propagates as :class:`_UserCodeError` with the original traceback."""
    kwargs = kwargs or {}
    cls = _task_class(spec)
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as e:
        raise _ArgError(f"task '{spec}': {e} (check --task-arg)") from e
    except ValueError:
        pass  # no signature to check: let the constructor decide
    try:
        return cls(**kwargs)
    except (ValueError, KeyError, FileNotFoundError) as e:
        if cls.__module__.split(".")[0] == "tasks":
            # a bundled task rejecting its robot or arguments (frame not found, no torque limits, ...):
            # the message names the problem and the fix; a traceback into our code would not help
            raise _ArgError(f"task '{spec}': {e.args[0] if isinstance(e, KeyError) and e.args else e}") from e
        raise _UserCodeError(f"task '{spec}': its constructor raised {type(e).__name__}: {e}") from e
    except Exception as e:
        raise _UserCodeError(f"task '{spec}': its constructor raised {type(e).__name__}: {e}") from e


class _UserCodeError(Exception):
    """An exception raised inside the task's (or a cost's) code; shown with its traceback."""


def _report_user_error(e: BaseException, what: str) -> int:
    """Print the traceback of ``e`` (the cause of a :class:`_UserCodeError`) and one summary line; exit code 1."""
    inner = e.__cause__ if isinstance(e, _UserCodeError) and e.__cause__ is not None else e
    traceback.print_exception(type(inner), inner, inner.__traceback__, file=sys.stderr)
    msg = str(e) if isinstance(e, _UserCodeError) else f"{type(e).__name__}: {e}"
    print(f"mpc-accel: error: {what}: {msg} (traceback above)", file=sys.stderr)
    return 1


class _ArgError(Exception):
    pass


def _check_backend(name: str):
    """The backend of ``--backend`` (a name, or ``name:key=value,...`` with options)."""
    table = available_backends()
    try:
        base = parse_backend_spec(name)[0]      # "fpga-sim:emulate=gradients" -> "fpga-sim"
    except ValueError as e:
        raise _ArgError(str(e)) from e
    if base not in table:
        raise _ArgError(f"unknown backend '{base}'; known backends: {', '.join(table)}")
    ok, why = table[base]
    if not ok:
        avail = [k for k, (a, _) in table.items() if a]
        raise _ArgError(f"backend '{base}' is not available here: {why}; available: {', '.join(avail)}")
    try:
        return get_backend(name)
    except (TypeError, ValueError) as e:
        raise _ArgError(f"backend '{name}': {e}") from e


def _dynamics_second_order_sources(ctrl) -> list[str]:
    """Where DDP's second-order dynamics term comes from on the knots of ``ctrl``'s problem now, in
    words, one entry per kind of knot (free, contact, impulse)."""
    return list(dict.fromkeys(str(g.item.second_order_source) for g in ctrl.problem.dynamics_groups))


def _second_order_sources(ctrl, at_start: list[str]) -> dict:
    """The summary's ``second_order``: whether the solver uses second-order dynamics terms (DDP,
    FDDP with second_order=True) and their sources on the knots of the problem at the start and the
    end of the run (a re-phased problem, e.g. a trot, has contact and impulse knots)."""
    uses = bool(getattr(ctrl.solver, "uses_second_order", False))
    sources = list(dict.fromkeys(at_start + _dynamics_second_order_sources(ctrl))) if uses else []
    return {"used": uses, "sources": sources}


def _penalty_cones_for_solver(task, solver: str | None, task_args: dict) -> str | None:
    """The note for a legged task whose hard cones come from its default (``--task-arg cones`` not
    given) run with an explicit solver that refuses constraints (fddp, ddp, ilqr, ...): that run
    takes the penalty cones (``cones=penalty``) instead; None when nothing changes. An explicit
    ``cones=hard`` with such a solver stays an error (``cmd_run``). task: the task or its class
    (the class's field default is the task's default)."""
    if solver is None or getattr(task, "cones", None) != "hard" or "cones" in task_args:
        return None
    if getattr(SOLVER_CLASSES.get(solver), "handles_constraints", False):
        return None
    return (f"--solver {solver} does not enforce constraints: task '{task.name}' runs with its contact-force "
            f"cones as penalty costs (cones=penalty) instead of its default hard cones; drop --solver or give "
            f"--solver csqp for the hard cones")


def cmd_run(a: argparse.Namespace, on_result=None) -> int:
    """``mpc-accel run``. on_result: optional ``f(result, summary)`` called with the
    :class:`sim.runner.SimResult` and the summary dict before the summary is written (the study's
    worker adds its columns there)."""
    try:
        backend = _check_backend(a.backend)
        task_args = dict(a.task_arg)
        for key, val in (("robot", a.robot), ("ee", a.ee), ("feet", a.feet), ("pushes", tuple(a.push) or None)):
            if val is not None:
                task_args[key] = val
        # decided on the class, so the task is built once (a computed posture costs seconds)
        cone_note = _penalty_cones_for_solver(_task_class(a.task), a.solver, task_args)
        if cone_note is not None:       # the task with the cones as costs, which that solver can take
            task_args["cones"] = "penalty"
        task = _load_task(a.task, task_args)
        model = task.model
        h = float(model.mj_model.opt.timestep)
        try:
            a.solver, a.horizon, a.dt, update_every, from_task = run_settings(a, task, h)
        except (TypeError, ValueError) as e:
            raise _ArgError(str(e)) from e
        constrained = getattr(SOLVER_CLASSES.get(a.solver), "handles_constraints", False)
        if getattr(task, "wall_plane", None) is not None and not constrained:
            raise _ArgError(f"task '{a.task}': the wall is a hard constraint and only --solver csqp or alddp enforces it "
                            f"(got --solver {a.solver}); drop --solver to use the task's default (csqp)")
        if getattr(task, "cones", None) == "hard" and not constrained:
            raise _ArgError(f"task '{a.task}': cones=hard are constraints and only --solver csqp or alddp enforces them "
                            f"(got --solver {a.solver}); drop --solver to use csqp, or give --task-arg "
                            f"cones=penalty (the cones as costs) to run --solver {a.solver}")
        duration = a.duration if a.duration is not None else float(getattr(task, "duration", 0) or 0)
        if duration <= 0:
            raise _ArgError(f"task '{a.task}' has no duration; give --duration SECONDS")
        if a.second_order == "complex" and not backend.complex_step_safe:
            raise _ArgError(f"--second-order complex needs a complex-step-safe backend (numpy), not "
                            f"'{backend.name}'; use --second-order fd, or --backend numpy")
        if a.second_order == "analytical" and not backend.supports("aba_second_derivatives"):
            raise _ArgError(f"--second-order analytical: backend '{backend.name}' has no analytical second "
                            f"derivatives; use --second-order auto or fd")
        if a.viewer:
            try:
                check_display()
            except ViewerUnavailable as e:
                raise _ArgError(str(e)) from e
    except _ArgError as e:
        return _fail(str(e))
    except _UserCodeError as e:
        return _report_user_error(e, "the task's code failed")

    out = a.out if a.out is not None else Path("runs") / str(getattr(task, "name", "task")).replace("/", "_")
    config = {**({"task_args": {k: v for k, v in task_args.items()}} if task_args else {}),
              **({"rollout": a.rollout} if a.rollout else {}),
              **({"rollout_threads": a.rollout_threads} if a.rollout_threads else {}), "solver": a.solver,
              "backend": a.backend, "horizon": a.horizon, "dt": a.dt, "iterations": a.iterations,
              "time_budget": a.time_budget, "tol": a.tol, "mode": a.mode, "update_every": update_every,
              "duration": duration, "feedback": not a.no_feedback, "box": not a.no_box,
              "refresh_gains": a.refresh_gains, "line_search": a.line_search, "integrator": a.integrator,
              "second_order": a.second_order, "samples": a.samples, "noise": a.noise,
              "latency": "measured" if a.latency is None else f"fixed {a.latency * 1e3:g} ms",
              "latency_compensation": a.mode == "realtime" and not a.no_latency_compensation,
              "seed": a.seed, "task_defaults_used": ", ".join(from_task) or None}
    say = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr))
    if cone_note is not None:
        say(f"mpc-accel: note: {cone_note}")
    try:
        # builds the task's problem: its costs and build_problem run here
        ctrl = MPC(task, solver=a.solver, backend=backend, horizon=a.horizon, dt=a.dt,
                   iterations_per_update=a.iterations, time_budget=a.time_budget,
                   initial_iterations=a.initial_iterations, feedback=not a.no_feedback, tol=a.tol,
                   refresh_gains=a.refresh_gains, box=not a.no_box, line_search=a.line_search,
                   integrator=a.integrator, second_order=a.second_order,
                   solver_options={k: v for k, v in (("samples", a.samples), ("noise", a.noise),
                                                     ("rollout", a.rollout), ("rollout_threads", a.rollout_threads))
                                   if v is not None},
                   latency_compensation=(None if a.mode != "realtime" or a.no_latency_compensation
                                         else "auto" if a.latency is None else a.latency))
    except Exception as e:  # noqa: BLE001 — the task's build_problem, its costs or the solver set-up
        return _report_user_error(e, f"setting up the controller for task '{task.name}' failed")
    show = not (a.quiet or a.json)
    video_missing = video_unavailable() if a.video else None
    if video_missing is not None:
        say(f"mpc-accel: --video: no video will be made ({video_missing}); the run goes on without it")
    if backend.prefers_compiled_solver and show:   # a compiled backend: its kernels compile on the first run
        say("mpc-accel: loading the compiled kernels (the first run on a machine compiles them: "
            "only the kernels this run uses, about a minute on 2 cores; cached on disk afterwards)")

    def warmup_progress(label: str, done: int, total: int | None) -> None:
        # total None: the backend compiles what the run uses, as it first runs it (count not known)
        head = f"compiling kernel {done}" if total is None else f"kernels {done}/{total}"
        print(f"\r  {head}: {label:<40}", end="", file=sys.stderr, flush=True)

    sources_at_start = _dynamics_second_order_sources(ctrl)
    try:
        warmup_s = ctrl.warmup(progress=warmup_progress if show else None)
    except Exception as e:  # noqa: BLE001 — a throw-away solve: the task's costs run here too
        if show:
            print(file=sys.stderr)
        return _report_user_error(e, "warming up the controller failed")
    if show:
        print(f"\r  kernels ready{'':<50}", file=sys.stderr, flush=True)
    say(f"mpc-accel: {task.name}: backend '{backend.name}' warm-up {warmup_s:.2f} s")
    callbacks = []
    progress, close_progress = make_progress(duration, enabled=not (a.quiet or a.json))
    if progress is not None:
        callbacks.append(progress)
    viewer = None
    try:
        if a.viewer:
            viewer = PassiveViewer(model.mj_model)
            callbacks.append(viewer)
        x0 = perturbed_initial_state(model, task.initial_state(), a.seed)
        result = simulate(model, ctrl, x0, duration, mode=a.mode, update_every=update_every,
                          callbacks=tuple(callbacks), disturbances=task.disturbances(), latency=a.latency)
    except Exception as e:  # noqa: BLE001 — the first solve (task costs), the viewer, a callback
        close_progress()
        return _report_user_error(e, "the run failed")
    finally:
        if viewer is not None:
            viewer.close()
    close_progress()

    try:
        metrics = report.metric_series(task, result)
        summary = report.summarize(result, task, metrics, config=config, warmup_s=warmup_s)
    except Exception as e:  # noqa: BLE001 — task.metrics / task.evaluate
        return _report_user_error(e, f"evaluating the run with task '{task.name}' failed")
    summary["second_order"] = _second_order_sources(ctrl, sources_at_start)
    files = [report.write_summary(summary, out / "summary.json"),
             report.write_trajectory(result, out / "trajectory.npz", metrics)]
    notes = []
    if a.plot:
        try:
            events = list(task.events(result.sim_time) or [])
            files.append(plots.plot_metrics(result, metrics, out / "tracking.png", info=report.metric_info(task),
                                            events=events))
            files.append(plots.plot_torques(result, out / "torques.png", events=events))
            files.append(plots.plot_latency(result, out / "latency.png"))
        except plots.PlotsUnavailable as e:
            notes.append(f"no plots: {e}")
    if a.video:
        idx, _ = sample_frames(result.t, result.x, a.fps)
        markers = task.markers(result.t[idx])
        if video_missing is None:
            say("mpc-accel: rendering video ...")
        outcome = render_video(model.mj_model, result.x[idx, :model.nq], out / "video", fps=a.fps, markers=markers)
        if outcome.path is not None:
            files.append(outcome.path)
        else:
            notes.append(outcome.message)
    summary["files"] = [str(f) for f in files]
    summary["notes"] = ([cone_note] if cone_note is not None else []) + notes
    if on_result is not None:
        on_result(result, summary)
    report.write_summary(summary, out / "summary.json")
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        print(report.format_summary(summary))
        for n in notes:
            print(f"note: {n}")
        print("files: " + ", ".join(str(f) for f in files))
    if result.error_traceback:
        print(result.error_traceback, end="", file=sys.stderr)
        print(f"mpc-accel: error: the run aborted: {result.aborted} (traceback above)", file=sys.stderr)
    if result.aborted == "interrupted":
        print(f"mpc-accel: interrupted at t = {result.sim_time:.3f} s; wrote what was simulated "
              f"(summary marked interrupted)", file=sys.stderr)
        return 130
    if not result.completed:
        return 1
    if a.strict and not summary.get("success"):
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mpc-accel`` console script and ``python -m mpc``."""
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command is None:
        parser.print_help()
        return 2
    if a.command == "tasks":
        return cmd_tasks()
    if a.command == "backends":
        return cmd_backends()
    if a.command == "study":
        return cmd_study(a)
    if a.command == "report":
        return cmd_report(a)
    try:
        return cmd_run(a)
    except KeyboardInterrupt:   # before the closed loop started (warm-up, first solve): nothing to keep
        print("\nmpc-accel: interrupted before the closed loop started; nothing written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
