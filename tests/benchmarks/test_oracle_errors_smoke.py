"""benchmarks/oracle_errors.py must keep running and measure the same quantities as the oracle tests.

A ``--quick`` run (iiwa, 2 states, first-order oracles) in a subprocess: the JSON it prints has the
documented structure, every oracle is either measured or listed as skipped with a reason, and every
reported relative error is small. The tight tolerances are enforced by the oracle tests themselves
(test_oracle_mujoco.py, test_oracle_pinocchio.py, test_derivatives_numerical.py); the 1e-6 bound
here only catches a script that compares mismatched quantities or conventions.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICK_ORACLES = {"mujoco", "pinocchio", "central_diff", "complex_step"}


def test_oracle_errors_quick_runs_and_errors_are_small(tmp_path):
    out = tmp_path / "oracle_errors.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "oracle_errors.py"), "--quick", "--table",
                           "--no-progress", "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert json.loads(out.read_text()) == data
    assert "| model | oracle | quantity |" in proc.stderr  # --table

    for key in ("machine", "settings", "models", "results", "timings_seconds", "skipped", "failed", "total_seconds"):
        assert key in data, key
    assert data["failed"] == []
    assert {"cpu_model", "versions", "git_commit"} <= set(data["machine"])
    assert data["settings"]["models"] == ["iiwa"] and data["settings"]["states"] == 2
    assert data["settings"]["second_order_states"] == 0
    assert set(data["models"]) == {"iiwa"} and data["models"]["iiwa"]["nv"] == 7

    measured = {r["oracle"] for r in data["results"]}
    skipped = {s["oracle"]: s["reason"] for s in data["skipped"]}
    assert measured | set(skipped) == QUICK_ORACLES
    assert all(reason for reason in skipped.values())
    assert {"central_diff", "complex_step"} <= measured  # need nothing beyond the numpy backend
    if importlib.util.find_spec("mujoco") is not None:
        assert "mujoco" in measured
    if importlib.util.find_spec("pinocchio") is not None:
        assert "pinocchio" in measured
    else:
        assert "pinocchio" in skipped
    assert set(data["timings_seconds"]["iiwa"]) == measured

    quantities = {(r["oracle"], r["quantity"]) for r in data["results"]}
    for oracle in measured & {"pinocchio", "central_diff", "complex_step"}:
        for q in ("rnea_derivatives dtau_dq", "rnea_derivatives dtau_dv", "aba_derivatives da_dq",
                  "aba_derivatives da_dv", "aba_derivatives da_dtau"):
            assert (oracle, q) in quantities, (oracle, q)
    for r in data["results"]:
        assert r["model"] == "iiwa"
        assert r["evaluations"] >= 2, r
        assert r["max_ref"] > 0, r  # a quantity compared against an all-zero oracle measures nothing
        assert 0.0 <= r["max_abs"] and 0.0 <= r["max_rel"] < 1e-6, r
