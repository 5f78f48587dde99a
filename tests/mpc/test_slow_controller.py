"""Slow controllers degrade, they do not destabilise; Ctrl-C keeps what was simulated.

* ``mpc-accel run iiwa-reach --mode realtime --latency fixed:60ms``: every plan is applied 60 ms
  after its state was measured (six times the update period of 10 ms); MuJoCo must show the arm
  inside its joint limits and the commands inside the torque limits.
* SIGINT during ``mpc-accel run``: exit 130 with one line, and a valid summary marked interrupted
  with the seconds already simulated."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from tests.helpers.signal_helpers import default_sigint

ROOT = Path(__file__).resolve().parents[2]


def _run(args, **kw):
    return subprocess.run([sys.executable, "-m", "mpc", *args], cwd=ROOT, capture_output=True, text=True, **kw)


def test_fixed_latency_keeps_the_arm_inside_its_limits(tmp_path):
    out = tmp_path / "slow"
    p = _run(["run", "iiwa-reach", "--mode", "realtime", "--latency", "fixed:60ms", "--solver", "ilqr",
              "--horizon", "16", "--duration", "2.5", "--quiet", "--out", str(out)], timeout=600)
    assert p.returncode in (0, 3), p.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["latency"] == "fixed 60 ms" and s["completed"]
    tr = np.load(out / "trajectory.npz")
    lo, hi = tr["u_lower"], tr["u_upper"]
    assert np.all(tr["u"] >= lo - 1e-9) and np.all(tr["u"] <= hi + 1e-9)
    assert np.all(tr["u_cmd"] >= lo - 1e-9) and np.all(tr["u_cmd"] <= hi + 1e-9), "commands beyond the torque limits"
    import dynamics
    m = dynamics.load_model("iiwa")
    q = tr["q"]
    lim = m.mj_model.jnt_range[m.mj_model.jnt_limited.astype(bool)]
    assert np.all(q >= lim[:, 0] - 1e-3) and np.all(q <= lim[:, 1] + 1e-3), "joint limits exceeded"
    lat = tr["update_latency"]
    assert np.allclose(lat, 0.06) and np.all(np.isfinite(tr["x"]))


def test_sigint_writes_a_partial_summary_and_exits_130(tmp_path):
    out = tmp_path / "int"
    proc = subprocess.Popen([sys.executable, "-m", "mpc", "run", "iiwa-reach", "--duration", "30", "--solver", "ilqr",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    deadline = time.time() + 300
    err = ""
    # wait until the closed loop runs (the progress line shows simulated time), then interrupt
    while time.time() < deadline:
        line = proc.stderr.readline()
        err += line
        if "simulating" in line or "simulated" in line:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err += rest
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted at t =" in err and "Traceback" not in err
    s = json.loads((out / "summary.json").read_text())
    assert s["aborted"] == "interrupted" and s["completed"] is False
    assert 0 < s["timing"]["sim_time_s"] < 30
    tr = np.load(out / "trajectory.npz")
    assert tr["t"].size > 0 and np.all(np.isfinite(tr["x"]))
    assert not list(out.glob(".*partial*"))
