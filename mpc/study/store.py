"""The study folder on disk, and what counts as a finished run.

Layout of ``out/``::

    study.json                  the configuration and the skipped backends (with the reason)
    runs/<run_id>/              one finished run: spec.json (its configuration), run.json (exit code,
                                executor, wall time), summary.json and trajectory.npz (``mpc-accel run``'s
                                files), run.log (its output)
    runs/.<run_id>.tmp-<pid>-<n>/   a run in progress (or left by a killed study): never read
    results.csv / results.json / results.md   the table (:mod:`mpc.study.table`)
    plots/*.png                 the plots (:mod:`mpc.study.plots`)

A run is written into its temporary folder and renamed to ``runs/<run_id>`` only once it has
finished and its summary is complete, so a study killed outright (SIGKILL, power cut) never leaves
a folder that a resume would take as finished: ``runs/<run_id>/spec.json`` and ``summary.json``
both exist only after the rename.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

from .plan import RunSpec

_counter = itertools.count()


def runs_dir(out: Path) -> Path:
    return Path(out) / "runs"


def run_dir(out: Path, spec: RunSpec) -> Path:
    return runs_dir(out) / spec.run_id


def is_finished(out: Path, spec: RunSpec) -> bool:
    """A finished run of exactly this configuration is stored (its folder was renamed into place)."""
    d = run_dir(out, spec)
    try:
        return (d / "summary.json").is_file() and json.loads((d / "spec.json").read_text()) == spec.config()
    except (OSError, ValueError):
        return False


def new_tmp_dir(out: Path, spec: RunSpec) -> Path:
    d = runs_dir(out) / f".{spec.run_id}.tmp-{os.getpid()}-{next(_counter)}"
    d.mkdir(parents=True, exist_ok=False)
    return d


def commit(tmp: Path, out: Path, spec: RunSpec, run_info: dict) -> Path:
    """Move a finished run's temporary folder into place (``runs/<run_id>``), atomically."""
    (tmp / "spec.json").write_text(json.dumps(spec.config(), indent=2) + "\n")
    (tmp / "run.json").write_text(json.dumps(run_info, indent=2) + "\n")
    final = run_dir(out, spec)
    if final.exists():        # a stale result of the same id (e.g. spec.json unreadable): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)     # a directory rename is atomic on one file system
    return final


def discard(tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(out: Path) -> int:
    """Remove temporary run folders left by studies that are no longer running; how many."""
    n = 0
    d = runs_dir(out)
    if not d.is_dir():
        return 0
    for p in d.glob(".*.tmp-*"):
        try:
            pid = int(p.name.rsplit(".tmp-", 1)[1].split("-")[0])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid() or not _alive(pid):
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n


def finished_run_dirs(out: Path) -> list[Path]:
    """Every finished run folder of the study (sorted by name); temporary folders are ignored."""
    d = runs_dir(out)
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / "spec.json").is_file() and (p / "summary.json").is_file())


def is_study_dir(path: Path) -> bool:
    return (Path(path) / "study.json").is_file() or runs_dir(path).is_dir()


def write_json_atomic(path: Path, data) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path
