"""Analytical forward-dynamics derivatives (the ``numba`` backend's ``aba_derivatives``) next to
MuJoCo's finite differences, on the same states in the same run: what the study's "what MJPC
does" row costs against ours.

For each robot and batch size N, three timings (median of ``--repeats``):

* ``numba``: ``aba_derivatives`` on the numba backend (the anchor; its threads as configured).
* ``mujoco``: ``aba_derivatives`` on the ``mujoco`` backend — central differences of ``mj_forward``
  (4 nv forward evaluations per state, the position stage reused for the v columns) plus
  ``mj_solveM`` for ∂a/∂τ, looped over the states in Python; the same quantity as numba's.
* ``mjd_transitionFD``: MuJoCo's own C finite differences of one *discrete* transition (centered,
  the ``(2nv, 2nv)`` A and ``(2nv, nu)`` B of MuJoCo's integrator step), called per state from
  Python on the backend's private model (contacts and constraints off): what MJPC's iLQG calls.
  A different quantity (discrete time, MuJoCo's tangent basis, ctrl columns instead of τ) with a
  similar number of forward evaluations: the cost floor of MuJoCo's differences without our
  Python loop.

``ratio`` is each time over numba's. Floating-base robots (HyQ, Atlas): both backends compute the
free-flyer dynamics without contacts (the flying robot); the derivatives are in our tangent basis
(body-frame free-joint velocity), the mujoco backend converting each perturbed MuJoCo state
(docs/conventions.md) — that conversion is part of its time. ``mjd_transitionFD`` derives in
MuJoCo's basis and needs none.

Examples::

    python benchmarks/mujoco_fd.py --table
    python benchmarks/mujoco_fd.py --robots iiwa --n 1,16 --repeats 3 --quick
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import dynamics  # noqa: E402
from benchmarks.arguments import csv_list  # noqa: E402
from benchmarks.machine import load_average, machine_info  # noqa: E402
from benchmarks.output import Column, TextTable, add_output_arguments, run_and_emit  # noqa: E402
from benchmarks.timing import measure  # noqa: E402

ROBOTS = ("iiwa", "hyq", "atlas")
BATCHES = (1, 4, 16, 64, 256)



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robots", type=csv_list(str), default=list(ROBOTS), help="comma-separated robots (default all)")
    p.add_argument("--n", type=csv_list(int), default=list(BATCHES),
                   help=f"comma-separated batch sizes (default {','.join(map(str, BATCHES))})")
    p.add_argument("--repeats", type=int, default=5, help="timed samples per measurement (default 5)")
    p.add_argument("--budget", type=float, default=3.0,
                   help="seconds of timed samples per measurement at most (slow calls get fewer repeats)")
    p.add_argument("--threads", type=int, default=None, help="numba backend threads (default: numba's)")
    p.add_argument("--quick", action="store_true", help="one repeat, short budget (a smoke run)")
    add_output_arguments(p)
    return p


def _transition_fd(model: dynamics.RobotModel, mj, q: np.ndarray, v: np.ndarray, eps: float):
    """A callable running ``mjd_transitionFD`` (centered) at each of the states (q, v)."""
    m, d = mj.m, mj.d
    mujoco = mj.mujoco
    nx = 2 * m.nv + m.na
    A, B = np.zeros((nx, nx)), np.zeros((nx, m.nu))
    qvel = model.qvel_from_v(q, v)

    def run() -> None:
        for s in range(q.shape[0]):
            d.qpos[:] = q[s]
            d.qvel[:] = qvel[s]
            mujoco.mjd_transitionFD(m, d, eps, 1, A, B, None, None)
    return run


def run(args: argparse.Namespace) -> dict[str, Any]:
    from dynamics.mujoco_backend import MujocoBackend
    from dynamics.numba_backend import NumbaBackend

    for r in args.robots:
        if r not in dynamics.BUNDLED_ROBOTS:
            raise SystemExit(f"unknown robot '{r}'; choose from {', '.join(dynamics.BUNDLED_ROBOTS)}")
    if any(n < 1 for n in args.n):
        raise SystemExit("--n: batch sizes must be >= 1")
    repeats, budget = (1, 0.5) if args.quick else (args.repeats, args.budget)
    load0 = load_average()
    nb = NumbaBackend(threads=args.threads)
    mj = MujocoBackend()
    rows = []
    for name in args.robots:
        model = dynamics.load_model(name)
        nb.warmup(model)
        session = mj._session(model)     # the backend's private MjModel: the same dynamics for mjd_transitionFD
        for n in args.n:
            rng = np.random.default_rng(n)
            q = model.random_configuration(rng, size=(n,))
            v, tau = rng.normal(size=(n, model.nv)), rng.normal(size=(n, model.nv))
            args_ = (model, q, v, tau)
            t_nb = measure(lambda a=args_: nb.aba_derivatives(*a), repeats=repeats, budget=budget)
            t_mj = measure(lambda a=args_: mj.aba_derivatives(*a), repeats=repeats, budget=budget,
                           warmup=lambda a=args_: mj.aba_derivatives(a[0], *(x[:1] for x in a[1:])))
            fd = _transition_fd(model, session, q, v, mj.fd_step)
            t_fd = measure(fd, repeats=repeats, budget=budget)
            rows.append({"robot": name, "nv": model.nv, "floating_base": model.has_floating_base, "n": n,
                         "numba_s": t_nb.seconds, "mujoco_s": t_mj.seconds, "mjd_transitionFD_s": t_fd.seconds,
                         "ratio_mujoco_vs_numba": t_mj.seconds / t_nb.seconds,
                         "ratio_mjd_transitionFD_vs_numba": t_fd.seconds / t_nb.seconds,
                         "mujoco_per_state_s": t_mj.seconds / n, "numba_per_state_s": t_nb.seconds / n})
    return {"benchmark": "mujoco_fd", "anchor": "numba aba_derivatives, same states, same run",
            "fd_step": mj.fd_step, "numba_threads": nb.threads if args.threads else "numba default",
            "results": rows, "machine": machine_info(load0)}


format_table = TextTable((
    Column("robot", "<6", lambda r: r["robot"]), Column("N", "4d", lambda r: r["n"]),
    Column("numba ms", "9.3f", lambda r: r["numba_s"] * 1e3), Column("mujoco ms", "10.3f", lambda r: r["mujoco_s"] * 1e3),
    Column("x numba", "8.1f", lambda r: r["ratio_mujoco_vs_numba"]),
    Column("mjdFD ms", "9.3f", lambda r: r["mjd_transitionFD_s"] * 1e3),
    Column("x numba", "8.1f", lambda r: r["ratio_mjd_transitionFD_vs_numba"])))


if __name__ == "__main__":
    run_and_emit(build_parser(), run, format_table)
