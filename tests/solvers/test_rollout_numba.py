"""The compiled forward pass (solvers.rollout_numba) against the Python forward pass
``ILQR._simulate`` / ``FDDP._simulate`` run on the numpy-reference dynamics (the independent oracle:
``DiscreteDynamics.step`` with the "numpy" backend), on a fixed-base arm, a floating-base robot and
random trees with ball, slide and free joints, springs and damping: random feedback gains, several
step sizes including 0, with and without clipping, with and without FDDP gaps, and diverging
candidates (non-finite controls or states) that must be flagged while the others still match."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import dynamics
import tasks
from solvers import FDDP, ILQR, ShootingProblem, StateCost
from solvers.result import TIMING_KEYS
from solvers.rollout_numba import CompiledRollout, compiled_rollout_available
from tests.helpers.comparisons import check
from tests.helpers.rollout_checks import check_rollouts, check_rollouts_on_two_threads

pytestmark = pytest.mark.skipif("numba" not in dynamics.available_backends(),
                                reason="the numba backend is not available on this machine")

N, DT = 12, 0.01
ALPHAS = np.array([1.0, 0.5, 0.25, 0.125, 0.0])
RTOL = 1e-10


# ---------------------------------------------------------------- problems (numpy oracle, numba)
def _iiwa(backend):
    task = tasks.get_task("iiwa-reach")
    return task.build_problem(task.initial_state(), N, DT, backend=backend)


def _hyq(backend):
    m = dynamics.load_model("hyq")
    rng = np.random.default_rng(3)
    x0 = np.concatenate([m.keyframe("standing"), 0.3 * rng.normal(size=m.nv)])
    bound = np.full(m.nu, 25.0)     # tighter than the model's: gains and feed-forward scale with it
    return ShootingProblem.uniform(m, x0, N, DT, StateCost(m, x0), backend=backend, u_lower=-bound, u_upper=bound)


def _tree_model(seed, free_root):
    """A random tree (tests/helpers/random_trees.py) with motors on its hinge/slide joints and damping and
    springs (with spring reference) on some of them."""
    import mujoco

    from tests.helpers.random_trees import random_tree_mjcf
    rng = np.random.default_rng(seed)
    xml = random_tree_mjcf(rng, 8, free_root=free_root, ball=True, slide=True, refs=True)
    scalar = re.findall(r'<joint name="(j\d+_\d+)" type="(?:hinge|slide)"', xml)

    def passive(match):
        r = rng.random()
        extra = ""
        if r < 0.7:
            extra += f' damping="{rng.uniform(0.05, 0.5):.6g}"'
        if r > 0.3:
            extra += f' stiffness="{rng.uniform(0.5, 5.0):.6g}" springref="{rng.uniform(-0.3, 0.3):.6g}"'
        return match.group(0) + extra
    xml = re.sub(r'<joint name="j\d+_\d+" type="(?:hinge|slide)"', passive, xml)
    motors = "".join(f'<motor joint="{j}" gear="{rng.uniform(0.5, 2):.6g}" ctrlrange="-4 4"/>' for j in scalar)
    xml = xml.replace("</mujoco>", f"<actuator>{motors}</actuator>\n</mujoco>")
    model = dynamics.from_mujoco(mujoco.MjModel.from_xml_string(xml), name=f"tree_{seed}")
    assert model.nu > 0 and model.ball_adr and np.any(model.link_stiffness) and np.any(model.dof_damping)
    assert np.any(model.link_type == dynamics.JointType.SLIDE)
    return model


_TREES = {}


def _tree(backend, seed=10, free_root=False):
    key = (seed, free_root)
    if key not in _TREES:
        _TREES[key] = _tree_model(seed, free_root)
    m = _TREES[key]
    rng = np.random.default_rng(seed)
    x0 = np.concatenate([m.random_configuration(rng), 0.5 * rng.normal(size=m.nv)])
    return ShootingProblem.uniform(m, x0, N, DT, StateCost(m, x0), backend=backend)


ROBOTS = {"iiwa": _iiwa, "hyq": _hyq, "tree": _tree, "tree-free": lambda be: _tree(be, seed=5, free_root=True)}


@pytest.fixture(scope="module", params=list(ROBOTS))
def problems(request):
    build = ROBOTS[request.param]
    p_np, p_nb = build("numpy"), build("numba")
    if request.param.startswith("tree"):
        assert p_np.model.free_adr if request.param == "tree-free" else not p_np.model.free_adr
    return p_np, p_nb


# ---------------------------------------------------------------- inputs and the oracle
def _inputs(p, rng, gain_scale=1.0):
    """A reference trajectory xs (the open-loop rollout, perturbed by small and large tangent
    steps so both the series and the closed forms of the Lie operations are exercised), controls,
    feed-forward k (large enough for the bounds to clip) and random gains K."""
    us = np.tile(p.clip_controls(p.gravity_compensation()), (N, 1)) + rng.normal(size=(N, p.nu))
    xs = p.rollout(us)
    scale = np.where(np.arange(N + 1) % 2 == 0, 1e-3, 0.4)[:, None]
    xs = p.state.integrate(xs, scale * rng.normal(size=(N + 1, p.ndx)))
    span = np.where(np.isfinite(p.u_upper), p.u_upper, 10.0)
    k = 0.8 * span * rng.normal(size=(N, p.nu))
    K = gain_scale * rng.normal(size=(N, p.nu, p.ndx)) * (0.2 * span / p.ndx)[:, None]
    return xs, us, k, K


def _gaps(p, rng):
    g = 0.05 * rng.normal(size=(N + 1, p.ndx))
    g[::3] *= 20.0        # some large gaps (rotations beyond the series range)
    return g


def python_rollout(p, alphas, xs, us, k, K, clip, gaps=None):
    """ILQR._simulate (gaps None) or FDDP._simulate (infeasible iterate with gaps) on problem p."""
    solver = ILQR(p, box=clip) if gaps is None else FDDP(p, box=clip)
    solver.timings = dict.fromkeys(TIMING_KEYS, 0.0)
    solver.feasible = gaps is None
    solver.gaps = np.zeros((N + 1, p.ndx)) if gaps is None else np.array(gaps)
    c = solver._simulate(np.asarray(alphas, float), xs, us, k, K, with_cost=False)
    return c.xs, c.us, c.ok


def _check(p_np, p_nb, alphas, xs, us, k, K, clip, gaps=None, expect_ok=None):
    ref = python_rollout(p_np, alphas, xs, us, k, K, clip, gaps)
    X, U, ok = CompiledRollout(p_nb).run(p_nb.x0, alphas, xs, us, k, K, p_nb.u_lower, p_nb.u_upper, clip, gaps)
    assert p_nb.horizon == N
    check_rollouts((X, U, ok), ref, alphas, p_nb, RTOL, expect_ok)
    return X, U, ok


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize("with_gaps", [False, True])
def test_matches_python_forward_pass(problems, clip, with_gaps):
    p_np, p_nb = problems
    rng = np.random.default_rng(7)
    xs, us, k, K = _inputs(p_np, rng)
    gaps = _gaps(p_np, rng) if with_gaps else None
    X, U, _ = _check(p_np, p_nb, ALPHAS, xs, us, k, K, clip, gaps, expect_ok=np.ones(len(ALPHAS), bool))
    if clip:   # the bounds were active somewhere, and are respected
        assert np.any(U == p_nb.u_lower) or np.any(U == p_nb.u_upper)
        assert np.all(U >= p_nb.u_lower) and np.all(U <= p_nb.u_upper)
    if with_gaps:  # x̂_0 = x0 ⊕ (α - 1) f̄_0: only the full step starts at x0
        assert np.array_equal(X[0, 0], p_nb.x0) and not np.allclose(X[1, 0], p_nb.x0)
    else:
        assert np.all(X[:, 0] == p_nb.x0)


def test_diverging_candidate_is_flagged(bundled):
    """A huge feed-forward spike makes the α = 1 rollout blow up (non-finite accelerations); the
    candidate comes back failed but finite, the others (α·spike ~ 1, and α = 0) still match."""
    p_np, p_nb = _iiwa("numpy"), _iiwa("numba")
    rng = np.random.default_rng(1)
    xs, us, k, K = _inputs(p_np, rng)
    k[2, 0] = 1e190
    _check(p_np, p_nb, np.array([1.0, 1e-190, 0.0]), xs, us, k, K, clip=False,
           expect_ok=np.array([False, True, True]))


@pytest.mark.parametrize("clip", [False, True])
def test_non_finite_controls(clip):
    """k = inf at one knot: α·k is inf (clipped to the bound when clipping, else the candidate
    fails) and 0·inf = NaN for α = 0 (fails; its control falls back to ``us``); failed candidates
    stay finite and, here, deterministic, so they are compared too."""
    p_np, p_nb = _iiwa("numpy"), _iiwa("numba")
    rng = np.random.default_rng(2)
    xs, us, k, K = _inputs(p_np, rng)
    k[3, 1] = np.inf
    alphas = np.array([1.0, 0.5, 0.0])
    X, U, ok = _check(p_np, p_nb, alphas, xs, us, k, K, clip, expect_ok=np.array([clip, clip, False]))
    X_ref, U_ref, _ = python_rollout(p_np, alphas, xs, us, k, K, clip)
    check("states (all candidates)", X, X_ref, RTOL)
    check("controls (all candidates)", U, U_ref, RTOL)
    assert np.array_equal(U[2, 3], us[3])


def test_availability_and_warmup():
    task = tasks.get_task("iiwa-reach")
    x0 = task.initial_state()
    assert compiled_rollout_available(task.build_problem(x0, 4, DT, backend="numba"))
    for backend, integrator in (("numpy", "euler"), ("numba", "rk4"), ("numpy", "rk4")):
        prob = task.build_problem(x0, 4, DT, backend=backend, integrator=integrator)
        assert not compiled_rollout_available(prob)
        with pytest.raises(ValueError, match="euler"):
            CompiledRollout(prob)
    cr = CompiledRollout(task.build_problem(x0, 4, DT, backend="numba"))
    cr.warmup()
    with pytest.raises(ValueError, match="K has shape"):
        cr.run(x0, np.ones(2), np.zeros((5, 14)), np.zeros((4, 7)), np.zeros((4, 7)), np.zeros((4, 7, 7)),
               task.model.u_lower, task.model.u_upper, True)


def test_solver_on_the_numpy_backend_imports_no_numba():
    """The compiled rollout imports numba and the kernel library; the solvers import it only for a
    compiled solver, so a solve on the numpy backend loads neither."""
    code = ("import sys, tasks\n"
            "from solvers import ILQR\n"
            "task = tasks.get_task('iiwa-reach')\n"
            "ILQR(task.build_problem(task.initial_state(), 4, 0.01, backend='numpy')).solve(max_iter=1)\n"
            "loaded = [m for m in sys.modules if m == 'numba' or m.startswith('solvers.') and m.endswith('_numba')]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)



@pytest.mark.skipif("numba" not in dynamics.available_backends()
                    or __import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs numba with two threads")
@pytest.mark.parametrize("S", [2, 5])
def test_candidates_on_two_threads_equal_one_thread(S):
    """The parallel driver (candidates split over the backend's threads) runs the same per-candidate
    arithmetic as the serial kernel: bitwise the same rollouts, and both match the Python oracle."""
    p_np = _iiwa("numpy")
    rng = np.random.default_rng(4)
    xs, us, k, K = _inputs(p_np, rng)
    alphas = ALPHAS[:S]
    out = {}
    for threads in (1, 2):
        p = _iiwa(dynamics.get_backend("numba", threads=threads))
        cr = CompiledRollout(p)
        assert cr.fd.threads() == threads
        out[threads] = cr.run(p.x0, alphas, xs, us, k, K, p.u_lower, p.u_upper, True)
    for a, b in zip(out[1], out[2]):
        assert np.array_equal(a, b)
    X_ref, U_ref, ok_ref = python_rollout(p_np, alphas, xs, us, k, K, True)
    assert np.array_equal(out[2][2], ok_ref)
    check("states", out[2][0], X_ref, RTOL)
    check("controls", out[2][1], U_ref, RTOL)


@pytest.mark.skipif("numba" not in dynamics.available_backends()
                    or __import__("numba").config.NUMBA_NUM_THREADS < 2, reason="needs numba with two threads")
def test_rollouts_on_two_python_threads_equal_serial_ones():
    """Two Python threads rolling out on one compiled rollout at once (the parallel driver runs
    without the GIL) each get the rollouts of a serial call: the ABA input scratch is not shared
    between calling threads."""
    p = _iiwa(dynamics.get_backend("numba", threads=2))
    xs, us, k, K = _inputs(p, np.random.default_rng(4))
    cr = CompiledRollout(p)
    alphas = (np.linspace(1.0, 0.0, 16), np.linspace(0.05, 0.9, 16))
    check_rollouts_on_two_threads(cr, p, xs, us, k, K, alphas, repeats=60)


def test_backends_side_by_side_in_one_process():
    """The rollout runs the kernel library's functions on the packed model a backend hands over and
    binds no backend: rollouts on two numba backends run side by side and agree; a backend whose
    compiled forward dynamics is not the kernel library's gets the Python rollout instead."""
    import dataclasses

    from dynamics.kernels import rnea
    from dynamics.numba_backend import NumbaBackend

    class OtherForwardDynamics(NumbaBackend):
        def compiled_forward_dynamics(self, model):
            return dataclasses.replace(super().compiled_forward_dynamics(model), aba_range=rnea.rnea_range)

    p_np = _iiwa("numpy")
    rng = np.random.default_rng(6)
    xs, us, k, K = _inputs(p_np, rng)
    runs = [CompiledRollout(_iiwa(be)) for be in (dynamics.get_backend("numba"), NumbaBackend(threads=1))]
    X = [cr.run(p_np.x0, ALPHAS, xs, us, k, K, p_np.u_lower, p_np.u_upper, True)[0] for cr in runs + runs[::-1]]
    assert all(np.array_equal(X[0], x) for x in X[1:])
    check("states", X[0], python_rollout(p_np, ALPHAS, xs, us, k, K, True)[0], RTOL)
    other = _iiwa(OtherForwardDynamics())
    assert not compiled_rollout_available(other)
    assert not ILQR(other).forward.uses_compiled_rollout
