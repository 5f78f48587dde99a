"""``benchmarks/gpu_check.py --simulate``: the prepared GPU hardware check runs every step at tiny sizes
in Numba's CUDA simulator, so it never rots (its numbers are never asserted: speed is not a unit
test, and simulator times say nothing about a GPU)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check_module():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_check_simulate_runs_every_step(tmp_path, capsys):
    check = _check_module()
    out = tmp_path / "check.json"
    assert check.main(["--simulate", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["simulated"] and "SIMULATOR" in res["note"]
    env = res["environment"]
    for key in ("numpy", "numba", "numba_cuda", "cupy", "mujoco", "numpy_numba_cuda_compatible", "missing"):
        assert key in env
    assert env["gpu_backend"].startswith("available")
    # the hardware tests ran in a child process: on a machine without a GPU pytest skips them all
    tests = res["hardware_tests"]
    assert tests["returncode"] == 0 and sum(tests["counts"].values()) > 0
    (entry,) = res["table"]["entries"]
    assert entry["robot"] == "iiwa" and entry["n"] == 1 and entry["best_partition"] == "completely_fused"
    part = entry["partitions"]["completely_fused"]
    assert {"end_to_end_s", "compute_s", "h2d_s", "d2h_s", "host_s"} <= set(part)
    (row,) = res["loop"]["rows"]
    assert row["horizon"] == 2 and row["gpu"]["updates"] > 0 and row["numba"]["updates"] > 0
    plots = (tmp_path / "check.png").exists() and (tmp_path / "check_table.png").exists()
    assert plots == (importlib.util.find_spec("matplotlib") is not None)     # plots need the plot extra
    assert "numba" in capsys.readouterr().err


def test_gpu_check_reports_missing_mujoco_instead_of_failing(tmp_path, monkeypatch):
    """A GPU machine may lack MuJoCo: the check says so and skips the closed loop, the rest still runs."""
    check = _check_module()
    import builtins
    real_import = builtins.__import__

    def no_mujoco(name, *args, **kwargs):
        if name == "mujoco":
            raise ImportError("No module named 'mujoco'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_mujoco)
    env = check.environment(simulate=True)
    assert env["mujoco"] is None and any("MuJoCo" in m for m in env["missing"])
    monkeypatch.setattr(check, "environment", lambda simulate: env)
    res = check.run(check.build_parser().parse_args(["--simulate", "--skip", "tests,table"]))
    assert "mujoco not installed" in res["loop"]["not_run"]


def test_hardware_tests_cut_short_report_their_progress():
    """The hardware tests run last with what is left of the budget; a run cut short still reports."""
    check = _check_module()
    assert check._progress_counts("..s.F  [ 40%]\n..\nother output\n") == {"passed": 5, "skipped": 1, "failed": 1}
    res = check.hardware_tests(timeout_s=0.05)
    assert res["timed_out"] and "counts_before_timeout" in res


def test_gpu_kernels_breakdown_runs_in_simulator(tmp_path):
    """``benchmarks/gpu_kernels.py --simulate``: every kernel function at one batch and block size, both
    launch paths' entries and the accuracy against the numpy reference (never a speed assertion)."""
    spec = importlib.util.spec_from_file_location("gpu_kernels", ROOT / "benchmarks" / "gpu_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "k.json"
    assert mod.main(["--simulate", "--robots", "iiwa", "--n", "1", "--threads-per-block", "4", "--repeats", "1",
                     "--out", str(out)]) == 0
    r = json.loads(out.read_text())["robots"]["iiwa"]
    assert set(r["device_s"]) == set(mod.FUNCTIONS) and set(r["end_to_end_s"]) == {"bound", "numba"}
    assert r["max_abs_error"] < 1e-10
