"""``benchmarks/fpga_sim_loop.py`` keeps running: a tiny closed loop per configuration, the JSON has
the documented fields (numbers are never asserted: speed is not a unit test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fpga_sim_loop_smoke(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("fpga_sim_loop", ROOT / "benchmarks" / "fpga_sim_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "loop.json"
    assert mod.main(["--tasks", "iiwa-reach", "--horizons", "4", "--duration", "0.03", "--initial-iterations", "1",
                     "--configs", "numba;fpga-sim:emulate=gradients", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    numba, fpga = res["rows"]
    assert numba["backend"] == "numba" and numba["timing_source"] == "measured" and numba["ratio_rate_vs_numba"] == 1
    assert "emulate='gradients'" in fpga["repr"] and "host='numba'" in fpga["repr"]
    assert fpga["timing_source"].startswith("simulated") and fpga["accel_simulated_ms"] > 0
    assert fpga["updates"] > 0 and "ratio_rate_vs_numba" in fpga
