"""The key of the gpu backend's on-disk compile cache (``runtime.kernel_cache_key``) changes with
everything that changes a kernel's code — model constants, dtype, compute capability, kernel
source (of the kernel or of any retargeted callee), compiler stack — and only with those; and the
PTX store keyed on it serves a second compile from disk. No GPU needed (the PTX part needs NVVM)."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics.gpu_backend.kernels import KERNELS
from dynamics.gpu_backend.runtime import PtxStore, device, kernel_cache_key, kernel_sources

CONSTS = dict(DT=np.float64, NL=7, NV=7, NMATS=9, NVECS=8)
CC = (8, 0)
TOOL = "numba-cuda 0.30.4"


def key(f=KERNELS["k_aba_derivatives"], cc=CC, tool=TOOL, **changes):
    return kernel_cache_key(f, dict(CONSTS, **changes), cc, tool)


def test_same_inputs_same_key():
    assert key() == key()
    assert key() == kernel_cache_key(KERNELS["k_aba_derivatives"], dict(reversed(list(CONSTS.items()))), CC, TOOL)


def test_every_input_that_changes_the_code_changes_the_key():
    keys = {key(), key(NL=12), key(NV=12), key(DT=np.float32), key(cc=(9, 0)), key(tool="numba-cuda 0.31.0"),
            key(f=KERNELS["k_aba"])}
    assert len(keys) == 7


@device
def _helper_a(x):
    return x + 1.0


@device
def _helper_b(x):
    return x + 2.0


def _kernel_a(out):
    out[0] = _helper_a(out[0])


def _kernel_b(out):
    out[0] = _helper_b(out[0])


def test_callee_sources_are_part_of_the_key():
    """The kernels differ only by the callee they retarget: the key follows the callee's source."""
    names = [n for n, _ in kernel_sources(_kernel_a)]
    assert any(n.endswith("_helper_a") for n in names)
    assert kernel_cache_key(_kernel_a, CONSTS, CC, TOOL) != kernel_cache_key(_kernel_b, CONSTS, CC, TOOL)
    # a kernel-library callee of a real kernel is in its sources too (the ABA sweeps of the CPU backend)
    assert any(n.startswith("dynamics.kernels.") for n, _ in kernel_sources(KERNELS["k_aba"]))


def test_ptx_store_round_trip(tmp_path):
    st = PtxStore(str(tmp_path))
    assert st.get("abc") is None
    st.put("abc", ".version 8.0\n")
    assert st.get("abc") == ".version 8.0\n" and PtxStore(str(tmp_path)).get("abc") == ".version 8.0\n"
    assert not list(tmp_path.glob("*.tmp"))


def test_ptx_compile_served_from_disk(tmp_path, bundled):
    """Compile one kernel to PTX through the store: the second compile (another Compiler, as in a new
    process) loads the same PTX from disk; another robot (other model constants) misses."""
    from numba import cuda
    from numba.core import config
    if config.ENABLE_CUDASIM:
        pytest.skip("NUMBA_ENABLE_CUDASIM=1: numba.cuda is the simulator")
    def probe(x):
        x[0] = 1.0
    try:
        cuda.compile_ptx(probe, "void(float64[::1])", cc=CC)
    except Exception as e:
        pytest.skip(f"NVVM not found ({type(e).__name__}); see python -m dynamics.gpu_backend.ptx --help")
    from dynamics.gpu_backend.ptx import compile_kernels
    st = PtxStore(str(tmp_path))
    (a,) = compile_kernels(bundled["iiwa"], only=["k_com"], store=st)
    (b,) = compile_kernels(bundled["iiwa"], only=["k_com"], store=st)
    (c,) = compile_kernels(bundled["hyq"], only=["k_com"], store=st)
    assert a.ok and not a.cached and b.ok and b.cached and b.key == a.key and b.ptx_chars == a.ptx_chars
    assert c.ok and not c.cached and c.key != a.key
    assert len(list(tmp_path.glob("*.ptx"))) == 2
