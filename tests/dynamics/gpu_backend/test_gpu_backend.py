"""The ``gpu`` backend (issue 15) in Numba's CUDA simulator: every function against the numpy
reference, partitions, float32, device-resident calls, the missing-CuPy / no-GPU errors and a
smoke run of ``benchmarks/gpu.py``.

Tolerances: float64 ``|x - ref| <= 1e-10 * max(1, max|ref|)`` (as every backend,
tests/dynamics/test_backend_consistency.py); float32 ``FLOAT32_RTOL`` (1e-3; measured ≤ 1.5e-4 on Atlas,
≤ 1e-5 on iiwa and HyQ). The simulator is slow (a Python thread per GPU thread), so batches are
N ≤ 4 and the second-order tensors are checked on iiwa and HyQ only. The same checks run on a real
GPU in tests/dynamics/gpu_backend/test_gpu_hardware.py (marker ``gpu``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]

from tests.helpers.random_trees import random_tree_model  # noqa: E402
from tests.helpers.comparisons import check, check_all  # noqa: E402
from tests.helpers.gpu_checks import check_dynamics, check_kinematics, check_partitions, check_second_order, states  # noqa: E402,F401

import dynamics  # noqa: E402
from dynamics.gpu_backend import FLOAT32_RTOL, PARTITIONS, GpuBackend  # noqa: E402
from dynamics.gpu_backend.runtime import detect_gpu  # noqa: E402

REFERENCES = ("local", "world", "local_world_aligned")
HAS_CUPY = importlib.util.find_spec("cupy") is not None


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def sim64() -> GpuBackend:
    return dynamics.get_backend("gpu", simulate=True)


@pytest.fixture(scope="module")
def sim32() -> GpuBackend:
    return dynamics.get_backend("gpu", simulate=True, dtype="float32")


# ------------------------------------------------------------------ float64 against the reference
@pytest.mark.parametrize("name", ("iiwa", "hyq"))
def test_dynamics_match_reference(sim64, bundled, name):
    check_dynamics(sim64, bundled[name], 2, 1e-10)


def test_atlas_case(sim64, bundled):
    """Atlas (31 links, 8 tree levels, floating base): the ∇FD kernel, M⁻¹ and RNEA."""
    ref = dynamics.get_backend("numpy")
    m = bundled["atlas"]
    q, v, tau, fext = states(m, 1, 6)
    check_all("atlas aba_derivatives", sim64.aba_derivatives(m, q, v, tau, fext), ref.aba_derivatives(m, q, v,
              tau, fext))
    check("atlas minv", sim64.minv(m, q), ref.minv(m, q))
    check("atlas rnea", sim64.rnea(m, q, v, tau, fext), ref.rnea(m, q, v, tau, fext))
    check_all("atlas com_jacobian", sim64.com_jacobian(m, q), ref.com_jacobian(m, q))


def test_random_tree_ball_slide_free_joints(sim64):
    """A random tree with ball, slide and hinge joints, a free root, anchors, welded bodies, armature
    and joint references (ball/free joints use the 3x3/6x6 articulated-inertia inverse)."""
    ref = dynamics.get_backend("numpy")
    m = random_tree_model(611, 10, free_root=True, refs=True)[0]
    q, v, a, fext = states(m, 2, 7)
    check_all("tree aba_derivatives", sim64.aba_derivatives(m, q, v, a, fext), ref.aba_derivatives(m, q, v, a, fext))
    check_all("tree rnea_derivatives", sim64.rnea_derivatives(m, q, v, a), ref.rnea_derivatives(m, q, v, a))
    check("tree crba", sim64.crba(m, q), ref.crba(m, q))
    site = m.body_names[-1]
    check_all("tree frame_jacobian_time_variation", sim64.frame_jacobian_time_variation(m, q, v, site, "local"),
              ref.frame_jacobian_time_variation(m, q, v, site, "local"))


@pytest.mark.parametrize("name", ("iiwa", "hyq"))
def test_kinematics_match_reference(sim64, bundled, name):
    check_kinematics(sim64, bundled[name], 2, 1e-10)


@pytest.mark.parametrize("name", ("iiwa", "hyq"))
def test_second_order_match_reference(sim64, bundled, name):
    check_second_order(sim64, bundled[name], 2 if name == "iiwa" else 1, 1e-10)


def test_batch_dimensions_and_single_state(sim64, bundled):
    """Leading batch dimensions (2, 1) and a single state go through the common Backend machinery."""
    ref = dynamics.get_backend("numpy")
    m = bundled["iiwa"]
    q, v, tau, _ = states(m, 2, 8)
    qb, vb, tb = q.reshape(2, 1, -1), v.reshape(2, 1, -1), tau.reshape(2, 1, -1)
    out = sim64.aba_derivatives(m, qb, vb, tb)
    assert all(x.shape == (2, 1, m.nv, m.nv) for x in out)
    check_all("batch (2, 1)", out, ref.aba_derivatives(m, qb, vb, tb))
    check("single state", sim64.aba(m, q[0], v[0], tau[0]), ref.aba(m, q[0], v[0], tau[0]))


def test_contact_dynamics_through_shared_code(sim64, bundled):
    """Rigid contacts (dynamics.contact, backend-agnostic) on top of this backend's kernels."""
    ContactSet = pytest.importorskip("dynamics.contact").ContactSet
    ref = dynamics.get_backend("numpy")
    m = bundled["hyq"]
    q, v, tau, _ = states(m, 1, 14)
    cs = ContactSet(m, frames=("lf_foot", "rf_foot", "lh_foot", "rh_foot"), kind="point")
    check_all("contact_dynamics", tuple(sim64.contact_dynamics(m, q, v, tau, cs)),
              tuple(ref.contact_dynamics(m, q, v, tau, cs)), 1e-10)
    check_all("contact_dynamics_derivatives", tuple(sim64.contact_dynamics_derivatives(m, q, v, tau, cs)),
              tuple(ref.contact_dynamics_derivatives(m, q, v, tau, cs)), 1e-10)


