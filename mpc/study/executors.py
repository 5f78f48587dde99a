"""Where a study's runs execute: :class:`LocalExecutor` (a pool of subprocesses on this machine,
the default) or :class:`RayExecutor` (tasks on a Ray cluster; ``pip install 'mpc-accel[cluster]'``).

Each run is one fresh process, ``python -m mpc.study.worker`` (:mod:`mpc.study.worker`), so runs
never share compiled-kernel state, thread pools or memory. Its thread pools are pinned through the
environment (``NUMBA_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` = the run's thread count) and, when the local executor runs several at
once, each run is bound to its own CPUs (``sched_setaffinity``) so concurrent runs do not disturb
each other's timing. The default of one run at a time is what timing fidelity needs.

An executor's :meth:`run` yields an :class:`Outcome` per run as runs finish; :meth:`cancel` stops
the runs in flight (their temporary folders are then discarded by the caller).
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .plan import RunSpec

THREAD_ENV = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
RUN_FILES = ("summary.json", "trajectory.npz", "run.log")


@dataclass
class Job:
    """A run to execute; its files go to ``tmp`` (a temporary folder of the study)."""

    spec: RunSpec
    tmp: Path


@dataclass
class Outcome:
    """A finished run: returncode (``mpc-accel run``'s exit code; negative: killed by that signal),
    wall_s (the whole subprocess, start-up included) [s], where (host or Ray node)."""

    job: Job
    returncode: int
    wall_s: float
    where: str = ""


def project_root() -> Path:
    """The folder holding the ``mpc`` package (put on the runs' PYTHONPATH when it exists there)."""
    return Path(__file__).resolve().parents[2]


def run_env(threads: int, pythonpath: str | None = None) -> dict[str, str]:
    """The environment of a run: this one with pinned thread counts (and the project on PYTHONPATH)."""
    env = dict(os.environ)
    for k in THREAD_ENV:
        env[k] = str(int(threads))
    if pythonpath and Path(pythonpath).is_dir():
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def default_threads(jobs: int) -> int:
    return max(1, len(_cpus()) // max(1, jobs))


def _cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:       # not Linux
        return list(range(os.cpu_count() or 1))


def _child_setup(cpus: list[int] | None):
    """preexec_fn of a run: die with the parent (so a killed study or Ray worker leaves no run behind)
    and, with several runs at once, bind to this run's CPUs."""
    def setup():
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if cpus:
            try:
                os.sched_setaffinity(0, cpus)
            except (AttributeError, OSError):
                pass
    return setup


def _worker_cmd(spec_path: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "mpc.study.worker", str(spec_path), str(out)]


class LocalExecutor:
    """Runs on this machine, ``jobs`` at a time, each with ``threads`` threads (default: cores // jobs)."""

    name = "local"

    def __init__(self, jobs: int = 1, threads: int | None = None):
        self.jobs = max(1, int(jobs))
        self.threads = int(threads) if threads else default_threads(self.jobs)
        self._running: dict[int, tuple[subprocess.Popen, Job, float, int]] = {}

    def describe(self) -> str:
        pin = ", each on its own CPUs" if self.jobs > 1 else ""
        return f"local: {self.jobs} run(s) at a time, {self.threads} thread(s) per run{pin}"

    def _slot_cpus(self, slot: int) -> list[int] | None:
        if self.jobs == 1:
            return None
        cpus = _cpus()
        k = self.threads
        return [cpus[(slot * k + i) % len(cpus)] for i in range(k)]

    def run(self, jobs: list[Job]) -> Iterator[Outcome]:
        queue = list(jobs)
        env = run_env(self.threads, str(project_root()))
        free = list(range(self.jobs))
        while queue or self._running:
            while queue and free:
                job = queue.pop(0)
                slot = free.pop(0)
                spec_path = job.tmp / "spec.request.json"
                spec_path.write_text(json.dumps(job.spec.config()))
                log = open(job.tmp / "run.log", "w")
                proc = subprocess.Popen(_worker_cmd(spec_path, job.tmp), env=env, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True,   # a terminal Ctrl-C reaches the study only
                                        preexec_fn=_child_setup(self._slot_cpus(slot)))
                log.close()
                self._running[proc.pid] = (proc, job, time.perf_counter(), slot)
            done = [pid for pid, (p, *_) in self._running.items() if p.poll() is not None]
            if not done:
                time.sleep(0.05)
                continue
            for pid in done:
                proc, job, t0, slot = self._running.pop(pid)
                free.append(slot)
                (job.tmp / "spec.request.json").unlink(missing_ok=True)
                yield Outcome(job, proc.returncode, time.perf_counter() - t0, where="local")

    def cancel(self) -> list[Job]:
        """Stop the runs in flight (SIGTERM, then SIGKILL after 5 s); the jobs they were running."""
        jobs = []
        for proc, job, *_ in self._running.values():
            if proc.poll() is None:
                proc.terminate()
            jobs.append(job)
        deadline = time.time() + 5
        for proc, *_ in self._running.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._running.clear()
        return jobs

    def close(self) -> None:
        self.cancel()


def _ray_run(config: dict, env: dict, pythonpath: str) -> tuple[int, float, str, dict]:
    """A run on a Ray node, in a fresh subprocess there; returns (exit code, wall s, node, files)."""
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="mpc-study-"))
    try:
        spec_path = tmp / "spec.request.json"
        spec_path.write_text(json.dumps(config))
        e = dict(os.environ)
        e.update({k: v for k, v in env.items() if k in THREAD_ENV})
        if pythonpath and Path(pythonpath).is_dir():
            e["PYTHONPATH"] = os.pathsep.join([pythonpath, *([e["PYTHONPATH"]] if e.get("PYTHONPATH") else [])])
        with open(tmp / "run.log", "w") as log:
            rc = subprocess.call(_worker_cmd(spec_path, tmp), env=e, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, preexec_fn=_child_setup(None))
        files = {n: (tmp / n).read_bytes() for n in RUN_FILES if (tmp / n).is_file()}
        return rc, time.perf_counter() - t0, platform.node(), files
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class RayExecutor:
    """Runs as Ray tasks (each one subprocess on a node, its files sent back to this machine).
    address: a running cluster (``ray://host:10001`` or ``host:6379``; None starts a single-machine
    Ray here: ``ray.init(num_cpus=<cores>, include_dashboard=False)``). jobs: runs in flight at once;
    threads: threads per run, also the CPUs each Ray task reserves."""

    name = "ray"

    def __init__(self, address: str | None = None, jobs: int = 1, threads: int | None = None,
                 num_cpus: int | None = None):
        try:
            import ray      # optional (the cluster extra): only this executor needs it
        except ImportError:
            raise RuntimeError("the Ray executor needs ray: pip install 'mpc-accel[cluster]' (or pip install ray)") \
                from None
        self.ray = ray
        self.address = address
        self.jobs = max(1, int(jobs))
        self.threads = int(threads) if threads else default_threads(self.jobs)
        self._started = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=num_cpus or max(len(_cpus()), self.threads), include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
                self._started = True
        self._remote = ray.remote(num_cpus=self.threads, max_retries=0)(_ray_run)
        self._running: dict = {}

    def describe(self) -> str:
        where = self.address or "a single-machine Ray started here"
        return f"ray ({where}): {self.jobs} run(s) at a time, {self.threads} thread(s) per run"

    def run(self, jobs: list[Job]) -> Iterator[Outcome]:
        ray = self.ray
        queue = list(jobs)
        env = {k: str(self.threads) for k in THREAD_ENV}
        root = str(project_root())
        while queue or self._running:
            while queue and len(self._running) < self.jobs:
                job = queue.pop(0)
                ref = self._remote.remote(job.spec.config(), env, root)
                self._running[ref] = job
            ready, _ = ray.wait(list(self._running), num_returns=1, timeout=0.5)
            for ref in ready:
                job = self._running.pop(ref)
                try:
                    rc, wall, node, files = ray.get(ref)
                except Exception as e:  # noqa: BLE001 — a lost node or worker: report the run as failed
                    (job.tmp / "run.log").write_text(f"ray task failed: {type(e).__name__}: {e}\n")
                    yield Outcome(job, -1, 0.0, where="ray")
                    continue
                for name, data in files.items():
                    (job.tmp / name).write_bytes(data)
                yield Outcome(job, rc, wall, where=f"ray:{node}")

    def cancel(self) -> list[Job]:
        jobs = list(self._running.values())
        for ref in self._running:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 — already finished
                pass
        self._running.clear()
        return jobs

    def close(self) -> None:
        self.cancel()
        if self._started:
            self.ray.shutdown()


def make_executor(kind: str, jobs: int = 1, threads: int | None = None, address: str | None = None):
    if kind == "local":
        return LocalExecutor(jobs, threads)
    if kind == "ray":
        return RayExecutor(address, jobs, threads)
    raise ValueError(f"unknown executor '{kind}'; choose local or ray")
