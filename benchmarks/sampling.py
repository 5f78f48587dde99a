"""Batched rollouts of the sampling planners (solvers/sampling) against MuJoCo's own threaded
rollouts of the same number of steps, in the same run.

Problem: iiwa-reach (its own costs), horizon ``--horizon`` knots of ``--dt`` s (default 30 × 10
ms), K samples (``--samples``, default 64 and 256). Timings (median of ``--repeats``):

* ``update``: one warm-started predictive-sampling iteration on the chosen backend
  (``PredictiveSampling.solve(xs_init, us_init, max_iter=1)``, its default policy, ``policy`` in
  each row): K spline perturbations, K rollouts (one batched Euler step per knot, the PD law on
  each with policy "pd"), the K costs from the problem's cost objects, the selection.
* ``update_rollouts`` / ``update_costs``: the update's own split (its timings ``forward`` and
  ``cost``): the K rollouts as the planner runs them (the compiled rollouts: on a model of hinge
  and slide joints such as the iiwa, the lanes kernel, :mod:`dynamics.kernels.aba_lanes`), and the
  K trajectory costs.
* ``rollout``: the K rollouts knot by knot through the backend's batched calls
  (:func:`solvers.sampling.rollout_batch`, the planners' path for policies without an affine form).
* ``aba_one_call``: the backend's ``aba`` on all K·N states in one call — the dynamics work of a
  rollout without its sequential dependency (a lower bound for any per-knot batching).
* ``mujoco_rollout`` (the anchor): ``mujoco.rollout`` of the same K × N steps (timestep dt, Euler,
  contacts and constraints off, generalised forces as controls) on ``--threads`` MjData: how
  MJPC-style planners roll out, physics only (no costs).

Ratios are each time over the anchor's. The issue's target (K = 256 × 30 steps ≤ 2 ms per
update with numba on the 2-core VM) is reported as data, never asserted, for the rollouts and for
the whole update.

Examples::

    python benchmarks/sampling.py --table
    python benchmarks/sampling.py --samples 64 --repeats 3 --threads 1 --table
"""

from __future__ import annotations

import argparse
import copy
import os
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

TARGET_S = 2e-3      # issue 29: K = 256 × 30-step iiwa rollouts in one update, numba, 2-core VM



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="numba", help="dynamics backend of the planner (default numba)")
    p.add_argument("--samples", type=csv_list(int), default=[64, 256], help="comma-separated K (default 64,256)")
    p.add_argument("--horizon", type=int, default=30, help="knots N (default 30)")
    p.add_argument("--dt", type=float, default=0.01, help="knot spacing [s] (default 0.01)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of the numba backend and of mujoco.rollout (default: all cores)")
    p.add_argument("--repeats", type=int, default=7, help="timed samples per measurement (default 7)")
    p.add_argument("--quick", action="store_true", help="one repeat (a smoke run)")
    add_output_arguments(p)
    return p


def _mujoco_rollout(model: dynamics.RobotModel, K: int, N: int, dt: float, threads: int, x0: np.ndarray,
                    tau: np.ndarray):
    """A callable running ``mujoco.rollout`` of K × N Euler steps of dt from x0 under the
    generalised forces tau (K, N, nv)."""
    mujoco = dynamics.model.import_mujoco()
    from mujoco import rollout

    m = copy.deepcopy(model.mj_model)
    m.opt.timestep = dt
    m.opt.integrator = int(mujoco.mjtIntegrator.mjINT_EULER)
    D = mujoco.mjtDisableBit
    m.opt.disableflags |= int(D.mjDSBL_CONSTRAINT | D.mjDSBL_CONTACT)
    datas = [mujoco.MjData(m) for _ in range(threads)]
    d = datas[0]
    d.qpos[:] = x0[:model.nq]
    d.qvel[:] = model.qvel_from_v(x0[:model.nq], x0[model.nq:])
    spec = int(mujoco.mjtState.mjSTATE_FULLPHYSICS)
    state0 = np.zeros(mujoco.mj_stateSize(m, spec))
    mujoco.mj_getState(m, d, state0, spec)
    initial = np.tile(state0, (K, 1))
    control = np.ascontiguousarray(tau)
    out = np.zeros((K, N, state0.size))
    cspec = int(mujoco.mjtState.mjSTATE_QFRC_APPLIED)

    models = [m] * K      # the form skip_checks=True takes (no per-call checks or tiling in Python)

    def run() -> None:
        rollout.rollout(models, datas, initial, control, control_spec=cspec, state=out, nstep=N, skip_checks=True,
                        persistent_pool=True)
    return run


