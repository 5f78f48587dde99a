"""Command-line argument types and options the benchmark scripts share."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def csv_list(kind: type = str) -> Callable[[str], list]:
    """An argparse type: ``"a,b,c"`` -> ``[kind("a"), kind("b"), kind("c")]`` (blank items dropped);
    an empty list or an item ``kind`` rejects is an argparse error naming the expected type."""
    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("give a comma-separated list")
        try:
            return [kind(t) for t in items]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}: {e}") from e
    return parse


def add_iteration_timing_arguments(parser: argparse.ArgumentParser, iterations: int, repeats: int = 3,
                                   what: str = "iterations") -> None:
    """Add ``--iterations K`` (``what`` per timed solve) and ``--repeats``: the options of a
    per-iteration timing (:func:`benchmarks.timing.time_iterations`)."""
    parser.add_argument("--iterations", type=int, default=iterations,
                        help=f"{what} K per timed solve (default {iterations})")
    parser.add_argument("--repeats", type=int, default=repeats, help=f"timed repeats, median reported (default {repeats})")
