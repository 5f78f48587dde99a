"""∇FD (``aba_derivatives``) on the ``gpu`` backend, per CPU/GPU partition, next to the ``numba`` CPU
backend measured in the same run (Plancher et al. 2021 §V-C, Fig. 2 and Fig. 3).

For each robot and batch size N: the numba backend's ``aba_derivatives`` (the anchor; all its
threads), and for each partition (split, fused, completely fused) of the gpu backend the median
over ``--repeats`` calls of the end-to-end time (one ``aba_derivatives`` call: host work,
host↔device copies of the input/output blocks and kernels) and of its parts from
``backend.last_timing`` (compute-only = device time; transfer; host). JSON on stdout or ``--out``;
a stacked-bar plot (``--plot``) in the style of Plancher et al. 2021 Fig. 2/3.

Examples::

    python benchmarks/gpu.py --out gpu.json --plot gpu.png          # needs CuPy and an NVIDIA GPU
    python benchmarks/gpu.py --simulate --n 2 --robots iiwa          # smoke run in Numba's CUDA simulator

With ``--simulate`` the "device" is Numba's CUDA simulator running on the CPU: the numbers only
show that the script works, they say nothing about GPU performance (the JSON and plot say so).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import dynamics  # noqa: E402
from benchmarks.arguments import csv_list  # noqa: E402

ROBOTS = ("iiwa", "hyq", "atlas")
BATCHES = (16, 32, 64, 128, 256, 1024)
PARTITIONS = ("split", "fused", "completely_fused")
LABEL = {"split": "s", "fused": "f", "completely_fused": "c"}



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robots", type=csv_list(str), default=list(ROBOTS), help="comma-separated robots (default all)")
    p.add_argument("--n", type=csv_list(int), default=None,
                   help=f"comma-separated batch sizes (default {','.join(map(str, BATCHES))}; 2 with --simulate)")
    p.add_argument("--partitions", type=csv_list(str), default=list(PARTITIONS), help="comma-separated partitions")
    p.add_argument("--simulate", action="store_true", help="run the kernels in Numba's CUDA simulator (smoke test)")
    p.add_argument("--dtype", default="float64", choices=("float64", "float32"), help="device arithmetic")
    p.add_argument("--threads-per-block", type=int, default=None, help="threads per knot block (backend default)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per entry (default 20; 1 with --simulate)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="write the JSON here (default: stdout)")
    p.add_argument("--plot", type=Path, default=None, help="write a stacked-bar plot (PNG/PDF/SVG) here")
    return p


def machine_info(simulate: bool) -> dict[str, Any]:
    """Host, library versions, GPU name (when one is used) and a UTC timestamp."""
    info: dict[str, Any] = dict(python=platform.python_version(), platform=platform.platform(),
                                processor=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
                                numpy=np.__version__, utc=_dt.datetime.now(_dt.timezone.utc).isoformat(),
                                threads={k: os.environ.get(k) for k in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS")})
    import numba
    info["numba"] = numba.__version__
    if not simulate:
        import cupy
        info["cupy"] = cupy.__version__
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
        info["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return info


def all_cores_numba() -> dynamics.Backend:
    """The anchor: the numba backend on every worker thread of this host (not the default adaptive
    count, which follows the load it reads: on a sandboxed GPU host whose ``/proc/loadavg`` counts
    threads that are not running it chose one thread, docs/gpu.md)."""
    import numba
    return dynamics.get_backend("numba", threads=int(numba.config.NUMBA_NUM_THREADS))


def _timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every (robot, N) entry; see the module docstring."""
    for p in args.partitions:
        if p not in PARTITIONS:
            raise SystemExit(f"unknown partition '{p}'; use {', '.join(PARTITIONS)}")
    batches = args.n or ([2] if args.simulate else list(BATCHES))
    repeats = args.repeats or (1 if args.simulate else 20)
    numba_be = all_cores_numba()
    gpus = {p: dynamics.get_backend("gpu", simulate=args.simulate, dtype=args.dtype, partition=p,
                                    threads_per_block=args.threads_per_block) for p in args.partitions}
    rng = np.random.default_rng(args.seed)
    entries = []
    for robot in args.robots:
        model = dynamics.load_model(robot)
        for n in batches:
            q = model.random_configuration(rng, size=(n,))
            v = rng.normal(size=(n, model.nv))
            tau = rng.normal(size=(n, model.nv))
            numba_be.aba_derivatives(model, q, v, tau)  # warm-up: compile or load from numba's cache
            cpu = median(_timed(lambda: numba_be.aba_derivatives(model, q, v, tau), repeats))
            entry: dict[str, Any] = dict(robot=robot, nv=model.nv, n=n, numba_s=cpu, partitions={},
                                         threads_per_block=next(iter(gpus.values())).block_size(model))
            for p, be in gpus.items():
                be.aba_derivatives(model, q, v, tau)  # warm-up: JIT compilation, allocations, first launch
                parts = []

                def call():
                    be.aba_derivatives(model, q, v, tau)
                    parts.append(be.last_timing)
                e2e = median(_timed(call, repeats))
                comp = median(t.compute_s for t in parts)
                entry["partitions"][p] = dict(
                    end_to_end_s=e2e, compute_s=comp, h2d_s=median(t.h2d_s for t in parts),
                    d2h_s=median(t.d2h_s for t in parts), host_s=median(t.host_s for t in parts),
                    bytes_h2d=parts[-1].bytes_h2d, bytes_d2h=parts[-1].bytes_d2h,
                    ratio_end_to_end_vs_numba=e2e / cpu, ratio_compute_vs_numba=comp / cpu)
            entries.append(entry)
            print(f"{robot} N={n}: numba {cpu * 1e6:.0f} us; " + ", ".join(
                f"{p} {d['end_to_end_s'] * 1e6:.0f} us (compute {d['compute_s'] * 1e6:.0f})"
                for p, d in entry["partitions"].items()), file=sys.stderr)
    return dict(benchmark="gpu aba_derivatives", simulated=args.simulate,
                note=("SIMULATOR RUN: the device is Numba's CUDA simulator on the CPU; these times say nothing "
                      "about GPU performance" if args.simulate else "real GPU run"),
                dtype=args.dtype, repeats=repeats, threads_per_block=args.threads_per_block,
                anchor="numba backend aba_derivatives on all worker threads, same run", machine=machine_info(args.simulate),
                entries=entries)


