"""``mpc-accel study``: a tiny sweep (2 tasks × 2 backends × 2 horizons, 0.03 s simulated, lockstep)
gives one row per run whose measured columns agree with each run's recorded trajectory file
(``mpc-accel run``'s per-update arrays and task metrics, the independent record); resuming starts
no run; a half-written run is never taken as finished; an unavailable backend is reported and
skipped; SIGINT leaves resumable state; the Ray executor gives the same rows; a TOML file equals
the flags. The runs are real subprocesses (one per run), so the whole file costs ~30-60 s."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.signal_helpers import default_sigint

from mpc import cli
from mpc.study import ConfigError, load_config, plan_runs, store, table

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--tasks", "iiwa-reach,hyq-stand", "--backends", "numpy,numba", "--horizons", "2,4", "--duration", "0.03",
        "--initial-iterations", "2", "--mode", "lockstep"]


def _main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(args)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "tiny"
    rc, stdout, stderr = _main(["study", *TINY, "--jobs", "2", "--out", str(out)])
    assert rc == 0, stdout + stderr
    return out, stdout, stderr


def test_tiny_study_table_matches_each_runs_record(tiny):
    out, stdout, stderr = tiny
    data = json.loads((out / "results.json").read_text())
    rows = data["rows"]
    assert [c for c in data["columns"][:len(table.CONFIG_COLUMNS)]] == list(table.CONFIG_COLUMNS)
    combos = {(r["task"], r["backend"], r["horizon"]) for r in rows}
    assert len(rows) == 8 and combos == {(t, b, h) for t in ("iiwa-reach", "hyq-stand")
                                         for b in ("numpy", "numba") for h in (2, 4)}
    csv_lines = (out / "results.csv").read_text().strip().splitlines()
    assert len(csv_lines) == 9 and csv_lines[0].split(",")[:3] == ["run_id", "task", "backend"]
    for r in rows:
        assert r["status"] == "completed" and r["mode"] == "lockstep" and r["seed"] == 0
        assert r["stage_times"] == "measured" and r["latency_source"].startswith("none")
        tr = np.load(out / "runs" / r["run_id"] / "trajectory.npz")
        # the table's numbers are the run's own per-update records, summarised
        assert r["updates"] == tr["update_latency"].size >= 2
        assert r["update_ms_median"] == pytest.approx(np.median(tr["update_latency"]) * 1e3)
        for st in ("derivatives", "backward", "forward", "cost"):
            assert r[f"{st}_ms"] == pytest.approx(np.median(tr[f"update_time_{st}"]) * 1e3)
            assert 0 <= r[f"{st}_ms"] <= r["update_ms_median"] * 1.5
        assert math.isfinite(r["control_loop_hz"]) and r["control_loop_hz"] > 0
        # updates per second of loop: at most one update per median update time (plus physics)
        assert r["control_loop_hz"] < 1e3 / min(tr["update_latency"] * 1e3) * 1.01
        metric = "ee_error" if r["task"] == "iiwa-reach" else "height_error"
        assert r["tracking_metric"] == metric and r["tracking_unit"] == "m"
        assert r["tracking_error_mean"] == pytest.approx(float(np.mean(tr[f"metric_{metric}"])))
        assert r["torque_limit_steps"] == 0 and r["joint_limit_steps"] == 0
        # MuJoCo's measurement: 0.03 s after the start the arm is still near its home pose (far from the
        # first target), the quadruped's trunk still at its standing height
        if r["task"] == "hyq-stand":
            assert 0.6 < tr["x"][-1, 2] < 0.66 and r["tracking_error_mean"] < 0.01
        else:
            assert 0.05 < r["tracking_error_mean"] < 1.0
    assert "iiwa-reach numba ilqr N=4" in stderr and "[8/8]" in stderr
    md = (out / "results.md").read_text()
    assert md.count("\n| iiwa-reach") == 4 and md.count("\n| hyq-stand") == 4
    names = {p.name for p in (out / "plots").glob("*.png")}
    if importlib.util.find_spec("matplotlib") is None:
        assert not names and "no plots" in stdout      # the table is still written
    else:
        assert names == {"rate_vs_horizon.png", "tracking_vs_rate.png", "stages.png"}
        assert all((out / "plots" / n).stat().st_size > 5000 for n in names)


def test_resume_runs_nothing_and_report_rebuilds(tiny):
    out, _, _ = tiny
    before = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/summary.json")}
    n_dirs = len(list((out / "runs").iterdir()))
    t0 = time.perf_counter()
    rc, stdout, stderr = _main(["study", *TINY, "--jobs", "2", "--out", str(out), "--no-plots"])
    assert rc == 0 and "all 8 runs already done" in stderr, stderr
    assert time.perf_counter() - t0 < 20          # no subprocess was started (each costs seconds)
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/summary.json")} == before
    assert len(list((out / "runs").iterdir())) == n_dirs
    rows = json.loads((out / "results.json").read_text())["rows"]
    (out / "results.csv").unlink()
    rc, stdout, _ = _main(["report", str(out), "--no-plots"])
    assert rc == 0 and (out / "results.csv").is_file()
    assert json.loads((out / "results.json").read_text())["rows"] == rows
    # a single run folder still reports as before
    rc, stdout, _ = _main(["report", str(out / "runs" / rows[0]["run_id"])])
    assert rc == 0 and "control loop" in stdout


def test_half_written_run_is_not_taken_as_finished(tiny, tmp_path):
    src, _, _ = tiny
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    cfg = load_config(None, {"tasks": "iiwa-reach,hyq-stand", "backends": "numpy,numba", "horizons": "2,4",
                             "duration": "0.03", "initial_iterations": "2", "out": str(out)})
    specs = plan_runs(cfg)
    assert all(store.is_finished(out, s) for s in specs)
    victim = store.run_dir(out, specs[0])
    # a run caught while it was still writing: its files sit in the temporary folder, under a dead pid
    tmp = store.runs_dir(out) / f".{specs[0].run_id}.tmp-999999999-0"
    victim.rename(tmp)
    assert not store.is_finished(out, specs[0])
    # a run folder without its spec (as if renamed by hand mid-way) is not finished either
    (store.run_dir(out, specs[1]) / "spec.json").unlink()
    rc, _, stderr = _main(["study", *TINY, "--out", str(out), "--dry-run"])
    assert rc == 0 and "6 done, 2 to run" in stderr, stderr
    assert "removed 1 unfinished run folder" in stderr and not tmp.exists()
    assert specs[0].label() in stderr and specs[1].label() in stderr


def test_unavailable_backend_is_reported_not_fatal(tiny, tmp_path, monkeypatch):
    import dynamics

    real = dynamics.available_backends

    def fake():
        t = dict(real())
        t["numba"] = (False, "pretend: numba is missing")
        return t

    monkeypatch.setattr(dynamics, "available_backends", fake)
    src, _, _ = tiny
    out = tmp_path / "skip"
    shutil.copytree(src, out)
    rc, stdout, stderr = _main(["study", *TINY, "--out", str(out), "--no-plots"])
    assert rc == 0, stderr
    assert "skipping backend 'numba' (4 runs): not available here: pretend: numba is missing" in stderr
    data = json.loads((out / "results.json").read_text())
    assert {r["backend"] for r in data["rows"]} == {"numpy"} and len(data["rows"]) == 4
    assert data["skipped"] == [{"backend": "numba", "reason": "pretend: numba is missing"}]
    rc, _, stderr = _main(["study", *TINY, "--backends", "numpy,nosuch", "--out", str(out)])
    assert rc == 2 and "unknown backend 'nosuch'" in stderr


def test_toml_config_equals_flags(tmp_path):
    f = tmp_path / "study.toml"
    f.write_text('tasks = ["iiwa-reach", "hyq-stand"]\nbackends = "numpy,numba"\nhorizons = [2, 4]\n'
                 'duration = 0.03\ninitial-iterations = 2\nmode = "lockstep"\nseeds = 2\n'
                 f'out = "{tmp_path / "o"}"\n')
    flags = {"tasks": "iiwa-reach,hyq-stand", "backends": "numpy,numba", "horizons": "2,4", "duration": "0.03",
             "initial_iterations": "2", "mode": "lockstep", "seeds": "2", "out": str(tmp_path / "o")}
    a, b = load_config(f, {}), load_config(None, flags)
    assert a == b and [s.run_id for s in plan_runs(a)] == [s.run_id for s in plan_runs(b)]
    assert len(plan_runs(a)) == 16 and {s.seed for s in plan_runs(a)} == {0, 1}
    assert load_config(f, {"horizons": "8"}).horizons == (8,)          # a flag overrides the file
    f.write_text(f.read_text() + "horizon_typo = 3\n")
    with pytest.raises(ConfigError, match="unknown key 'horizon_typo'"):
        load_config(f, {})
    rc, _, stderr = _main(["study", str(f)])
    assert rc == 2 and "unknown key 'horizon_typo'" in stderr
    with pytest.raises(ConfigError, match="realtime"):
        load_config(None, {**flags, "latency": "fixed:20ms"})


def test_seed_perturbs_the_initial_state_within_limits():
    import tasks

    for name in ("iiwa-reach", "hyq-stand"):
        task = tasks.get_task(name)
        m, x0 = task.model, task.initial_state()
        assert np.array_equal(cli.perturbed_initial_state(m, x0, 0), x0)
        x1, x2 = cli.perturbed_initial_state(m, x0, 1), cli.perturbed_initial_state(m, x0, 2)
        assert np.array_equal(x1, cli.perturbed_initial_state(m, x0, 1)) and not np.allclose(x1, x2)
        qi = np.asarray(m.scalar_q_index)
        dq = (x1 - x0)[qi]
        assert 0 < np.max(np.abs(dq)) < 6 * cli.SEED_SIGMA_Q
        assert np.all(x1[:m.nq][qi] >= m.q_lower[qi]) and np.all(x1[:m.nq][qi] <= m.q_upper[qi])
        if m.has_floating_base:       # the base pose and velocity are left as they are
            assert np.array_equal(x1[:7], x0[:7]) and np.array_equal(x1[m.nq:m.nq + 6], x0[m.nq:m.nq + 6])


def test_sigint_discards_the_run_in_flight_and_resumes(tiny, tmp_path):
    src, _, _ = tiny
    out = tmp_path / "int"
    shutil.copytree(src, out)
    args = [*TINY, "--horizons", "2,4,16", "--backends", "numpy", "--out", str(out), "--no-plots"]
    proc = subprocess.Popen([sys.executable, "-m", "mpc", "study", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    err = ""
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        err += line
        if "to run)" in line or not line:
            break
    assert "(4 already done, 2 to run)" in err, err
    time.sleep(0.5)                       # the first new run is in flight (its subprocess alone takes longer
    proc.send_signal(signal.SIGINT)       # to start); on a fast machine it may finish first: then the second is
    _, rest = proc.communicate(timeout=60)
    err += rest
    assert proc.returncode == 130, err[-2000:]
    done = re.search(r"interrupted: (\d) of 6 runs done \(1 in flight discarded\)", err)
    assert done and int(done.group(1)) in (4, 5) and "Traceback" not in err, err[-2000:]
    assert not list((out / "runs").glob(".*"))            # nothing half-written left
    n = int(done.group(1))
    rc, _, stderr = _main(["study", *args, "--dry-run"])
    assert rc == 0 and f"{n} done, {6 - n} to run" in stderr      # a second invocation resumes from here


def test_ray_executor_gives_the_same_rows(tiny, tmp_path):
    pytest.importorskip("ray", reason="the Ray executor needs ray: pip install 'mpc-accel[cluster]'")
    src, _, _ = tiny
    out = tmp_path / "ray"
    sub = ["--tasks", "iiwa-reach", "--backends", "numpy"]
    rc, stdout, stderr = _main(["study", *TINY, *sub, "--executor", "ray", "--jobs", "2", "--threads", "1",
                                "--out", str(out), "--no-plots"])
    assert rc == 0, stderr
    assert "ray (a single-machine Ray started here)" in stderr
    ray_rows = json.loads((out / "results.json").read_text())["rows"]
    local_rows = [r for r in json.loads((src / "results.json").read_text())["rows"]
                  if r["task"] == "iiwa-reach" and r["backend"] == "numpy"]
    cfg_cols = table.CONFIG_COLUMNS
    assert len(ray_rows) == 2
    assert [{c: r[c] for c in cfg_cols} for r in ray_rows] == [{c: r[c] for c in cfg_cols} for r in local_rows]
    for r, q in zip(ray_rows, local_rows):
        assert r["status"] == q["status"] == "completed" and r["updates"] == q["updates"]
        assert json.loads((out / "runs" / r["run_id"] / "run.json").read_text())["executor"] == "ray"
        # same controller, same simulation: MuJoCo's trajectories agree (timings do not enter lockstep)
        a = np.load(out / "runs" / r["run_id"] / "trajectory.npz")["x"]
        b = np.load(src / "runs" / q["run_id"] / "trajectory.npz")["x"]
        assert np.allclose(a, b, atol=1e-9)
