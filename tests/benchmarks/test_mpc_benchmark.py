"""Smoke test: benchmarks/mpc_rate.py --quick runs and prints its JSON (speeds are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mpc_rate_benchmark_quick_runs():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mpc_rate.py"), "--quick", "--no-crocoddyl", "--busy", "1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["benchmark"] == "mpc_rate" and result["crocoddyl_available"] is False
    (e,) = result["results"]
    assert e["horizon"] == 16 and e["backend"] == "numpy" and e["completed"]
    assert e["control_loop_hz"] > 0 and e["updates"] == 29 and e["ours_iteration_s"] > 0
    assert set(e["stage_ms"]) == {"derivatives", "backward", "forward", "cost", "other"}
    b = e["busy"]                                   # --busy 1: the same loop beside one busy process
    assert b["processes"] == 1 and b["control_loop_hz"] > 0 and len(e["runs_hz"]["busy"]) == 1
    assert b["ratio_quiet_vs_busy_hz"] == e["control_loop_hz_median"] / b["control_loop_hz"]
    assert "thread_policy" in result["machine"]["threads"]


def test_update_targets_say_pass_or_miss_and_what_holds_a_miss_back():
    from benchmarks import mpc_rate
    e = {"ratio_update_vs_crocoddyl_iteration": 1.4, "control_loop_hz": 1200.0,
         "stage_ms": {"derivatives": 0.2, "backward": 0.12, "forward": 0.13, "cost": 0.08, "other": 0.1}}
    mpc_rate._update_targets(e, "ilqr", 32)
    ratio, loop = e["targets"]
    assert ratio["result"] == "miss" and ratio["limit"] == 1.0 and ratio["value"] == 1.4
    assert ratio["held_back_by"]["stage"] == "derivatives"
    assert abs(ratio["held_back_by"]["fraction"] - 0.2 / 0.63) < 1e-12
    assert loop["result"] == "pass" and "held_back_by" not in loop
    e2 = {"ratio_update_vs_crocoddyl_iteration": 1.9, "control_loop_hz": 500.0, "stage_ms": {"derivatives": 1.0}}
    mpc_rate._update_targets(e2, "ddp", 16)
    assert [t["result"] for t in e2["targets"]] == ["pass"]          # DDP: <= 2.0x; no loop-rate target
    e3 = {"ratio_update_vs_crocoddyl_iteration": None, "control_loop_hz": None, "stage_ms": {}}
    mpc_rate._update_targets(e3, "fddp", 16)
    assert "targets" not in e3
