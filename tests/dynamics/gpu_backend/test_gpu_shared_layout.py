"""The gpu kernels keep per-knot arrays in shared memory where they fit (``kernels.kernel_constants``):
the static shared memory stays within the 48 KiB a block may declare (checked against the PTX the
real CUDA frontend emits where NVVM is installed), and results match the numpy reference whether
every candidate array is in shared memory or none is (Numba's CUDA simulator)."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
import dynamics.gpu_backend as gpu
from dynamics.gpu_backend import kernels as K
from tests.helpers.comparisons import check_all
from tests.helpers.gpu_checks import nvvm_or_skip


def _consts(model):
    return gpu.GpuBackend(simulate=True)._md(model).compiler.consts


@pytest.mark.parametrize("name", ["iiwa", "hyq", "atlas"])
def test_layout_within_budget(bundled, name):
    c = _consts(bundled[name])
    item = np.dtype(c["DT"]).itemsize
    for kname in K.SHARED_CANDIDATES:
        f = K.KERNELS[kname]
        kc = K.kernel_constants(f, c)
        moved = [n[3:] for n, v in kc.items() if n.startswith("SH_") and kc["M_" + n[3:]]]
        total = K.declared_shared_bytes(f, c) + sum(int(np.prod(kc["SH_" + n])) * (8 if n == "LI" else item)
                                                   for n in K.SHARED_CANDIDATES[kname])
        assert total <= K.SHARED_BUDGET, (kname, total)
        # the first candidate fits for every bundled robot; none moves on a zero budget, all on a huge one
        assert K.SHARED_CANDIDATES[kname][0] in moved
        assert not any(v for n, v in K.kernel_constants(f, c, budget=0).items() if n.startswith("M_"))
        big = K.kernel_constants(f, c, budget=10**9)
        assert all(big["M_" + n] for n in K.SHARED_CANDIDATES[kname])


def test_unmoved_arrays_declare_one_element_per_axis(bundled):
    kc = K.kernel_constants(K.KERNELS["k_aba"], _consts(bundled["atlas"]), budget=0)
    assert kc["SH_IA"] == (1, 1, 1) and kc["SH_LI"] == (1, 1)


@pytest.mark.parametrize("budget", [0, 10**9])
def test_results_with_all_or_no_arrays_in_shared_memory(monkeypatch, bundled, budget):
    monkeypatch.setattr(K, "SHARED_BUDGET", budget)
    monkeypatch.setattr(gpu, "_COMPILERS", {})   # kernels compiled afresh with this layout
    be = gpu.GpuBackend(simulate=True)
    ref = dynamics.get_backend("numpy")
    m = bundled["hyq"]
    rng = np.random.default_rng(3)
    q = m.random_configuration(rng, size=(2,))
    v, tau = rng.normal(size=(2, m.nv)), rng.normal(size=(2, m.nv))
    check_all("aba_derivatives", be.aba_derivatives(m, q, v, tau), ref.aba_derivatives(m, q, v, tau), 1e-10)
    check_all("rnea_derivatives", be.rnea_derivatives(m, q, v, tau), ref.rnea_derivatives(m, q, v, tau), 1e-10)
    check_all("minv", (be.minv(m, q),), (ref.minv(m, q),), 1e-10)
    check_all("aba", (be.aba(m, q, v, tau),), (ref.aba(m, q, v, tau),), 1e-10)


@pytest.mark.parametrize("name", ["iiwa", "atlas"])
def test_ptx_shared_memory_is_what_the_layout_declares(bundled, name):
    nvvm_or_skip()
    from dynamics.gpu_backend.ptx import SHARED_LIMIT, compile_kernels
    c = _consts(bundled[name])
    for r in compile_kernels(bundled[name], "float64", only=["k_aba_derivatives", "k_aba"]):
        assert r.ok, r.error
        f = K.KERNELS[r.kernel]
        kc = K.kernel_constants(f, c)
        item = np.dtype(c["DT"]).itemsize
        want = K.declared_shared_bytes(f, c) + sum(int(np.prod(kc["SH_" + n])) * (8 if n == "LI" else item)
                                                  for n in K.SHARED_CANDIDATES[r.kernel])
        assert abs(r.shared_bytes - want) <= 512 and r.shared_bytes <= SHARED_LIMIT