def plot(result: dict[str, Any], path: Path) -> None:
    """Stacked bars per robot and N (Plancher et al. 2021 Fig. 2/3): for each partition host CPU work,
    host↔device transfer and device compute; the numba backend ([C]PU) as a single bar."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise SystemExit("--plot needs matplotlib: pip install \".[plot]\" (the JSON was written)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    robots = list(dict.fromkeys(e["robot"] for e in result["entries"]))
    fig, axes = plt.subplots(1, len(robots), figsize=(5.5 * len(robots), 4), squeeze=False)
    colors = dict(host="#f0a030", transfer="#8080d0", compute="#30a060", cpu="#606060")
    for ax, robot in zip(axes[0], robots):
        es = [e for e in result["entries"] if e["robot"] == robot]
        x = 0.0
        ticks, labels = [], []
        for e in es:
            start = x
            for p, d in e["partitions"].items():
                h, t, c = d["host_s"] * 1e6, (d["h2d_s"] + d["d2h_s"]) * 1e6, d["compute_s"] * 1e6
                ax.bar(x, h, color=colors["host"], width=0.8)
                ax.bar(x, t, bottom=h, color=colors["transfer"], width=0.8)
                ax.bar(x, c, bottom=h + t, color=colors["compute"], width=0.8)
                ax.text(x, h + t + c, "G" + LABEL[p], ha="center", va="bottom", fontsize=7)
                x += 1
            ax.bar(x, e["numba_s"] * 1e6, color=colors["cpu"], width=0.8)
            ax.text(x, e["numba_s"] * 1e6, "C", ha="center", va="bottom", fontsize=7)
            ticks.append((start + x) / 2)
            labels.append(f"N={e['n']}")
            x += 2
        ax.set_xticks(ticks, labels)
        ax.set_ylabel("time per batch [µs]")
        ax.set_title(f"{robot}: ∇FD (aba_derivatives)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in ("host", "transfer", "compute", "cpu")]
    fig.legend(handles, ["host CPU work", "host↔device transfer", "device compute", "numba CPU backend (C)"],
               loc="lower center", ncol=4, fontsize=8)
    title = "Gs/Gf/Gc: gpu backend split / fused / completely fused"
    if result["simulated"]:
        title = "SIMULATOR (CPU) — not GPU performance. " + title
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run(args)
    except dynamics.BackendUnavailableError as e:
        print(f"benchmarks/gpu.py: {e}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    else:
        print(text)
    if args.plot is not None:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
