"""Where the ``gpu`` backend's kernels run: a real NVIDIA GPU (CuPy arrays, ``numba.cuda.jit``) or
Numba's CUDA simulator (NumPy arrays, ``numba.cuda.simulator.jit``), and how the compiled CPU
passes of the kernel library (:mod:`dynamics.kernels`) become CUDA device functions.

Simulator without ``NUMBA_ENABLE_CUDASIM``
    The simulator normally needs ``NUMBA_ENABLE_CUDASIM=1`` before ``numba.cuda`` is first imported,
    which a library cannot guarantee (the numba backend or the user may have imported it already).
    This module does not use the switch: it takes the simulator's own ``jit`` from
    ``numba.cuda.simulator`` (importable in either mode) and hands every kernel its array arguments
    already wrapped as simulator device arrays (``FakeCUDAArray``), so the simulator never calls into
    the real driver. While a simulated kernel runs, the simulator swaps every global that *is* the
    ``numba.cuda`` module for its fake one, so the kernel sources refer to ``cuda`` as usual. Real
    and simulated kernels can therefore coexist in one process, in any import order.

Retargeting
    Every per-state pass of the kernel library (spatial algebra, joint placements, RNEA/ABA/M⁻¹
    sweeps, ∇RNEA, IDSVA-SO) is plain Python compiled by :mod:`dynamics.kernels.jit`.
    :meth:`Compiler.device` re-binds such a function's globals — callees become device functions,
    ``np.empty(6)`` scratch becomes ``cuda.local.array(6, DT)`` — and compiles it with
    ``cuda.jit(device=True)``: one source for the CPU and GPU backends, on the same packed model
    layout (:mod:`dynamics.kernels.packing`).
"""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..backend import BackendUnavailableError

INSTALL_HINT = ('install the GPU extra with  pip install "mpc-accel[gpu]"  (CuPy + numba-cuda; needs an NVIDIA '
                'GPU and driver), or pass simulate=True (dynamics.get_backend("gpu", simulate=True)) to run '
                "the kernels in Numba's CUDA simulator on the CPU for testing (slow)")


#: numba-cuda releases that reference a NumPy attribute a newer NumPy removed, as
#: (numba-cuda versions below this one, the attribute, the first NumPy without it): numba-cuda
#: 0.30.x registers an overload of ``np.row_stack`` when it first compiles a kernel, and NumPy 2.5
#: removed ``row_stack`` (numba-cuda is in maintenance mode and its maintainers declined to follow
#: NumPy 2.5, NVIDIA/numba-cuda#907), so every kernel compile fails with an AttributeError
NUMBA_CUDA_NUMPY_LIMITS: tuple[tuple[tuple[int, ...], str, str], ...] = (((0, 31), "row_stack", "2.5"),)


