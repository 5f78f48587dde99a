"""The benchmark scripts must keep running (their numbers are never asserted: speed is not a unit
test). A quick numpy-only run checks the JSON they print has the documented structure."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]


def test_dynamics_benchmark_quick_runs_and_prints_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dynamics.py"), "--quick", "--backends", "numpy",
                           "--functions", "aba,aba_derivatives", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "MPC_ACCEL_THREADS"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == data
    assert "machine" in json.dumps(data)
    text = json.dumps(data)
    assert "aba_derivatives" in text
    if importlib.util.find_spec("pinocchio") is not None:
        assert "ratio_vs_pinocchio_loop" in text
        import pinocchio
        assert data["anchor"]["pinocchio_version"] == pinocchio.__version__     # which Pinocchio was timed
        assert f"[dynamics] anchor: Pinocchio {pinocchio.__version__}" in proc.stderr
    assert data["machine"]["threads"]["thread_policy"] == "MPC_ACCEL_THREADS=all"   # kernels on a fixed count


def test_dynamics_benchmark_rejects_unknown_robot():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dynamics.py"), "--robots", "nope",
                           "--backends", "numpy", "--no-progress"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode != 0
    assert "nope" in proc.stderr


def test_dynamics_benchmark_target_summary():
    """performance_targets picks the numba entries named by each target and compares with the limit."""
    spec = importlib.util.spec_from_file_location("bench_dynamics", ROOT / "benchmarks" / "dynamics.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # dataclasses look their module up while the file executes
    sys.path.insert(0, str(ROOT))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(ROOT))

    def e(robot, fn, n, backend, ratio, seconds):
        return {"robot": robot, "function": fn, "N": n, "backend": backend, "variant": "analytical",
                "ratio_vs_pinocchio_loop": ratio, "seconds": seconds * n, "seconds_per_state": seconds}

    entries = [e("iiwa", "aba_derivatives", 64, "numba", 0.3, 1e-6), e("iiwa", "aba_derivatives", 64, "numpy", 9.0, 1e-4),
               e("iiwa", "aba_derivatives", 1, "numba", 2.0, 1e-5), e("atlas", "aba_second_derivatives", 1, "numba", None, 1e-3),
               e("iiwa", "aba_second_derivatives", 1, "numba", None, 1e-2)]
    t = {(x["target"].split()[0], x["robot"], x["value"]): (x["met"], x["stretch_met"]) for x in mod.performance_targets(entries)}
    assert t == {("aba_derivatives", "iiwa", 0.3): (True, False), ("aba_derivatives", "iiwa", 2.0): (False, None),
                 ("aba_second_derivatives", "atlas", 1e-3): (True, None)}
