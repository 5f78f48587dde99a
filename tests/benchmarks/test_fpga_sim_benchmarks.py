"""The fpga-sim benchmark scripts keep running with tiny settings and print the documented JSON
(their numbers are not asserted beyond the published design points they must contain)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                          timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_accuracy_benchmark_quick(tmp_path):
    out = tmp_path / "acc.json"
    data = run("fpga_sim_accuracy.py", "--quick", "--out", str(out))
    assert json.loads(out.read_text()) == data
    assert {e["format"] for e in data["gradient_sweep"]} == {"Q12.5", "Q16.16"}
    for e in data["gradient_sweep"]:
        assert {"da_dq_max_rel", "da_dq_rms_rel", "da_dv_max_rel", "da_dv_rms_rel", "overflows"} <= set(e)
    by = {e["format"]: e for e in data["gradient_sweep"]}
    assert by["Q16.16"]["da_dq_max_rel"] < by["Q12.5"]["da_dq_max_rel"]
    solves = data["iiwa_reach_solves"]
    assert {"float64", "Q12.5", "Q16.16"} <= set(solves)
    assert "reaches_float64_optimum" in solves["Q16.16"]


def test_design_benchmark_quick():
    data = run("fpga_sim_design.py", "--quick")
    (tab,) = data["design_spaces"]
    assert tab["robot"] == "iiwa" and tab["points"] == 3 * 3 * 7
    assert tab["smallest"]["latency_cycles"] == 829
    assert any(p["latency_cycles"] == tab["fastest"]["latency_cycles"] for p in tab["pareto"])
    (cmp_,) = data["knots_comparison"]
    row = cmp_["rows"][0]
    assert row["N"] == 16 and row["numpy_measured_s"] > 0 and row["fpga_sim_latency"]["simulated"]
    assert data["dadu_configuration"]["latency_mode_cycles"] == 34


def test_benchmarks_reject_bad_arguments():
    for script, args in (("fpga_sim_accuracy.py", ["--formats", "float32"]),
                         ("fpga_sim_design.py", ["--robots", "nope"])):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert proc.returncode != 0
        assert ("Qm.n" in proc.stderr) or ("nope" in proc.stderr)