def _version_tuple(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version string (``"0.30.4rc1"`` -> ``(0, 30, 4)``)."""
    out = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        out.append(int(m.group()))
        if m.end() < len(part):
            break
    return tuple(out)


def check_numpy_support(numpy_module: types.ModuleType = np,
                        version: Callable[[str], str] | None = None) -> None:
    """Raise BackendUnavailableError when the installed numba-cuda cannot compile kernels with this
    NumPy: the NumPy lacks an attribute that numba-cuda uses (a capability check, not a version
    guess) and numba-cuda's version is one :data:`NUMBA_CUDA_NUMPY_LIMITS` lists as using it. The
    message names both versions and the fix. version: ``importlib.metadata.version`` (for tests);
    without numba-cuda installed (numba's own CUDA target) nothing is checked."""
    if version is None:
        from importlib.metadata import version
    try:
        installed = version("numba-cuda")
    except Exception:  # PackageNotFoundError: not installed
        return
    for below, attribute, numpy_first in NUMBA_CUDA_NUMPY_LIMITS:
        if not hasattr(numpy_module, attribute) and _version_tuple(installed) < below:
            raise BackendUnavailableError(
                f"gpu backend: numba-cuda {installed} cannot compile kernels with NumPy "
                f"{getattr(numpy_module, '__version__', '?')}: it uses numpy.{attribute}, which NumPy {numpy_first} "
                f"removed (every kernel compile would fail with \"module 'numpy' has no attribute "
                f"'{attribute}'\"); install a NumPy it accepts:  pip install \"numpy<{numpy_first}\"  (numba-cuda "
                f"below {'.'.join(map(str, below))} has no fix)")


def detect_gpu(import_module: Callable[[str], types.ModuleType] = importlib.import_module):
    """``(cupy, numba.cuda)`` if a CUDA GPU is usable, else raise BackendUnavailableError naming
    what is missing (CuPy, a CUDA device, or Numba's CUDA target) and how to fix it."""
    try:
        cupy = import_module("cupy")
    except ImportError as e:
        raise BackendUnavailableError(f"gpu backend: CuPy is not installed ({e}); {INSTALL_HINT}") from e
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # cupy raises CUDARuntimeError without a driver/device
        raise BackendUnavailableError(f"gpu backend: no CUDA device available (CuPy: {e}); check the NVIDIA "
                                      f"driver and CUDA_VISIBLE_DEVICES, or {INSTALL_HINT}") from e
    if n < 1:
        raise BackendUnavailableError(f"gpu backend: no CUDA device found (CuPy sees 0 devices); {INSTALL_HINT}")
    check_numpy_support()
    try:
        ncuda = import_module("numba.cuda")
        ok = bool(ncuda.is_available())
    except Exception as e:
        raise BackendUnavailableError(f"gpu backend: Numba's CUDA target cannot be used ({e}); {INSTALL_HINT}") from e
    if not ok:
        raise BackendUnavailableError("gpu backend: CuPy sees a CUDA device but Numba's CUDA target does not "
                                      "(numba.cuda.is_available() is False; try pip install numba-cuda); "
                                      f"{INSTALL_HINT}")
    return cupy, ncuda


@dataclass
class Runtime:
    """Kernel compiler and array mover for one target. ``xp`` is the array namespace of device arrays
    (``cupy`` on a GPU; ``numpy`` in the simulator, where "device" arrays are host arrays)."""

    simulate: bool
    xp: types.ModuleType
    jit: Callable
    jit_device: Callable
    _wrap: Callable | None = None
    _sync: Callable | None = None

    def arg(self, x):
        """A kernel argument: CuPy arrays as they are; in the simulator, ndarrays wrapped as simulator
        device arrays (writes go straight to the wrapped array)."""
        if self._wrap is not None and isinstance(x, np.ndarray):
            return self._wrap(x)
        return x

    def to_device(self, x: np.ndarray):
        """Host -> device copy (one transfer)."""
        return self.xp.array(x) if not self.simulate else np.array(x)

    def copy_to_device(self, dst, src: np.ndarray) -> None:
        """Host -> device copy into an existing device array of the same shape and dtype."""
        if self.simulate:
            np.copyto(dst, src)
        else:
            dst.set(src)

    def to_host(self, x) -> np.ndarray:
        """Device -> host copy (one transfer)."""
        return np.array(x) if self.simulate else self.xp.asnumpy(x)

    def is_device_array(self, x) -> bool:
        return isinstance(x, np.ndarray) if self.simulate else hasattr(x, "__cuda_array_interface__")

    def synchronize(self) -> None:
        if self._sync is not None:
            self._sync()


def make_runtime(simulate: bool) -> Runtime:
    """The simulator runtime (any machine) or the GPU runtime (raises BackendUnavailableError)."""
    if simulate:
        from numba.cuda import simulator
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        return Runtime(True, np, simulator.jit, lambda f: simulator.jit(device=True)(f), FakeCUDAArray, None)
    from numba.core import config
    cupy, ncuda = detect_gpu()
    if config.ENABLE_CUDASIM:
        raise BackendUnavailableError("gpu backend: NUMBA_ENABLE_CUDASIM=1 is set, so numba.cuda is the simulator "
                                      "and cannot launch on a GPU; unset it, or pass simulate=True")
    return Runtime(False, cupy, ncuda.jit, lambda f: ncuda.jit(device=True)(f), None, ncuda.synchronize)


# ------------------------------------------------------------------------------------ retargeting
_EMPTY6 = re.compile(r"np\.empty\((\d+)\)")


def _is_compiled(obj) -> bool:
    """A numba CPU dispatcher (a function of the kernel library, :mod:`dynamics.kernels.jit`)."""
    return hasattr(obj, "py_func") and type(obj).__module__.startswith("numba.")


def _device_numpy() -> types.ModuleType:
    """What ``np`` means inside a retargeted function: numba's CUDA target types ``math.sqrt`` and
    friends but not the NumPy ufuncs on scalars (``np.sqrt`` is rejected by the CUDA frontend)."""
    import math
    mod = types.ModuleType("dynamics.gpu_backend.device_numpy")
    for name in ("sqrt", "sin", "cos", "nan", "inf", "pi", "exp", "log", "fabs"):
        setattr(mod, name, getattr(math, name))
    mod.abs = math.fabs
    for name in ("float64", "float32", "int64", "int32"):
        setattr(mod, name, getattr(np, name))
    return mod


DEVICE_NUMPY = _device_numpy()

#: functions (plain Python, in this package) that are device functions when called from a kernel
DEVICE: set = set()


def device(f: Callable) -> Callable:
    """Mark a plain-Python helper of this package as a device function (compiled on first use)."""
    DEVICE.add(f)
    return f


class Compiler:
    """Turns kernel sources into kernels for one runtime and one set of compile-time constants
    (``DT`` dtype, ``NL`` links, ``NV`` dofs ...), compiling each callee once."""

    def __init__(self, rt: Runtime, consts: dict):
        self.rt = rt
        self.consts = dict(consts)
        self._memo: dict[int, Callable] = {}

    def consts_for(self, f: Callable) -> dict:
        """The compile-time constants of kernel ``f``: the model's, plus the kernel's own where its
        module defines ``kernel_constants(f, consts)`` (the gpu kernels' shared-memory layout)."""
        hook = getattr(f, "__globals__", {}).get("kernel_constants")
        return dict(self.consts, **hook(f, self.consts)) if callable(hook) else dict(self.consts)

    def _rebind(self, py: Callable, consts: dict | None = None) -> Callable:
        from numba import cuda
        g = dict(py.__globals__)
        for name in py.__code__.co_names:
            val = g.get(name)
            if val is None:
                continue
            if _is_compiled(val) or (callable(val) and val in DEVICE):
                g[name] = self.device(val)
        if g.get("np") is np:
            g["np"] = DEVICE_NUMPY
        g.update(self.consts if consts is None else consts)
        g["cuda"] = cuda
        src = textwrap.dedent(inspect.getsource(py)) if "empty" in py.__code__.co_names else None
        if src is not None and _EMPTY6.search(src):
            # scratch vectors of the CPU passes become per-thread local arrays
            src = _EMPTY6.sub(r"cuda.local.array(\1, DT)", src)
            src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("@"))
            code = compile(src, f"<gpu:{py.__module__}.{py.__name__}>", "exec")
            ns: dict = {}
            exec(code, g, ns)
            return ns[py.__name__]
        return types.FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)

    def device(self, f: Callable) -> Callable:
        py = f.py_func if _is_compiled(f) else f
        key = id(py)
        if key not in self._memo:
            self._memo[key] = self.rt.jit_device(self._rebind(py))
        return self._memo[key]

    def kernel(self, f: Callable) -> Callable:
        key = ("kernel", id(f))
        if key not in self._memo:
            self._memo[key] = self.rt.jit(self._rebind(f, self.consts_for(f)))
        return self._memo[key]

    def rebound(self, f: Callable) -> Callable:
        """Kernel ``f`` as plain Python retargeted to this compiler's device functions and constants
        (what :func:`numba.cuda.compile_ptx` takes)."""
        key = ("rebound", id(f))
        if key not in self._memo:
            self._memo[key] = self._rebind(f, self.consts_for(f))
        return self._memo[key]


