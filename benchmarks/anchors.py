"""The Crocoddyl anchor of the solver benchmarks (``solvers.py``, ``mpc_rate.py``): whether it can
run here, and Crocoddyl's FDDP on the Crocoddyl counterpart of one of our problems
(``solvers.crocoddyl_problem.build_crocoddyl_problem``), timed as our solvers are
(:func:`benchmarks.timing.time_iterations`: a K-iteration and a 0-iteration solve from the same guess).
"""

from __future__ import annotations

from typing import Any

from benchmarks.timing import IterationTiming, time_iterations


def crocoddyl_importable(skip: bool = False) -> bool:
    """Whether the anchor runs: ``crocoddyl`` importable and not skipped (``--no-crocoddyl``)."""
    if skip:
        return False
    try:
        import crocoddyl  # noqa: F401
    except ImportError:
        return False
    return True


class CrocoddylFDDP:
    """``crocoddyl.SolverFDDP`` (``SolverBoxFDDP`` with ``box``) on ``problem``'s Crocoddyl counterpart,
    its OpenMP loop over knots on ``threads`` threads (1: like our solvers), never stopping before the
    iterations asked for. Raises ``NotImplementedError`` when the problem has no counterpart."""

    def __init__(self, problem, threads: int = 1, box: bool = False):
        import crocoddyl

        from solvers.crocoddyl_problem import build_crocoddyl_problem
        self.problem = build_crocoddyl_problem(problem, bounds=box)
        self.problem.nthreads = threads
        self.solver = crocoddyl.SolverBoxFDDP(self.problem) if box else crocoddyl.SolverFDDP(self.problem)
        self.solver.th_stop = 1e-300   # (must be > 0) never stop early: the full iterations asked for
        self.version = getattr(crocoddyl, "__version__", "?")

    def time_iterations(self, xs: list, us: list, iterations: int, repeats: int) -> IterationTiming:
        """``solve(xs, us, K)`` and ``solve(xs, us, 0)`` from the same guess; each call's result is
        ``(iterations run, cost)``."""
        def solve(k: int) -> tuple[int, float]:
            self.solver.solve(xs, us, k, False)
            return int(self.solver.iter), float(self.solver.cost)
        return time_iterations(solve, iterations, repeats, min_time=0.02)

    def describe(self) -> dict[str, Any]:
        return {"solver": "crocoddyl." + type(self.solver).__name__, "version": self.version,
                "threads": int(self.problem.nthreads)}
