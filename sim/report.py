"""Run reports: the JSON summary of a closed-loop run, the trajectory file, and the stdout table.

Summary fields (times in s unless the key says ms; forces in N m):

* timing — ``updates``, ``wall_time_s`` (the loop, physics included), ``control_loop_hz`` (updates
  per wall-clock second), ``update_latency_ms`` (median / p95 / max / mean of the wall time of
  each update), ``stage_ms`` (median per solver stage: derivatives, backward, forward, cost, and
  ``other`` = latency not inside the solver: problem set-up, warm start), ``stage_fraction``
  (share of the total update time), ``iterations_per_update``, ``real_time_factor`` (simulated /
  wall time), ``initial_solve_s``, ``warmup_s``, ``fallback_updates`` (solves that failed before
  their first iteration, so the previous plan was kept); in real-time mode ``plan_delay_ms``
  (time from the measured state to applying its plan);
* constraints — ``torque_limit`` (physics steps whose command had to be clipped, largest excess,
  per actuator) and ``joint_limit`` (steps with a joint outside its range, largest excess);
* ``tracking`` — each metric of ``task.metrics`` (mean / max / final; metrics marked
  ``summary=False`` in ``task.metric_info`` left out) and ``tracking_units`` (their units);
* ``evaluation`` — the task's :class:`tasks.Evaluation`: ``criteria`` (name, value, unit, passed,
  detail; ``passed: null`` for values reported but not judged), ``details`` (task-specific) and
  ``success``; ``success`` — the run completed and every judged criterion passed;
* ``task_notes`` — ``task.notes()``: what the task decided about its robot (e.g. where the
  standing posture came from, a floor added), printed under the first line of the table;
* ``second_order`` (written by ``mpc-accel run``) — ``used`` (the solver takes DDP's second-order
  dynamics terms) and ``sources`` (where they come from on each kind of knot, in words); the table
  says so plainly when a source is not analytical (contact and impulse knots: central differences
  of the first-order derivatives).

Only the documented :class:`tasks.Task` interface is used, so every task gets the same report.
JSON has no infinity: a value that is infinite (e.g. a target never reached) is ``null``.
"""

from __future__ import annotations

import json
import os
import math
from pathlib import Path

import numpy as np

from tasks.base import Evaluation, check_evaluation

from .runner import SimResult

STAGES = ("derivatives", "backward", "forward", "cost")


