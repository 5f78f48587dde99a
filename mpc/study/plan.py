"""The runs of a study: every combination of the configuration's axes, as :class:`RunSpec`.

A run is identified by its configuration (:attr:`RunSpec.run_id`: readable fields plus a hash of
every field), so a resumed study finds the runs it already has, and a change of any setting
(duration, dt, ...) gives new runs rather than reusing results of another configuration.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass

import dynamics
import tasks
from dynamics.backend import parse_backend_spec

from .config import StudyConfig


@dataclass(frozen=True)
class RunSpec:
    """One closed-loop run of a study (the arguments of one ``mpc-accel run``). Times in s;
    latency: ``measured`` or ``fixed:<ms>ms``; duration None: the task's own."""

    task: str
    backend: str
    solver: str
    horizon: int
    mode: str
    latency: str
    seed: int
    duration: float | None
    dt: float
    iterations: int
    initial_iterations: int

    def config(self) -> dict:
        return asdict(self)

    @property
    def run_id(self) -> str:
        """``<task>_<backend>_<solver>_N<h>_<mode>[_<latency>]_s<seed>_<hash8>`` (file-name safe)."""
        digest = hashlib.sha256(json.dumps(self.config(), sort_keys=True).encode()).hexdigest()[:8]
        lat = "" if self.latency == "measured" else f"_{self.latency.replace(':', '')}"
        readable = f"{self.task}_{self.backend}_{self.solver}_N{self.horizon}_{self.mode}{lat}_s{self.seed}"
        return f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', readable)}_{digest}"

    def label(self) -> str:
        lat = "" if self.latency == "measured" else f" latency {self.latency[6:]}"
        return f"{self.task} {self.backend} {self.solver} N={self.horizon} {self.mode}{lat} seed {self.seed}"

    def argv(self, out: str) -> list[str]:
        """Arguments of ``mpc-accel run`` for this run, writing into ``out``."""
        a = ["run", self.task, "--backend", self.backend, "--solver", self.solver, "--horizon", str(self.horizon),
             "--dt", repr(self.dt), "--iterations", str(self.iterations),
             "--initial-iterations", str(self.initial_iterations), "--mode", self.mode,
             "--seed", str(self.seed), "--out", out, "--json", "--quiet"]
        if self.duration is not None:
            a += ["--duration", repr(self.duration)]
        if self.mode == "realtime":
            a += ["--latency", self.latency]
        return a

    @classmethod
    def from_config(cls, d: dict) -> "RunSpec":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def plan_runs(cfg: StudyConfig, backends: tuple[str, ...] | None = None) -> list[RunSpec]:
    """Every combination, task-major (all runs of a task together), seeds innermost.
    backends: the subset to run (default: all of the configuration's)."""
    use = cfg.backends if backends is None else backends
    return [RunSpec(task=t, backend=b, solver=s, horizon=h, mode=cfg.mode, latency=lat, seed=seed,
                    duration=cfg.duration, dt=cfg.dt, iterations=cfg.iterations,
                    initial_iterations=cfg.initial_iterations)
            for t, b, s, h, lat, seed in itertools.product(cfg.tasks, use, cfg.solvers, cfg.horizons,
                                                          cfg.latencies, range(cfg.seeds))]


def split_backends(names: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
    """(the backends available here, {unavailable backend: why}) by the backend registry's own
    check (:func:`dynamics.available_backends`, as ``mpc-accel backends`` shows). An unknown name
    raises ValueError with the known ones."""
    table = dynamics.available_backends()
    base = {n: parse_backend_spec(n)[0] for n in names}      # "fpga-sim:emulate=gradients" -> "fpga-sim"
    unknown = [b for b in base.values() if b not in table]
    if unknown:
        raise ValueError(f"study: unknown backend '{unknown[0]}'; known backends: {', '.join(table)}")
    ok = tuple(n for n in names if table[base[n]][0])
    return ok, {n: table[base[n]][1] for n in names if not table[base[n]][0]}


def check_tasks(names: tuple[str, ...]) -> None:
    """Raise ValueError naming a task spec that does not resolve (before any run starts)."""
    for n in names:
        try:
            tasks.resolve_task(n)
        except Exception as e:  # noqa: BLE001 — unknown name, missing file or module: one clear line
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise ValueError(f"study: task '{n}': {msg} (see 'mpc-accel tasks')") from e
