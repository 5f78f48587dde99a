"""DDP with the analytical second-order dynamics tensors (FDSVA-SO, Singh, Russell & Wensing 2022
eq. 46, ``backend.aba_second_derivatives``) produces the same iterates as DDP with the numerical
providers of ``dynamics.second_order_numerical`` — central differences of the analytical
first-order derivatives (the paper's "Finite-Diff-2") and complex step — which are the independent
oracles here. Speed is measured in ``benchmarks/second_order_ddp.py``, never asserted.

Every solve uses ``gauss_newton_fallback=False`` so that each backward pass really contains the
curvature ``V'_x · F2`` (with the fallback an indefinite ``Q_uu`` would silently switch a pass to
Gauss–Newton, where the tensors play no role), and ``tol=0`` so that all solves run the same fixed
number of iterations. Which provider ran is recorded by a spy backend (counts
``aba_second_derivatives`` calls) and a wrapper around the numerical provider (records its
``method``), so a test cannot pass with the wrong path.

Tolerances: on these trajectories the central-difference ``F2`` differs from the analytical one by
≈ 5e-11 relative to its largest entry (complex step: ≈ 2e-15). Over 8 DDP iterations on iiwa the
observed differences (relative to the largest entry) are ≤ 4e-10 with central differences (cost
history, iterates xs/us, final gains) and ≤ 3e-14 with complex step; on HyQ ≤ 2e-10 and ≤ 4e-15.
The bounds — 1e-7 for central (tighter than the issue's 1e-6 on the cost), 1e-10 for complex —
leave ≥ 200× margin, while a 1e-3 relative error in ``∂²a/∂q²`` moves them by 3e-5 to 4e-4
(iiwa) and DDP without the tensors (iLQR, F2 = 0) by O(1): both are checked to fail the comparison.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import solvers.integrators.acceleration as acceleration
import tasks
from benchmarks.problems import hyq_free_base
from dynamics.numpy_backend import NumpyBackend
from solvers import DDP, ILQR, ShootingProblem

N_IIWA, DT_IIWA, ITERS_IIWA = 16, 0.03, 8
N_HYQ, DT_HYQ, ITERS_HYQ = 8, 0.02, 3
TOL_FD = 1e-7        # relative, central differences vs analytical
TOL_COMPLEX = 1e-10  # relative, complex step vs analytical


class SpyBackend(NumpyBackend):
    """The numpy backend, counting calls of the analytical second-order entry points (the full
    tensors, and the bracketed terms ``∂²a = −M⁻¹ B`` that DDP's Euler knots take where the backend
    has them, both under ``"aba_second_derivatives"``; the latter also under ``"bracket"``).

    ``scale_d2a_dq2`` (default 1) multiplies the returned ``∂²a/∂q²`` (or ``B_qq``, the same
    scaling of ``∂²a/∂q²``) — a deliberately wrong tensor, used to show the comparison detects a
    small error. ``bracket=False``: the backend does not advertise the bracketed terms (DDP then
    takes the full tensors and does not fold ``−M⁻¹`` into its factor C)."""

    def __init__(self, scale_d2a_dq2: float = 1.0, bracket: bool = True):
        self.calls: Counter = Counter()
        self.scale = scale_d2a_dq2
        if not bracket:
            self._aba_second_derivatives_bracket = None     # supports() is then False

    def aba_second_derivatives(self, model, q, v, tau, fext=None, out=None):
        self.calls["aba_second_derivatives"] += 1
        a_qq, a_vv, a_qv, a_qt = super().aba_second_derivatives(model, q, v, tau, fext, out=out)
        a_qq *= self.scale          # this call's own array (fresh, or the caller's out)
        return a_qq, a_vv, a_qv, a_qt

    def aba_second_derivatives_bracket(self, model, q, v, tau, fext=None, out=None):
        self.calls["aba_second_derivatives"] += 1
        self.calls["bracket"] += 1
        b_qq, b_vv, b_qv, b_qt = super().aba_second_derivatives_bracket(model, q, v, tau, fext, out=out)
        b_qq *= self.scale
        return b_qq, b_vv, b_qv, b_qt


def _spy_on_numerical_provider(mp: pytest.MonkeyPatch) -> Counter:
    """Wrap the numerical provider as the free-dynamics acceleration calls it; count calls by method."""
    calls: Counter = Counter()
    original = acceleration.aba_second_derivatives_numerical

    def recording(backend, model, q, v, tau, fext=None, method="central", eps=None):
        calls[method] += 1
        return original(backend, model, q, v, tau, fext, method=method, eps=eps)

    mp.setattr(acceleration, "aba_second_derivatives_numerical", recording)
    return calls


@pytest.fixture
def numerical_calls(monkeypatch) -> Counter:
    return _spy_on_numerical_provider(monkeypatch)


class RecordingDDP(DDP):
    """DDP that keeps a copy of every accepted iterate (xs, us)."""

    def solve(self, *args, **kwargs):
        self.iterates: list[tuple[np.ndarray, np.ndarray]] = []
        return super().solve(*args, **kwargs)

    def _accept_step(self, ls) -> None:
        super()._accept_step(ls)
        self.iterates.append((self.xs.copy(), self.us.copy()))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| relative to max |a| (at least 1)."""
    return float(np.abs(a - b).max() / max(1.0, np.abs(a).max()))