def jsonable(v):
    """numpy → Python, non-finite floats → None (strict JSON)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return jsonable(v.tolist())
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


def metric_series(task, result: SimResult) -> dict[str, np.ndarray]:
    """``task.metrics(t, x)`` at every recorded physics step: name -> (T,) array."""
    out: dict[str, list] = {}
    for t, x in zip(result.t, result.x):
        for k, val in (task.metrics(float(t), x) or {}).items():
            out.setdefault(k, []).append(float(val))
    return {k: np.asarray(v) for k, v in out.items()}


def _stats(a: np.ndarray) -> dict:
    if a.size == 0:
        return {"mean": None, "max": None, "final": None}
    return {"mean": float(np.mean(a)), "max": float(np.max(a)), "final": float(a[-1])}


def _timing(result: SimResult, warmup_s: float | None) -> dict:
    ups = result.updates
    lat = np.array([u.latency for u in ups])
    wall = result.wall_time
    out = {
        "updates": len(ups),
        "sim_time_s": result.sim_time,
        "wall_time_s": wall,
        "control_loop_hz": len(ups) / wall if wall > 0 else None,
        "real_time_factor": result.sim_time / wall if wall > 0 else None,
        "initial_solve_s": result.initial.latency,
        "warmup_s": warmup_s,
        "update_latency_ms": {"median": None, "p95": None, "max": None, "mean": None},
        "stage_ms": {},
        "stage_fraction": {},
        "iterations_per_update": None,
        "latency_source": "measured wall time",
    }
    if not ups:
        return out
    sim = [u.info.get("simulated_s") for u in ups if u.info.get("simulated_s") is not None]
    if sim and result.mode == "realtime":
        measured = np.array([u.info.get("measured_latency_s", np.nan) for u in ups])
        out["latency_source"] = ("simulated: the emulated accelerator calls charged at the backend's hardware model, "
                                 "the rest at measured wall time")
        out["measured_update_latency_ms"] = {"median": float(np.nanmedian(measured)) * 1e3,
                                             "max": float(np.nanmax(measured)) * 1e3}
        out["simulated_accelerator_ms_per_update"] = float(np.median(sim)) * 1e3
    out["update_latency_ms"] = {"median": float(np.median(lat)) * 1e3, "p95": float(np.percentile(lat, 95)) * 1e3,
                                "max": float(lat.max()) * 1e3, "mean": float(lat.mean()) * 1e3}
    stage = {s: np.array([float(u.info.get("timings", {}).get(s, 0.0)) for u in ups]) for s in STAGES}
    inside = sum(stage.values())
    stage["other"] = np.maximum(lat - inside, 0.0)
    total = float(lat.sum())
    out["stage_ms"] = {s: float(np.median(a)) * 1e3 for s, a in stage.items()}
    out["stage_fraction"] = {s: float(a.sum() / total) if total > 0 else None for s, a in stage.items()}
    its = [u.info.get("iterations") for u in ups if u.info.get("iterations") is not None]
    out["iterations_per_update"] = float(np.mean(its)) if its else None
    out["fallback_updates"] = int(sum(bool(u.info.get("fallback", False)) for u in ups))
    conv = [u.info.get("converged") for u in ups if "converged" in u.info]
    if conv:
        out["converged_fraction"] = float(np.mean(conv))
    if result.mode == "realtime":
        d = np.array([u.t_applied - u.t_measured for u in ups if u.t_applied is not None])
        out["plan_delay_ms"] = {"median": float(np.median(d)) * 1e3 if d.size else None,
                                "max": float(d.max()) * 1e3 if d.size else None}
        out["plans_never_applied"] = int(sum(u.t_applied is None for u in ups))
    out["plan_exhausted_steps"] = int(result.plan_exhausted_steps)
    return out


def _constraints(result: SimResult, tol: float = 1e-9) -> dict:
    m = result.model
    ucmd = result.u_cmd
    over = np.maximum(ucmd - m.u_upper, 0.0) + np.maximum(m.u_lower - ucmd, 0.0)
    viol = over > tol
    q = result.x[:, :m.nq]
    qexc = np.maximum(q - m.q_upper, 0.0) + np.maximum(m.q_lower - q, 0.0)  # inf limits give 0
    qviol = qexc > 1e-6
    return {
        "torque_limit": {
            "violation_steps": int(np.any(viol, axis=1).sum()) if viol.size else 0,
            "max_excess_Nm": float(over.max()) if over.size else 0.0,
            "per_actuator_steps": {str(m.actuator_names[j] or j): int(viol[:, j].sum()) for j in range(m.nu)},
            "note": "commands outside the actuator limits before clipping (the applied force is clipped)",
        },
        "joint_limit": {
            "violation_steps": int(np.any(qviol, axis=1).sum()) if qviol.size else 0,
            "max_excess": float(qexc.max()) if qexc.size else 0.0,
            "note": "physics steps with a joint beyond its range by more than 1e-6 (rad or m)",
        },
    }


def metric_info(task) -> dict:
    """``task.metric_info()`` (name -> :class:`tasks.MetricInfo`), {} when the task has none."""
    info = getattr(task, "metric_info", None)
    return dict(info() or {}) if callable(info) else {}


def summarize(result: SimResult, task=None, metrics: dict | None = None, config: dict | None = None,
              warmup_s: float | None = None) -> dict:
    """The JSON-ready summary of a run (see the module docstring for the fields)."""
    out: dict = {"task": getattr(task, "name", None), "config": dict(config or {}), "mode": result.mode,
                 "physics_dt_s": result.physics_dt, "update_every_steps": result.update_every,
                 "completed": result.completed, "aborted": result.aborted}
    out["timing"] = _timing(result, warmup_s)
    out["constraints"] = _constraints(result)
    evaluation = None
    if task is not None:
        metrics = metric_series(task, result) if metrics is None else metrics
        info = metric_info(task)
        shown = [k for k in metrics if getattr(info.get(k), "summary", True)]
        out["tracking"] = {k: _stats(metrics[k]) for k in shown}
        out["tracking_units"] = {k: getattr(info.get(k), "unit", "") for k in shown}
        evaluation = check_evaluation(task, task.evaluate(result.t, result.x, result.u_cmd)) if len(result.t) \
            else Evaluation()
        out["evaluation"] = evaluation.to_dict()
        notes = getattr(task, "notes", None)
        out["task_notes"] = [str(n) for n in (notes() or [])] if callable(notes) else []
    out["success"] = bool(result.completed and evaluation.success) if evaluation is not None else None
    return jsonable(out)


def _atomic(path: Path, write) -> Path:
    """Write through a temporary file in the same folder, then rename: a run killed mid-write never
    leaves a half-written result that looks finished."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial{path.suffix}")
    write(tmp)
    os.replace(tmp, path)
    return path


