"""Parallel-in-depth algorithms (Yang, Wu & Pan 2016, 2017): the scan RNEA and the JSIIA / ABIA / CFA-OEE
forward dynamics equal the recursive RNEA / ABA on random serial chains of 2…256 links and on the
bundled robots where they apply; the scan and OEE building blocks equal serial evaluation; errors
for unknown or inapplicable methods name the valid ones; the benchmark runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest

import dynamics
from dynamics import parallel_depth as pd
from dynamics.inputs import ShapeError
from dynamics.parallel_depth import oee, scan

from tests.helpers.random_chains import random_chain_model, random_state  # noqa: E402
from tests.helpers.random_trees import random_tree_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
EPS = np.finfo(float).eps
be = dynamics.get_backend("numpy")


def assert_close(x, ref, tol=1e-10):
    """``|x - ref| <= tol * max(1, |ref|_max)`` (the project's backend tolerance form)."""
    x, ref = np.asarray(x), np.asarray(ref)
    assert x.shape == ref.shape, (x.shape, ref.shape)
    err = np.max(np.abs(x - ref)) / max(1.0, np.max(np.abs(ref)))
    assert err <= tol, f"relative error {err:.3e} > {tol:.1e}"


_chains: dict[int, dynamics.RobotModel] = {}


def chain(n: int) -> dynamics.RobotModel:
    if n not in _chains:
        _chains[n] = random_chain_model(1000 + n, n)
    return _chains[n]


# ---------------------------------------------------------------- scan RNEA
@pytest.mark.parametrize("n", [2, 3, 5, 8, 16, 33, 64, 128, 256])
def test_rnea_scan_equals_recursive_on_random_chains(n):
    m = chain(n)
    rng = np.random.default_rng(n)
    q, v, a = random_state(m, rng, (2, 2))
    fext = rng.normal(size=(2, 2, m.nbody, 6))
    ref = be.rnea(m, q, v, a, fext)
    out = be.rnea(m, q, v, a, fext, algorithm="scan")
    assert out.shape == (2, 2, m.nv) and out.dtype == np.float64
    assert_close(out, ref)
    assert_close(be.rnea(m, q, v, a, algorithm="scan"), be.rnea(m, q, v, a))


@pytest.mark.parametrize("n", [2, 7, 64, 256])
@pytest.mark.parametrize("operand,method", [("group", "blelloch"), ("group", "serial"),
                                            ("matrix", "hillis-steele"), ("matrix", "blelloch")])
def test_rnea_scan_variants(n, operand, method):
    m = chain(n)
    q, v, a = random_state(m, np.random.default_rng(7 + n), 3)
    assert_close(pd.rnea(be, m, q, v, a, operand=operand, scan=method), be.rnea(m, q, v, a))


@pytest.mark.parametrize("robot", ["iiwa", "hyq", "atlas"])
@pytest.mark.parametrize("operand", ["group", "matrix"])
def test_rnea_scan_on_bundled_robots(robot, operand):
    m = dynamics.load_model(robot)
    rng = np.random.default_rng(3)
    q, v, a = random_state(m, rng, 4)
    fext = rng.normal(size=(4, m.nbody, 6))
    assert_close(pd.rnea(be, m, q, v, a, fext, operand=operand), be.rnea(m, q, v, a, fext))


@pytest.mark.parametrize("seed", range(4))
def test_rnea_scan_on_random_trees(seed):
    """Branched trees with ball/slide/multi-joint bodies, welded bodies and a free root: the tree
    forward scan (pointer jumping) and the world-frame subtree sums."""
    m, _ = random_tree_model(seed, 14, free_root=seed % 2 == 0)
    rng = np.random.default_rng(seed)
    q, v, a = random_state(m, rng, 3)
    fext = rng.normal(size=(3, m.nbody, 6))
    assert_close(be.rnea(m, q, v, a, fext, algorithm="scan"), be.rnea(m, q, v, a, fext))


def test_rnea_scan_through_the_numba_backend():
    try:
        nb = dynamics.get_backend("numba")
    except dynamics.BackendUnavailableError:
        pytest.skip("numba backend not available")
    m = chain(9)
    q, v, a = random_state(m, np.random.default_rng(1), 5)
    assert_close(nb.rnea(m, q, v, a, algorithm="scan"), be.rnea(m, q, v, a))
    assert_close(nb.forward_dynamics(m, q, v, a, method="oee"), be.aba(m, q, v, a))


class _NumpyProxy:
    """A stand-in array namespace that is not the ``numpy`` module (delegates to it)."""
    __name__ = "numpy_proxy"

    def __getattr__(self, name):
        return getattr(np, name)


def test_backend_device_namespace_is_used_with_host_copies_in_and_out():
    """A backend with a device runtime (the gpu backend's ``rt``) gets its inputs copied to the
    device, its model constants in the device namespace and its results copied back."""
    from types import SimpleNamespace

    from dynamics.numpy_backend import NumpyBackend
    from dynamics.parallel_depth.namespace import model_arrays

    moves = {"to_device": 0, "to_host": 0}

    def mover(kind):
        def move(x):
            moves[kind] += 1
            return np.array(x)
        return move
    proxy = _NumpyProxy()

    class DeviceBackend(NumpyBackend):
        rt = SimpleNamespace(xp=proxy, simulate=False, to_device=mover("to_device"), to_host=mover("to_host"))
    dev = DeviceBackend()
    m = chain(7)
    q, v, a = random_state(m, np.random.default_rng(4), 3)
    assert_close(dev.rnea(m, q, v, a, algorithm="scan"), be.rnea(m, q, v, a))
    assert moves == {"to_device": 3, "to_host": 1}
    assert_close(dev.forward_dynamics(m, q, v, a, method="oee"), be.aba(m, q, v, a))
    assert moves == {"to_device": 6, "to_host": 2}
    assert model_arrays(m, proxy).xp is proxy
    sim = DeviceBackend()
    sim.rt = SimpleNamespace(xp=proxy, simulate=True, to_device=mover("to_device"), to_host=mover("to_host"))
    sim.rnea(m, q, v, a, algorithm="scan")
    assert moves == {"to_device": 6, "to_host": 2}  # simulators run on the host: no copies


def test_trees_refuse_chain_only_scans():
    m = dynamics.load_model("hyq")
    q, v, a = random_state(m, np.random.default_rng(0))
    with pytest.raises(ValueError, match="serial chains only.*hillis-steele"):
        pd.rnea(be, m, q, v, a, scan="blelloch")


# ---------------------------------------------------------------- forward dynamics
def mass_matrix(m, q) -> np.ndarray:
    """M(q) (B, nv, nv) from recursive RNEA columns ``rnea(q, 0, e_j) - rnea(q, 0, 0)`` (one batched
    call; the numpy CRBA loops over link pairs in Python, slow at 256 links)."""
    eye = np.eye(m.nv)
    qq = np.broadcast_to(q[:, None, :], (q.shape[0], m.nv, m.nq))
    cols = be.rnea(m, qq, np.zeros(m.nv), eye) - be.rnea(m, q, np.zeros(m.nv), np.zeros(m.nv))[:, None, :]
    return np.swapaxes(cols, -1, -2)


def fd_tolerance(M: np.ndarray) -> float:
    """1e-10, or eps cond(M) where M is so ill-conditioned that two correct algorithms (ABA vs a
    factorisation of M) need not agree more closely (the 256-link random chain: cond(M) ~ 1e8)."""
    lam = np.linalg.eigvalsh(M)  # M is symmetric positive definite: cond = λ_max / λ_min
    return max(1e-10, EPS * float(np.max(lam[..., -1] / lam[..., 0])))


_mass: dict[int, tuple[np.ndarray, float]] = {}


@pytest.mark.parametrize("n", [2, 3, 7, 16, 64, 256])
@pytest.mark.parametrize("method", ["jsiia", "abia", "oee"])
def test_forward_dynamics_equals_aba_on_random_chains(n, method):
    m = chain(n)
    rng = np.random.default_rng(100 + n)
    q, v, tau = random_state(m, rng, 2)
    fext = rng.normal(size=(2, m.nbody, 6))
    ref = be.aba(m, q, v, tau, fext)
    out = be.forward_dynamics(m, q, v, tau, fext, method=method)
    assert out.shape == (2, m.nv)
    if n not in _mass:  # the three methods share the chain and the state
        M = mass_matrix(m, q)
        _mass[n] = M, fd_tolerance(M)
    M, tol = _mass[n]
    if n <= 16:
        np.testing.assert_allclose(M, be.crba(m, q), rtol=0, atol=1e-12 * np.abs(M).max())
    assert_close(out, ref, tol)
    # and it solves the equations of motion: M a = tau - c to ~machine precision (backward error)
    c = be.bias_forces(m, q, v, fext)
    res = np.einsum("bij,bj->bi", M, out) - (tau - c)
    scale = np.linalg.norm(M, axis=(1, 2)) * np.linalg.norm(out, axis=1) + np.linalg.norm(tau - c, axis=1)
    assert np.all(np.linalg.norm(res, axis=1) <= 1e-11 * scale)


def test_forward_dynamics_tolerance_is_tight_where_well_conditioned():
    for n in (2, 3, 7, 16, 64):
        m = chain(n)
        q, _, _ = random_state(m, np.random.default_rng(100 + n), 2)
        assert fd_tolerance(mass_matrix(m, q)) == 1e-10


def test_oee_without_refinement_is_close_and_refinement_helps():
    """The plain CFA (Yang, Wu & Pan 2016 Algorithm 1) already agrees; one refinement step tightens it."""
    from dynamics.parallel_depth import cfa, kinematics, namespace
    m = chain(64)
    q, v, tau = random_state(m, np.random.default_rng(5), 2)
    c = namespace.model_arrays(m)
    E, r = kinematics.link_transforms(c, q)
    ref = be.aba(m, q, v, tau)
    raw = cfa.cfa(c, E, r, v, tau, None, refine=0)
    refined = cfa.cfa(c, E, r, v, tau, None, refine=1)
    err = [np.max(np.abs(x - ref)) / np.max(np.abs(ref)) for x in (raw, refined)]
    assert err[0] < 1e-6 and err[1] < 1e-10 and err[1] <= err[0]


@pytest.mark.parametrize("robot,methods", [("iiwa", ["jsiia", "abia", "oee"]), ("hyq", ["jsiia"]),
                                           ("atlas", ["jsiia"])])
def test_forward_dynamics_on_bundled_robots(robot, methods):
    m = dynamics.load_model(robot)
    rng = np.random.default_rng(11)
    q, v, tau = random_state(m, rng, 3)
    fext = rng.normal(size=(3, m.nbody, 6))
    ref = be.aba(m, q, v, tau, fext)
    assert set(pd.applicable_methods(m)) == {"aba", "minv", *methods}
    for method in methods:
        assert_close(be.forward_dynamics(m, q, v, tau, fext, method=method), ref)


@pytest.mark.parametrize("method", ["jsiia", "abia", "oee"])
@pytest.mark.parametrize("scan_method", ["blelloch", "serial"])
def test_forward_dynamics_scan_variants(method, scan_method):
    m = chain(19)
    q, v, tau = random_state(m, np.random.default_rng(2), 2)
    assert_close(pd.forward_dynamics(be, m, q, v, tau, method=method, scan=scan_method), be.aba(m, q, v, tau))


# ---------------------------------------------------------------- API, shapes and errors
def test_batch_shapes_and_broadcasting():
    m = chain(6)
    rng = np.random.default_rng(0)
    q, v, a = random_state(m, rng)
    assert be.rnea(m, q, v, a, algorithm="scan").shape == (m.nv,)
    V = rng.normal(size=(4, 1, m.nv))
    A = rng.normal(size=(3, m.nv))
    out = be.rnea(m, q, V, A, algorithm="scan")
    assert out.shape == (4, 3, m.nv)
    assert_close(out, be.rnea(m, q, V, A))
    for method in ("jsiia", "abia", "oee"):
        fd = be.forward_dynamics(m, q, V, A, method=method)
        assert fd.shape == (4, 3, m.nv)
        assert_close(fd, be.aba(m, q, V, A))
    assert_close(be.rnea(m, q.astype(np.float32), v.tolist(), a, algorithm="scan"),
                 be.rnea(m, q.astype(np.float32), v, a))


def test_bad_inputs_are_reported_like_the_backend_api():
    m = chain(4)
    q, v, a = random_state(m, np.random.default_rng(0))
    with pytest.raises(ShapeError, match="rnea: v has shape"):
        be.rnea(m, q, v[:3], a, algorithm="scan")
    with pytest.raises(ValueError, match="non-finite"):
        be.forward_dynamics(m, q, v, np.full(m.nv, np.nan), method="oee")
    with pytest.raises(ShapeError, match="fext"):
        be.rnea(m, q, v, a, np.zeros((m.nbody, 3)), algorithm="scan")
    with pytest.raises(TypeError, match="RobotModel"):
        be.rnea("iiwa", q, v, a, algorithm="scan")


def test_unknown_algorithm_and_method_name_the_valid_ones():
    m = chain(3)
    q, v, a = random_state(m, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown algorithm 'prefix'.*recursive, scan"):
        be.rnea(m, q, v, a, algorithm="prefix")
    with pytest.raises(ValueError, match="unknown method 'dca'.*aba, minv, jsiia, abia, oee"):
        be.forward_dynamics(m, q, v, a, method="dca")
    with pytest.raises(ValueError, match="unknown scan method 'ladner'"):
        pd.rnea(be, m, q, v, a, scan="ladner")
    with pytest.raises(ValueError, match="unknown scan operand 'dual'"):
        pd.rnea(be, m, q, v, a, operand="dual")


@pytest.mark.parametrize("method", ["abia", "oee"])
def test_chain_methods_refuse_trees_and_name_the_methods_that_apply(method):
    m = dynamics.load_model("atlas")
    q, v, tau = random_state(m, np.random.default_rng(0))
    with pytest.raises(pd.MethodNotApplicableError,
                       match=rf"'{method}' needs a serial chain.*'atlas' is not a serial chain.*apply to this "
                             r"model: aba, minv, jsiia$"):
        be.forward_dynamics(m, q, v, tau, method=method)


def test_oee_refuses_massless_links_but_abia_applies():
    """A body with two hinges is a chain of two links, the first without inertia: J^-1 does not
    exist, so the CFA does not apply; ABIA and JSIIA still do."""
    xml = """<mujoco><worldbody><body name="a" pos="0 0 0.1">
      <inertial pos="0 0 0.1" mass="1" diaginertia="0.01 0.02 0.02"/>
      <joint name="j1" type="hinge" axis="1 0 0"/><joint name="j2" type="hinge" axis="0 1 0"/>
      <body name="b" pos="0 0 0.3"><inertial pos="0 0 0.1" mass="1" diaginertia="0.01 0.02 0.02"/>
      <joint name="j3" type="hinge" axis="0 0 1"/></body></body></worldbody></mujoco>"""
    m = dynamics.from_mujoco(mujoco.MjModel.from_xml_string(xml), name="two_hinge_body")
    assert pd.applicable_methods(m) == ("aba", "minv", "jsiia", "abia")
    q, v, tau = random_state(m, np.random.default_rng(0), 2)
    with pytest.raises(pd.MethodNotApplicableError, match="positive-definite spatial inertia.*aba, minv, jsiia, abia"):
        be.forward_dynamics(m, q, v, tau, method="oee")
    assert_close(be.forward_dynamics(m, q, v, tau, method="abia"), be.aba(m, q, v, tau))
    assert_close(be.forward_dynamics(m, q, v, tau, method="jsiia"), be.aba(m, q, v, tau))


def test_aba_and_minv_pass_through():
    m = dynamics.load_model("iiwa")
    q, v, tau = random_state(m, np.random.default_rng(0), 2)
    for method in ("aba", "minv"):
        assert_close(pd.forward_dynamics(be, m, q, v, tau, method=method), be.aba(m, q, v, tau))
    assert_close(pd.rnea(be, m, q, v, tau, algorithm="recursive"), be.rnea(m, q, v, tau))


# ---------------------------------------------------------------- building blocks
def _random_operands(rng, B, n, k=3):
    return (rng.normal(size=(B, n, k, k)) / np.sqrt(k),)


def _serial_prefix(A):
    out = A.copy()
    for i in range(1, A.shape[1]):
        out[:, i] = A[:, i] @ out[:, i - 1]
    return out


@pytest.mark.parametrize("n", list(range(1, 20)) + [31, 32, 33, 100])
def test_scans_equal_serial_prefix_products(n):
    rng = np.random.default_rng(n)
    (A,) = _random_operands(rng, 2, n)
    ref = _serial_prefix(A)
    for method in scan.METHODS:
        (out,) = scan.inclusive_scan((A,), scan.matmul_combine, method)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
    # a chain given as a tree: pointer jumping is Hillis–Steele
    (out,) = scan.pointer_jumping((A,), scan.matmul_combine, np.arange(n) - 1)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
    assert np.shares_memory(A, out) is False


def test_pointer_jumping_on_a_tree_gives_root_to_node_products():
    rng = np.random.default_rng(0)
    parent = np.array([-1, 0, 1, 0, 3, 4, 1, -1, 7, 2])
    (A,) = _random_operands(rng, 2, parent.size)
    (out,) = scan.pointer_jumping((A,), scan.matmul_combine, parent)
    for i in range(parent.size):
        ref = A[:, i]
        j = parent[i]
        while j >= 0:
            ref = ref @ A[:, j]
            j = parent[j]
        np.testing.assert_allclose(out[:, i], ref, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 64])
def test_oee_solves_block_tridiagonal_systems(n):
    rng = np.random.default_rng(n)
    k, B = 4, 3
    blocks = rng.normal(size=(B, n, k, k))
    U = rng.normal(size=(B, max(n - 1, 0), k, k)) * 0.5
    D = blocks @ np.swapaxes(blocks, -1, -2) + 4 * k * np.eye(k)
    R = rng.normal(size=(B, n, k))
    A = np.zeros((B, n * k, n * k))
    for i in range(n):
        A[:, i * k:(i + 1) * k, i * k:(i + 1) * k] = D[:, i]
        if i < n - 1:
            A[:, i * k:(i + 1) * k, (i + 1) * k:(i + 2) * k] = U[:, i]
            A[:, (i + 1) * k:(i + 2) * k, i * k:(i + 1) * k] = np.swapaxes(U[:, i], -1, -2)
    ref = np.linalg.solve(A, R.reshape(B, -1, 1))[..., 0].reshape(B, n, k)
    np.testing.assert_allclose(oee.oee_solve(D, U, R), ref, rtol=0, atol=1e-11)
    f = oee.oee_factor(D, U)
    assert len(f.steps) == int(np.ceil(np.log2(n))) if n > 1 else len(f.steps) == 0


def test_scan_depth_is_logarithmic():
    """Count the dependent steps (combine calls) of each scan on 256 operands."""
    calls = {}
    for method in scan.METHODS:
        count = [0]

        def combine(o, i, count=count):
            count[0] += 1
            return scan.matmul_combine(o, i)
        scan.inclusive_scan((np.ones((1, 256, 1, 1)),), combine, method)
        calls[method] = count[0]
    assert calls == {"hillis-steele": 8, "blelloch": 15, "serial": 255}


# ---------------------------------------------------------------- benchmark smoke test
def test_benchmark_quick_run_writes_json_and_plots(tmp_path):
    out = tmp_path / "pd.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "parallel_depth.py"), "--quick", "--backends", "numpy",
                           "--out", str(out), "--plots", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data == json.loads(proc.stdout)
    assert {"machine", "vs_links", "vs_problems", "summary"} <= set(data)
    labels = {r["label"] for r in data["vs_links"]}
    assert {"numpy recursive ABA", "numpy OEE (CFA)", "numpy scan RNEA"} <= labels
    assert all(r["seconds"] > 0 for r in data["vs_links"] + data["vs_problems"])
    assert {r["nlinks"] for r in data["vs_problems"]} == {3, 5}
    assert isinstance(data["summary"], list) and data["summary"]
    pytest.importorskip("matplotlib")
    assert (tmp_path / "parallel_depth_links.png").stat().st_size > 0
    assert (tmp_path / "parallel_depth_problems.png").stat().st_size > 0
