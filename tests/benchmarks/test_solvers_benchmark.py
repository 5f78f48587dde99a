"""Smoke test: benchmarks/solvers.py --quick runs and prints its JSON (timings are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_solvers_benchmark_quick_runs():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "solvers.py"), "--quick", "--no-crocoddyl"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["benchmark"] == "solvers"
    entries = {(e["solver"], e["horizon"]) for e in result["results"]}
    assert entries == {("ilqr", 16), ("ddp", 16)}
    for e in result["results"]:
        assert e["per_iteration_s"] > 0
        assert set(e["per_iteration_stage_s"]) == {"derivatives", "backward", "forward", "cost", "total"}