def run(args: argparse.Namespace) -> dict[str, Any]:
    import tasks
    from solvers.sampling import PredictiveSampling, rollout_batch

    if args.horizon < 1 or args.dt <= 0 or any(k < 2 for k in args.samples):
        raise SystemExit("--horizon must be >= 1, --dt > 0 and every --samples >= 2")
    repeats = 1 if args.quick else args.repeats
    load0 = load_average()
    threads = args.threads or os.cpu_count() or 1
    options = {"threads": args.threads} if args.threads and args.backend == "numba" else {}
    be = dynamics.get_backend(args.backend, **options)
    task = tasks.get_task("iiwa-reach")
    x0 = task.initial_state()
    problem = task.build_problem(x0, args.horizon, args.dt, backend=be)
    task.update_problem(problem, 0.0)
    model, N = problem.model, problem.horizon
    rows = []
    for K in args.samples:
        planner = PredictiveSampling(problem, samples=K, seed=0)
        planner.warmup()
        first = planner.solve(max_iter=3)
        us = first.us
        rng = np.random.default_rng(K)
        U = problem.clip_controls(us + 0.02 * (problem.u_upper - problem.u_lower) * rng.standard_normal((K, N, problem.nu)))
        X = np.empty((K, N + 1, problem.nx))
        rollout_batch(problem, U, X)
        qs, vs = np.ascontiguousarray(X[:, :-1, :model.nq].reshape(-1, model.nq)), \
            np.ascontiguousarray(X[:, :-1, model.nq:].reshape(-1, model.nv))
        taus = np.ascontiguousarray(U.reshape(-1, problem.nu) @ model.actuation_matrix.T)
        # warm-started as the MPC does it (states and controls of the last plan)
        t_update = measure(lambda s=planner, x=first.xs, u=us: s.solve(xs_init=x, us_init=u, max_iter=1),
                           repeats=repeats)
        # the update's own split: its K rollouts (spline to controls + the compiled rollouts, lanes
        # kernel on the iiwa) and its K cost evaluations, medians over the timed updates
        stages = [planner.solve(xs_init=first.xs, us_init=us, max_iter=1).timings for _ in range(max(3, repeats))]
        t_fwd = float(np.median([st["forward"] for st in stages]))
        t_cost = float(np.median([st["cost"] for st in stages]))
        t_roll = measure(lambda u=U, x=X: rollout_batch(problem, u, x), repeats=repeats)
        t_aba = measure(lambda a=(model, qs, vs, taus): be.aba(*a), repeats=repeats)
        t_mj = measure(_mujoco_rollout(model, K, N, args.dt, threads, x0, taus.reshape(K, N, model.nv)),
                       repeats=repeats)
        rows.append({"samples": K, "horizon": N, "dt": args.dt, "policy": planner.policy, "update_s": t_update.seconds,
                     "update_rollouts_s": t_fwd, "update_costs_s": t_cost,
                     "rollout_s": t_roll.seconds, "aba_one_call_s": t_aba.seconds, "mujoco_rollout_s": t_mj.seconds,
                     "ratio_update_rollouts_vs_mujoco_rollout": t_fwd / t_mj.seconds,
                     "ratio_update_vs_mujoco_rollout": t_update.seconds / t_mj.seconds,
                     "ratio_rollout_vs_mujoco_rollout": t_roll.seconds / t_mj.seconds,
                     "ratio_aba_one_call_vs_mujoco_rollout": t_aba.seconds / t_mj.seconds,
                     "update_hz": 1.0 / t_update.seconds,
                     "target_2ms": (None if K != 256 or N != 30 else
                                    {"limit_s": TARGET_S, "rollouts_met": bool(t_fwd <= TARGET_S),
                                     "update_met": bool(t_update.seconds <= TARGET_S)})})
    return {"benchmark": "sampling", "task": "iiwa-reach", "planner": "predictive sampling",
            "backend": be.name, "threads": threads, "anchor": "mujoco.rollout of the same K x N steps, same run",
            "results": rows, "machine": machine_info(load0)}


format_table = TextTable((
    Column("K", "5d", lambda r: r["samples"]), Column("N", "3d", lambda r: r["horizon"]),
    Column("update ms", "10.2f", lambda r: r["update_s"] * 1e3),
    Column("its rollouts ms", "16.2f", lambda r: r["update_rollouts_s"] * 1e3),
    Column("its costs ms", "13.2f", lambda r: r["update_costs_s"] * 1e3),
    Column("rollout ms", "11.2f", lambda r: r["rollout_s"] * 1e3),
    Column("aba 1 call ms", "14.2f", lambda r: r["aba_one_call_s"] * 1e3),
    Column("mj.rollout ms", "14.2f", lambda r: r["mujoco_rollout_s"] * 1e3),
    Column("update/mj", "10.2f", lambda r: r["ratio_update_vs_mujoco_rollout"])))


if __name__ == "__main__":
    run_and_emit(build_parser(), run, format_table)
