"""numba's on-disk kernel cache, stamped with every source a cached kernel compiles in.

numba stamps a cached function with a hash of *its own* source file only, but a cached kernel also
contains the compiled code of every jitted function it calls from other files; after an edit (or a
package upgrade) touching only a callee's file, numba would load a stale kernel.
:func:`stamp_sources` registers, for the functions defined in a given set of files, numba's usual
cache location (``__pycache__`` next to the sources, or ``NUMBA_CACHE_DIR``) with an extra stamp
(e.g. a hash of every file the kernels call into). Used by the numba backend, the contact kernels
and the solvers' compiled rollout. Importing this module imports numba.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from numba.core import caching


def files_hash(paths: Iterable[Path]) -> str:
    """SHA-256 of the files' names and contents, in the given order."""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def stamp_sources(name: str, owns: Callable[[Path], bool], extra_stamp: Callable[[], object]) -> None:
    """Register (once per ``name``) a cache locator for the functions whose source file satisfies
    ``owns(path)``, adding ``extra_stamp()`` to numba's stamp of the file itself."""
    if any(getattr(c, "stamp_name", None) == name for c in caching.CacheImpl._locator_classes):
        return

    class StampedLocator(caching._CacheLocator):
        stamp_name = name

        def __init__(self, inner):
            self._inner = inner

        def ensure_cache_path(self):
            self._inner.ensure_cache_path()

        def get_cache_path(self):
            return self._inner.get_cache_path()

        def get_source_stamp(self):
            return (self._inner.get_source_stamp(), extra_stamp())

        def get_disambiguator(self):
            return self._inner.get_disambiguator()

        @classmethod
        def from_function(cls, py_func, py_file):
            try:
                if not owns(Path(py_file).resolve()):
                    return None
            except OSError:
                return None
            for other in caching.CacheImpl._locator_classes:
                if other is cls or getattr(other, "stamp_name", None) is not None:
                    continue
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
            return None

    caching.CacheImpl._locator_classes.insert(0, StampedLocator)


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
