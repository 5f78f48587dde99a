"""Compile every kernel of the ``gpu`` backend to PTX **without a GPU** — the check that the kernels
are accepted by Numba's real CUDA frontend and NVVM (the simulator runs any Python, so it cannot
tell), and a report of their static shared-memory and local-memory use.

Needs NVIDIA's NVVM library, e.g. from the ``nvidia-cuda-nvcc-cu12`` wheel::

    pip install --target /tmp/nvvm nvidia-cuda-nvcc-cu12
    CUDA_HOME=/tmp/nvvm/nvidia/cuda_nvcc python -m dynamics.gpu_backend.ptx --robot atlas --dtype float64

The argument types are those of real launches: the backend runs once in simulator mode with its
launches recorded instead of executed. Compilation targets compute capability ``--cc`` (default
8.0) through ``numba.cuda.compile_ptx``; no driver is touched (the compute capability Numba asks
the driver for when it compiles device functions is supplied for the duration of the check).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..model import RobotModel

#: the static shared memory one block may use without opting in [bytes]
SHARED_LIMIT = 48 * 1024


@dataclass
class PtxReport:
    """One kernel compiled to PTX: size of the PTX text, compile time [s], static shared and local
    memory per block / thread [bytes], or the error."""

    kernel: str
    ok: bool
    ptx_chars: int = 0
    seconds: float = 0.0
    shared_bytes: int = 0
    local_bytes: int = 0
    error: str = ""
    cached: bool = False           # loaded from the on-disk store instead of compiled
    key: str = ""                  # runtime.kernel_cache_key of this kernel and target


def recorded_launches(model: RobotModel, dtype: str = "float64") -> dict[str, tuple]:
    """Every kernel name -> the arguments of one launch on ``model`` (from a simulator-mode run
    whose launches are recorded, not executed)."""
    from . import GpuBackend

    calls: dict[str, tuple] = {}

    class _Recorder(GpuBackend):
        def _launch(self, md, kernel, B, *args):
            calls.setdefault(kernel, args)

    rng = np.random.default_rng(0)
    q = model.random_configuration(rng, size=(1,))
    v = rng.normal(size=(1, model.nv))
    fe = rng.normal(size=(1, model.nbody, 6))
    be = _Recorder(simulate=True, dtype=dtype)
    frame = model.body_names[-1]
    with np.errstate(all="ignore"):  # the outputs of unexecuted launches are uninitialised
        _record_calls(be, model, q, v, fe, frame)
    return calls


def _record_calls(be, model: RobotModel, q, v, fe, frame: str) -> None:
    be.rnea(model, q, v, v, fe)
    be.crba(model, q)
    be.minv(model, q)
    be.aba(model, q, v, v, fe)
    be.rnea_derivatives(model, q, v, v, fe)
    be.aba_derivatives(model, q, v, v, fe)
    be.rnea_second_derivatives(model, q, v, v, fe)
    be.body_placements(model, q)
    be.frame_jacobian_time_variation(model, q, v, frame, "local")
    be.com_jacobian(model, q)
    be.partition = "split"
    be.aba_derivatives(model, q, v, v, fe)


@contextlib.contextmanager
def _compute_capability(cc: tuple[int, int]):
    """Numba's built-in CUDA target asks the driver for the compute capability when it compiles a
    device function; supply ``cc`` instead for the duration of the check."""
    import numba.cuda.dispatcher as disp
    saved = getattr(disp, "get_current_device", None)
    if saved is None:
        yield
        return
    disp.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        disp.get_current_device = saved


def compile_kernels(model: RobotModel, dtype: str = "float64", cc: tuple[int, int] = (8, 0),
                    only: list[str] | None = None, store=None) -> list[PtxReport]:
    """Compile the kernels (``only``: a subset of names) for ``model`` to PTX; one report each.
    store: a :class:`~.runtime.PtxStore` to take each kernel's PTX from when it holds its
    :func:`~.runtime.kernel_cache_key`, and to put newly compiled PTX into (None: always compile)."""
    import numba
    from numba import cuda

    from . import GpuBackend
    from .kernels import KERNELS
    from .runtime import Compiler, Runtime, kernel_cache_key

    calls = recorded_launches(model, dtype)
    md = GpuBackend(simulate=True, dtype=dtype)._md(model)
    rt = Runtime(False, np, lambda f: f, lambda f: cuda.jit(device=True)(f))
    comp = Compiler(rt, md.compiler.consts)
    reports = []
    with _compute_capability(cc):
        for name, args in calls.items():
            if only and name not in only:
                continue
            sig = tuple(numba.typeof(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else numba.typeof(a)
                        for a in args)
            t = time.perf_counter()
            # the signature decides the code too (array layouts, scalar types)
            key = kernel_cache_key(KERNELS[name], dict(comp.consts_for(KERNELS[name]), SIG=str(sig)), cc)
            ptx = store.get(key) if store is not None else None
            cached = ptx is not None
            if not cached:
                try:
                    ptx, _ = cuda.compile_ptx(comp.kernel(KERNELS[name]), sig, cc=cc)
                except Exception as e:  # report every kernel, not only the first failure
                    reports.append(PtxReport(name, False, error=f"{type(e).__name__}: {e}", key=key))
                    continue
                if store is not None:
                    store.put(key, ptx)
            shared = sum(int(x) for x in re.findall(r"\.shared \.align \d+ \.b8 \S+\[(\d+)\]", ptx))
            local = sum(int(x) for x in re.findall(r"\.local \.align \d+ \.b8 \S+\[(\d+)\]", ptx))
            reports.append(PtxReport(name, True, len(ptx), time.perf_counter() - t, shared, local, cached=cached,
                                     key=key))
    return reports


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robot", default="iiwa", help="bundled robot name or MJCF path")
    p.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    p.add_argument("--cc", default="8.0", help="compute capability, e.g. 8.0 or 9.0")
    p.add_argument("--kernels", default="", help="comma-separated subset of kernel names")
    p.add_argument("--cache", default=None, metavar="DIR",
                   help="keep the PTX in DIR across processes, keyed on everything that changes it "
                        "(runtime.kernel_cache_key); default: compile every time")
    args = p.parse_args(argv)
    from .. import load_model
    from .runtime import PtxStore
    cc = tuple(int(x) for x in args.cc.split("."))
    reports = compile_kernels(load_model(args.robot), args.dtype, cc, [k for k in args.kernels.split(",") if k],
                              store=PtxStore(args.cache) if args.cache else None)
    bad = 0
    for r in reports:
        if r.ok:
            over = "  OVER the 48 KiB static shared-memory limit" if r.shared_bytes > SHARED_LIMIT else ""
            bad += bool(over)
            print(f"{r.kernel:28s} PTX {'cached' if r.cached else 'ok    '}  {r.seconds:5.1f} s  shared {r.shared_bytes:6d} B  "
                  f"local {r.local_bytes:4d} B{over}")
        else:
            bad += 1
            print(f"{r.kernel:28s} FAILED  {r.error[:2000]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