# ------------------------------------------------------------------ partitions, threads, precision
def test_partitions_identical(bundled):
    """HyQ (floating base, four branches); the hardware module runs iiwa, HyQ and Atlas."""
    check_partitions(lambda p: dynamics.get_backend("gpu", simulate=True, partition=p), bundled["hyq"], 2, 1e-10)


def test_threads_per_block_do_not_change_results(bundled, sim64):
    """1 thread (every parallel step done serially) and 33 (more threads than links, dofs and most
    column ranges: idle threads at every step) give the default block's ∇FD."""
    m = bundled["iiwa"]
    q, v, tau, fext = states(m, 1, 9)
    base = sim64.aba_derivatives(m, q, v, tau, fext)
    for t in (1, 33):
        be = dynamics.get_backend("gpu", simulate=True, threads_per_block=t)
        check_all(f"threads_per_block={t}", be.aba_derivatives(m, q, v, tau, fext), base, 1e-13)


@pytest.mark.parametrize("name", ("iiwa", "hyq", "atlas"))
def test_float32_within_stated_bound(sim32, bundled, name):
    """float32 device arithmetic within FLOAT32_RTOL (results are float64): every kernel on iiwa,
    ∇FD and M⁻¹ (the least accurate) on HyQ and Atlas."""
    m = bundled[name]
    assert sim32.rtol == FLOAT32_RTOL
    ref = dynamics.get_backend("numpy")
    if name != "iiwa":
        q, v, tau, fext = states(m, 1, 10)
        check_all(f"{name} float32 aba_derivatives", sim32.aba_derivatives(m, q, v, tau, fext),
                  ref.aba_derivatives(m, q, v, tau, fext), FLOAT32_RTOL)
        check(f"{name} float32 minv", sim32.minv(m, q), ref.minv(m, q), FLOAT32_RTOL)
        return
    check_dynamics(sim32, m, 2, FLOAT32_RTOL, full=False)
    q, v, _, _ = states(m, 2, 3)
    f = m.site_names[0]
    check_all("float32 body_placements", sim32.body_placements(m, q), ref.body_placements(m, q), FLOAT32_RTOL)
    check("float32 com_jacobian", sim32.com_jacobian(m, q), ref.com_jacobian(m, q), FLOAT32_RTOL)
    check_all("float32 frame_jacobian_time_variation", sim32.frame_jacobian_time_variation(m, q, v, f, "local"),
              ref.frame_jacobian_time_variation(m, q, v, f, "local"), FLOAT32_RTOL)
    check_second_order(sim32, m, 1, FLOAT32_RTOL)
    # float32 really is float32 on the device: far from float64 agreement
    ref = dynamics.get_backend("numpy")
    q, v, tau, _ = states(m, 2, 11)
    err = np.abs(sim32.aba(m, q, v, tau) - ref.aba(m, q, v, tau)).max()
    assert err > 1e-9, "float32 backend agrees to float64 precision: is it computing in float64?"


