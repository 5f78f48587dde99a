"""Where the ``gpu`` backend's time goes, per kernel and launch path, next to the numba backend.

For each robot, batch size N and block size (``--threads-per-block``, comma-separated):

* **device time** of each kernel function (``aba``: the serial ABA sweeps; ``minv``;
  ``rnea_derivatives``; ``aba_derivatives``: the completely fused ∇FD), from CUDA events on the
  stream around the launch (``last_timing.compute_s`` of the bound launch path), median of
  ``--repeats``;
* **end to end** ``aba_derivatives`` per launch path (``bound``: PTX loaded once, parameters bound
  once, pinned staging; ``numba``: numba-cuda's dispatcher), and the numba backend on all cores of
  the same host (the anchor, timed in the same run);
* **accuracy**: the largest difference of the bound path's ``aba_derivatives`` from the numpy
  reference backend;
* **compile**: seconds of the first call per robot (cold: Numba's compile, or the on-disk PTX store
  when it holds the kernels; ``MPC_ACCEL_GPU_CACHE`` chooses where it is).

JSON on stdout or ``--out``. Needs CuPy and an NVIDIA GPU.

    python benchmarks/gpu_kernels.py --robots iiwa,hyq,atlas --n 1,64,1024 --out gpu_kernels.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import dynamics  # noqa: E402
from benchmarks.arguments import csv_list  # noqa: E402
from benchmarks.gpu import machine_info  # noqa: E402

FUNCTIONS = ("aba", "minv", "rnea_derivatives", "aba_derivatives")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robots", type=csv_list(str), default=["iiwa", "hyq", "atlas"])
    p.add_argument("--n", type=csv_list(int), default=[1, 64, 1024], help="batch sizes")
    p.add_argument("--threads-per-block", type=csv_list(int), default=[32, 64, 128, 256])
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--numba-launch-robots", type=csv_list(str), default=None,
                   help="robots whose end-to-end time is also taken with numba-cuda's dispatcher (default all)")
    p.add_argument("--simulate", action="store_true", help="Numba's CUDA simulator (smoke run; times mean nothing)")
    p.add_argument("--out", type=Path, default=None)
    return p


def _call(be, fn: str, model, q, v, tau):
    if fn == "minv":
        return be.minv(model, q)
    if fn == "aba":
        return be.aba(model, q, v, tau)
    if fn == "rnea_derivatives":
        return be.rnea_derivatives(model, q, v, tau)
    return be.aba_derivatives(model, q, v, tau)


def _median_time(f, repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``f`` [s]."""
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    from benchmarks.gpu import all_cores_numba
    cpu = all_cores_numba()
    ref = dynamics.get_backend("numpy")
    sim = dict(simulate=True) if args.simulate else {}
    out: dict[str, Any] = dict(benchmark="gpu kernels", machine=machine_info(args.simulate), repeats=args.repeats,
                               simulated=args.simulate, robots={})
    for robot in args.robots:
        model = dynamics.load_model(robot)
        r: dict[str, Any] = dict(nv=model.nv, compile={}, device_s={}, end_to_end_s={}, numba_cpu_s={},
                                 max_abs_error=None)
        out["robots"][robot] = r
        states = {}
        for n in args.n:
            states[n] = (model.random_configuration(rng, size=(n,)), rng.normal(size=(n, model.nv)),
                         rng.normal(size=(n, model.nv)))
        for tpb in args.threads_per_block:
            be = dynamics.get_backend("gpu", threads_per_block=tpb, **sim)
            for fn in FUNCTIONS:
                t0 = time.perf_counter()
                _call(be, fn, model, *states[args.n[0]])
                if tpb == args.threads_per_block[0]:
                    r["compile"][fn] = time.perf_counter() - t0
                for n in args.n:
                    q, v, tau = states[n]
                    _call(be, fn, model, q, v, tau)
                    comp = []
                    for _ in range(args.repeats):
                        _call(be, fn, model, q, v, tau)
                        comp.append(be.last_timing.compute_s)
                    r["device_s"].setdefault(fn, {}).setdefault(str(n), {})[str(tpb)] = median(comp)
                print(f"{robot} tpb={tpb} {fn}: " + ", ".join(
                    f"N={n} {r['device_s'][fn][str(n)][str(tpb)] * 1e6:.1f} us" for n in args.n), file=sys.stderr)
        # end to end, both launch paths at the best block size of the fused kernel at the largest N
        d = r["device_s"]["aba_derivatives"][str(args.n[-1])]
        tpb = int(min(d, key=d.get))
        r["end_to_end_threads_per_block"] = tpb
        launches = ("bound", "numba") if args.numba_launch_robots is None or robot in args.numba_launch_robots \
            else ("bound",)
        for launch in launches:
            be = dynamics.get_backend("gpu", threads_per_block=tpb, launch=launch, **sim)
            for n in args.n:
                q, v, tau = states[n]
                be.aba_derivatives(model, q, v, tau)
                t = _median_time(lambda: be.aba_derivatives(model, q, v, tau), args.repeats)
                r["end_to_end_s"].setdefault(launch, {})[str(n)] = t
                if launch == "bound":
                    r.setdefault("bound_split_s", {})[str(n)] = dict(
                        h2d=be.last_timing.h2d_s, compute=be.last_timing.compute_s, d2h=be.last_timing.d2h_s,
                        host=be.last_timing.host_s)
        for n in args.n:
            q, v, tau = states[n]
            cpu.aba_derivatives(model, q, v, tau)
            r["numba_cpu_s"][str(n)] = _median_time(lambda: cpu.aba_derivatives(model, q, v, tau), args.repeats)
            r.setdefault("ratio_bound_vs_numba_cpu", {})[str(n)] = r["end_to_end_s"]["bound"][str(n)] / \
                r["numba_cpu_s"][str(n)]
        q, v, tau = (x[:4] for x in states[args.n[-1]])
        got = dynamics.get_backend("gpu", threads_per_block=tpb, **sim).aba_derivatives(model, q, v, tau)
        want = ref.aba_derivatives(model, q, v, tau)
        r["max_abs_error"] = max(float(np.max(np.abs(a - b))) for a, b in zip(got, want))
        print(f"{robot}: e2e bound {[round(x * 1e6) for x in r['end_to_end_s']['bound'].values()]} us, numba-launch "
              f"{[round(x * 1e6) for x in r['end_to_end_s'].get('numba', {}).values()]} us, cpu "
              f"{[round(x * 1e6) for x in r['numba_cpu_s'].values()]} us, err {r['max_abs_error']:.1e}",
              file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    res = run(args)
    text = json.dumps(res, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
