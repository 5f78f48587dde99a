"""Running a study: plan the runs, skip unavailable backends (with the reason) and finished runs,
execute the rest, then write the table and the plots. Ctrl-C stops the runs in flight (their
temporary folders are discarded), writes the table of what is done and returns 130; running the
same study again resumes."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import store, table
from .config import StudyConfig
from .executors import Job, make_executor
from .plan import RunSpec, check_tasks, plan_runs, split_backends
from .plots import PlotsUnavailable, write_plots


@dataclass
class StudyOutcome:
    """What a :func:`run_study` call did: planned (every run of the study), already (finished before
    this call), ran (finished in this call), failed (run_id -> why), skipped (backend -> why),
    interrupted, files (table and plots written)."""

    planned: list[RunSpec] = field(default_factory=list)
    already: list[RunSpec] = field(default_factory=list)
    ran: list[RunSpec] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _log_tail(path: Path, n: int = 6) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    return " | ".join(lines[-n:]) or "(no output)"


def _describe_result(run_dir: Path) -> str:
    row = table.row_from_run(run_dir)
    hz = row["control_loop_hz"]
    parts = [f"{hz:.1f} Hz{' (sim)' if row['timing_source'] != 'measured' else ''}" if hz else "- Hz"]
    if row["tracking_metric"] and row["tracking_error_mean"] is not None:
        parts.append(f"{row['tracking_metric']} {row['tracking_error_mean']:.3g} {row['tracking_unit']}".rstrip())
    parts.append("SUCCESS" if row["success"] else ("FAILED" if row["status"] == "completed" else row["status"]))
    return ", ".join(parts)


def write_outputs(out: Path, specs: list[RunSpec] | None, skipped: dict[str, str], plots: bool,
                  config: dict | None = None) -> tuple[list[Path], list[str]]:
    """The table (of ``specs``' finished runs; None: every finished run in ``out``) and the plots."""
    rows = table.collect_rows(out, config)
    if specs is not None:
        ids = {s.run_id for s in specs}
        rows = [r for r in rows if r["run_id"] in ids]
    skipped_rows = [{"backend": b, "reason": why} for b, why in skipped.items()]
    files = table.write_table(out, rows, skipped_rows)
    notes = []
    if plots:
        try:
            files += write_plots(out, rows)
        except PlotsUnavailable as e:
            notes.append(f"no plots: {e}")
    return files, notes


def run_study(cfg: StudyConfig, dry_run: bool = False, stream=None) -> StudyOutcome:
    """Run (or resume) the study ``cfg``; progress lines go to ``stream`` (default: stderr). Raises
    ValueError for an unknown task or backend (before anything runs)."""
    def say(msg: str) -> None:
        print(msg, file=stream or sys.stderr, flush=True)

    res = StudyOutcome()
    check_tasks(cfg.tasks)
    available, res.skipped = split_backends(cfg.backends)
    for b, why in res.skipped.items():
        n = len(plan_runs(cfg, (b,)))
        say(f"study: skipping backend '{b}' ({n} runs): not available here: {why}")
    res.planned = plan_runs(cfg, available)
    out = Path(cfg.out)
    store.runs_dir(out).mkdir(parents=True, exist_ok=True)
    store.write_json_atomic(out / "study.json", {"config": cfg.to_dict(),
                                                 "skipped": [{"backend": b, "reason": w} for b, w in res.skipped.items()]})
    stale = store.clean_stale(out)
    if stale:
        say(f"study: removed {stale} unfinished run folder(s) left by an earlier, interrupted study")
    res.already = [s for s in res.planned if store.is_finished(out, s)]
    todo = [s for s in res.planned if not store.is_finished(out, s)]
    total = len(res.planned)
    if dry_run:
        say(f"study: {total} runs: {len(res.already)} done, {len(todo)} to run (dry run: nothing started)")
        for s in todo:
            say(f"  to run: {s.label()}")
        return res
    if not todo:
        say(f"study: all {total} runs already done in {out} (nothing to run); table and plots rebuilt")
    executor = None
    jobs: list[Job] = []
    if todo:
        executor = make_executor(cfg.executor, cfg.jobs, cfg.threads, cfg.address)
        say(f"study: {total} runs ({len(res.already)} already done, {len(todo)} to run) in {out}; "
            f"{executor.describe()}")
    done_count = len(res.already)
    t_start = time.perf_counter()
    try:
        if executor is not None:
            jobs = [Job(s, store.new_tmp_dir(out, s)) for s in todo]
            finished_now = 0
            for oc in executor.run(jobs):
                spec = oc.job.spec
                if (oc.job.tmp / "summary.json").is_file() and oc.returncode in (0, 1, 3):
                    final = store.commit(oc.job.tmp, out, spec, {"returncode": oc.returncode, "wall_s": oc.wall_s,
                                                                 "where": oc.where, "executor": executor.name})
                    res.ran.append(spec)
                    done_count += 1
                    what = _describe_result(final)
                else:
                    why = f"exit code {oc.returncode}: {_log_tail(oc.job.tmp / 'run.log')}"
                    res.failed[spec.run_id] = why
                    store.discard(oc.job.tmp)
                    what = f"FAILED to run ({why})"
                finished_now += 1
                elapsed = time.perf_counter() - t_start
                left = len(todo) - finished_now
                eta = f", about {elapsed / finished_now * left:.0f} s left" if left else ""
                say(f"study: [{done_count}/{total}] {spec.label()}: {what} ({oc.wall_s:.1f} s{eta})")
    except KeyboardInterrupt:
        res.interrupted = True
        in_flight = executor.cancel() if executor is not None else []
        for j in jobs:
            if j.tmp.exists():
                store.discard(j.tmp)
        say(f"\nstudy: interrupted: {done_count} of {total} runs done "
            f"({len(in_flight)} in flight discarded); run the same command again to resume")
    finally:
        if executor is not None:
            executor.close()
    try:
        res.files, res.notes = write_outputs(out, res.planned, res.skipped, cfg.plots, cfg.to_dict())
    except KeyboardInterrupt:
        res.interrupted = True
    for spec_id, why in res.failed.items():
        say(f"study: run {spec_id} failed: {why}")
    return res
