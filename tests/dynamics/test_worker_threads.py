"""dynamics.worker_threads.use_threads: numba's per-calling-thread worker count, set only when it
changes, and per calling thread."""

from __future__ import annotations

import threading

import pytest

numba = pytest.importorskip("numba")

from dynamics import worker_threads  # noqa: E402


def test_use_threads_sets_numba_count_for_the_calling_thread():
    top = numba.config.NUMBA_NUM_THREADS
    worker_threads.use_threads(1)
    assert numba.get_num_threads() == 1
    worker_threads.use_threads(top)
    assert numba.get_num_threads() == top
    seen = []

    def other():            # another Python thread starts from numba's default and sets its own
        worker_threads.use_threads(1)
        seen.append(numba.get_num_threads())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [1] and numba.get_num_threads() == top