# ------------------------------------------------------------------ device-resident calls, timing
def test_on_device_keeps_results_on_device(sim64, bundled):
    m = bundled["iiwa"]
    q, v, tau, fext = states(m, 2, 12)
    rt = sim64.rt
    dq, dv, dt, dfe = (rt.to_device(x) for x in (q, v, tau, fext))
    out = sim64.on_device("aba_derivatives", m, dq, dv, dt, fext=dfe)
    assert len(out) == 3 and all(rt.is_device_array(x) and x.shape == (2, m.nv, m.nv) for x in out)
    assert sim64.last_timing.h2d_s == 0 and sim64.last_timing.d2h_s == 0 and sim64.last_timing.bytes_h2d == 0
    host = sim64.aba_derivatives(m, q, v, tau, fext)
    for k in range(3):
        check(f"on_device[{k}]", rt.to_host(out[k]).astype(float), host[k], 1e-14)
    (tau_dev,) = sim64.on_device("rnea", m, dq, dv, dt)
    check("on_device rnea", rt.to_host(tau_dev), sim64.rnea(m, q, v, tau), 1e-14)
    with pytest.raises(TypeError, match="not a device array"):
        sim64.on_device("rnea", m, [list(x) for x in q], dv, dt)
    with pytest.raises(ValueError, match="unknown function"):
        sim64.on_device("jacobian", m, dq)
    with pytest.raises(ValueError, match=r"must be \(B, 7\)"):
        sim64.on_device("aba", m, dq, dv[:, :3], dt)


def test_last_timing_separates_transfers(sim64, bundled):
    m = bundled["iiwa"]
    q, v, a, _ = states(m, 4, 13)
    sim64.rnea(m, q, v, a)
    tm = sim64.last_timing
    assert tm.function == "rnea" and tm.batch == 4 and tm.simulated
    # one contiguous input block (q, v, a and the dummy f_ext) and one output block, at float64
    assert tm.bytes_h2d == 8 * (4 * (m.nq + 2 * m.nv) + m.nbody * 6)
    assert tm.bytes_d2h == 8 * 4 * m.nv
    assert min(tm.h2d_s, tm.d2h_s, tm.compute_s, tm.host_s) >= 0 and tm.total_s > tm.compute_s


# ------------------------------------------------------------------ availability and options
def test_missing_cupy_message():
    def no_cupy(name):
        raise ImportError(f"No module named '{name}'")
    with pytest.raises(dynamics.BackendUnavailableError) as e:
        detect_gpu(no_cupy)
    msg = str(e.value)
    assert "CuPy is not installed" in msg and 'pip install "mpc-accel[gpu]"' in msg and "simulate=True" in msg


