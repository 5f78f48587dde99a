"""One study run, in a fresh process: ``python -m mpc.study.worker SPEC_JSON OUT_DIR``.

Runs exactly ``mpc-accel run`` with the spec's arguments (:meth:`RunSpec.argv`), writing its
summary.json and trajectory.npz into OUT_DIR, and adds to the summary an ``emulation`` block when
the backend emulates hardware (fpga-sim): the accelerator time the hardware model charges, the
host's emulation time, and the loop time with the emulated calls charged at the model's time.
Exit code: ``mpc-accel run``'s (0 done, 1 aborted/failed, 2 bad arguments, 130 interrupted).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from ..cli import build_parser, cmd_run

from .plan import RunSpec


def emulation_block(result) -> dict | None:
    """Accelerator-model bookkeeping of a run on an emulating backend (None otherwise). Times in s
    (totals over the updates) and ms (medians per update)."""
    ups = result.updates
    sim = [u.info.get("simulated_s") for u in ups]
    if not ups or all(s is None for s in sim):
        return None
    sim_s = np.array([s or 0.0 for s in sim])
    emu_s = np.array([u.info.get("emulation_wall_s") or 0.0 for u in ups])
    # the host's wall time of each update (in realtime mode the runner replaced .latency by its charge)
    raw_s = np.array([u.info.get("measured_latency_s", u.latency) for u in ups])
    modelled = np.maximum(raw_s - emu_s, 0.0) + sim_s
    loop = max(result.wall_time - float(emu_s.sum()) + float(sim_s.sum()), 1e-12)
    return {"simulated_s_total": float(sim_s.sum()), "emulation_wall_s_total": float(emu_s.sum()),
            "loop_time_modelled_s": loop, "control_loop_hz_modelled": len(ups) / loop,
            "simulated_ms_per_update": float(np.median(sim_s)) * 1e3,
            "update_ms_modelled": {"median": float(np.median(modelled)) * 1e3,
                                   "p95": float(np.percentile(modelled, 95)) * 1e3},
            "note": "loop and update times with the emulated accelerator calls charged at the backend's "
                    "hardware model (simulated) and the rest of the host's work at measured wall time"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m mpc.study.worker SPEC_JSON OUT_DIR", file=sys.stderr)
        return 2
    spec = RunSpec.from_config(json.loads(Path(args[0]).read_text()))
    ns = build_parser().parse_args(spec.argv(args[1]))

    def add_emulation(result, summary) -> None:
        block = emulation_block(result)
        if block is not None:
            summary["emulation"] = block

    try:
        return cmd_run(ns, on_result=add_emulation)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
