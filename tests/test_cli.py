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

ROOT = Path(__file__).resolve().parents[1]


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
    assert s["constraints"]["torque_limit"]["violation_steps"] >= 0
    assert len(s["targets"]) == 4 and s["targets"][1]["t_start_s"] is None  # only 0.1 s of target 0 ran
    traj = np.load(out / "trajectory.npz")
    assert traj["x"].shape == (100, 14) and traj["update_latency"].shape == (4,)
    assert traj["metric_ee_error"].shape == (100,)
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
