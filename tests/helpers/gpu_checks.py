"""The gpu backend's checks against the numpy reference, shared by the CUDA-simulator tests and
the hardware tests (tests/dynamics/gpu_backend/)."""

from __future__ import annotations

import numpy as np

import dynamics
from dynamics.gpu_backend import PARTITIONS, GpuTiming

from .comparisons import check, check_all

REFERENCES = ("local", "world", "local_world_aligned")


def states(model: dynamics.RobotModel, n: int, seed: int):
    """Random ``(q, v, a_or_tau, fext)`` for a batch of ``n``."""
    rng = np.random.default_rng(seed)
    return (model.random_configuration(rng, size=(n,)), rng.normal(size=(n, model.nv)),
            rng.normal(size=(n, model.nv)), rng.normal(size=(n, model.nbody, 6)))


# ------------------------------------------------------------------ checks shared with test_gpu_hardware
def check_dynamics(be: dynamics.Backend, m: dynamics.RobotModel, n: int, rtol: float, seed: int = 1,
                   full: bool = True) -> None:
    """RNEA (with/without f_ext), bias forces, gravity, CRBA, M⁻¹, ABA, forward dynamics by M⁻¹,
    ∇RNEA and ∇FD (without f_ext, with f_ext and M⁻¹ given) against the numpy reference;
    ``full=False``: the kernels only (RNEA, CRBA, M⁻¹, ABA, ∇RNEA, ∇FD)."""
    ref = dynamics.get_backend("numpy")
    q, v, a, fext = states(m, n, seed)
    tag = f"{be!r} {m.name} N={n}"
    check(f"{tag} rnea", be.rnea(m, q, v, a, fext), ref.rnea(m, q, v, a, fext), rtol)
    check(f"{tag} aba", be.aba(m, q, v, a, fext), ref.aba(m, q, v, a, fext), rtol)
    check(f"{tag} crba", be.crba(m, q), ref.crba(m, q), rtol)
    check(f"{tag} minv", be.minv(m, q), ref.minv(m, q), rtol)
    check_all(f"{tag} rnea_derivatives", be.rnea_derivatives(m, q, v, a, fext), ref.rnea_derivatives(m, q, v, a, fext),
              rtol)
    check_all(f"{tag} aba_derivatives", be.aba_derivatives(m, q, v, a), ref.aba_derivatives(m, q, v, a), rtol)
    if not full:
        return
    Mi = ref.minv(m, q)
    check_all(f"{tag} aba_derivatives(fext, minv given)", be.aba_derivatives(m, q, v, a, fext, minv=Mi),
              ref.aba_derivatives(m, q, v, a, fext, minv=Mi), rtol)
    check(f"{tag} rnea (no fext)", be.rnea(m, q, v, a), ref.rnea(m, q, v, a), rtol)
    check(f"{tag} bias_forces", be.bias_forces(m, q, v), ref.bias_forces(m, q, v), rtol)
    check(f"{tag} gravity_torques", be.gravity_torques(m, q), ref.gravity_torques(m, q), rtol)
    check(f"{tag} forward_dynamics(minv)", be.forward_dynamics(m, q, v, a, fext, method="minv"),
          ref.forward_dynamics(m, q, v, a, fext, method="minv"), rtol)


def check_kinematics(be: dynamics.Backend, m: dynamics.RobotModel, n: int, rtol: float, seed: int = 3) -> None:
    """Placements, frame Jacobians in every reference and their time variation, centre of mass and
    its Jacobian, for the first site, the last body and the world body."""
    ref = dynamics.get_backend("numpy")
    q, v, _, _ = states(m, n, seed)
    tag = f"{be!r} {m.name} N={n}"
    check_all(f"{tag} body_placements", be.body_placements(m, q), ref.body_placements(m, q), rtol)
    check_all(f"{tag} site_placements", be.site_placements(m, q), ref.site_placements(m, q), rtol)
    check(f"{tag} center_of_mass", be.center_of_mass(m, q), ref.center_of_mass(m, q), rtol)
    check(f"{tag} com_jacobian", be.com_jacobian(m, q), ref.com_jacobian(m, q), rtol)
    frames = list(dict.fromkeys([n for n in m.site_names if n][:1] + [m.body_names[-1], m.body_names[0]]))
    for f in frames:
        check_all(f"{tag} frame_placement({f})", be.frame_placement(m, q, f), ref.frame_placement(m, q, f), rtol)
        for r in REFERENCES:
            check(f"{tag} {f} {r} frame_jacobian", be.frame_jacobian(m, q, f, r), ref.frame_jacobian(m, q, f, r), rtol)
            check_all(f"{tag} {f} {r} frame_jacobian_time_variation", be.frame_jacobian_time_variation(m, q, v, f, r),
                      ref.frame_jacobian_time_variation(m, q, v, f, r), rtol)


