"""The solver's warm-up (solvers/warmup.py) as the MPC controller uses it: on a cold cache the
backend's batched derivative kernels compile in a second process while this one compiles the
solver's own kernels, each reported as it starts; the backend's settings are restored; the
controller's own extra work (the latency predictor) runs under the same reporting; a backend
that is not warmed by use runs its own warm-up with counted steps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mpc import MPC
from solvers.warmup import WarmupResult, batched_derivative_calls
from tasks import get_task
from tasks.iiwa_reach import DEFAULT_TARGETS

pytest.importorskip("numba")


def _task():
    return get_task("iiwa-reach", targets=DEFAULT_TARGETS[:1])


class _Job:
    """Stands in for the child compile (dynamics.numba_backend.compile_ahead.CompileJob)."""

    def __init__(self, calls, log):
        self.calls, self.log = calls, log

    def wait(self, timeout=None) -> bool:
        self.log.append("wait")
        return True


class _Predictor:
    """Stands in for the controller's state predictor (one step of the model's dynamics)."""

    def __init__(self, h, log):
        self.h, self.log = h, log

    def step(self, x, u):
        self.log.append(("predict", self.h))
        return x


def test_cold_cache_compiles_the_derivatives_alongside_the_solver_kernels(monkeypatch):
    ctrl = MPC(_task(), solver="ddp", backend="numba", horizon=8, dt=0.02, latency_compensation=0.01)
    be, solver = ctrl.backend, ctrl.solver
    calls = batched_derivative_calls(solver)
    assert calls == [("aba_derivatives", 8), ("aba_second_derivatives", 8)]
    log = []
    job_calls = [("aba_second_derivatives", 8)]       # the child takes the second order; the parent the rest
    monkeypatch.setattr(be, "compile_ahead", lambda model, c: log.append(("ahead", list(c))) or _Job(job_calls, log))
    rollout_warmup = solver.forward.warmup
    monkeypatch.setattr(solver.forward, "warmup", lambda: log.append("rollout") or rollout_warmup())
    derivatives = be.aba_derivatives
    monkeypatch.setattr(be, "aba_derivatives", lambda *a, **k: log.append("aba_derivatives") or derivatives(*a, **k))
    solve = solver.solve
    monkeypatch.setattr(solver, "solve", lambda **k: log.append(("solve", be.parallel_threshold_us)) or solve(**k))
    monkeypatch.setattr(MPC, "_predictor", lambda self, h: _Predictor(h, log))
    threshold = be.parallel_threshold_us
    steps = []
    seconds = ctrl.warmup(progress=lambda label, done, total: steps.append((label, done, total)))
    assert seconds > 0
    # the child is started first with every batched derivative call, the parent compiles what the child did
    # not take (first order) and its own kernels (rollout) before waiting, then the throw-away iterations
    # (each a cold solve and a warm-started one): one at the backend's threshold, one with every batch
    # sent to the parallel variant
    assert log[0] == ("ahead", calls)
    assert log.index("aba_derivatives") < log.index("wait") and log.index("rollout") < log.index("wait")
    solves = [e for e in log if isinstance(e, tuple) and e[0] == "solve"]
    assert solves == [("solve", threshold)] * 2 + [("solve", 0.0)] * 2 and log.index(solves[0]) > log.index("wait")
    assert be.parallel_threshold_us == threshold
    assert log[-1] == ("predict", ctrl.dt)            # the latency predictor's step, last, under the reporting
    assert steps[0] == ("aba_second_derivatives (in a second process, alongside)", 1, None)
    assert [d for _, d, _ in steps] == list(range(1, len(steps) + 1))


def test_solver_warmup_reports_what_it_compiled():
    ctrl = MPC(_task(), solver="ilqr", backend="numba", horizon=8, dt=0.02)
    ctrl.warmup()                      # compiled (or loaded) now: a second warm-up compiles nothing
    seen = []
    res = ctrl.solver.warmup(progress=lambda label, done, total: seen.append(label))
    assert isinstance(res, WarmupResult) and res.seconds > 0
    assert res.compiled == seen == [] and res.compiled_ahead == []


def test_a_backend_warmed_by_its_own_warmup_counts_its_steps(monkeypatch):
    ctrl = MPC(_task(), solver="ddp", backend="numpy", horizon=8, dt=0.02)
    be = ctrl.backend
    assert not be.warmup_by_use and not ctrl.solver.compiled

    def backend_warmup(model, progress=None):
        for i, label in enumerate(("rnea", "aba")):
            progress(label, i, 2)
    monkeypatch.setattr(be, "warmup", backend_warmup)
    steps = []
    res = ctrl.solver.warmup(progress=lambda label, done, total: steps.append((label, done, total)))
    assert steps == [("rnea", 0, 2), ("aba", 1, 2)]
    assert res.compiled == [] and res.compiled_ahead == []
    # a compiled solver on such a backend: its kernels are one more step
    ctrl.solver.compiled = True
    monkeypatch.setattr(ctrl.solver, "solve",
                        lambda *a, **k: steps.append("solve") or SimpleNamespace(iterations=1, converged=False))
    steps.clear()
    ctrl.solver.warmup(progress=lambda label, done, total: steps.append((label, done, total)))
    assert steps == [("rnea", 0, 3), ("aba", 1, 3), ("solver kernels", 2, 3), "solve"]


def _compiled_signatures() -> dict[str, int]:
    """Number of compiled (or cache-loaded) signatures of every numba kernel of the project."""
    import sys

    from numba.core.registry import CPUDispatcher
    out = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(("dynamics.", "solvers.")):
            continue
        for key, v in list(vars(mod).items()):
            if isinstance(v, CPUDispatcher):
                out[f"{name}.{key}"] = len(v.signatures)
    return out


@pytest.mark.parametrize("name, duration", [("hyq-stand", 0.1), ("hyq-trot", 0.62), ("humanoid-walk", 0.95)])
def test_the_closed_loop_meets_no_kernel_the_warmup_left_out(name, duration):
    """After MPC.warmup, a closed loop adds no kernel signature: hyq-stand's hard cones start at the
    optimum (a warm-up solve that stopped at the initial KKT check would skip the QP's kernels),
    the gaits' first swing and touchdown-impulse knots come after t = 0 (Task.warmup_times), and the
    walk's default guess diverges there (the warm-up then holds the state)."""
    from sim.runner import simulate

    task = get_task(name)
    d = task.defaults
    ctrl = MPC(task, solver=d.solver, backend="numba", horizon=8, dt=d.dt, initial_iterations=2)
    ctrl.warmup()
    before = _compiled_signatures()
    h = float(task.model.mj_model.opt.timestep)
    simulate(task.model, ctrl, task.initial_state(), duration, mode="lockstep", update_every=max(1, round(d.dt / h)))
    after = _compiled_signatures()
    assert {k: (before.get(k, 0), n) for k, n in after.items() if n != before.get(k, 0)} == {}
