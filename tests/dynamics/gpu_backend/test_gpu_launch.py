"""The pre-bound launch path of the gpu backend (``dynamics.gpu_backend.launch``) without a GPU:
the flattened parameters follow Numba's CUDA calling convention (checked against the parameter list
of the PTX that numba-cuda's real frontend emits, where NVVM is installed), parameter blocks are
bound once per buffer set, and the PTX comes from the on-disk store in a later process."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from dynamics.gpu_backend.kernels import KERNELS
from dynamics.gpu_backend.launch import BoundLauncher, entry_point, flatten, signature
from dynamics.gpu_backend.runtime import Compiler, PtxStore, Runtime, kernel_cache_key
from tests.helpers.gpu_checks import nvvm_or_skip


class FakeDeviceArray:
    """A host array posing as a device array (what the launch path reads of a CuPy array)."""

    def __init__(self, a: np.ndarray, ptr: int | None = None):
        self.a = a
        self.data = SimpleNamespace(ptr=a.ctypes.data if ptr is None else ptr)
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (self.data.ptr, False),
                                         "version": 3}

    def __getattr__(self, name):
        return getattr(self.a, name)


def _fake_args(args):
    return tuple(FakeDeviceArray(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in args)


def test_flatten_follows_numbas_calling_convention():
    a = FakeDeviceArray(np.zeros((3, 4)), ptr=0x7000)
    vals = flatten((a, 5, np.int64(-2)))
    assert len(vals) == 5 + 2 * 2 + 2
    meminfo, parent, nitems, itemsize, data, s0, s1, st0, st1, i0, i1 = (v.value for v in vals)
    assert (meminfo, parent, nitems, itemsize, data) == (None, None, 12, 8, 0x7000)
    assert (s0, s1, st0, st1) == (3, 4, 32, 8) and (i0, i1) == (5, -2)
    assert isinstance(vals[-1], ctypes.c_int64)


def test_signature_types_arrays_and_integers():
    from numba.core import types
    sig = signature((FakeDeviceArray(np.zeros((2, 3))), FakeDeviceArray(np.zeros(4, np.int64)), 1, True))
    assert sig == (types.Array(types.float64, 2, "C"), types.Array(types.int64, 1, "C"), types.int64, types.int64)
    assert signature((FakeDeviceArray(np.zeros((4, 4))[:, ::2]),))[0].layout == "A"
    with pytest.raises(TypeError, match="cannot bind"):
        signature((1.5,))


def test_entry_point_reads_the_parameter_list():
    ptx = ".version 8.0\n.visible .entry _Z3k_a(\n\t.param .u64 p0,\n\t.param .u64 p1,\n\t.param .u64 p2\n)\n{ ret; }"
    assert entry_point(ptx) == ("_Z3k_a", 3)
    with pytest.raises(RuntimeError, match="one kernel entry"):
        entry_point(ptx + ptx)


class FakeDriver:
    def __init__(self):
        self.loaded, self.launches = [], []

    def moduleLoadData(self, image):
        self.loaded.append(image)
        return 11

    def moduleGetFunction(self, module, name):
        return 1000 + len(self.loaded)

    def launchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.launches.append((f, gx, bx, stream, params))


def _launcher(store):
    drv = FakeDriver()
    return BoundLauncher(SimpleNamespace(cuda=SimpleNamespace(driver=drv)), (9, 0), store), drv


def _kernel(x, n):
    x[0] = n


def _stored(tmp_path, compiler, args, nparams):
    """A store holding a (hand-written) PTX for ``_kernel`` at ``args``' signature."""
    st = PtxStore(str(tmp_path))
    key = kernel_cache_key(_kernel, dict(compiler.consts, SIG=str(signature(args))), (9, 0))
    params = ",\n".join(f"\t.param .u64 p{i}" for i in range(nparams))
    st.put(key, f".version 8.0\n.visible .entry _Z7_kernel(\n{params}\n)\n{{ ret; }}\n")
    return st


def test_bound_launcher_binds_once_per_buffer_set(tmp_path):
    comp = Compiler(Runtime(False, np, lambda f: f, lambda f: f), dict(DT=np.float64, NL=1, NV=1))
    x = FakeDeviceArray(np.zeros(4))
    st = _stored(tmp_path, comp, (x, 3), 5 + 2 + 1)
    bl, drv = _launcher(st)
    bl.launch(comp, "_kernel", _kernel, 8, 32, (x, 3), 0)
    bl.launch(comp, "_kernel", _kernel, 8, 32, (x, 3), 0)
    assert len(drv.loaded) == 1 and len(bl.bound) == 1 and drv.launches[0] == drv.launches[1]
    (k,) = bl.kernels.values()
    assert k.cached and k.nparams == 8
    # the parameter block holds the flattened values: read the data pointer back through it
    params = ctypes.cast(drv.launches[0][4], ctypes.POINTER(ctypes.c_void_p))
    assert ctypes.c_void_p.from_address(params[4]).value == x.data.ptr
    assert ctypes.c_int64.from_address(params[7]).value == 3
    # another integer or another buffer binds a new block; the loaded code is reused
    bl.launch(comp, "_kernel", _kernel, 8, 32, (x, 4), 0)
    bl.launch(comp, "_kernel", _kernel, 8, 32, (FakeDeviceArray(np.zeros(4)), 3), 0)
    assert len(bl.bound) == 3 and len(drv.loaded) == 1


def test_parameter_count_mismatch_is_an_error(tmp_path):
    comp = Compiler(Runtime(False, np, lambda f: f, lambda f: f), dict(DT=np.float64, NL=1, NV=1))
    x = FakeDeviceArray(np.zeros(4))
    bl, _ = _launcher(_stored(tmp_path, comp, (x, 3), 4))
    with pytest.raises(RuntimeError, match="launch='numba'"):
        bl.launch(comp, "_kernel", _kernel, 1, 32, (x, 3), 0)


@pytest.mark.parametrize("name", ["k_aba_derivatives", "k_frame_jacobian"])
def test_flattened_parameters_match_the_compiled_kernel(bundled, name):
    """numba-cuda's real frontend: the kernel's PTX entry declares exactly as many parameters as the
    launch path passes for the arguments of a real launch (every array kind and integer)."""
    nvvm_or_skip()
    from numba import cuda

    from dynamics.gpu_backend import GpuBackend
    from dynamics.gpu_backend.ptx import _compute_capability, recorded_launches
    model = bundled["iiwa"]
    args = _fake_args(recorded_launches(model)[name])
    md = GpuBackend(simulate=True)._md(model)
    comp = Compiler(Runtime(False, np, lambda f: f, lambda f: cuda.jit(device=True)(f)), md.compiler.consts)
    with _compute_capability((8, 0)):
        ptx, _ = cuda.compile_ptx(comp.rebound(KERNELS[name]), signature(args), cc=(8, 0))
    assert entry_point(ptx)[1] == len(flatten(args))
