"""How many worker threads the numba backend's parallel regions use, and on how many it runs them.

Two things live here.

* :func:`use_threads`: numba keeps the thread count per calling thread (``numba.set_num_threads``).
  Every batched kernel call of the numba backend and of the solvers' compiled kernels sets it (one
  thread for a batch too small to be worth waking the pool, the backend's count otherwise), five
  times per MPC update. ``numba.get_num_threads`` takes a process-wide lock and costs a few µs, so
  :func:`use_threads` remembers, per calling thread, what it last set and calls
  ``numba.set_num_threads`` only when the count changes. The kernels split their work into the
  slices they are given whatever numba's count is, so a count changed behind this module's back
  (a direct ``numba.set_num_threads``) costs speed only, never results.
* :func:`default_threads`: the count of a backend the user gave none, chosen by the policy of the
  ``MPC_ACCEL_THREADS`` variable (``docs/backends.md``, "Sharing the CPU"). By default it follows
  the cores that other processes leave free (:class:`CoreMonitor`): a parallel region waits for
  its slowest thread, and a worker thread that has to share a core with another process stalls
  every region it is in for a scheduler time slice (milliseconds), so on a machine whose other
  core is busy the serial path on the calling thread is several times faster than the parallel one.
  numpy's OpenBLAS pool follows the same count (:func:`follow_blas`) unless the user sized it; the
  BLAS the compiled kernels call from inside their parallel regions runs on one thread
  (:func:`serial_kernel_blas`).

Importing this module imports neither numba nor anything else heavy; the first :func:`use_threads`
call, which may start numba's thread pool, applies :mod:`dynamics.worker_wait` first.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .worker_wait import configure_before_workers_start

_local = threading.local()
_numba = None

#: environment variable choosing the thread-count policy of a backend given no count:
#: ``adaptive`` (default), ``all`` (every worker thread, whatever else runs), or an integer
POLICY_VARIABLE = "MPC_ACCEL_THREADS"
POLICIES = ("adaptive", "all")


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
        serial_kernel_blas()
        import numba
        _numba = numba
    _numba.set_num_threads(n)
    _local.n = n


# ------------------------------------------------------------------ reading the load
@dataclass(frozen=True)
class LoadReading:
    """One snapshot of the CPU load.

    running: threads runnable or running on the whole machine (``/proc/loadavg``'s fourth field,
    the reading thread included). own_running: those of them that belong to this process (its
    threads in state R: the reader itself, numba workers still spinning after a region).
    cpus: cores this process may run on (``os.sched_getaffinity``)."""

    running: int
    own_running: int
    cpus: int

    @property
    def others(self) -> int:
        """Runnable threads of other processes."""
        return max(0, self.running - self.own_running)


def threads_for(reading: LoadReading, top: int) -> int:
    """Worker threads worth using given ``reading``: the cores no other process is running on,
    between 1 and ``top``. A core shared with another runnable thread is not counted: the worker
    on it would get half of it, in time slices, and stall the region."""
    if top < 1:
        raise ValueError(f"threads_for: top must be >= 1, got {top}")
    return max(1, min(top, reading.cpus - reading.others))


def _own_running() -> int:
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                s = f.read()
        except OSError:   # the thread ended meanwhile
            continue
        # "pid (comm) S ...": the state follows the last ')' (comm may contain spaces or parentheses)
        if s[s.rindex(b")") + 2:s.rindex(b")") + 3] == b"R":
            n += 1
    return n


def read_load() -> LoadReading | None:
    """The current :class:`LoadReading`, or None where ``/proc`` cannot tell (not Linux)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            running = int(f.read().split()[3].split(b"/")[0])
        own = _own_running()
        cpus = len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return LoadReading(running, max(1, own), cpus)


