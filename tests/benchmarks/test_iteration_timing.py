"""``benchmarks.timing.IterationTiming``: the per-iteration difference of a K- and a 0-iteration solve,
and the stages for which that difference comes out negative (noise, reported by the benchmarks)."""

from __future__ import annotations

import pytest

from benchmarks.timing import IterationTiming, Timing


def _timing(seconds: float) -> Timing:
    return Timing(seconds=seconds, samples=[seconds], repeats=1, loops=1, warmup_seconds=0.0)


def test_per_iteration_stages_and_negative_ones():
    solve = [{"derivatives": 3.0, "backward": 2.0}, {"derivatives": 5.0, "backward": 2.2}, {"derivatives": 4.0, "backward": 2.1}]
    setup = [{"derivatives": 1.0, "backward": 2.5}, {"derivatives": 1.2, "backward": 2.6}, {"derivatives": 0.8, "backward": 2.4}]
    t = IterationTiming(2, _timing(10.0), _timing(4.0), solve, setup)
    assert t.per_iteration_s() == pytest.approx(3.0)
    per = t.per_iteration_stage_s(("derivatives", "backward"))
    assert per["derivatives"] == pytest.approx((4.0 - 1.0) / 2)
    assert per["backward"] == pytest.approx((2.1 - 2.5) / 2)
    assert t.negative_stages(("derivatives", "backward")) == ["backward"]
    assert t.negative_stages(("derivatives",)) == []