# ------------------------------------------------------------------------------------ compile cache key
def _referenced(py: Callable) -> list[tuple[str, object]]:
    """The globals a retargeted function's code names, as the retargeting sees them."""
    return [(name, py.__globals__[name]) for name in py.__code__.co_names if name in py.__globals__]


def kernel_sources(f: Callable) -> list[tuple[str, str]]:
    """``(qualified name, text)`` of everything that decides the code :meth:`Compiler.kernel` makes of
    ``f``: the source of ``f`` and of every callee it retargets (kernel-library functions and
    :func:`device` helpers, transitively), and the value of every other constant global they name
    (numbers, strings, tuples: a changed table size changes the code), in a fixed order."""
    seen: dict[str, str] = {}
    todo = [f]
    while todo:
        g = todo.pop()
        py = g.py_func if _is_compiled(g) else g
        qual = f"{py.__module__}.{py.__qualname__}"
        if qual in seen:
            continue
        seen[qual] = textwrap.dedent(inspect.getsource(py))
        for name, val in _referenced(py):
            if _is_compiled(val) or (callable(val) and val in DEVICE):
                todo.append(val)
            elif isinstance(val, (int, float, str, tuple, bool)) and not isinstance(val, type):
                seen[f"{qual}:{name}"] = repr(val)
    return sorted(seen.items())


