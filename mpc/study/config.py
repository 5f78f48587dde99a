"""What a study sweeps: :class:`StudyConfig`, built from command-line flags or a TOML file.

The TOML keys are the flags' long names (``initial-iterations`` or ``initial_iterations``); lists
are TOML arrays or comma-separated strings. Unknown keys and bad values raise :class:`ConfigError`
naming the key and the fix. Flags given on the command line override the file's values.
"""

from __future__ import annotations

import argparse
import math
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..args import latency_arg
from ..controller import SOLVERS

MODES = ("lockstep", "realtime")
EXECUTORS = ("local", "ray")


class ConfigError(ValueError):
    """A study configuration that cannot be run (message names the key and the fix)."""


@dataclass(frozen=True)
class StudyConfig:
    """A study: every combination of ``tasks × backends × horizons × solvers × latencies × seeds``.

    tasks: task names or ``module:Class`` specs; backends: dynamics backend names; horizons: knot
    counts N; solvers: ``ilqr``/``ddp``/``fddp``; mode: ``lockstep`` or ``realtime``; duration:
    simulated seconds per run (None: each task's own duration); seeds: number of seeds per
    combination (seed 0 = the task's initial state, seed k > 0 = seeded initial-state noise, see
    ``mpc-accel run --seed``); latencies: ``measured`` or ``fixed:<time>`` (realtime mode);
    dt: knot spacing [s]; iterations: solver iterations per update; initial_iterations: of the
    first solve; out: the study folder; jobs: runs at once; threads: threads per run (None:
    cores // jobs); executor: ``local`` or ``ray``; address: the Ray cluster (None: start a local
    Ray); plots: write the plots (needs matplotlib)."""

    tasks: tuple[str, ...]
    backends: tuple[str, ...]
    horizons: tuple[int, ...]
    solvers: tuple[str, ...] = ("ilqr",)
    mode: str = "lockstep"
    duration: float | None = None
    seeds: int = 1
    latencies: tuple[str, ...] = ("measured",)
    dt: float = 0.01
    iterations: int = 1
    initial_iterations: int = 50
    out: Path = Path("runs/study")
    jobs: int = 1
    threads: int | None = None
    executor: str = "local"
    address: str | None = None
    plots: bool = True

    def to_dict(self) -> dict:
        d = asdict(self)
        d["out"] = str(self.out)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# key accepted in a file/flag -> field name
_ALIASES = {"latency": "latencies", "solver": "solvers", "task": "tasks", "backend": "backends",
            "horizon": "horizons", "plot": "plots"}
_REQUIRED = ("tasks", "backends", "horizons")


def _field_name(key: str) -> str:
    k = str(key).replace("-", "_")
    return _ALIASES.get(k, k)


def _as_list(key: str, v) -> list:
    if isinstance(v, str):
        items = [x.strip() for x in v.split(",")]
    elif isinstance(v, (list, tuple)):
        items = list(v)
    else:
        items = [v]
    if not items or any(x == "" for x in items):
        raise ConfigError(f"study: '{key}' needs a non-empty list (comma-separated or a TOML array), got {v!r}")
    return items


def _pos_int(key: str, v) -> int:
    try:
        i = int(v)
        if isinstance(v, bool) or i != float(v) or i <= 0:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"study: '{key}' must be a positive integer, got {v!r}") from None
    return i


def _pos_float(key: str, v) -> float:
    try:
        f = float(v)
        if isinstance(v, bool) or not math.isfinite(f) or f <= 0:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"study: '{key}' must be a positive number, got {v!r}") from None
    return f


def _latency(v) -> str:
    """Normalise a latency spec (``measured``, ``fixed:20ms`` ...) to ``measured`` / ``fixed:<ms>ms``."""
    try:
        sec = latency_arg(str(v).strip())
    except argparse.ArgumentTypeError as e:
        raise ConfigError(f"study: latency: {e}") from None
    return "measured" if sec is None else f"fixed:{sec * 1e3:g}ms"


