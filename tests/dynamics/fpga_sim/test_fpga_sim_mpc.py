"""The MPC runner charges an emulated accelerator's modelled time, not the host's emulation time,
in real-time mode (fpga-sim), and says so in the summary."""

from __future__ import annotations

import numpy as np

import dynamics
import tasks
from mpc import MPC
from sim import report
from sim.runner import simulate


def test_realtime_charges_simulated_accelerator_time():
    task = tasks.get_task("iiwa-reach")
    be = dynamics.get_backend("fpga-sim", emulate="gradients")
    ctrl = MPC(task, solver="ilqr", backend=be, horizon=8, dt=0.02, initial_iterations=3)
    assert ctrl.problem.backend is be
    r = simulate(task.model, ctrl, task.initial_state(), 0.1, mode="realtime", update_every=20)
    assert r.aborted is None, r.aborted
    assert r.updates
    for u in r.updates:
        i = u.info
        assert i["simulated_s"] > 0 and i["emulation_wall_s"] > 0
        # the emulation takes far longer on the host than the modelled accelerator would
        assert i["emulation_wall_s"] > i["simulated_s"]
        assert np.isclose(u.latency, i["measured_latency_s"] - i["emulation_wall_s"] + i["simulated_s"])
    s = report.summarize(r, task, config={})
    assert s["timing"]["latency_source"].startswith("simulated")
    assert s["timing"]["measured_update_latency_ms"]["median"] > s["timing"]["update_latency_ms"]["median"]
