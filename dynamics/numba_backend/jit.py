"""Compilation options of every kernel of this package, and its on-disk cache policy.

``jit`` compiles a kernel with numba's on-disk cache, FMA contraction (``fastmath={"contract"}``:
fused multiply-adds only; no reassociation, and NaN/inf semantics are kept) and numpy's floating
point error model (a division by zero gives inf/NaN as in the numpy reference, instead of a
Python exception and a test before every division); ``jit_parallel`` is the same with
``parallel=True`` for the ``prange`` batch drivers.

Cache invalidation: numba stamps a cached function with a hash of *its own* source file only, but a cached kernel
contains the compiled code of every function it calls from the other modules of this package;
after an edit (or a package upgrade) touching only a callee's module, numba would load a stale
kernel. This module registers a cache locator for the functions defined in this package that keeps
numba's usual cache location (``__pycache__`` next to the sources, or ``NUMBA_CACHE_DIR``) and adds a
hash of all the package's sources to the stamp. It is installed when this module is imported, i.e.
before any kernel of the package is decorated with :data:`jit` or :data:`jit_parallel`.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from numba import njit
from numba.core import caching

_PACKAGE_DIR = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def package_source_hash() -> str:
    """SHA-256 of every kernel source of this package (name and content), computed once per process.
    ``__init__.py`` (the Python-side backend class, no compiled code) is left out."""
    h = hashlib.sha256()
    for path in sorted(p for p in _PACKAGE_DIR.glob("*.py") if p.name != "__init__.py"):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


class PackageStampLocator(caching._CacheLocator):
    """numba's default locator for the function, with the package-wide source hash in its stamp."""

    def __init__(self, inner: caching._CacheLocator):
        self._inner = inner

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return (self._inner.get_source_stamp(), package_source_hash())

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        try:
            if Path(py_file).resolve().parent != _PACKAGE_DIR:
                return None
        except OSError:
            return None
        for other in caching.CacheImpl._locator_classes:
            if other is cls:
                continue
            inner = other.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner)
        return None


if PackageStampLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, PackageStampLocator)


#: decorator of every serial kernel: cached on disk, FMA contraction allowed, numpy error model
jit = njit(cache=True, fastmath={"contract"}, error_model="numpy")
#: decorator of the batch drivers that split a batch over the worker threads with ``numba.prange``
jit_parallel = njit(cache=True, parallel=True, error_model="numpy")
