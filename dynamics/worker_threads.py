"""How many worker threads the calling thread's next numba parallel region uses.

numba keeps that count per calling thread (``numba.set_num_threads``). Every batched kernel call
of the numba backend and of the solvers' compiled kernels chooses it (one thread for a batch too
small to be worth waking the pool, the backend's count otherwise), five times per MPC update.
``numba.get_num_threads`` takes a process-wide lock and costs a few µs, so :func:`use_threads`
remembers, per calling thread, what it last set and calls ``numba.set_num_threads`` only when
the count changes. The kernels split their work into the slices they are given whatever numba's
count is, so a count changed behind this module's back (a direct ``numba.set_num_threads``) costs
speed only, never results. Importing this module does not import numba; its first call, which
may start numba's thread pool, applies :mod:`dynamics.worker_wait` first.
"""

from __future__ import annotations

import threading

from .worker_wait import configure_before_workers_start

_local = threading.local()
_numba = None


def use_threads(n: int) -> None:
    """Run the calling thread's next numba parallel regions on ``n`` threads (1 <= n <=
    ``NUMBA_NUM_THREADS``)."""
    if getattr(_local, "n", None) == n:
        return
    global _numba
    if _numba is None:
        # numba.set_num_threads starts the thread pool (loads libgomp), which reads its wait
        # policy once, now
        configure_before_workers_start()
        import numba
        _numba = numba
    _numba.set_num_threads(n)
    _local.n = n
