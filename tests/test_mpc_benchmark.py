"""Smoke test: benchmarks/mpc_rate.py --quick runs and prints its JSON (speeds are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mpc_rate_benchmark_quick_runs():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mpc_rate.py"), "--quick", "--no-crocoddyl"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["benchmark"] == "mpc_rate" and result["crocoddyl_available"] is False
    (e,) = result["results"]
    assert e["horizon"] == 16 and e["backend"] == "numpy" and e["completed"]
    assert e["control_loop_hz"] > 0 and e["updates"] == 29 and e["ours_iteration_s"] > 0
    assert set(e["stage_ms"]) == {"derivatives", "backward", "forward", "cost", "other"}