class CoreMonitor:
    """The worker-thread count that follows the cores other processes leave free.

    ``on_change(n)`` is called when the count in force changes (the module's monitor makes numpy's
    OpenBLAS pool follow it, :func:`follow_blas`).

    A reading is a snapshot, so the count is the (lower) median of the counts of the last
    ``window`` readings, taken at most every ``interval_s`` seconds when :meth:`threads` is called:
    a process that keeps a core busy is seen within ``window * interval_s``, and a thread that
    runs for an instant does not switch the path. Between readings :meth:`threads` costs a clock
    read. ``read``: the load source (tests pass a fake one)."""

    def __init__(self, interval_s: float = 0.05, window: int = 5,
                 read: Callable[[], LoadReading | None] = read_load, clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[int], None] | None = None):
        if interval_s < 0 or window < 1:
            raise ValueError(f"CoreMonitor: interval_s must be >= 0 and window >= 1, got {interval_s}, {window}")
        self.interval_s = float(interval_s)
        self._read, self._clock, self._on_change = read, clock, on_change
        self._counts: deque[int] = deque(maxlen=int(window))
        self._next = float("-inf")
        self._choice: int | None = None
        self._top: int | None = None
        self.chosen: dict[int, int] = {}   # thread count -> readings after which it was in force

    def threads(self, top: int) -> int:
        """Worker threads to use now, at most ``top``."""
        now = self._clock()
        if now >= self._next or top != self._top:
            self._next = now + self.interval_s
            if top != self._top:
                self._counts.clear()
                self._top = top
            r = self._read()
            self._counts.append(top if r is None else threads_for(r, top))
            choice = statistics.median_low(self._counts)
            if choice != self._choice:
                changed()
                if self._on_change is not None:
                    self._on_change(choice)
            self._choice = choice
            self.chosen[choice] = self.chosen.get(choice, 0) + 1
        return self._choice

    def due(self) -> bool:
        """Whether the next :meth:`threads` call takes a reading (the interval has passed)."""
        return self._clock() >= self._next

    def last_readings(self) -> list[int]:
        """The counts of the readings the current choice is the median of (oldest first)."""
        return list(self._counts)


class OpenBLASThreads:
    """numpy's OpenBLAS thread pool, resized through its C API (``ctypes``; the library numpy
    loaded, found in ``/proc/self/maps``). ``initial``: its size when first found."""

    _NAMES = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
              ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
              ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
              ("openblas_set_num_threads", "openblas_get_num_threads"))

    def __init__(self, setter, getter):
        self._set, self._get = setter, getter
        self.initial = self.get()

    def get(self) -> int:
        return int(self._get())

    def set(self, n: int) -> None:
        self._set(int(n))

    @classmethod
    def find(cls) -> OpenBLASThreads | None:
        """numpy's OpenBLAS, or None (another BLAS, or not loaded, or no ``/proc``)."""
        pools = cls.find_all()
        return pools["numpy"] or pools["kernels"]

    @classmethod
    def find_all(cls) -> dict[str, OpenBLASThreads | None]:
        """The OpenBLAS pools loaded in this process: ``"numpy"`` (numpy's own, or the one shared
        library everything uses) and ``"kernels"`` (another one — scipy's wheel ships its own,
        and the compiled kernels' matrix products call it through ``scipy.linalg.cython_blas``),
        each None where absent."""
        try:
            with open("/proc/self/maps") as f:
                paths = list(dict.fromkeys(line.split()[-1] for line in f
                                           if "openblas" in line.rsplit("/", 1)[-1] and ".so" in line))
        except OSError:
            return {"numpy": None, "kernels": None}
        import numpy
        numpy_libs = os.path.dirname(numpy.__file__) + ".libs" + os.sep
        found = [(path, pool) for path in paths if (pool := cls._open(path)) is not None]
        numpy_pool = next((pool for path, pool in found if path.startswith(numpy_libs)), None)
        others = [pool for path, pool in found if not path.startswith(numpy_libs)]
        if numpy_pool is None and len(others) == 1:
            return {"numpy": others[0], "kernels": None}
        return {"numpy": numpy_pool, "kernels": others[0] if others else None}

    @classmethod
    def _open(cls, path: str) -> OpenBLASThreads | None:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            return None
        for set_name, get_name in cls._NAMES:
            if hasattr(lib, set_name) and hasattr(lib, get_name):
                setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                return cls(setter, getter)
        return None


