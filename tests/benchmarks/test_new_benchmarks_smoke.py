"""Smoke runs of the constrained-solver, MuJoCo finite-difference and sampling benchmarks: each
prints strict JSON with its measurements and anchors (speed itself is never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _numbers(obj) -> list[float]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _numbers(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _numbers(v)]
    return [obj] if isinstance(obj, (int, float)) and not isinstance(obj, bool) else []


@pytest.mark.parametrize("script, args", [
    ("constrained.py", ("--quick", "--no-mim", "--problems", "iiwa-wall")),
    ("mujoco_fd.py", ("--quick", "--robots", "iiwa", "--n", "1,2", "--threads", "1")),
    ("sampling.py", ("--quick", "--samples", "8", "--horizon", "5", "--threads", "1")),
])
def test_benchmark_prints_json_with_measurements(script, args):
    out = _run(script, *args)
    assert "machine" in out
    body = {k: v for k, v in out.items() if k != "machine"}
    numbers = _numbers(body)
    assert numbers and any(x > 0 for x in numbers), f"{script}: no measurement in {sorted(body)}"
