"""Busy neighbours for the contention benchmarks: K single-threaded processes that each keep one
core busy (``while True: pass``, as an estimator or a logger that never sleeps would), started
beside a measurement and always ended after it.

    with busy_neighbours(1) as pids:
        ...   # the measurement, with one core taken

Each runs in a session of its own (``setsid``), as another program on the machine would: Linux's
scheduler (with ``sched_autogroup`` on, the default of desktop and many server kernels) shares the
CPU between sessions first, so a busy process started in the benchmark's own session would take half
of the benchmark's share whenever the machine is loaded, whatever the benchmark does
(``same_session=True`` measures that case).

They are ended when the block exits, whether normally, on an exception or on Ctrl-C
(``KeyboardInterrupt``), and at interpreter exit; if this process is killed outright (SIGKILL), each
of them notices within about 0.1 s that its parent is gone and exits by itself.
"""

from __future__ import annotations

import argparse
import atexit
import os
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

# spins on the CPU; every ~1e5 iterations checks that its parent (argv[1], given rather than read at
# start: the parent may already be gone by then) still lives, and exits when orphaned
_BUSY_SOURCE = (
    "import os, sys\n"
    "p = int(sys.argv[1])\n"
    "while os.getppid() == p:\n"
    "    for _ in range(100000):\n"
    "        pass\n"
)
_live: list[subprocess.Popen] = []


def _end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:   # not expected after SIGKILL; never leave the caller hanging
            pass
        if p in _live:
            _live.remove(p)


atexit.register(lambda: _end(list(_live)))


@contextmanager
def busy_neighbours(k: int, same_session: bool = False) -> Iterator[list[int]]:
    """Run ``k`` single-threaded busy processes for the duration of the block, each in a session of
    its own unless ``same_session``; yields their pids."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"busy_neighbours: k must be an integer >= 0, got {k!r}")
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(k):
            p = subprocess.Popen([sys.executable, "-c", _BUSY_SOURCE, str(os.getpid())], stdin=subprocess.DEVNULL,
                                 start_new_session=not same_session)
            procs.append(p)
            _live.append(p)
        yield [p.pid for p in procs]
    finally:
        _end(procs)


def add_busy_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--busy K`` and ``--busy-same-session``: the :func:`busy_neighbours` of a benchmark
    that measures each run quiet and beside busy processes."""
    parser.add_argument("--busy", type=int, default=0, metavar="K",
                        help="also run every closed loop beside K single-threaded busy processes and report both "
                             "rates (default 0: quiet only)")
    parser.add_argument("--busy-same-session", action="store_true",
                        help="start the busy processes in this benchmark's session rather than each in its own "
                             "(with the kernel's autogroup scheduling they then share this process's CPU share; "
                             "benchmarks/contention.py)")
