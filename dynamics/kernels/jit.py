"""Compilation options of every kernel of this package, and its on-disk cache policy.

``jit`` compiles a kernel with numba's on-disk cache, FMA contraction (``fastmath={"contract"}``:
fused multiply-adds only; no reassociation, and NaN/inf semantics are kept) and numpy's floating
point error model (a division by zero gives inf/NaN as in the numpy reference, instead of a
Python exception and a test before every division); ``jit_parallel`` is the same with
``parallel=True`` for the ``prange`` batch drivers.

Cache invalidation: numba stamps a cached function with a hash of *its own* source file only, but a cached kernel
contains the compiled code of every function it calls from the other modules of this package;
after an edit (or a package upgrade) touching only a callee's module, numba would load a stale
kernel. This module registers (:mod:`dynamics.kernel_cache`) a stamp with a hash of all the package's
sources for the functions defined in this package, when it is imported, i.e. before any kernel of
the package is decorated with :data:`jit` or :data:`jit_parallel`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from numba import njit

from ..kernel_cache import files_hash, stamp_sources

_PACKAGE_DIR = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def package_source_hash() -> str:
    """SHA-256 of every kernel source of this package (name and content), computed once per process.
    ``__init__.py`` (the Python-side backend class, no compiled code) is left out."""
    return files_hash(sorted(p for p in _PACKAGE_DIR.glob("*.py") if p.name != "__init__.py"))


# the kernels of this package: numba's stamp of the file plus the hash of the whole package
stamp_sources("dynamics.kernels", lambda path: path.parent == _PACKAGE_DIR, package_source_hash)


#: decorator of every serial kernel: cached on disk, FMA contraction allowed, numpy error model
jit = njit(cache=True, fastmath={"contract"}, error_model="numpy")
#: decorator of the batch drivers that split a batch over the worker threads with ``numba.prange``
jit_parallel = njit(cache=True, parallel=True, error_model="numpy")
