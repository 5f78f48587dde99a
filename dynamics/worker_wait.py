"""How the numba backend's worker threads wait between batched calls (libgomp's wait policy).

numba's threading layer on Linux is OpenMP (GNU libgomp). When a parallel region ends, libgomp's
workers spin for ``GOMP_SPINCOUNT`` iterations, then sleep in the kernel until the next region
wakes them. Both extremes cost the MPC loop on a 2-core machine (iiwa, iLQR, N = 32, median of 350
warm updates on the 2-core CI VM; each update runs four parallel regions):

=====================================  ==============  ==========================================
worker wait                            idle machine    one other busy process (median / mean)
=====================================  ==============  ==========================================
passive (``OMP_WAIT_POLICY=PASSIVE``)  0.90 ms         0.94–0.97 / 1.03 ms
spin 10 000 (``GOMP_SPINCOUNT``)      0.66–0.68 ms    0.74–2.9 / 2.0–2.6 ms
libgomp's default spin (300 000)       0.68 ms         0.67 / 2.1 ms (up to 40 ms seen)
=====================================  ==============  ==========================================

Passive waiting pays a futex wake-up per region, tens of microseconds on a virtual machine
(``aba_derivatives`` of 32 iiwa states: 124 µs median against 80 µs with a spin; one thread 150 µs).
Spinning keeps the worker awake across the short gaps inside an update, but on a machine whose
other core is busy the spinning worker competes with the process it serves.

The default is a *bounded spin*: ``OMP_WAIT_POLICY=PASSIVE`` with ``GOMP_SPINCOUNT=30000`` (about
0.3 ms). It covers the gaps between the four parallel regions of one update and the gap between
two updates of a lockstep closed loop (the physics steps and the plan's feedback, 0.15–0.3 ms for
the iiwa), which a spin of 10 000 (≈ 0.1 ms) does not: the first region of every update then wakes
a sleeping worker (iiwa iLQR closed loop, median update: N = 16 450–456 µs against 487–498 µs,
N = 64 1040–1059 µs against 1108–1127 µs; 100 000 and 300 000 measured no faster). A loop whose
updates are further apart (a real-time loop at 100 Hz) still pays that wake-up once per update.

When it is applied: importing :mod:`dynamics` changes nothing. libgomp reads the variables once,
when it is loaded, and numba loads it when its thread pool first starts; so the numba backend
calls :func:`configure_before_workers_start` just before that can happen (its first kernel import,
and :func:`dynamics.worker_threads.use_threads`, the gate of every parallel region of the backend,
the contact kernels and the solvers' compiled kernels). An application that loads libgomp through
another library first (Pinocchio and Crocoddyl do, on import) calls :func:`configure_worker_wait`
itself before importing it, or sets the variables in the shell.

Overriding: the user's environment always wins. ``OMP_WAIT_POLICY`` set: nothing is changed;
``GOMP_SPINCOUNT`` set: only the policy is added. On a busy machine the backend's default thread
count already drops to one (:mod:`dynamics.worker_threads`), so no worker is woken and none spins;
``GOMP_SPINCOUNT=0`` (sleep at once) is for a loop pinned to several threads on a shared machine.
:func:`worker_wait_status` says what applied (the benchmarks record it).
"""

from __future__ import annotations

import os

SPIN_VARIABLE = "GOMP_SPINCOUNT"
POLICY_VARIABLE = "OMP_WAIT_POLICY"
DEFAULT_SPINCOUNT = "30000"
DEFAULT_POLICY = "PASSIVE"
_set_by_us: dict[str, str] = {}
#: None: not attempted yet in this process; True: applied (or left to the user's settings);
#: False: libgomp was already loaded, too late
_applied: bool | None = None


def _libgomp_loaded() -> bool | None:
    """Whether libgomp is mapped into this process (None where /proc is not available)."""
    try:
        with open("/proc/self/maps") as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return None


def configure_worker_wait() -> dict[str, str]:
    """Set the bounded spin (module docstring) where the user chose nothing: the policy when
    ``OMP_WAIT_POLICY`` is unset, the spin count when neither variable is set. Nothing when
    libgomp is already loaded (too late to take effect). Returns what it set."""
    global _applied
    if _libgomp_loaded():
        _applied = False
        return {}
    _applied = True
    user_chose = SPIN_VARIABLE in os.environ or POLICY_VARIABLE in os.environ
    if POLICY_VARIABLE not in os.environ:
        os.environ[POLICY_VARIABLE] = _set_by_us[POLICY_VARIABLE] = DEFAULT_POLICY
    if not user_chose:
        os.environ[SPIN_VARIABLE] = _set_by_us[SPIN_VARIABLE] = DEFAULT_SPINCOUNT
    return dict(_set_by_us)


def configure_before_workers_start() -> None:
    """:func:`configure_worker_wait` the first time numba's thread pool may start in this process
    (called by the numba backend; later calls do nothing)."""
    if _applied is None:
        configure_worker_wait()


def worker_wait_status() -> str:
    """One line for benchmark reports: how libgomp's workers wait in this process."""
    chosen = {k: os.environ[k] for k in (SPIN_VARIABLE, POLICY_VARIABLE) if k in os.environ}
    if not chosen:
        if _applied is False or (_applied is None and _libgomp_loaded()):
            return "libgomp default (libgomp was loaded before mpc-accel could configure it)"
        return "libgomp default so far (not configured yet: numba's worker threads have not started)"
    parts = [f"{k}={v}" + (" (mpc-accel)" if _set_by_us.get(k) == v else " (user)") for k, v in chosen.items()]
    return ", ".join(parts)
