"""fpga-sim in the solver loop with its host side on the fastest CPU path (issue 25 item 4): with
``host="numba"`` (the default) the solvers take the compiled rollouts, cost kernels and Riccati pass
on the numba backend's dynamics — asked for through the public Backend capabilities only — and the
derivatives stay emulated; ``host="python"`` keeps the Python reference loops.

Oracles: the numba backend (a float64 implementation independent of the fixed-point datapath) for
the derivatives, elementwise within the rigorous error bound the backend declares for that call
(``last_error_bound``); the solver's result against
numba's within the drift three iterations of Q16.16 derivatives cause (measured ≤ 6e-4 relative on
the controls, ≤ 3e-3 on the cost; asserted with about 5x margin).
"""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
import tasks
from dynamics.accelerator_host import resolve_host
from solvers import ILQR
from solvers.costs.compiled import runs_kernel_library as costs_run_kernel_library
from solvers.rollout_numba import compiled_rollout_available

N, DT = 8, 0.02


@pytest.fixture(scope="module")
def reach():
    task = tasks.get_task("iiwa-reach")
    return task, task.initial_state()


def test_host_numba_takes_the_compiled_paths(reach):
    task, x0 = reach
    be = dynamics.get_backend("fpga-sim")
    assert be.host == "numba" and be.prefers_compiled_solver
    p = task.build_problem(x0, N, DT, backend=be)
    assert compiled_rollout_available(p)
    assert costs_run_kernel_library(be.compiled_kinematics(p.model))
    assert ILQR(p).compiled
    # the derivatives are still the accelerator's: emulated, charged simulated time
    t0 = be.simulated_s_total
    p.derivatives(*p.initial_guess())
    assert be.simulated_s_total > t0 and be.last_timing.function == "dFD" and be.last_timing.knots == N


def test_host_python_keeps_the_reference_loops(reach):
    task, x0 = reach
    be = dynamics.get_backend("fpga-sim", host="python")
    assert not be.prefers_compiled_solver
    assert be.compiled_forward_dynamics(task.model) is None and be.compiled_kinematics(task.model) is None
    p = task.build_problem(x0, N, DT, backend=be)
    assert not compiled_rollout_available(p) and not ILQR(p).compiled


def test_options_from_a_spec_string():
    """What a command line or a study configuration gives: ``name:key=value,...``."""
    from dynamics.backend import parse_backend_spec
    be = dynamics.get_backend("fpga-sim:emulate=gradients,host=python")
    assert be.emulate == "gradients" and be.host == "python"
    assert parse_backend_spec("gpu:simulate=true,threads_per_block=8,dtype=float32") == (
        "gpu", {"simulate": True, "threads_per_block": 8, "dtype": "float32"})
    assert parse_backend_spec("numba") == ("numba", {})
    with pytest.raises(ValueError, match="key=value pairs"):
        dynamics.get_backend("fpga-sim:emulate")


def test_host_option_errors(monkeypatch):
    with pytest.raises(ValueError, match="host must be one of numba, python"):
        dynamics.get_backend("fpga-sim", host="cuda")
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real(name, *a))
    assert resolve_host(None, "fpga-sim") == "python"
    with pytest.raises(dynamics.BackendUnavailableError, match="pip install numba"):
        resolve_host("numba", "fpga-sim")


def test_same_result_as_numba(reach):
    task, x0 = reach
    fp, nb = dynamics.get_backend("fpga-sim"), dynamics.get_backend("numba")
    pf = task.build_problem(x0, N, DT, backend=fp)
    pn = task.build_problem(x0, N, DT, backend=nb)
    # the derivatives the solver asks for: the emulated ∇FD against numba's, within the declared bound
    model = task.model
    rng = np.random.default_rng(3)
    q = model.random_configuration(rng, size=(N,))
    v, tau = rng.normal(size=(N, model.nv)), 10.0 * rng.normal(size=(N, model.nv))
    got = fp.aba_derivatives(model, q, v, tau)
    bounds = fp.last_error_bound
    assert fp.last_timing.overflow_total == 0
    for g, r, e in zip(got, nb.aba_derivatives(model, q, v, tau), bounds):
        assert (np.abs(g - r) <= e.reshape(g.shape) + 1e-9 * max(1.0, np.abs(r).max())).all()
    # the closed solve: three iterations from the same guess
    rf = ILQR(pf).solve(max_iter=3)
    rn = ILQR(pn).solve(max_iter=3)
    assert np.isfinite(rf.cost) and rf.cost < pn.cost(*pn.initial_guess()).sum()
    assert abs(rf.cost - rn.cost) <= 1e-2 * abs(rn.cost)
    assert np.abs(rf.us - rn.us).max() <= 3e-3 * max(1.0, np.abs(rn.us).max())


def test_gradients_mode_computes_contact_values_on_the_host(bundled):
    """``emulate="gradients"``: contact values are the host's (numba's fused kernel, identical
    results, no accelerator time); their derivatives stay on the emulated accelerator."""
    from dynamics.contact import ContactSet
    m = bundled["hyq"]
    cs = ContactSet(m, frames=("lf_foot", "rf_foot", "lh_foot", "rh_foot"), kind="point")
    be, nb = dynamics.get_backend("fpga-sim", emulate="gradients"), dynamics.get_backend("numba")
    rng = np.random.default_rng(0)
    q = m.random_configuration(rng, size=(2,))
    v, tau = rng.normal(size=(2, m.nv)), rng.normal(size=(2, m.nv))
    t0 = be.simulated_s_total
    got, ref = be.contact_dynamics(m, q, v, tau, cs), nb.contact_dynamics(m, q, v, tau, cs)
    assert be.simulated_s_total == t0
    assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
    be.contact_dynamics_derivatives(m, q, v, tau, cs)
    assert be.simulated_s_total > t0
