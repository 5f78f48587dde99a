"""fpga-sim in the MPC loop: the closed-loop update rate with the emulated accelerator calls charged
at the hardware model's time (simulated) and the rest of the host's work measured, for several
backend configurations next to the numba backend measured in the same run (the anchor).

The rate study (``mpc-accel study``) names backends without options; this script builds each
configuration with options (``host=``, ``emulate=``), so the partitions can be compared:

* ``fpga-sim`` — defaults: every Table I function on the accelerator, host side on numba (compiled
  rollouts, cost kernels, Riccati pass);
* ``fpga-sim:emulate=gradients`` — only the gradients on the accelerator (Plancher et al. 2021's
  partition), dynamics values (contact solves included) on numba;
* ``fpga-sim:host=python`` — the host side on the Python reference loops.

Per (task, N, configuration): ``control_loop_hz`` (updates per second of the loop, modelled for
fpga-sim as in the study: :func:`mpc.study.worker.emulation_block`), the median update time, the
accelerator's simulated time per update, the per-stage split, and the ratio of the rate to numba's.
Lockstep, iLQR, one iteration per update. Speed is a ratio to numba measured in the same run.

    python benchmarks/fpga_sim_loop.py --out fpga_loop.json
    python benchmarks/fpga_sim_loop.py --tasks iiwa-reach --horizons 8 --duration 0.05 --configs numba,fpga-sim
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()
import tasks  # noqa: E402
from benchmarks.machine import load_average, machine_info  # noqa: E402
from benchmarks.output import Column, TextTable, add_output_arguments, run_and_emit  # noqa: E402
from mpc import MPC  # noqa: E402
from mpc.study.worker import emulation_block  # noqa: E402
from sim import report  # noqa: E402
from sim.runner import simulate  # noqa: E402
from tasks.legged import with_penalty_cones  # noqa: E402

CONFIGS = ("numba", "fpga-sim", "fpga-sim:emulate=gradients", "fpga-sim:host=python")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="iiwa-reach,hyq-stand")
    p.add_argument("--horizons", default="16,32")
    p.add_argument("--configs", default=";".join(CONFIGS),
                   help="';'-separated backend specs name[:key=value,...] (default: %(default)s)")
    p.add_argument("--duration", type=float, default=0.5, help="simulated seconds per run")
    p.add_argument("--initial-iterations", type=int, default=10)
    p.add_argument("--dt", type=float, default=0.01)
    add_output_arguments(p)
    return p


def one_run(task, spec: str, N: int, args) -> dict[str, Any]:
    be = dynamics.get_backend(spec)        # name[:key=value,...] (dynamics.backend.parse_backend_spec)
    ctrl = MPC(task, solver="ilqr", backend=be, horizon=N, dt=args.dt, initial_iterations=args.initial_iterations)
    warm = ctrl.warmup()
    h = float(task.model.mj_model.opt.timestep)
    r = simulate(task.model, ctrl, task.initial_state(), args.duration, mode="lockstep",
                 update_every=max(1, round(args.dt / h)))
    tm = report.summarize(r, task, config={}, warmup_s=warm)["timing"]
    emu = emulation_block(r)
    out = {"backend": spec, "repr": repr(be), "updates": tm["updates"], "warmup_s": warm,
           "control_loop_hz": tm["control_loop_hz"], "update_ms_median": tm["update_latency_ms"]["median"],
           "stage_ms": tm["stage_ms"], "timing_source": "measured"}
    if emu is not None:
        out.update(control_loop_hz=emu["control_loop_hz_modelled"], update_ms_median=emu["update_ms_modelled"]["median"],
                   accel_simulated_ms=emu["simulated_ms_per_update"], control_loop_hz_wall=tm["control_loop_hz"],
                   timing_source="simulated accelerator + measured host",
                   host_ms_median=emu["update_ms_modelled"]["median"] - emu["simulated_ms_per_update"])
    return out


def run(args) -> dict[str, Any]:
    load0 = load_average()
    specs = [s for s in args.configs.split(";") if s]
    rows = []
    for tname in [t for t in args.tasks.split(",") if t]:
        task = tasks.get_task(tname, **with_penalty_cones(tasks.resolve_task(tname), {}))  # iLQR: no hard cones
        for N in [int(h) for h in args.horizons.split(",") if h]:
            group = [dict(task=tname, horizon=N, **one_run(task, s, N, args)) for s in specs]
            anchor = next((g for g in group if g["backend"] == "numba"), None)
            for g in group:
                if anchor is not None and anchor["control_loop_hz"]:
                    g["ratio_rate_vs_numba"] = g["control_loop_hz"] / anchor["control_loop_hz"]
                print(f"{tname} N={N} {g['backend']}: {g['control_loop_hz']:.1f} Hz"
                      f"{' (sim)' if 'accel_simulated_ms' in g else ''}, update {g['update_ms_median']:.3f} ms",
                      file=sys.stderr)
            rows.extend(group)
    return {"benchmark": "fpga-sim closed loop vs numba", "anchor": "numba backend, same run, measured",
            "solver": "ilqr", "mode": "lockstep", "duration_s": args.duration, "rows": rows,
            "machine": machine_info(load0)}


format_table = TextTable((
    Column("task", "<11s", lambda r: r["task"]), Column("N", "3d", lambda r: r["horizon"]),
    Column("backend", "<28s", lambda r: r["backend"]), Column("Hz", "8.1f", lambda r: r["control_loop_hz"]),
    Column("update ms", "9.3f", lambda r: r["update_ms_median"]),
    Column("accel ms", "8.3f", lambda r: r.get("accel_simulated_ms", float("nan"))),
    Column("vs numba", "8.2f", lambda r: r.get("ratio_rate_vs_numba", float("nan")))), rows="rows")


def main(argv: list[str] | None = None) -> int:
    run_and_emit(build_parser(), run, format_table, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
