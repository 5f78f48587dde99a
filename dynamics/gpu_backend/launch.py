"""Launching the ``gpu`` backend's kernels with pre-bound arguments (issue 25, item 1).

numba-cuda's dispatcher types and converts every argument at every launch (a ``__cuda_array_interface__``
export and a ctypes conversion per array; ``k_aba_derivatives`` takes 22 arrays). This module launches
the same compiled code without it:

* **code**: each kernel is compiled once per signature to PTX by numba-cuda (:func:`numba.cuda.compile_ptx`,
  the same frontend and NVVM as the dispatcher), kept on disk in a :class:`~.runtime.PtxStore` under
  :func:`~.runtime.kernel_cache_key` (so a later process skips Numba's typing and NVVM), and loaded
  with the CUDA driver (``cuModuleLoadData`` through CuPy), which JIT-compiles PTX to machine code
  and caches that itself;
* **arguments**: a launch's arguments are flattened once into the kernel's parameter list in Numba's
  calling convention (per array: meminfo, parent, item count, item size, data pointer, shape,
  strides; per integer: an int64) and kept as a ctypes ``void*[]`` keyed on the values that decide
  it (device pointers, shapes, strides, dtypes, integers). The backend's device buffers persist per
  function and batch size, so a warm call finds its parameter block and launches it with one
  ``cuLaunchKernel``.

The parameter count is checked against the PTX entry's declaration when a kernel is loaded.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .runtime import PtxStore, kernel_cache_key

_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\((.*?)\)", re.S)
#: bound parameter blocks kept per launcher before the oldest half is dropped (calls on fresh device
#: arrays, e.g. ``on_device`` with new arrays each time, would otherwise grow the table without bound)
MAX_BOUND = 2048


def entry_point(ptx: str) -> tuple[str, int]:
    """``(name, parameter count)`` of the single kernel entry of a PTX module."""
    found = _ENTRY.findall(ptx)
    if len(found) != 1:
        raise RuntimeError(f"gpu backend: expected one kernel entry in the PTX, found {len(found)}")
    name, params = found[0]
    return name, len(re.findall(r"\.param\b", params))


def is_array(x) -> bool:
    return hasattr(x, "__cuda_array_interface__") and hasattr(x, "strides")


def signature(args: tuple) -> tuple:
    """Numba types of a launch's arguments: device arrays as C-contiguous (or any-layout) arrays of
    their dtype and rank, integers as int64 (the dispatcher's typing of a Python int)."""
    from numba.core import types
    from numba.np.numpy_support import from_dtype
    sig = []
    for a in args:
        if is_array(a):
            layout = "C" if a.flags.c_contiguous else "A"
            sig.append(types.Array(from_dtype(a.dtype), a.ndim, layout))
        elif isinstance(a, (bool, int, np.integer)):
            sig.append(types.int64)
        else:
            raise TypeError(f"gpu backend: cannot bind a kernel argument of type {type(a).__name__}")
    return tuple(sig)


def flatten(args: tuple) -> list:
    """The ctypes values of a launch's parameters in Numba's CUDA calling convention."""
    c_intp = ctypes.c_ssize_t
    vals: list = []
    for a in args:
        if is_array(a):
            vals += [ctypes.c_void_p(0), ctypes.c_void_p(0), c_intp(a.size), c_intp(a.itemsize),
                     ctypes.c_void_p(int(a.data.ptr))]
            vals += [c_intp(s) for s in a.shape]
            vals += [c_intp(s) for s in a.strides]
        else:
            vals.append(ctypes.c_int64(int(a)))
    return vals


def arg_key(a):
    """What a bound parameter block depends on for one argument."""
    if is_array(a):
        return (a.data.ptr, a.shape, a.strides, a.dtype.char)
    return int(a)


@dataclass
class LoadedKernel:
    """One kernel loaded on the device: driver handle, parameter count, and where its code came from."""

    handle: int
    nparams: int
    cached: bool          # the PTX came from the on-disk store (no Numba compile in this process)
    compile_s: float      # seconds to obtain the PTX and load it


@dataclass
class _Bound:
    kernel: LoadedKernel
    values: list           # keeps the ctypes values alive
    pointers: object       # ctypes void*[] over ``values``
    address: int


@dataclass
class BoundLauncher:
    """Compiles, loads and launches kernels for one compiler (one model size and dtype) on a GPU.

    ``cupy``: the CuPy module; ``store``: the PTX store (``None``: the default location); ``cc``:
    the device's compute capability."""

    cupy: object
    cc: tuple[int, int]
    store: PtxStore | None = None
    kernels: dict = field(default_factory=dict)     # (compiler consts, kernel, signature) -> LoadedKernel
    bound: dict = field(default_factory=dict)       # (kernel, grid, block, arg keys) -> _Bound

    def load(self, compiler, name: str, f: Callable, sig: tuple) -> LoadedKernel:
        """The kernel ``f`` of ``compiler`` compiled for ``sig`` and loaded (memoised)."""
        import time
        key = (id(compiler), name, sig)
        hit = self.kernels.get(key)
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        store = self.store if self.store is not None else PtxStore()
        ckey = kernel_cache_key(f, dict(compiler.consts_for(f), SIG=str(sig)), self.cc)
        ptx = store.get(ckey)
        cached = ptx is not None
        if not cached:
            from numba import cuda
            ptx, _ = cuda.compile_ptx(compiler.rebound(f), sig, cc=self.cc)
            try:
                store.put(ckey, ptx)
            except OSError:  # a read-only home: run without the disk cache
                pass
        entry, nparams = entry_point(ptx)
        drv = self.cupy.cuda.driver
        module = drv.moduleLoadData(ptx.encode() + b"\0")
        handle = drv.moduleGetFunction(module, entry)
        loaded = self.kernels[key] = LoadedKernel(int(handle), nparams, cached, time.perf_counter() - t0)
        return loaded

    def launch(self, compiler, name: str, f: Callable, grid: int, block: int, args: tuple, stream_ptr: int) -> None:
        """Launch kernel ``name`` (source ``f``) on ``grid`` blocks of ``block`` threads with ``args``
        (device arrays and integers) on the stream ``stream_ptr``."""
        key = (id(compiler), name, grid, block) + tuple(arg_key(a) for a in args)
        b = self.bound.get(key)
        if b is None:
            k = self.load(compiler, name, f, signature(args))
            values = flatten(args)
            if len(values) != k.nparams:
                raise RuntimeError(f"gpu backend: {name} declares {k.nparams} parameters in its PTX but its "
                                   f"{len(args)} arguments flatten to {len(values)}; launch it with launch='numba'")
            pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
            if len(self.bound) >= MAX_BOUND:
                for old in list(self.bound)[:MAX_BOUND // 2]:
                    del self.bound[old]
            b = self.bound[key] = _Bound(k, values, pointers, ctypes.addressof(pointers))
        self.cupy.cuda.driver.launchKernel(b.kernel.handle, grid, 1, 1, block, 1, 1, 0, stream_ptr, b.address, 0)