#: numpy's OpenBLAS pool: None not looked for yet, False none (or the user sized it)
_blas: OpenBLASThreads | bool | None = None
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def _user_sized_blas() -> bool:
    return any(v in os.environ for v in BLAS_VARIABLES)


def follow_blas(n: int) -> None:
    """Size numpy's OpenBLAS pool like the numba count (at most its own size at start), for the same
    reason: its workers, too, spin and wait for each other in every threaded call. Nothing when the
    user sized it (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``) or numpy uses another BLAS."""
    global _blas
    if _blas is None:
        import numpy  # noqa: F401  (loads its BLAS, if this runs before anything imported numpy)
        _blas = False if _user_sized_blas() else (OpenBLASThreads.find_all()["numpy"] or False)
    if _blas:
        _blas.set(max(1, min(n, _blas.initial)))


def serial_kernel_blas() -> None:
    """Run the compiled kernels' matrix products on one BLAS thread. The kernels call BLAS from
    inside their parallel regions, which already use the cores: a BLAS pool of its own there only
    oversubscribes them, and with another process on the machine its spinning workers stall the
    region (an Atlas second-order batch of 16 states: a median of 0.5–3 s instead of 39 ms on the
    2-core VM under load). Applies to a BLAS library other than numpy's (scipy's wheel ships one;
    where numpy and scipy share one library it follows the numba count instead, :func:`follow_blas`).
    Nothing when the user sized BLAS (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``)."""
    if _user_sized_blas():
        return
    import scipy.linalg.cython_blas  # noqa: F401  (the library numba's kernels call; loads it now)
    pool = OpenBLASThreads.find_all()["kernels"]
    if pool is not None:
        pool.set(1)


_monitor = CoreMonitor(on_change=follow_blas)
_policy: str | int | None = None


def parse_policy(text: str | None) -> str | int:
    """``MPC_ACCEL_THREADS``'s value as a policy: ``"adaptive"``, ``"all"`` or a thread count."""
    if text is None or not text.strip():
        return "adaptive"
    t = text.strip().lower()
    if t in POLICIES:
        return t
    try:
        n = int(t)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{POLICY_VARIABLE}={text!r}: use 'adaptive' (follow the free cores, the default), "
                         "'all' (every worker thread) or a thread count >= 1")
    return n


def thread_policy() -> str | int:
    """The policy in force (read from ``MPC_ACCEL_THREADS`` once, on first use)."""
    global _policy
    if _policy is None:
        _policy = parse_policy(os.environ.get(POLICY_VARIABLE))
    return _policy


_epoch = 0     # bumped whenever a thread count chosen from these settings may change (changed())


def changed() -> None:
    """Record that a thread count may have changed: the adaptive policy chose another count, a
    backend's count or serial threshold was set. Callers that keep thread counts derived from them
    (:func:`epoch`) derive them again."""
    global _epoch
    _epoch += 1


def epoch() -> tuple | None:
    """A value that stays the same for as long as no thread count derived from the policy, the
    backends' counts and their serial thresholds can change; None when the adaptive policy is due
    a reading (the caller then asks for its counts again, which takes it). A compiled loop's
    per-stage thread plan is re-derived only when this differs from when it was derived, instead of
    asking every stage at every call (a chain of Python calls each, in every MPC update)."""
    p = _policy if _policy is not None else thread_policy()
    if p == "adaptive" and _monitor.due():
        return None
    return _epoch, p


def default_threads(top: int) -> int:
    """Worker threads of a backend given no count, at most ``top`` (its ``NUMBA_NUM_THREADS``)."""
    p = thread_policy()
    if p == "adaptive":
        return _monitor.threads(top)
    if p == "all":
        return top
    return min(int(p), top)


def adaptive_choices() -> dict[int, int]:
    """How often each thread count was chosen so far in this process (one entry per reading of the
    adaptive policy; empty under another policy). Benchmarks take differences around a run."""
    return dict(_monitor.chosen)


def thread_policy_status() -> str:
    """One line for benchmark reports: the policy and, when adaptive, its recent readings."""
    p = thread_policy()
    if p == "adaptive":
        return f"adaptive (counts of the last readings: {_monitor.last_readings()})"
    return f"{POLICY_VARIABLE}={p}"