@pytest.mark.parametrize("count", (0, RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")))
def test_no_cuda_device_message(count):
    def runtime_count():
        if isinstance(count, Exception):
            raise count
        return count
    runtime = types.SimpleNamespace(getDeviceCount=runtime_count)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    with pytest.raises(dynamics.BackendUnavailableError) as e:
        detect_gpu(lambda name: fake)
    msg = str(e.value)
    assert "no CUDA device" in msg and 'pip install "mpc-accel[gpu]"' in msg and "simulate=True" in msg


def _fake_gpu(count: int = 1):
    """A CuPy stand-in that sees ``count`` CUDA devices (for detect_gpu's checks after CuPy)."""
    runtime = types.SimpleNamespace(getDeviceCount=lambda: count)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))


def _versions(numba_cuda: str | None):
    def version(name: str) -> str:
        if name == "numba-cuda" and numba_cuda is not None:
            return numba_cuda
        from importlib.metadata import PackageNotFoundError
        raise PackageNotFoundError(name)
    return version


def test_incompatible_numpy_numba_cuda_pair_is_refused(monkeypatch):
    """numba-cuda 0.30.4 with a NumPy that lacks ``row_stack`` (NumPy >= 2.5) fails at the first kernel
    compile; the backend refuses at creation instead, naming the fix, and ``available_backends`` (what
    ``mpc-accel backends`` prints) reports it."""
    from importlib import metadata

    from dynamics.gpu_backend.runtime import check_numpy_support
    np25 = types.SimpleNamespace(__version__="2.5.0")          # no row_stack: what NumPy 2.5 removed
    with pytest.raises(dynamics.BackendUnavailableError) as e:
        check_numpy_support(np25, _versions("0.30.4"))
    msg = str(e.value)
    assert "numba-cuda 0.30.4" in msg and "NumPy 2.5.0" in msg and "row_stack" in msg and 'numpy<2.5' in msg
    # compatible pairs: NumPy with row_stack, no numba-cuda (numba's own CUDA target), a numba-cuda past the table
    check_numpy_support(np, _versions("0.30.4"))
    check_numpy_support(np25, _versions(None))
    check_numpy_support(np25, _versions("0.31.0"))
    # end to end through detect_gpu / get_backend / available_backends, with a fake CuPy seeing one device
    monkeypatch.delattr(np, "row_stack", raising=False)
    monkeypatch.setattr(metadata, "version", _versions("0.30.4"))
    with pytest.raises(dynamics.BackendUnavailableError, match="numba-cuda 0.30.4 cannot compile"):
        detect_gpu(lambda name: _fake_gpu())
    import dynamics.gpu_backend.runtime as runtime
    monkeypatch.setattr(runtime, "detect_gpu", lambda: detect_gpu(lambda name: _fake_gpu()))
    ok, why = dynamics.available_backends()["gpu"]
    assert not ok and "numpy<2.5" in why


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here; the missing-CuPy path is covered by the fake above")
def test_get_backend_without_cupy_raises_unavailable():
    """What tests/dynamics/test_backend_consistency.py relies on: without CuPy, ``get_backend("gpu")`` raises
    BackendUnavailableError (so that suite skips the gpu backend) and ``available_backends`` says why."""
    with pytest.raises(dynamics.BackendUnavailableError, match="CuPy is not installed"):
        dynamics.get_backend("gpu")
    ok, why = dynamics.available_backends()["gpu"]
    assert not ok and "mpc-accel[gpu]" in why


def test_options_and_errors(bundled):
    be = dynamics.get_backend("gpu", simulate=True, dtype="float32", partition="fused", threads_per_block=8)
    assert isinstance(be, GpuBackend) and be.simulate and be.dtype == np.float32 and be.partition == "fused"
    assert be.threads_per_block == 8
    with pytest.raises(ValueError, match="partition must be one of"):
        GpuBackend(simulate=True, partition="half_fused")
    with pytest.raises(ValueError, match="dtype must be"):
        GpuBackend(simulate=True, dtype="float16")
    with pytest.raises(ValueError, match="threads_per_block"):
        GpuBackend(simulate=True, threads_per_block=0)
    with pytest.raises(ValueError, match="launch must be one of bound, numba"):
        GpuBackend(simulate=True, launch="graph")
    assert GpuBackend(simulate=True).launch == "numba"   # the simulator launches through its own dispatcher
    m = bundled["iiwa"]
    with pytest.raises(ValueError, match="unknown reference frame"):
        dynamics.get_backend("gpu", simulate=True).frame_jacobian(m, m.neutral(), m.body_names[-1], "body")
    with pytest.raises(ValueError, match=r"q has shape \(3,\), expected"):
        be.rnea(m, np.zeros(3), np.zeros(7), np.zeros(7))


