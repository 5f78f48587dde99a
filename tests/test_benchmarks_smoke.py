"""The benchmark scripts must keep running (their numbers are never asserted: speed is not a unit
test). A quick numpy-only run checks the JSON they print has the documented structure."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_dynamics_benchmark_quick_runs_and_prints_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dynamics.py"), "--quick", "--backends", "numpy",
                           "--functions", "aba,aba_derivatives", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == data
    assert "machine" in json.dumps(data)
    text = json.dumps(data)
    assert "aba_derivatives" in text
    if importlib.util.find_spec("pinocchio") is not None:
        assert "ratio_vs_pinocchio_loop" in text


def test_dynamics_benchmark_rejects_unknown_robot():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dynamics.py"), "--robots", "nope",
                           "--backends", "numpy", "--no-progress"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode != 0
    assert "nope" in proc.stderr
