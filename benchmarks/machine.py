"""The machine block of every benchmark's JSON.

:func:`machine_info`: CPU model, core counts, platform, library versions (``versions.pinocchio``
is the Pinocchio that the anchors timed, ``versions.crocoddyl`` Crocoddyl's; ``None`` when not
importable), thread settings (environment variables, numba's pool, numpy's BLAS and libgomp's
worker wait), git commit, load average and a UTC timestamp. Other processes distort timings:
a run passes the load average it saw at its start (:func:`load_average`) and the block records
start and end.

A benchmark script calls ``dynamics.worker_wait.configure_worker_wait()`` itself, before anything
imports Pinocchio or Crocoddyl (they load libgomp); importing this module changes nothing.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("scipy", "numba", "mujoco", "pinocchio", "crocoddyl")
#: the newest Pinocchio release the dynamics anchors are meant to time. The ``test`` extra pins
#: 4.0.0 (Crocoddyl 3.2.1 needs it), so the dynamics benchmarks run in a separate virtual
#: environment for it (benchmarks/README.md, "Timing against the newest Pinocchio").
NEWEST_PINOCCHIO = "4.1.0"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
                    "NUMBA_THREADING_LAYER")


def library_versions(libraries: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """Python, numpy and each of ``libraries`` by import name (``None``: not importable here)."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in libraries:
        try:
            versions[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception:  # optional packages: absent (or broken) is fine
            versions[mod] = None
    return versions


def cpu_model() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def thread_settings() -> dict[str, Any]:
    """Thread-count variables, numba's thread pool, numpy's BLAS and libgomp's worker wait."""
    threads: dict[str, Any] = {k: os.environ.get(k) for k in THREAD_VARIABLES}
    try:
        import numba
        threads["numba_num_threads"] = numba.get_num_threads()
        threads["numba_config_num_threads"] = numba.config.NUMBA_NUM_THREADS
        try:
            threads["numba_threading_layer"] = numba.threading_layer()
        except ValueError:  # raised until a parallel numba function has run
            threads["numba_threading_layer"] = None
    except ImportError:
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        threads["numpy_blas"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # the layout of show_config differs across numpy versions; informational only
        threads["numpy_blas"] = None
    from dynamics.worker_threads import thread_policy_status
    from dynamics.worker_wait import worker_wait_status
    threads["worker_wait"] = worker_wait_status()
    try:
        threads["thread_policy"] = thread_policy_status()
    except ValueError as e:   # a bad MPC_ACCEL_THREADS: the run that uses it reports the error
        threads["thread_policy"] = str(e)
    return threads


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split("."):
        digits = "".join(c for c in p if c.isdigit()) if p else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def pinocchio_anchor(version: str | None) -> dict[str, Any]:
    """Which Pinocchio a run's anchor timed (``version``: ``pinocchio.__version__``, None: not
    importable), whether it is :data:`NEWEST_PINOCCHIO` or newer, and a line to print."""
    if version is None:
        return {"pinocchio_version": None, "newest_known": NEWEST_PINOCCHIO, "is_newest": False,
                "line": "anchor: Pinocchio not importable: no anchor timed"}
    newest = _version_tuple(version) >= _version_tuple(NEWEST_PINOCCHIO)
    line = f"anchor: Pinocchio {version}" + (
        "" if newest else f", older than the newest release {NEWEST_PINOCCHIO}: ratios are against an older "
                          "anchor (see benchmarks/README.md, 'Timing against the newest Pinocchio')")
    return {"pinocchio_version": version, "newest_known": NEWEST_PINOCCHIO, "is_newest": newest, "line": line}


def load_average() -> list[float] | None:
    """System load (1, 5, 15 min): other processes on the machine distort timings."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def git_commit() -> str | None:
    """HEAD of the checkout, ``-dirty`` when tracked files differ from it (None: no git here)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(load_start: list[float] | None = None) -> dict[str, Any]:
    """The ``machine`` block (module docstring). ``load_average_1_5_15min`` is the load now, or
    ``{"start": load_start, "end": now}`` when the run's starting load is given."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    load = load_average()
    return {"cpu_model": cpu_model(), "logical_cores": os.cpu_count(), "usable_cores": affinity,
            "platform": platform.platform(), "versions": library_versions(), "threads": thread_settings(),
            "git_commit": git_commit(),
            "load_average_1_5_15min": load if load_start is None else {"start": load_start, "end": load},
            "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