def check_second_order(be: dynamics.Backend, m: dynamics.RobotModel, n: int, rtol: float, seed: int = 4) -> None:
    """IDSVA-SO and FDSVA-SO tensors (with external forces) against the numpy reference."""
    ref = dynamics.get_backend("numpy")
    q, v, a, fext = states(m, n, seed)
    tag = f"{be!r} {m.name} N={n}"
    check_all(f"{tag} rnea_second_derivatives", be.rnea_second_derivatives(m, q, v, a, fext),
              ref.rnea_second_derivatives(m, q, v, a, fext), rtol)
    check_all(f"{tag} aba_second_derivatives", be.aba_second_derivatives(m, q, v, a, fext),
              ref.aba_second_derivatives(m, q, v, a, fext), rtol)


def check_partitions(make, m: dynamics.RobotModel, n: int, rtol: float, seed: int = 5) -> None:
    """The three partitions agree with each other (to 1e-12 relative in float64: host BLAS vs kernel
    summation order) and with the reference (with f_ext; and with M⁻¹ given), and report their timing."""
    ref = dynamics.get_backend("numpy")
    q, v, tau, fext = states(m, n, seed)
    Mi = ref.minv(m, q)
    expect = [ref.aba_derivatives(m, q, v, tau, fext), ref.aba_derivatives(m, q, v, tau, None, minv=Mi)]
    got, moved = {}, {}
    for p in PARTITIONS:
        be = make(p)
        got[p] = [be.aba_derivatives(m, q, v, tau, fext)]
        tm = be.last_timing
        assert isinstance(tm, GpuTiming) and tm.partition == p and tm.function == "aba_derivatives"
        assert tm.batch == n and tm.bytes_h2d > 0 and tm.bytes_d2h > 0
        assert tm.compute_s > 0 and tm.transfer_s == tm.h2d_s + tm.d2h_s
        assert tm.total_s >= tm.compute_s + tm.h2d_s + tm.d2h_s
        assert tm.host_s > 0  # packing the input block; for split/fused also q̈, M⁻¹ (and RNEA) on the host
        moved[p] = (tm.bytes_h2d, tm.bytes_d2h)
        got[p].append(be.aba_derivatives(m, q, v, tau, None, minv=Mi))
        for k, (x, y) in enumerate(zip(got[p], expect)):
            check_all(f"{p} {m.name} call {k}", x, y, rtol)
    # what each partition moves: split sends the RNEA quantities, fused the state and q̈;
    # completely fused returns ∂a/∂τ = M⁻¹ as well (Plancher et al. 2021 Fig. 2: I/O grows split > fused)
    assert moved["split"][0] > moved["fused"][0]
    assert moved["completely_fused"][1] > moved["fused"][1] == moved["split"][1]
    for k in range(2):
        check_all(f"split vs completely_fused {k}", got["split"][k], got["completely_fused"][k], max(rtol, 1e-12))
        check_all(f"fused vs completely_fused {k}", got["fused"][k], got["completely_fused"][k], max(rtol, 1e-12))


def nvvm_or_skip() -> None:
    """Skip the calling test unless Numba's real CUDA frontend and NVVM can compile to PTX here (no GPU
    needed): ``pip install --target DIR nvidia-cuda-nvcc-cu12`` and ``CUDA_HOME=DIR/nvidia/cuda_nvcc``."""
    import pytest
    from numba import cuda
    from numba.core import config
    if config.ENABLE_CUDASIM:
        pytest.skip("NUMBA_ENABLE_CUDASIM=1: numba.cuda is the simulator")

    def probe(x):
        x[0] = 1.0
    try:
        cuda.compile_ptx(probe, "void(float64[::1])", cc=(8, 0))
    except Exception as e:
        pytest.skip(f"NVVM not found ({type(e).__name__}); see python -m dynamics.gpu_backend.ptx --help")
