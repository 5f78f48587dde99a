"""The study's tidy table: one row per finished run, its configuration columns then its measured
columns, read back from the stored run folders (so ``mpc-accel report`` rebuilds it any time).

Written as ``results.csv`` (empty cell: no value), ``results.json`` (``{"columns", "units", "rows",
"skipped"}``; null: no value) and ``results.md`` (a markdown table of the main columns).
Column units are in :data:`UNITS` and in docs/study.md.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

from sim.report import STAGES

from . import store

CONFIG_COLUMNS = ("run_id", "task", "backend", "solver", "horizon", "dt_s", "mode", "latency", "seed",
                  "duration_s", "iterations")
MEASURED_COLUMNS = (
    "status", "success", "criteria_passed", "criteria_judged",
    "control_loop_hz", "control_loop_hz_wall", "update_ms_median", "update_ms_p95",
    *(f"{s}_ms" for s in STAGES), "other_ms", "accel_simulated_ms",
    "stage_times", "timing_source", "latency_source",
    "tracking_metric", "tracking_error_mean", "tracking_error_final", "tracking_unit",
    "torque_limit_steps", "joint_limit_steps", "plan_exhausted_steps", "fallback_updates",
    "updates", "iterations_per_update", "sim_time_s", "wall_time_s", "warmup_s", "initial_solve_s", "run_dir")
COLUMNS = CONFIG_COLUMNS + MEASURED_COLUMNS

UNITS = {"horizon": "knots", "dt_s": "s", "duration_s": "s", "control_loop_hz": "Hz", "control_loop_hz_wall": "Hz",
         "update_ms_median": "ms", "update_ms_p95": "ms", **{f"{s}_ms": "ms" for s in (*STAGES, "other")},
         "accel_simulated_ms": "ms", "tracking_error_mean": "tracking_unit", "tracking_error_final": "tracking_unit",
         "torque_limit_steps": "physics steps", "joint_limit_steps": "physics steps",
         "plan_exhausted_steps": "physics steps", "sim_time_s": "s", "wall_time_s": "s", "warmup_s": "s",
         "initial_solve_s": "s"}


def tracking_metric(summary: dict) -> str | None:
    """The task's main tracking-error metric: the first summarised metric named ``*error*`` (iiwa-reach:
    ``ee_error``, hyq-stand: ``height_error``), else the first summarised metric."""
    names = list(summary.get("tracking") or {})
    errs = [n for n in names if "error" in n]
    return (errs or names or [None])[0]


def _num(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def row_from_run(run_dir: Path) -> dict:
    """The table row of a finished run folder (spec.json + summary.json)."""
    run_dir = Path(run_dir)
    spec = json.loads((run_dir / "spec.json").read_text())
    s = json.loads((run_dir / "summary.json").read_text())
    tm = s.get("timing") or {}
    emu = s.get("emulation")
    stage = tm.get("stage_ms") or {}
    lat = tm.get("update_latency_ms") or {}
    crit = (s.get("evaluation") or {}).get("criteria") or []
    judged = [c for c in crit if c.get("passed") is not None]
    metric = tracking_metric(s)
    track = (s.get("tracking") or {}).get(metric) or {}
    cons = s.get("constraints") or {}
    if s.get("completed"):
        status = "completed"
    else:
        status = "interrupted" if s.get("aborted") == "interrupted" else f"aborted: {s.get('aborted')}"
    if spec["mode"] != "realtime":
        latency_source = "none (lockstep: plans apply at once)"
    elif spec["latency"] != "measured":
        latency_source = f"fixed {spec['latency'][6:]}"
    elif emu is not None:
        latency_source = "simulated (accelerator calls at the backend's hardware model) + measured host"
    else:
        latency_source = "measured"
    row = {
        "run_id": run_dir.name, "task": spec["task"], "backend": spec["backend"], "solver": spec["solver"],
        "horizon": spec["horizon"], "dt_s": spec["dt"], "mode": spec["mode"], "latency": spec["latency"],
        "seed": spec["seed"], "duration_s": _num(tm.get("sim_time_s")) if spec["duration"] is None else spec["duration"],
        "iterations": spec["iterations"],
        "status": status, "success": s.get("success"),
        "criteria_passed": sum(bool(c["passed"]) for c in judged), "criteria_judged": len(judged),
        "control_loop_hz": (emu or {}).get("control_loop_hz_modelled", tm.get("control_loop_hz")),
        "control_loop_hz_wall": tm.get("control_loop_hz"),
        "update_ms_median": ((emu or {}).get("update_ms_modelled") or lat).get("median"),
        "update_ms_p95": ((emu or {}).get("update_ms_modelled") or lat).get("p95"),
        **{f"{st}_ms": stage.get(st) for st in (*STAGES, "other")},
        "accel_simulated_ms": (emu or {}).get("simulated_ms_per_update"),
        "stage_times": "emulated" if emu is not None else "measured",
        "timing_source": "simulated accelerator + measured host" if emu is not None else "measured",
        "latency_source": latency_source,
        "tracking_metric": metric, "tracking_error_mean": track.get("mean"), "tracking_error_final": track.get("final"),
        "tracking_unit": (s.get("tracking_units") or {}).get(metric, "") if metric else "",
        "torque_limit_steps": (cons.get("torque_limit") or {}).get("violation_steps"),
        "joint_limit_steps": (cons.get("joint_limit") or {}).get("violation_steps"),
        "plan_exhausted_steps": tm.get("plan_exhausted_steps"), "fallback_updates": tm.get("fallback_updates"),
        "updates": tm.get("updates"), "iterations_per_update": tm.get("iterations_per_update"),
        "sim_time_s": tm.get("sim_time_s"), "wall_time_s": tm.get("wall_time_s"), "warmup_s": tm.get("warmup_s"),
        "initial_solve_s": tm.get("initial_solve_s"), "run_dir": str(Path("runs") / run_dir.name),
    }
    return {k: _num(row.get(k)) for k in COLUMNS}


def _order(row: dict, tasks: list, backends: list) -> tuple:
    def idx(seq, v):
        return seq.index(v) if v in seq else len(seq)
    return (idx(tasks, row["task"]), row["task"], idx(backends, row["backend"]), row["backend"], row["solver"],
            row["horizon"], row["latency"], row["seed"])


def collect_rows(out: Path, config: dict | None = None) -> list[dict]:
    """Rows of every finished run in ``out``, in the configuration's order (task, backend, solver,
    horizon, latency, seed)."""
    rows = [row_from_run(d) for d in store.finished_run_dirs(out)]
    cfg = config or {}
    return sorted(rows, key=lambda r: _order(r, list(cfg.get("tasks", [])), list(cfg.get("backends", []))))


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else r[k] for k in COLUMNS})
    return buf.getvalue()


MD_COLUMNS = ("task", "backend", "solver", "horizon", "latency", "seed", "status", "success", "control_loop_hz",
              "update_ms_median", *(f"{s}_ms" for s in STAGES), "accel_simulated_ms", "tracking_error_mean",
              "tracking_unit", "torque_limit_steps", "joint_limit_steps")


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def to_markdown(rows: list[dict], columns=MD_COLUMNS) -> str:
    """A markdown table of ``columns``; fpga-sim stage times are marked ``*`` (host emulation time)."""
    head = [f"{c} [{UNITS[c]}]" if c in UNITS and UNITS[c] != "tracking_unit" else c for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = []
        for c in columns:
            cell = _fmt(r.get(c))
            if r.get("stage_times") == "emulated" and c in {f"{s}_ms" for s in STAGES}:
                cell += "*"
            if r.get("timing_source", "measured") != "measured" and c in ("control_loop_hz", "update_ms_median",
                                                                          "accel_simulated_ms"):
                cell += " (sim)"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    if any(r.get("stage_times") == "emulated" for r in rows):
        lines.append("")
        lines.append("\\* host time of the fixed-point emulation (measured), not the accelerator's; (sim): the "
                     "emulated calls charged at the backend's hardware model (simulated), the rest measured.")
    return "\n".join(lines) + "\n"


def write_table(out: Path, rows: list[dict], skipped: list[dict] | None = None) -> list[Path]:
    """results.csv, results.json and results.md in ``out`` (each written then renamed)."""
    out = Path(out)
    files = []
    for name, text in (("results.csv", to_csv(rows)), ("results.md", to_markdown(rows))):
        tmp = out / f".{name}.partial"
        tmp.write_text(text)
        os.replace(tmp, out / name)
        files.append(out / name)
    files.append(store.write_json_atomic(out / "results.json", {"columns": list(COLUMNS), "units": UNITS,
                                                                "rows": rows, "skipped": skipped or []}))
    return files
