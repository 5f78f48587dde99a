"""The one set of compilation options of every numba CPU kernel of the project, and its on-disk cache.

Every kernel is compiled with numba's on-disk cache, FMA contraction (``fastmath={"contract"}``:
fused multiply-adds only; no reassociation, and NaN/inf semantics are kept) and numpy's floating
point error model (a division by zero gives inf/NaN as in the numpy reference, instead of a Python
exception and a test before every division):

* :func:`jit`: a serial kernel (a per-state pass, a ``*_range`` batch slice, a solver kernel);
* :func:`jit_inline`: the same, inlined into its callers at numba's IR level: the body of a
  parallel driver, so that the driver is the one function compiled (a callee compiled on its own
  would be compiled, then linked and optimised again inside the driver), and small helpers whose
  arguments are compile-time constants (:mod:`.scratch`);
* :func:`jit_parallel`: a batch driver that splits its batch over the worker threads with
  ``numba.prange`` (the backends' one driver, :mod:`.threaded_batch`, calls the serial kernel by
  address, so that it does not compile the kernel's call tree a second time).

Cache invalidation (:mod:`dynamics.kernel_cache`): each decorator accepts only functions defined in
one of the project's compiled sources, and their cache entries are stamped with a hash of all of
them, so an edit to a callee in another file recompiles its callers. The stamp is registered when
this module is imported, i.e. before any kernel is decorated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from numba import njit

from ..kernel_cache import COMPILED_SOURCES, compiled_source_hash, is_compiled_source, register

register()

_OPTIONS = dict(cache=True, fastmath={"contract"}, error_model="numpy")


def _decorator(**options) -> Callable:
    def decorate(fn: Callable):
        path = inspect.getsourcefile(fn) or fn.__code__.co_filename
        if not is_compiled_source(path):
            raise ValueError(f"{fn.__module__}.{fn.__qualname__} ({path}) is not in a compiled source of the project "
                             f"{COMPILED_SOURCES}: numba's cache stamp would not cover it (dynamics.kernel_cache)")
        return njit(**_OPTIONS, **options)(fn)
    return decorate


#: decorator of every serial kernel
jit = _decorator()
#: decorator of a kernel inlined into its callers (numba IR inlining, ``inline="always"``)
jit_inline = _decorator(inline="always")
#: decorator of the batch drivers that split a batch over the worker threads with ``numba.prange``
jit_parallel = _decorator(parallel=True)


def package_source_hash() -> str:
    """What every cached kernel is stamped with (:func:`dynamics.kernel_cache.compiled_source_hash`):
    changes whenever the compiled code of any kernel may change, for callers that cache their own
    compiled code (``source_hash`` of :class:`dynamics.backend.CompiledForwardDynamics`)."""
    return compiled_source_hash()