def test_simulator_with_numba_enable_cudasim_set():
    """The simulator path also works when the user set NUMBA_ENABLE_CUDASIM=1 (numba.cuda *is* the
    simulator then), and a real-GPU request then fails clearly instead of launching on the CPU."""
    code = (
        "import numpy as np, dynamics\n"
        "m = dynamics.load_model('iiwa'); rng = np.random.default_rng(0)\n"
        "q = m.random_configuration(rng, size=(2,)); v = rng.normal(size=(2, 7)); t = rng.normal(size=(2, 7))\n"
        "a = dynamics.get_backend('gpu', simulate=True).aba_derivatives(m, q, v, t)\n"
        "b = dynamics.get_backend('numpy').aba_derivatives(m, q, v, t)\n"
        "print(max(float(np.abs(x - y).max()) for x, y in zip(a, b)))\n"
        "try:\n    dynamics.get_backend('gpu')\nexcept dynamics.BackendUnavailableError as e:\n    print('ERR', e)\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert float(lines[0]) < 1e-10
    assert lines[1].startswith("ERR") and ("CuPy is not installed" in lines[1] or "NUMBA_ENABLE_CUDASIM" in lines[1])


# ------------------------------------------------------------------ real CUDA frontend (no GPU needed)
def _nvvm_reason() -> str | None:
    from numba import cuda
    from numba.core import config
    if config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM=1: numba.cuda is the simulator"

    def k(x):
        x[0] = 1.0
    try:
        cuda.compile_ptx(k, "void(float64[::1])", cc=(8, 0))
    except Exception as e:
        return (f"NVVM not found ({type(e).__name__}); pip install --target DIR nvidia-cuda-nvcc-cu12 and set "
                f"CUDA_HOME=DIR/nvidia/cuda_nvcc to run this check")
    return None


def test_kernels_compile_to_ptx(bundled):
    """A kernel (placements and the serial sweeps it shares with the others) through Numba's real CUDA
    frontend and NVVM: catches Python the simulator accepts but CUDA does not (e.g. ``np.sqrt``). The
    full check of every kernel: ``python -m dynamics.gpu_backend.ptx --robot atlas``."""
    reason = _nvvm_reason()
    if reason:
        pytest.skip(reason)
    from dynamics.gpu_backend.ptx import SHARED_LIMIT, compile_kernels
    (r,) = compile_kernels(bundled["iiwa"], "float64", only=["k_com"])
    assert r.ok, r.error
    assert 0 < r.shared_bytes <= SHARED_LIMIT


# ------------------------------------------------------------------ benchmark smoke test
def test_benchmark_runs_in_simulator(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_benchmark", ROOT / "benchmarks" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out, png = tmp_path / "gpu.json", tmp_path / "gpu.png"
    plot = importlib.util.find_spec("matplotlib") is not None     # the plot extra; the test extra lacks it
    args = ["--simulate", "--n", "2", "--robots", "iiwa", "--out", str(out)] + (["--plot", str(png)] if plot else [])
    assert bench.main(args) == 0
    res = json.loads(out.read_text())
    assert res["simulated"] and "SIMULATOR" in res["note"]
    (e,) = res["entries"]
    assert e["robot"] == "iiwa" and e["n"] == 2 and e["numba_s"] > 0
    assert set(e["partitions"]) == set(PARTITIONS)
    for d in e["partitions"].values():
        assert d["end_to_end_s"] >= d["compute_s"] > 0 and d["ratio_end_to_end_vs_numba"] > 0
    if plot:
        assert png.stat().st_size > 10_000


# ------------------------------------------------------------------ in the solver loop (host side on numba)
def test_solver_takes_compiled_host_paths_and_matches_numba(sim64):
    """With ``host="numba"`` (the default) the solvers run the compiled rollout, cost kernels and
    Riccati pass on the numba backend's dynamics and ask the gpu backend for the derivatives only;
    one iLQR iteration then matches the numba backend's (float64 throughout: to ~1e-10 relative,
    asserted at 1e-8 for the iteration's arithmetic). ``host="python"`` keeps the Python loops."""
    import tasks
    from solvers import ILQR
    from solvers.costs.compiled import runs_kernel_library
    from solvers.rollout_numba import compiled_rollout_available
    task = tasks.get_task("iiwa-reach")
    x0 = task.initial_state()
    assert sim64.host == "numba" and sim64.prefers_compiled_solver
    pg = task.build_problem(x0, 2, 0.02, backend=sim64)
    assert compiled_rollout_available(pg) and runs_kernel_library(sim64.compiled_kinematics(pg.model))
    solver = ILQR(pg)
    assert solver.compiled
    rg = solver.solve(max_iter=1)
    assert sim64.last_timing.function == "aba_derivatives"      # the derivatives were the device's
    rn = ILQR(task.build_problem(x0, 2, 0.02, backend=dynamics.get_backend("numba"))).solve(max_iter=1)
    assert abs(rg.cost - rn.cost) <= 1e-8 * abs(rn.cost)
    assert np.abs(rg.us - rn.us).max() <= 1e-8 * max(1.0, np.abs(rn.us).max())
    py = GpuBackend(simulate=True, host="python")
    assert not py.prefers_compiled_solver and py.compiled_forward_dynamics(task.model) is None
    assert not compiled_rollout_available(task.build_problem(x0, 2, 0.02, backend=py))


def test_work_arrays_persist_and_are_never_read_before_written(bundled):
    """Device work arrays and input / output blocks are allocated once per (slot, shape) and reused by
    later launches; poisoning
    them with NaN between calls leaves every result equal to the reference (no kernel reads work it
    did not write in the same launch)."""
    m = bundled["hyq"]
    be = GpuBackend(simulate=True)
    q, v, a = states(m, 2, seed=5)[:3]
    ref = dynamics.get_backend("numpy")
    be.aba_derivatives(m, q, v, a)
    be.minv(m, q)
    be.rnea_second_derivatives(m, q, v, a)
    be.frame_jacobian_time_variation(m, q, v, m.body_names[-1], "local")
    be.com_jacobian(m, q)
    work = dict(be._work)
    assert {"IA", "F", "P", "cols", "dtau", "mats", "vecs", "Jw", "mx"} <= {k[0] for k in work}
    # the device input and output blocks of each function persist too (poisoned below as well)
    assert any(k[0].startswith("in:aba_derivatives") for k in work) and any(k[0].startswith("out:") for k in work)
    for buf in work.values():
        buf.fill(np.nan if buf.dtype.kind == "f" else -1)
    check_all("aba_derivatives", be.aba_derivatives(m, q, v, a), ref.aba_derivatives(m, q, v, a), 1e-10)
    check("minv", be.minv(m, q), ref.minv(m, q), 1e-10)
    check_all("rnea_second_derivatives", be.rnea_second_derivatives(m, q, v, a),
              ref.rnea_second_derivatives(m, q, v, a), 1e-10)
    check_all("frame_jacobian_time_variation", be.frame_jacobian_time_variation(m, q, v, m.body_names[-1], "local"),
              ref.frame_jacobian_time_variation(m, q, v, m.body_names[-1], "local"), 1e-10)
    check("com_jacobian", be.com_jacobian(m, q), ref.com_jacobian(m, q), 1e-10)
    assert all(be._work[k] is work[k] for k in work)       # the same arrays, not new ones