def _run(problem: ShootingProblem, iters: int, solver=RecordingDDP):
    s = solver(problem, gauss_newton_fallback=False)   # (no effect on iLQR: it has no curvature)
    res = s.solve(max_iter=iters, tol=0.0)    # same initial guess: gravity compensation rolled out
    return res, getattr(s, "iterates", None)


def _differences(ref, ref_its, other, other_its) -> dict[str, float]:
    """Largest relative differences of the cost histories (per entry), of every accepted iterate
    (xs, us) and of the final gains (K, k)."""
    h_ref, h_oth = np.array(ref.cost_history), np.array(other.cost_history)
    assert h_ref.shape == h_oth.shape and len(ref_its) == len(other_its)
    return {
        "cost": float(np.max(np.abs(h_ref - h_oth) / np.abs(h_ref))),
        "xs": max(_rel(a[0], b[0]) for a, b in zip(ref_its, other_its)),
        "us": max(_rel(a[1], b[1]) for a, b in zip(ref_its, other_its)),
        "K": _rel(ref.K, other.K),
        "k": _rel(ref.k, other.k),
    }


def _assert_same_run(ref, ref_its, other, other_its, tol: float) -> dict[str, float]:
    """Same iteration count, step sizes, regularisation and no Gauss–Newton fallback; cost
    histories, every iterate and the final gains within ``tol`` (relative)."""
    assert ref.iterations == other.iterations
    assert ref.step_sizes == other.step_sizes
    assert ref.regularization == pytest.approx(other.regularization, rel=1e-12)
    assert ref.gauss_newton_fallbacks == other.gauss_newton_fallbacks == 0
    assert len(ref_its) == len(other_its) == ref.iterations
    diffs = _differences(ref, ref_its, other, other_its)
    for key, d in diffs.items():
        assert d <= tol, (key, d, tol)
    return diffs


# ----------------------------------------------------------------------------------------- iiwa
def _iiwa_problem(second_order: str | None, backend) -> ShootingProblem:
    task = tasks.get_task("iiwa-reach")
    opts = {} if second_order is None else {"second_order": second_order}
    return task.build_problem(task.initial_state(), N_IIWA, DT_IIWA, backend=backend, **opts)


@pytest.fixture(scope="module")
def iiwa_analytical():
    """The analytical-tensor DDP run on iiwa, shared by the tests below (the spy proves the path)."""
    be = SpyBackend()
    with pytest.MonkeyPatch.context() as mp:
        calls = _spy_on_numerical_provider(mp)
        res, its = _run(_iiwa_problem("analytical", be), ITERS_IIWA)
    assert be.calls["aba_second_derivatives"] >= ITERS_IIWA + 1   # one per derivative evaluation
    assert be.calls["bracket"] == be.calls["aba_second_derivatives"]   # the folded form (next test)
    assert sum(calls.values()) == 0                                # the numerical provider never ran
    assert not res.converged and res.iterations == ITERS_IIWA
    assert res.cost < 0.5 * res.cost_history[0]                   # it is a real, progressing solve
    return res, its


@pytest.mark.parametrize("mode, method, tol", [("fd", "central", TOL_FD), ("complex", "complex", TOL_COMPLEX)])
def test_iiwa_ddp_iterates_analytical_vs_numerical(iiwa_analytical, numerical_calls, mode, method, tol):
    ref, ref_its = iiwa_analytical
    be = SpyBackend()
    res, its = _run(_iiwa_problem(mode, be), ITERS_IIWA)
    assert be.calls["aba_second_derivatives"] == 0                 # the analytical path never ran
    assert numerical_calls[method] >= ITERS_IIWA + 1 and set(numerical_calls) == {method}
    _assert_same_run(ref, ref_its, res, its, tol)


@pytest.mark.parametrize("robot", ["iiwa", "hyq"])
def test_ddp_iterates_with_and_without_the_minv_fold(iiwa_analytical, robot):
    """DDP whose Euler knots take the bracketed terms B (``∂²a = −M⁻¹ B``) and fold ``−M⁻¹`` into
    the factor C gives the iterates of DDP on the full FDSVA-SO tensors, to rounding (the same F2
    summed in another order; observed ≤ 2e-14 on iiwa, ≤ 2e-15 on HyQ's free base)."""
    if robot == "iiwa":
        ref, ref_its = iiwa_analytical
        make, iters = _iiwa_problem, ITERS_IIWA
    else:
        ref, ref_its = _run(_hyq_problem("analytical", SpyBackend()), ITERS_HYQ)
        make, iters = _hyq_problem, ITERS_HYQ
    be = SpyBackend(bracket=False)
    res, its = _run(make("analytical", be), iters)
    assert be.calls["aba_second_derivatives"] >= iters + 1 and be.calls["bracket"] == 0
    _assert_same_run(ref, ref_its, res, its, 1e-12)


