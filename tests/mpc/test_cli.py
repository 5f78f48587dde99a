"""The ``mpc-accel`` command line (mpc/cli.py): listings, argument errors, a short run with
outputs, and a user task loaded from a file. Runs are kept tiny (horizon 4, 0.1 s simulated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _python_m(*args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "mpc", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def test_python_m_help_and_listings():
    r = _python_m("--help")
    assert r.returncode == 0 and "mpc-accel run iiwa-reach" in r.stdout and "examples:" in r.stdout
    r = _python_m("run", "--help")
    assert r.returncode == 0 and "--horizon" in r.stdout and "lockstep" in r.stdout and "realtime" in r.stdout
    r = _python_m("tasks")
    assert r.returncode == 0 and "iiwa-reach" in r.stdout
    r = _python_m("backends")
    assert r.returncode == 0
    assert "numpy" in r.stdout and "available" in r.stdout
    assert "gpu" in r.stdout  # planned backends are listed with the reason they are unavailable
    from dynamics import default_backend_name
    assert f"* default: {default_backend_name()}" in r.stdout
    assert f"* {default_backend_name()} " in r.stdout      # the default is marked in the list
    r = _python_m("run", "--help")
    for option in ("--max-iter", "--tol", "--integrator", "--second-order", "--refresh-gains", "--no-box",
                   "--line-search"):
        assert option in r.stdout, option
    assert f"default here: {default_backend_name()}" in " ".join(r.stdout.split())   # argparse wraps lines


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["run", "no-such-task"], "unknown task 'no-such-task'"),
    (["run", "iiwa-reach", "--solver", "newton"], "invalid choice: 'newton'"),
    (["run", "iiwa-reach", "--backend", "tpu"], "unknown backend 'tpu'"),
    (["run", "iiwa-reach", "--backend", "gpu"], "backend 'gpu' is not available"),
    (["run", "iiwa-reach", "--horizon", "0"], "expected a positive integer"),
    (["run", "iiwa-reach", "--horizon", "ten"], "expected a positive integer, got 'ten'"),
    (["run", "iiwa-reach", "--dt", "-0.01"], "expected a positive finite number"),
    (["run", "iiwa-reach", "--duration", "nan"], "expected a positive finite number"),
    (["run", "iiwa-reach", "--mode", "fast"], "invalid choice: 'fast'"),
    (["run", "iiwa-reach", "--tol", "-1"], "expected a finite number >= 0"),
    (["run", "iiwa-reach", "--integrator", "midpoint"], "invalid choice: 'midpoint'"),
    (["run", "iiwa-reach", "--line-search", "golden"], "invalid choice: 'golden'"),
    (["run", "iiwa-reach", "--second-order", "exact"], "invalid choice: 'exact'"),
    (["run", "iiwa-reach", "--backend", "numba", "--second-order", "complex"], "needs a complex-step-safe backend"),
    (["run", "iiwa-reach", "--task-arg", "oops"], "expected KEY=VALUE"),
    (["run", "iiwa-reach", "--task-arg", "no_such_option=1"], "unexpected keyword argument 'no_such_option'"),
    (["run", "missing_file.py:Task"], "no such file"),
    (["run", "os:path"], "not a subclass of tasks.Task"),
])
def test_bad_arguments_give_one_line_and_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        code = main(args)
        raise SystemExit(code)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1


def test_viewer_without_display_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    if not sys.platform.startswith("linux"):
        pytest.skip("the display check is Linux-specific")
    assert main(["run", "iiwa-reach", "--viewer", "--duration", "0.1"]) == 2
    assert "needs a display" in capsys.readouterr().err


def test_short_run_writes_outputs(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "iiwa-reach", "--solver", "ilqr", "--horizon", "4", "--dt", "0.02", "--duration", "0.1",
                 "--initial-iterations", "3", "--out", str(out), "--quiet", "--plot"])
    assert code == 0
    text = capsys.readouterr().out
    assert "control loop" in text and "per stage" in text and "files:" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] and s["config"]["solver"] == "ilqr" and s["config"]["update_every"] == 20
    tm = s["timing"]
    assert tm["updates"] == 4 and tm["control_loop_hz"] > 0 and tm["update_latency_ms"]["median"] > 0
    assert tm["warmup_s"] is not None and tm["initial_solve_s"] > 0
    for stage in ("derivatives", "backward", "forward", "cost"):
        assert tm["stage_ms"][stage] > 0
    assert abs(sum(tm["stage_fraction"].values()) - 1.0) < 1e-6
    # the policy saturates its command: nothing beyond the limits, although the 80 ms horizon
    # is aggressive enough to drive torques to them
    assert s["constraints"]["torque_limit"]["violation_steps"] == 0
    assert s["constraints"]["joint_limit"]["violation_steps"] == 0
    crit = {c["name"]: c for c in s["evaluation"]["criteria"]}
    assert crit["target 1 time to reach"]["value"] is None and crit["target 1 time to reach"]["passed"] is False
    assert "not run" in crit["target 1 time to reach"]["detail"]          # only 0.1 s of target 0 ran
    assert crit["torque limit"]["passed"] is True and s["success"] is False
    assert "target 0 time to reach" in text and "not run" in text and "FAILED" in text
    traj = np.load(out / "trajectory.npz")
    assert traj["x"].shape == (100, 14) and traj["update_latency"].shape == (4,)
    assert traj["metric_ee_error"].shape == (100,)
    # MuJoCo's arm moved towards target 0 (0.32 m away at home)
    assert traj["metric_ee_error"][-1] < traj["metric_ee_error"][0] - 0.1
    assert np.all(traj["u_cmd"] <= traj["u_upper"]) and np.all(traj["u_cmd"] >= traj["u_lower"])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert any("no plots" in n for n in s["notes"])
    else:
        for name in ("tracking.png", "torques.png", "latency.png"):
            assert (out / name).stat().st_size > 1000


USER_TASK = '''
import numpy as np
from tasks import get_task
from tasks.iiwa_reach import IiwaReach

class HoldHome(IiwaReach):
    """Hold the end effector at one point (a user task defined in a file)."""
    def __init__(self, **kw):
        super().__init__(targets=[[0.6, 0.0, 0.3]], switch_period=0.2, **kw)
        self.name = "hold-home"
'''


def test_user_task_from_file_via_python_m(tmp_path):
    f = tmp_path / "my_task.py"
    f.write_text(USER_TASK)
    r = _python_m("run", f"{f}:HoldHome", "--solver", "ilqr", "--horizon", "4", "--dt", "0.02",
                  "--initial-iterations", "3", "--out", str(tmp_path / "o"), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["task"] == "hold-home" and s["config"]["duration"] == pytest.approx(0.2)
    assert s["timing"]["updates"] == 9


def test_solver_settings_from_the_command_line(tmp_path):
    """--no-box, --line-search, --integrator, --refresh-gains, --max-iter and --tol reach the run
    (the summary's config) and the run still keeps its commands inside the limits."""
    out = tmp_path / "o"
    code = main(["run", "iiwa-reach", "--backend", "numpy", "--solver", "fddp", "--horizon", "4", "--dt", "0.02",
                 "--duration", "0.1", "--initial-iterations", "3", "--no-box", "--line-search", "parallel",
                 "--integrator", "rk4", "--refresh-gains", "--max-iter", "2", "--tol", "0", "--out", str(out),
                 "--json"])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    c = s["config"]
    assert (c["box"], c["line_search"], c["integrator"], c["refresh_gains"], c["iterations"], c["tol"]) == \
        (False, "parallel", "rk4", True, 2, 0.0)
    assert s["timing"]["iterations_per_update"] == 2.0           # --tol 0: every iteration runs
    traj = np.load(out / "trajectory.npz")
    assert np.all(traj["u_cmd"] <= traj["u_upper"]) and np.all(traj["u_cmd"] >= traj["u_lower"])



def test_rollout_flags_reach_the_sampling_planner(tmp_path, monkeypatch):
    """--rollout mujoco and --rollout-threads build the planner's MuJoCo rollouts on that many
    threads (hyq-stand: no contact schedule), and the summary's config records them."""
    import solvers.sampling.base as sampling_base
    made = []
    real = sampling_base.MujocoRollout

    def recording(problem, threads=1):
        made.append(threads)
        return real(problem, threads)
    monkeypatch.setattr(sampling_base, "MujocoRollout", recording)
    out = tmp_path / "o"
    code = main(["run", "hyq-stand", "--backend", "numpy", "--solver", "sampling", "--samples", "4", "--horizon", "3",
                 "--dt", "0.02", "--duration", "0.04", "--initial-iterations", "1", "--rollout", "mujoco",
                 "--rollout-threads", "2", "--out", str(out), "--json"])
    assert code == 0
    assert made == [2]
    c = json.loads((out / "summary.json").read_text())["config"]
    assert (c["rollout"], c["rollout_threads"]) == ("mujoco", 2)

BROKEN_COST_TASK = '''
import numpy as np
from tasks.iiwa_reach import IiwaReach


class Fragile:
    """A plain-Python cost with a bug that shows once the run is past 0.05 s."""

    def __init__(self, task):
        self.task = task

    def residual(self, x, u):
        if self.task.now > 0.05:
            return undefined_name_in_cost(x)
        return np.zeros((x.shape[0], 1))

    def residual_jacobian(self, x, u):
        return np.zeros((x.shape[0], 1, 14)), None if u is None else np.zeros((x.shape[0], 1, 7))


class Broken(IiwaReach):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.now = 0.0
        self.name = "broken"

    def build_problem(self, x0, horizon, dt, backend=None, **opts):
        p = super().build_problem(x0, horizon, dt, backend=backend, **opts)
        p.running_cost.add("fragile", Fragile(self), 1.0)
        return p

    def update_problem(self, problem, t):
        self.now = t
        super().update_problem(problem, t)


class BadInit(IiwaReach):
    def __post_init__(self):
        raise ZeroDivisionError("bug in the constructor")
'''


def test_errors_in_a_users_cost_show_their_traceback(tmp_path, capsys):
    """An exception inside a task's cost during the run ends it with exit code 1; stderr has the
    traceback down to the user's line (not a one-line summary), and the report is still written."""
    f = tmp_path / "broken_task.py"
    f.write_text(BROKEN_COST_TASK)
    out = tmp_path / "o"
    code = main(["run", f"{f}:Broken", "--backend", "numpy", "--solver", "ilqr", "--horizon", "4", "--dt", "0.02",
                 "--duration", "0.2", "--initial-iterations", "3", "--out", str(out), "--quiet"])
    assert code == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "broken_task.py" in err and "undefined_name_in_cost" in err and "NameError" in err
    s = json.loads((out / "summary.json").read_text())
    assert not s["completed"] and "NameError" in s["aborted"]

    code = main(["run", f"{f}:BadInit", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" in err and "bug in the constructor" in err and "__post_init__" in err


def test_errors_importing_a_users_task_file_show_their_traceback(tmp_path, capsys):
    f = tmp_path / "bad_import.py"
    f.write_text("import numpy as np\n\nTHRESHOLD = 2 * missing_helper()\n")
    code = main(["run", f"{f}:Task"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" in err and "bad_import.py" in err and "missing_helper" in err