def write_summary(summary: dict, path: Path) -> Path:
    text = json.dumps(summary, indent=2, allow_nan=False) + "\n"
    return _atomic(path, lambda tmp: tmp.write_text(text))


def write_trajectory(result: SimResult, path: Path, metrics: dict | None = None) -> Path:
    """``.npz`` with per-step arrays ``t, q, v, x, u, u_cmd, plan_age``, per-update arrays
    ``update_t, update_t_applied`` (NaN: never applied), ``update_latency``,
    ``update_time_<stage>`` (solver stage times), ``update_iterations``, ``update_cost`` (the
    solver's final cost), and
    ``metric_<name>`` per task metric. Times in s."""
    m = result.model
    ups = result.updates
    arrays = {"t": result.t, "x": result.x, "q": result.x[:, :m.nq], "v": result.x[:, m.nq:], "u": result.u,
              "u_cmd": result.u_cmd, "plan_age": result.plan_age, "u_lower": m.u_lower, "u_upper": m.u_upper,
              "update_t": np.array([u.t_measured for u in ups]),
              "update_t_applied": np.array([np.nan if u.t_applied is None else u.t_applied for u in ups]),
              "update_latency": np.array([u.latency for u in ups]),
              "update_iterations": np.array([u.info.get("iterations", -1) for u in ups]),
              "update_cost": np.array([u.info.get("cost", np.nan) for u in ups], dtype=float)}
    for s in STAGES:
        arrays[f"update_time_{s}"] = np.array([float(u.info.get("timings", {}).get(s, np.nan)) for u in ups])
    for k, v in (metrics or {}).items():
        arrays[f"metric_{k}"] = np.asarray(v)
    return _atomic(path, lambda tmp: np.savez_compressed(tmp, **arrays))


def _fmt(v, spec: str, unit: str = "", none: str = "-") -> str:
    return none if v is None else f"{v:{spec}}{unit}"


def _fmt_value(v, unit: str) -> str:
    """A criterion's value with its unit (None: not measured / infinite in JSON)."""
    if v is None:
        return "-"
    return f"{v:.4g}" + (f" {unit}" if unit else "")