def toolchain_version() -> str:
    """The CUDA compiler stack the kernels are compiled with: the numba-cuda distribution's version
    (NVIDIA's CUDA target), else numba's own (its built-in ``numba.cuda``)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"numba-cuda {version('numba-cuda')}"
    except PackageNotFoundError:
        import numba
        return f"numba {numba.__version__} (built-in numba.cuda)"


def kernel_cache_key(f: Callable, consts: dict, cc: tuple[int, int], toolchain: str | None = None) -> str:
    """SHA-256 naming the compiled code of kernel ``f`` for one target: everything that changes it —
    the sources of the kernel and its retargeted callees with the constants they read
    (:func:`kernel_sources`), the compile-time constants ``consts`` (model sizes, ``DT`` the dtype),
    the compute capability ``cc``, the compiler stack (:func:`toolchain_version`) and the retargeting
    rules themselves (this module's source). numba-cuda's own ``cache=True`` keys on the bytecode and
    closure of the Python function only, so it cannot tell two robots' kernels apart when they
    differ by injected globals; this key does."""
    import hashlib
    import sys
    h = hashlib.sha256()

    def add(*parts: str) -> None:
        for p in parts:
            h.update(p.encode())
            h.update(b"\0")
    add("kernel", f.__name__)
    for name, text in kernel_sources(f):
        add(name, text)
    for k in sorted(consts):
        v = consts[k]
        add(k, np.dtype(v).name if k == "DT" else repr(v))
    add("cc", f"{int(cc[0])}.{int(cc[1])}")
    add("toolchain", toolchain if toolchain is not None else toolchain_version())
    add("python", f"{sys.version_info[0]}.{sys.version_info[1]}")
    add("rules", inspect.getsource(sys.modules[__name__]))
    return h.hexdigest()


class PtxStore:
    """PTX text on disk, one file per :func:`kernel_cache_key` (``<root>/<key>.ptx``), shared by
    processes. root: ``$MPC_ACCEL_GPU_CACHE``, else ``~/.cache/mpc-accel/gpu``. Writes go to a
    temporary file renamed into place, so a reader never sees a partial file."""

    def __init__(self, root: str | None = None):
        import os
        from pathlib import Path
        self.root = Path(root or os.environ.get("MPC_ACCEL_GPU_CACHE") or Path.home() / ".cache" / "mpc-accel" / "gpu")

    def path(self, key: str):
        return self.root / f"{key}.ptx"

    def get(self, key: str) -> str | None:
        p = self.path(key)
        return p.read_text() if p.exists() else None

    def put(self, key: str, ptx: str) -> None:
        import os
        import tempfile
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(ptx)
        os.replace(tmp, self.path(key))
