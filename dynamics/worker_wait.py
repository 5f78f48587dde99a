"""How the numba backend's worker threads wait between batched calls (libgomp's wait policy).

numba's threading layer on Linux is OpenMP (GNU libgomp). When a parallel region ends, libgomp's
workers spin for ``GOMP_SPINCOUNT`` iterations, then sleep in the kernel until the next region
wakes them. Both extremes cost the MPC loop on a 2-core machine (iiwa, iLQR, N = 32, median of 350
warm updates, measured 2026-11-24 on the 2-core CI VM; each update runs four parallel regions):

=====================================  ==============  ==========================================
worker wait                            idle machine    one other busy process (median / mean)
=====================================  ==============  ==========================================
passive (``OMP_WAIT_POLICY=PASSIVE``)  0.90 ms         0.94–0.97 / 1.03 ms
spin 10 000 (``GOMP_SPINCOUNT``)      0.66–0.68 ms    0.74–2.9 / 2.0–2.6 ms
libgomp's default spin (300 000)       0.68 ms         0.67 / 2.1 ms (2026-11-23: up to 40 ms)
=====================================  ==============  ==========================================

Passive waiting pays a futex wake-up per region, tens of microseconds on a virtual machine
(``aba_derivatives`` of 32 iiwa states: 124 µs median against 80 µs with a spin; one thread 150 µs).
Spinning keeps the worker awake across the short gaps inside an update, but on a machine whose
other core is busy the spinning worker competes with the process it serves.

:func:`configure_worker_wait` (run when :mod:`dynamics` is imported) chooses a *bounded spin*:
``OMP_WAIT_POLICY=PASSIVE`` with ``GOMP_SPINCOUNT=30000`` (about 0.3 ms), the fastest on a machine
dedicated to the controller. 10 000 (≈ 0.1 ms, the default until 2026-11-25) covered the gaps
between the four parallel regions of one update but not the gap between two updates of a closed
loop (the physics steps and the plan's feedback, 0.15–0.3 ms in the iiwa lockstep loop), so the
first region of every update woke a sleeping worker: iiwa iLQR closed loop, median update, same
session: N = 16 487–498 → 450–456 µs, N = 64 1108–1127 → 1040–1059 µs (100 000 and 300 000
measured no faster). In a loop whose updates are further apart than that (a real-time loop at
100 Hz) the first region still pays the wake-up. On a shared, busy machine set
``GOMP_SPINCOUNT=0`` (sleep at once) in the shell; any ``GOMP_SPINCOUNT`` or
``OMP_WAIT_POLICY`` the user set wins. libgomp reads them once, when it is loaded: import
:mod:`dynamics` (or :mod:`mpc`) before a library that loads libgomp itself (Pinocchio does), or
set them in the shell; :func:`worker_wait_status` says which happened.
"""

from __future__ import annotations

import os

SPIN_VARIABLE = "GOMP_SPINCOUNT"
POLICY_VARIABLE = "OMP_WAIT_POLICY"
DEFAULT_SPINCOUNT = "30000"
DEFAULT_POLICY = "PASSIVE"
_set_by_us: dict[str, str] = {}


def _libgomp_loaded() -> bool | None:
    """Whether libgomp is mapped into this process (None where /proc is not available)."""
    try:
        with open("/proc/self/maps") as f:
            return any("libgomp" in line for line in f)
    except OSError:
        return None


def configure_worker_wait() -> dict[str, str]:
    """Set the short bounded spin (module docstring) where the user chose nothing: the policy
    when ``OMP_WAIT_POLICY`` is unset, the spin count when neither variable is set. Nothing when
    libgomp is already loaded (too late to take effect). Returns what it set."""
    if _libgomp_loaded():
        return {}
    user_chose = SPIN_VARIABLE in os.environ or POLICY_VARIABLE in os.environ
    if POLICY_VARIABLE not in os.environ:
        os.environ[POLICY_VARIABLE] = _set_by_us[POLICY_VARIABLE] = DEFAULT_POLICY
    if not user_chose:
        os.environ[SPIN_VARIABLE] = _set_by_us[SPIN_VARIABLE] = DEFAULT_SPINCOUNT
    return dict(_set_by_us)


def worker_wait_status() -> str:
    """One line for benchmark reports: how libgomp's workers wait in this process."""
    chosen = {k: os.environ[k] for k in (SPIN_VARIABLE, POLICY_VARIABLE) if k in os.environ}
    if not chosen:
        return "libgomp default (libgomp was loaded before mpc-accel could configure it)"
    parts = [f"{k}={v}" + (" (mpc-accel)" if _set_by_us.get(k) == v else " (user)") for k, v in chosen.items()]
    return ", ".join(parts)