def format_summary(summary: dict) -> str:
    """A human-readable table of the summary (what the CLI prints)."""
    tm = summary["timing"]
    lines = []
    cfg = summary.get("config", {})
    head = " ".join(f"{k}={v}" for k, v in cfg.items() if v is not None)
    lines.append(f"task {summary.get('task')}  {head}")
    for note in summary.get("task_notes") or ():
        lines.append(f"  task: {note}")
    if not summary["completed"]:
        lines.append(f"RUN ABORTED: {summary['aborted']}")
    lat = tm["update_latency_ms"]
    lines.append(f"  control loop      {_fmt(tm['control_loop_hz'], '.1f', ' Hz')} ({tm['updates']} updates in "
                 f"{tm['wall_time_s']:.2f} s wall; {tm['sim_time_s']:.2f} s simulated, real-time factor "
                 f"{_fmt(tm['real_time_factor'], '.2f')})")
    lines.append(f"  update latency    median {_fmt(lat['median'], '.1f', ' ms')}, p95 {_fmt(lat['p95'], '.1f', ' ms')}, "
                 f"max {_fmt(lat['max'], '.1f', ' ms')}; {_fmt(tm['iterations_per_update'], '.2f')} iterations/update")
    if tm["stage_ms"]:
        split = ", ".join(f"{s} {tm['stage_ms'][s]:.1f} ms ({100 * (tm['stage_fraction'][s] or 0):.0f}%)"
                          for s in (*STAGES, "other"))
        lines.append(f"  per stage (median) {split}")
    extra = f"first solve {tm['initial_solve_s']:.2f} s"
    if tm.get("warmup_s") is not None:
        extra = f"backend warm-up {tm['warmup_s']:.2f} s, " + extra
    if "plan_delay_ms" in tm:
        extra += f"; plans applied {_fmt(tm['plan_delay_ms']['median'], '.1f', ' ms')} (median) after their state"
    lines.append(f"  set-up            {extra}")
    if tm.get("fallback_updates"):
        lines.append(f"  solver failures   {tm['fallback_updates']} updates failed before their first iteration "
                     f"(the previous plan was kept)")
    so = summary.get("second_order") or {}
    numerical = [src for src in so.get("sources") or () if not src.startswith("analytical")]
    if so.get("used") and numerical:
        lines.append(f"  DDP second order  {'; '.join(numerical)} (not analytical: slow; FDDP and iLQR need no "
                     f"second-order terms, e.g. --solver fddp)")
    c = summary["constraints"]
    lines.append(f"  constraints       torque-limit violations {c['torque_limit']['violation_steps']} steps "
                 f"(max excess {c['torque_limit']['max_excess_Nm']:.3g} N m); joint-limit violations "
                 f"{c['joint_limit']['violation_steps']} steps")
    units = summary.get("tracking_units") or {}
    for k, st in (summary.get("tracking") or {}).items():
        u = f" {units[k]}" if units.get(k) else ""
        lines.append(f"  {k:<17} mean {_fmt(st['mean'], '.4g')}, max {_fmt(st['max'], '.4g')}, "
                     f"final {_fmt(st['final'], '.4g')}{u}")
    ev = summary.get("evaluation") or {}
    crit = ev.get("criteria") or []
    if crit:
        width = max(len(c["name"]) for c in crit)
        lines.append(f"  {'criterion':<{width}}  {'value':<14} {'pass':<5} detail")
        for c in crit:
            val = _fmt_value(c["value"], c.get("unit", ""))
            ok = "-" if c["passed"] is None else ("yes" if c["passed"] else "NO")
            lines.append(f"  {c['name']:<{width}}  {val:<14} {ok:<5} {c.get('detail', '')}".rstrip())
    if summary.get("success") is None:
        verdict = "done (no task given)"
    elif not any(c["passed"] is not None for c in crit):
        verdict = ("SUCCESS" if summary["success"] else "FAILED") + " (the task judges no criteria)"
    else:
        failed = [c["name"] for c in crit if c["passed"] is False]
        verdict = "SUCCESS" if summary["success"] else "FAILED"
        if failed:
            verdict += f" ({len(failed)} of {sum(c['passed'] is not None for c in crit)} criteria failed: " \
                       f"{', '.join(failed)})"
        elif not summary["completed"]:
            verdict += " (the run did not complete)"
    lines.append(verdict)
    return "\n".join(lines)
