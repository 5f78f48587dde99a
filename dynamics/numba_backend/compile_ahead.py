"""Compile batched kernels in a separate process, so that a first run compiles on two cores.

numba compiles one kernel at a time on the calling thread. On a fresh machine the MPC
controller's warm-up compiles its solver kernels (rollout, backward pass, cost terms) and the
backend's batched derivative kernels one after the other; the latter are the largest and do not
depend on the robot (a kernel is specialised on argument types, not sizes), so a child process
can compile them into numba's on-disk cache while the parent compiles the solver's, and the parent
then loads them (:meth:`NumbaBackend.compile_ahead`).

Child: ``python -m dynamics.numba_backend.compile_ahead KIND:VARIANT ...`` with KIND one of
``aba_derivatives``, ``aba_second_derivatives`` and VARIANT ``serial`` or ``parallel``: runs each
once on two states of the bundled iiwa through the numba backend (the call path, and so the
argument types, of the solvers' batched calls), then exits. It imports nothing but the dynamics
package, and writes nothing but numba's cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

KINDS = ("aba_derivatives", "aba_second_derivatives")
VARIANTS = ("serial", "parallel")


class CompileJob:
    """A running child compile (:func:`start`); :meth:`wait` before using what it compiles."""

    def __init__(self, proc: subprocess.Popen, calls: list[tuple[str, int]]):
        self.proc, self.calls = proc, calls       # calls: the (function, batch size) pairs it compiles

    def wait(self, timeout: float | None = 900.0) -> bool:
        """Wait for the child (killed after ``timeout`` seconds); True when it compiled everything
        (else the caller compiles what is missing itself, as without a child)."""
        try:
            return self.proc.wait(timeout=timeout) == 0
        except subprocess.TimeoutExpired:
            self.kill()
            return False
        except BaseException:      # Ctrl-C while waiting: do not leave the child behind
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cache_is_cold() -> bool:
    """Whether the project's kernels are not in numba's cache yet (a fresh machine, a new version,
    an edited compiled source): compiles (or loads) a one-line probe kernel, defined in this
    compiled source and so stamped like every kernel (:mod:`dynamics.kernel_cache`), and reports
    whether numba had to compile it."""
    from ..kernel_cache import report_compiles
    from ..kernels.jit import jit

    compiled: list[str] = []
    with report_compiles(compiled.append):
        _probe(jit)(1.0)
    return bool(compiled)


_probe_kernel = None


def _probe(jit):
    global _probe_kernel
    if _probe_kernel is None:
        _probe_kernel = jit(_cache_probe)
    return _probe_kernel


def _cache_probe(x):
    return x + 1.0


def start(args: list[str], calls: list[tuple[str, int]]) -> CompileJob | None:
    """Start the child for ``args`` ("kind:variant", what it runs for ``calls``); None when it
    cannot be started."""
    root = str(Path(__file__).resolve().parents[2])     # the directory holding the dynamics package
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # run in that directory: ``python -m`` puts the working directory first on sys.path, and a
    # source checkout there (the README's commands run from the repository root) would give the
    # child another copy of the package, whose kernels numba caches under another path
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dynamics.numba_backend.compile_ahead", *args], env=env,
                                cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:
        return None
    return CompileJob(proc, calls)


def _run(calls: list[str]) -> None:
    import dynamics
    m = dynamics.load_model("iiwa")
    be = dynamics.get_backend("numba")
    B = 2
    q = np.tile(m.neutral(), (B, 1))
    z = np.zeros((B, m.nv))
    for call in calls:
        kind, variant = call.split(":")
        if kind not in KINDS or variant not in VARIANTS:
            raise SystemExit(f"compile_ahead: unknown call '{call}' (kinds {KINDS}, variants {VARIANTS})")
        parallel = variant == "parallel"
        be.set_threads(min(2, be.max_threads) if parallel else 1)
        be.parallel_threshold_us = 0.0 if parallel else float("inf")
        if kind == "aba_derivatives":
            be.aba_derivatives(m, q, z, z, return_acceleration=True)
        else:
            be.aba_second_derivatives(m, q, z, z)


if __name__ == "__main__":
    _run(sys.argv[1:])
