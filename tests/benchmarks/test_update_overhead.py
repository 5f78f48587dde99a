"""Smoke run of benchmarks/update_overhead.py: strict JSON with the time outside the stage clocks
in each setting, every one a positive part of the closed loop's update (speed is never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_update_overhead_reports_every_setting():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "update_overhead.py"), "--horizon", "8",
                           "--duration", "0.3", "--updates", "40", "--repeats", "1", "--sweep-mb", "0.5"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["update_s"] > 0 and "machine" in out
    rows = {r["setting"]: r for r in out["results"]}
    assert set(rows) == {"closed_loop", "alone", "after_compiled_call", "after_sweep"}
    for r in rows.values():
        assert len(r["runs_s"]) == 1
        # a part of an update, never all of it: the stand-in runs skip the compiled stages only
        assert 0 < r["other_s"] < out["update_s"], r


def test_update_overhead_refuses_a_solver_without_the_compiled_call():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "update_overhead.py"), "--backend", "numpy",
                           "--duration", "0.05", "--updates", "2", "--repeats", "1", "--horizon", "4"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode != 0
    assert "no compiled first-iteration call" in proc.stderr