def _unique(key: str, items: list) -> tuple:
    seen = []
    for x in items:
        if x in seen:
            raise ConfigError(f"study: '{key}' lists {x!r} twice")
        seen.append(x)
    return tuple(seen)


def build_config(values: dict) -> StudyConfig:
    """A validated :class:`StudyConfig` from a mapping of flag/TOML keys to values (None values are
    ignored: not given)."""
    known = {f.name for f in fields(StudyConfig)}
    kw: dict = {}
    for key, v in values.items():
        if v is None:
            continue
        name = _field_name(key)
        if name not in known:
            raise ConfigError(f"study: unknown key '{key}'; known keys: "
                              f"{', '.join(sorted(k.replace('_', '-') for k in known))}")
        kw[name] = (key, v)
    missing = [k for k in _REQUIRED if k not in kw]
    if missing:
        raise ConfigError(f"study: no {', '.join(missing)} given; e.g. --tasks iiwa-reach --backends numba "
                          f"--horizons 16,32 (or the same keys in the TOML file)")
    out: dict = {}
    for name, (key, v) in kw.items():
        if name in ("tasks", "backends"):
            out[name] = _unique(key, [str(x).strip() for x in _as_list(key, v)])
        elif name == "horizons":
            out[name] = _unique(key, [_pos_int(key, x) for x in _as_list(key, v)])
        elif name == "solvers":
            items = [str(x).strip().lower() for x in _as_list(key, v)]
            bad = [x for x in items if x not in SOLVERS]
            if bad:
                raise ConfigError(f"study: unknown solver {bad[0]!r}; choose from {', '.join(SOLVERS)}")
            out[name] = _unique(key, items)
        elif name == "latencies":
            out[name] = _unique(key, [_latency(x) for x in _as_list(key, v)])
        elif name == "mode":
            if v not in MODES:
                raise ConfigError(f"study: mode must be one of {', '.join(MODES)}, got {v!r}")
            out[name] = v
        elif name == "executor":
            if v not in EXECUTORS:
                raise ConfigError(f"study: executor must be one of {', '.join(EXECUTORS)}, got {v!r}")
            out[name] = v
        elif name in ("duration", "dt"):
            out[name] = _pos_float(key, v)
        elif name in ("seeds", "iterations", "initial_iterations", "jobs", "threads"):
            out[name] = _pos_int(key, v)
        elif name == "out":
            out[name] = Path(v)
        elif name == "address":
            out[name] = str(v)
        elif name == "plots":
            if not isinstance(v, bool):
                raise ConfigError(f"study: 'plots' must be true or false, got {v!r}")
            out[name] = v
    if out.get("address") and out.get("executor", "local") != "ray":
        raise ConfigError("study: 'address' is for the Ray executor; add --executor ray (executor = \"ray\")")
    cfg = StudyConfig(**out)
    if cfg.mode == "lockstep" and cfg.latencies != ("measured",):
        raise ConfigError("study: a fixed latency only applies in realtime mode (lockstep updates take no "
                          "simulated time); add --mode realtime or drop --latency")
    return cfg


def read_toml(path: Path) -> dict:
    """The keys of a study TOML file (top level, or under a ``[study]`` table)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"study: config file '{path}' not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"study: '{path}' is not valid TOML: {e}") from None
    if set(data) == {"study"} and isinstance(data["study"], dict):
        data = data["study"]
    nested = [k for k, v in data.items() if isinstance(v, dict)]
    if nested:
        raise ConfigError(f"study: '{path}': unexpected table [{nested[0]}]; put the keys at the top level "
                          f"(or under [study])")
    return data


def load_config(path: Path | None, flags: dict) -> StudyConfig:
    """File values (if ``path``) overridden by the flags that were given (not None)."""
    values = dict(read_toml(path)) if path is not None else {}
    norm = {_field_name(k): k for k in values}
    for k, v in flags.items():
        if v is None:
            continue
        prev = norm.get(_field_name(k))
        if prev is not None:
            values.pop(prev)
        values[k] = v
    return build_config(values)


__all__ = ["StudyConfig", "ConfigError", "build_config", "read_toml", "load_config", "MODES", "EXECUTORS"]
