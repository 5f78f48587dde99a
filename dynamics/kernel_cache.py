"""numba's on-disk kernel cache, stamped with every source a cached kernel can compile in.

numba stamps a cached function with a hash of *its own* source file only, but a cached kernel also
contains the compiled code of every jitted function it calls from other files; after an edit (or a
package upgrade) touching only a callee's file, numba would load a stale kernel. The project's one
rule: every function it compiles with numba's CPU target lives in a *compiled source*
(:data:`COMPILED_SOURCES`; the decorators of :mod:`dynamics.kernels.jit` refuse any other file),
and its cache entry is stamped with numba's own stamp plus :func:`compiled_source_hash`, a hash
of every compiled source. Any edit to any of them invalidates every cached kernel: a kernel may
compile in callees from any of them, and a cold cache is rebuilt in the minute the first run
takes anyway.

Importing this module imports numba.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from numba.core import caching

#: every source file of the project whose functions numba compiles for the CPU, as glob patterns
#: relative to the folder that holds the project's packages
COMPILED_SOURCES = (
    "dynamics/kernels/*.py",
    "dynamics/contact/numba_kernels.py",
    "dynamics/gpu_backend/host.py",
    "dynamics/numba_backend/compile_ahead.py",
    "solvers/*_numba.py",
    "solvers/costs/compiled.py",
    "solvers/constraints/compiled.py",
)

#: the folder holding the ``dynamics`` and ``solvers`` packages
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def files_hash(paths: Iterable[Path], root: Path | None = None) -> str:
    """SHA-256 of the files' names (relative to ``root``, else the base name) and contents, in the
    given order."""
    h = hashlib.sha256()
    for path in paths:
        h.update((path.relative_to(root).as_posix() if root is not None else path.name).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def compiled_source_files() -> tuple[Path, ...]:
    """The files :data:`COMPILED_SOURCES` names, resolved and sorted."""
    return tuple(sorted({p.resolve() for pattern in COMPILED_SOURCES for p in PROJECT_ROOT.glob(pattern)}))


def is_compiled_source(path: str | Path) -> bool:
    """Whether ``path`` is one of :func:`compiled_source_files`."""
    try:
        return Path(path).resolve() in compiled_source_files()
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def compiled_source_hash() -> str:
    """SHA-256 of every compiled source (relative path and content), computed once per process: the
    extra stamp of every cached kernel."""
    return files_hash(compiled_source_files(), PROJECT_ROOT)


class _StampedLocator(caching._CacheLocator):
    """numba's usual cache location for a compiled source (``__pycache__`` next to it, or
    ``NUMBA_CACHE_DIR``), with :func:`compiled_source_hash` added to numba's stamp of the file."""

    def __init__(self, inner: caching._CacheLocator):
        self._inner = inner

    def ensure_cache_path(self):
        self._inner.ensure_cache_path()

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return (self._inner.get_source_stamp(), compiled_source_hash())

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not is_compiled_source(py_file):
            return None
        for other in caching.CacheImpl._locator_classes:
            if other is cls:
                continue
            inner = other.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner)
        return None


def register() -> None:
    """Put the stamped locator first in numba's list (once per process); must run before the first
    function of a compiled source is decorated (numba picks a function's locator then)."""
    if _StampedLocator not in caching.CacheImpl._locator_classes:
        caching.CacheImpl._locator_classes.insert(0, _StampedLocator)


class _CompileListener:
    """numba event listener calling ``callback(name)`` when numba starts compiling a kernel called
    from Python (depth 0: not the callees compiled inside it; cache loads fire no event)."""

    def __init__(self, callback: Callable[[str], None]):
        from numba.core import event

        class Listener(event.Listener):
            depth = 0

            def on_start(self, ev):
                if self.depth == 0:
                    disp = (ev.data or {}).get("dispatcher")
                    fn = getattr(disp, "py_func", None)
                    callback(getattr(fn, "__name__", None) or str(disp))
                self.depth += 1

            def on_end(self, ev):
                self.depth -= 1

        self.listener = Listener()


@contextmanager
def report_compiles(callback: Callable[[str], None]) -> Iterator[None]:
    """Within the block, call ``callback(kernel_name)`` each time numba *compiles* (not loads from
    its on-disk cache) a kernel called from Python; used to say what a first run compiles."""
    from numba.core import event

    listener = _CompileListener(callback).listener
    event.register("numba:compile", listener)
    try:
        yield
    finally:
        event.unregister("numba:compile", listener)
