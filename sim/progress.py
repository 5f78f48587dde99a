"""Progress display for long runs: tqdm when it is installed, otherwise a plain stderr line."""

from __future__ import annotations

import sys
import time
from typing import Callable


class Progress:
    """Callable ``progress(step, t, data)`` for :func:`sim.runner.simulate`, showing simulated time.

    total: simulated seconds of the run; every: physics steps between display refreshes."""

    def __init__(self, total: float, every: int = 100, desc: str = "simulating", stream=sys.stderr):
        self.total = float(total)
        self.every = max(int(every), 1)
        self.stream = stream
        self._bar = None
        self._last = 0.0
        self._t0 = time.perf_counter()
        self._desc = desc
        try:
            from tqdm import tqdm     # optional: without it, a plain line rewritten in place
            self._bar = tqdm(total=round(self.total, 3), desc=desc, unit="sim-s", file=stream, leave=False,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.2f}/{total:.2f} sim-s [{elapsed}<{remaining}]")
        except ImportError:
            pass

    def __call__(self, step: int, t: float, data) -> None:
        if (step + 1) % self.every:
            return
        if self._bar is not None:
            t = min(t, self.total)  # the bar's total is rounded; never overshoot it
            self._bar.update(round(t - self._last, 3))
            self._last = round(self._last + round(t - self._last, 3), 3)
        else:
            wall = time.perf_counter() - self._t0
            self.stream.write(f"\r{self._desc}: {t:6.2f} / {self.total:.2f} s simulated ({wall:5.1f} s wall)")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self.stream.write("\n")
            self.stream.flush()


def make_progress(total: float, enabled: bool) -> tuple[Callable | None, Callable[[], None]]:
    """A (callback, close) pair; both no-ops when ``enabled`` is False."""
    if not enabled:
        return None, lambda: None
    p = Progress(total)
    return p, p.close
