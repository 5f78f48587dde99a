"""Argument types of the ``mpc-accel`` command line, shared by the parser (:mod:`mpc.cli`) and the
study's configuration (:mod:`mpc.study.config`, which reads the same values from TOML or flags).

Each takes the command-line string and returns the parsed value, or raises
:class:`argparse.ArgumentTypeError` with a one-line message (argparse shows it as the error).
"""

from __future__ import annotations

import argparse
import ast
import math


def _convert(s: str, convert, what: str):
    """``convert(s)``; an argparse error naming ``what`` was expected if it fails."""
    try:
        return convert(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got '{s}'") from None


def positive_int(s: str) -> int:
    """An integer > 0."""
    v = _convert(s, int, "a positive integer")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def positive_float(s: str) -> float:
    """A finite number > 0."""
    v = _convert(s, float, "a positive number")
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {s}")
    return v


def nonnegative_float(s: str) -> float:
    """A finite number >= 0."""
    v = _convert(s, float, "a number >= 0")
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {s}")
    return v


def task_arg(s: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> (key, value): ``true``/``false`` as bools, Python literals as such, else the string."""
    key, eq, raw = s.partition("=")
    if not eq or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with a Python identifier as KEY, got '{s}'")
    low = raw.strip().lower()
    if low in ("true", "false"):
        return key.strip(), low == "true"
    try:
        return key.strip(), ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key.strip(), raw  # a plain string


def nonnegative_int(s: str) -> int:
    """An integer >= 0."""
    v = _convert(s, int, "an integer >= 0")
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def latency_arg(s: str) -> float | None:
    """``measured`` -> None; ``fixed:20ms`` / ``fixed:0.02s`` / ``fixed:0.02`` -> seconds."""
    if s == "measured":
        return None
    kind, sep, val = s.partition(":")
    try:
        if kind != "fixed" or not sep:
            raise ValueError
        v = val.strip().lower()
        sec = float(v[:-2]) / 1e3 if v.endswith("ms") else float(v[:-1] if v.endswith("s") else v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'measured' or 'fixed:<time>' (e.g. fixed:20ms), got '{s}'") from None
    if not (math.isfinite(sec) and sec >= 0):
        raise argparse.ArgumentTypeError(f"latency must be a non-negative time, got '{s}'")
    return sec


def push_arg(s: str) -> tuple:
    """``T,BODY,FX,FY,FZ,DURATION`` -> (t [s], body, (fx, fy, fz) [N], duration [s])."""
    parts = [p.strip() for p in s.split(",")]
    try:
        if len(parts) != 6:
            raise ValueError
        t, body, fx, fy, fz, dur = float(parts[0]), parts[1], *map(float, parts[2:])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected T,BODY,FX,FY,FZ,DURATION (e.g. 2.5,trunk,0,200,0,0.2), "
                                         f"got '{s}'") from None
    if not body or t < 0 or dur <= 0:
        raise argparse.ArgumentTypeError(f"push '{s}': need a body name, T >= 0 and DURATION > 0")
    return (t, body, (fx, fy, fz), dur)