def test_iiwa_comparison_detects_missing_or_wrong_tensors(iiwa_analytical):
    """The comparison can fail: without the curvature (iLQR) or with ∂²a/∂q² off by 0.1 %, the
    iterates leave the tolerance by orders of magnitude."""
    ref, ref_its = iiwa_analytical
    ilqr, _ = _run(_iiwa_problem("analytical", "numpy"), ITERS_IIWA, solver=ILQR)
    assert _rel(ref.us, ilqr.us) > 1e3 * TOL_FD
    wrong, wrong_its = _run(_iiwa_problem("analytical", SpyBackend(scale_d2a_dq2=1.0 + 1e-3)), ITERS_IIWA)
    assert wrong.iterations == ref.iterations
    diffs = _differences(ref, ref_its, wrong, wrong_its)
    assert min(diffs.values()) > 50 * TOL_FD, diffs   # observed: 2.9e-5 (cost) … 4.1e-4 (xs)


def test_iiwa_task_default_uses_analytical_path(iiwa_analytical, numerical_calls):
    """The task's problem with the default ``second_order="auto"``: DDP takes the analytical
    tensors (numpy backend supports them) and reproduces the explicit "analytical" run."""
    be = SpyBackend()
    problem = _iiwa_problem(None, be)
    assert problem.second_order == "auto" and be.supports("aba_second_derivatives")
    res, its = _run(problem, ITERS_IIWA)
    assert be.calls["aba_second_derivatives"] >= ITERS_IIWA + 1
    assert sum(numerical_calls.values()) == 0
    ref, ref_its = iiwa_analytical
    _assert_same_run(ref, ref_its, res, its, 1e-12)


# ----------------------------------------------------------------------------------------- HyQ
def _hyq_problem(second_order: str, backend) -> ShootingProblem:
    """Free-base HyQ, no contacts (benchmarks/problems.py; it falls, the point is the tensors incl.
    the SE(3) base), N_HYQ knots of DT_HYQ."""
    return hyq_free_base(N_HYQ, DT_HYQ, second_order, backend=backend)


def test_hyq_ddp_iterates_analytical_vs_numerical(numerical_calls):
    ref_be = SpyBackend()
    ref, ref_its = _run(_hyq_problem("analytical", ref_be), ITERS_HYQ)
    assert ref_be.calls["aba_second_derivatives"] >= ITERS_HYQ + 1 and sum(numerical_calls.values()) == 0
    assert ref.cost < 0.5 * ref.cost_history[0]
    for mode, method, tol in (("fd", "central", TOL_FD), ("complex", "complex", TOL_COMPLEX)):
        numerical_calls.clear()
        be = SpyBackend()
        res, its = _run(_hyq_problem(mode, be), ITERS_HYQ)
        assert be.calls["aba_second_derivatives"] == 0
        assert numerical_calls[method] >= ITERS_HYQ + 1 and set(numerical_calls) == {method}
        _assert_same_run(ref, ref_its, res, its, tol)
    ilqr, _ = _run(_hyq_problem("analytical", "numpy"), ITERS_HYQ, solver=ILQR)
    assert _rel(ref.us, ilqr.us) > 1e3 * TOL_FD        # the curvature changes the iterates


# ----------------------------------------------------------------------------------------- benchmark
def test_second_order_ddp_benchmark_quick_runs():
    """benchmarks/second_order_ddp.py --quick (iiwa only) runs and prints its JSON; the timings are
    not checked (speed is never asserted), the providers' runs must agree."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "second_order_ddp.py"), "--quick", "--robots",
                           "iiwa"], capture_output=True, text=True, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["benchmark"] == "second_order_ddp" and out["solver"]["gauss_newton_fallback"] is False
    entries = {(e["robot"], e["horizon"], e["provider"]): e for e in out["results"]}
    assert set(entries) == {("iiwa", 16, p) for p in ("analytical", "fd", "complex")}
    for (_, _, prov), e in entries.items():
        # per_iteration_s is T(K iterations) - T(0 iterations): it can come out negative on a loaded
        # machine, so only its presence is checked; the two direct measurements are positive
        assert np.isfinite(e["per_iteration_s"]) and e["tensor_s"] > 0 and e["derivative_stage_s"] > 0
        assert e["gauss_newton_fallbacks"] == 0
        if prov == "analytical":
            assert e["ratio_analytical_over_this"] is None
        else:
            assert set(e["ratio_analytical_over_this"]) == {"per_iteration_s", "derivative_stage_s", "tensor_s"}
            assert e["agreement"]["same_step_sizes"]
            assert e["agreement"]["final_cost_rel_diff_vs_analytical"] < TOL_FD
