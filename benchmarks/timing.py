"""Wall-clock timing of a Python callable: warm-up, auto-ranged inner loops, median of repeats.

Used by the benchmark scripts in this folder; results are JSON-friendly dataclasses. Speed is
only ever quoted as a ratio against an anchor timed in the same run (see benchmarks/README.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any, Callable


@dataclass(frozen=True)
class Timing:
    """One measurement of a callable.

    seconds: median over ``repeats`` samples of the time of one call [s].
    samples: each sample's time per call [s] (a sample runs the callable ``loops`` times).
    warmup_seconds: duration of the warm-up call [s] (includes any one-time cost such as JIT
        compilation or first-touch allocation); not part of the statistics.
    """

    seconds: float
    samples: list[float]
    repeats: int
    loops: int
    warmup_seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _time_loops(fn: Callable[[], Any], loops: int) -> float:
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return time.perf_counter() - t0


def measure(fn: Callable[[], Any], repeats: int = 5, min_time: float = 0.02,
            budget: float | None = None, warmup: Callable[[], Any] | None = None) -> Timing:
    """Time ``fn()`` with ``time.perf_counter``.

    1. One warm-up call, untimed for the statistics: ``fn()`` itself, or ``warmup()`` if given —
       a cheaper call exercising the same code (e.g. the same function on one state), for calls
       so slow that running them twice for one sample would waste the run; the first timed call
       of ``fn`` is then the first sample.
    2. Calls faster than ``min_time`` [s] are auto-ranged (as ``timeit``): the inner loop count is
       doubled until one sample lasts at least ``min_time``, so each sample is ≥ ``min_time``.
    3. ``repeats`` samples are taken; if ``budget`` [s] is given, fewer (but at least one) so
       that the timed samples together stay within about ``budget`` — slow calls get fewer
       repeats rather than a run that never ends.
    Returns the median time per call over the samples.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not (min_time >= 0 and math.isfinite(min_time)):
        raise ValueError(f"min_time must be a finite number >= 0 [s], got {min_time}")
    warm = _time_loops(warmup or fn, 1)
    samples: list[float] = []
    if warmup is None:
        per_call = warm          # the warm-up may include one-time work: never a sample
    else:
        per_call = _time_loops(fn, 1)
        samples.append(per_call)  # fn's code is warm: its first full call is a fair sample
    loops = 1
    if per_call < min_time:
        samples = []
        while True:
            t = _time_loops(fn, loops)
            per_call = t / loops
            if t >= min_time:
                break
            loops *= 2 if t <= 0 else max(2, min(10, math.ceil(min_time / t)))
    n = repeats
    if budget is not None:
        n = max(1, min(repeats, int(budget // max(per_call * loops, 1e-12))))
    while len(samples) < n:
        samples.append(_time_loops(fn, loops) / loops)
    return Timing(seconds=median(samples), samples=samples, repeats=len(samples), loops=loops,
                  warmup_seconds=warm)


@dataclass(frozen=True)
class IterationTiming:
    """A solve of K iterations and one of 0 iterations from the same start, each timed by :func:`measure`.

    solve / setup: the K- and 0-iteration timings; solve_results / setup_results: what each call
    of ``solve(K)`` / ``solve(0)`` returned (warm-up included), for stage timers and final costs.
    """

    iterations: int
    solve: Timing
    setup: Timing
    solve_results: list[Any]
    setup_results: list[Any]

    def per_iteration_s(self, iterations: int | None = None) -> float:
        """(K-iteration time − 0-iteration time) / iterations (default K): the 0-iteration solve —
        initial rollout, one derivative evaluation and backward pass — removes the set-up cost."""
        return (self.solve.seconds - self.setup.seconds) / (iterations or self.iterations)

    def per_iteration_stage_s(self, stages: tuple[str, ...],
                              stage_seconds: Callable[[Any], dict[str, float]] = lambda r: r) -> dict[str, float]:
        """The same difference for each stage timer (medians over the calls) / K."""
        def med(results: list[Any], s: str) -> float:
            return median(stage_seconds(r)[s] for r in results)
        return {s: (med(self.solve_results, s) - med(self.setup_results, s)) / self.iterations for s in stages}

    def negative_stages(self, stages: tuple[str, ...],
                        stage_seconds: Callable[[Any], dict[str, float]] = lambda r: r) -> list[str]:
        """The stages whose :meth:`per_iteration_stage_s` came out negative: the 0-iteration solves'
        median exceeded the K-iteration solves', so the difference (and the per-iteration time with
        it) measured the noise of the runs, not the iterations: more repeats, or a quieter machine."""
        return [s for s, v in self.per_iteration_stage_s(stages, stage_seconds).items() if v < 0]


def time_iterations(solve: Callable[[int], Any], iterations: int, repeats: int,
                    min_time: float = 0.0) -> IterationTiming:
    """Time ``solve(iterations)`` then ``solve(0)`` with :func:`measure` (``solve(k)`` runs k
    iterations from the same initial guess; what it returns is kept — return a snapshot, not an
    object the solver reuses)."""
    results: dict[int, list[Any]] = {iterations: [], 0: []}

    def run(k: int) -> None:
        results[k].append(solve(k))

    t_k = measure(lambda: run(iterations), repeats=repeats, min_time=min_time)
    t_0 = measure(lambda: run(0), repeats=repeats, min_time=min_time)
    return IterationTiming(iterations, t_k, t_0, results[iterations], results[0])
