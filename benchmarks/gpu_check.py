"""The prepared hardware check of the ``gpu`` backend: one command on a fresh GPU machine.

Steps, each reported even when an earlier one could not run:

1. **environment**: Python, NumPy, numba, numba-cuda, CuPy, the GPU (name, compute capability,
   driver), MuJoCo, and whether the NumPy / numba-cuda pair can compile kernels
   (:func:`dynamics.gpu_backend.runtime.check_numpy_support`); ``missing`` lists what is absent and
   how to get it, never assumed;
2. **compile ahead**: every kernel for iiwa, HyQ and Atlas in float64 and float32 compiled to PTX into
   the on-disk store, one process per (robot, dtype), all in parallel (the cold first-use compile;
   the later steps and the hardware tests load their kernels from the store);
3. **table**: ``aba_derivatives`` end to end on the gpu backend per partition against the numba
   backend on all cores of the same host (the anchor, timed in the same run), with the device /
   transfer / host split, iiwa, HyQ, Atlas, N = 1 … 1024 (:mod:`benchmarks.gpu`, reused);
4. **closed loop**: ``iiwa-reach`` with iLQR in lockstep at N = 32 and 256 on the gpu backend and on
   numba (update rate, median update latency, per-stage split); needs MuJoCo;
5. **hardware tests**: ``pytest -m gpu tests/dynamics/gpu_backend/test_gpu_hardware.py`` in a child
   process, last, with what is left of the budget (pass / fail / skip counts and the tail of its
   output; on a timeout the counts so far).

JSON on stdout and in ``--out`` (default ``gpu_check.json``), a plot next to it (``--plot``,
default ``gpu_check.png``). Exit status 2 when the gpu backend cannot run here (nothing measured),
1 when a step or a hardware test failed, else 0. Budget on a fresh machine: 6 minutes, kernel
compilation included (issue 25's target; unmeasured — the hardware tests alone compiled for about
6 minutes cold on the issue's machine, so they run last with what is left, at least 2 minutes).

``--simulate`` runs every step at tiny sizes with the kernels in Numba's CUDA simulator (iiwa, N = 1,
one partition, a closed loop of N = 2 for a few updates; the hardware tests are then skipped by
pytest for want of a GPU): a CI smoke run so the script never rots. Its numbers say nothing about a
GPU.

    python benchmarks/gpu_check.py                       # on the GPU machine
    python benchmarks/gpu_check.py --simulate --out /tmp/check.json --no-plot
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import dynamics  # noqa: E402
from benchmarks import gpu as gpu_bench  # noqa: E402

HARDWARE_TESTS = "tests/dynamics/gpu_backend/test_gpu_hardware.py"
TABLE_BATCHES = (1, 16, 64, 256, 1024)
LOOP_HORIZONS = (32, 256)
#: the whole check's time budget on a fresh machine [s]
BUDGET_S = 360.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--simulate", action="store_true", help="tiny sizes in Numba's CUDA simulator (CI smoke run)")
    p.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="JSON file (default gpu_check.json)")
    p.add_argument("--plot", type=Path, default=None, help="plot file (default: the JSON's name with .png)")
    p.add_argument("--no-plot", action="store_true", help="write no plot")
    p.add_argument("--skip", default="", help="comma-separated steps to skip: compile, tests, table, loop")
    p.add_argument("--duration", type=float, default=None, help="closed-loop simulated seconds (default 2; "
                                                                  "0.02 with --simulate)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per table entry (default 20)")
    p.add_argument("--tests-timeout", type=float, default=None,
                   help="seconds for the hardware tests (default: what is left of the 6-minute budget, >= 120)")
    return p


# ------------------------------------------------------------------ 1. environment
def _distribution_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def environment(simulate: bool) -> dict[str, Any]:
    """What this machine has, and ``missing``: what a full check needs and does not find here."""
    import numba
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                           "cpu_count": os.cpu_count(), "numpy": np.__version__, "numba": numba.__version__,
                           "numba_cuda": _distribution_version("numba-cuda"),
                           "numba_threads": numba.config.NUMBA_NUM_THREADS}
    missing: list[str] = []
    try:
        import mujoco
        env["mujoco"] = mujoco.__version__
    except Exception as e:  # absent or broken: the closed loop cannot run
        env["mujoco"] = None
        missing.append(f"MuJoCo ({type(e).__name__}: {e}): the closed loop needs it; pip install mujoco")
    try:
        import cupy
        env["cupy"] = cupy.__version__
        rt = cupy.cuda.runtime
        dev = rt.getDevice()
        props = rt.getDeviceProperties(dev)
        name = props["name"]
        env["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        env["compute_capability"] = f"{props['major']}.{props['minor']}"
        env["cuda_driver"] = rt.driverGetVersion()
        env["cuda_runtime"] = rt.runtimeGetVersion()
    except Exception as e:  # no CuPy or no device: the gpu backend's own check below says which, and the fix
        env.setdefault("cupy", None)
        env["gpu"] = None
        env["gpu_error"] = f"{type(e).__name__}: {e}"
    from dynamics.gpu_backend.runtime import check_numpy_support
    try:
        check_numpy_support()
        env["numpy_numba_cuda_compatible"] = True
    except dynamics.BackendUnavailableError as e:
        env["numpy_numba_cuda_compatible"] = False
        missing.append(str(e))
    try:
        dynamics.get_backend("gpu", simulate=simulate)
        env["gpu_backend"] = "available" + (" (simulator)" if simulate else "")
    except dynamics.BackendUnavailableError as e:
        env["gpu_backend"] = f"unavailable: {e}"
        if not any(str(e) in m for m in missing):
            missing.append(str(e))
    env["missing"] = missing
    return env


# ------------------------------------------------------------------ 2. hardware tests
def _progress_counts(text: str) -> dict[str, int]:
    """Outcome counts from pytest's ``-q`` progress lines (``..s.F  [ 40%]``), for a run cut short."""
    names = {".": "passed", "F": "failed", "s": "skipped", "E": "errors", "x": "xfailed", "X": "xpassed"}
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([.FsExX]+)(\s+\[\s*\d+%\])?", line.strip())
        if m:
            for ch in m.group(1):
                counts[names[ch]] = counts.get(names[ch], 0) + 1
    return counts


def hardware_tests(timeout_s: float) -> dict[str, Any]:
    """Run the hardware tests in a child process for at most ``timeout_s``; counts from pytest's
    summary line, or from its progress lines when the time ran out."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rs", HARDWARE_TESTS]
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return {"command": " ".join(cmd), "timed_out": True, "timeout_s": timeout_s,
                "seconds": time.perf_counter() - t0, "counts_before_timeout": _progress_counts(out),
                "tail": out[-2000:]}
    out = r.stdout + r.stderr
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", out)}
    return {"command": " ".join(cmd), "returncode": r.returncode, "counts": counts,
            "seconds": time.perf_counter() - t0, "tail": out[-2000:]}


# ------------------------------------------------------------------ 2. compile ahead
def compile_ahead(robots: tuple[str, ...] = ("iiwa", "hyq", "atlas"), dtypes: tuple[str, ...] = ("float64", "float32"),
                  timeout_s: float = 240.0) -> dict[str, Any]:
    """Compile every kernel for each (robot, dtype) into the on-disk PTX store, one process per pair, all
    in parallel (``python -m dynamics.gpu_backend.ptx --cache``): the later steps load their kernels
    from the store. The wall time is the cold first-use compile of the bundled robots."""
    import cupy

    from dynamics.gpu_backend.runtime import PtxStore
    cc = cupy.cuda.Device().compute_capability
    cc = f"{cc[:-1]}.{cc[-1]}"
    root = str(PtxStore().root)
    jobs = [(r, d) for r in robots for d in dtypes]
    t0 = time.perf_counter()
    procs = [(r, d, subprocess.Popen([sys.executable, "-m", "dynamics.gpu_backend.ptx", "--robot", r, "--dtype", d,
                                       "--cc", cc, "--cache", root], cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)) for r, d in jobs]
    out: dict[str, Any] = {"store": root, "compute_capability": cc, "jobs": {}}
    for r, d, p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, timeout_s - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
        out["jobs"][f"{r}/{d}"] = {"returncode": p.returncode, "tail": (text or "")[-600:]}
    out["seconds"] = time.perf_counter() - t0
    out["ok"] = all(j["returncode"] == 0 for j in out["jobs"].values())
    # a later process: the first aba_derivatives call with the kernels in the store
    code = ("import time, numpy as np, dynamics; m = dynamics.load_model('iiwa'); be = dynamics.get_backend('gpu'); "
            "q = m.random_configuration(np.random.default_rng(0), size=(64,)); z = np.zeros((64, m.nv)); "
            "t = time.perf_counter(); be.aba_derivatives(m, q, z, z); print(time.perf_counter() - t)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    try:
        out["later_process_first_call_s"] = float(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out["later_process_first_call_s"] = None
        out["later_process_error"] = r.stderr[-600:]
    return out


# ------------------------------------------------------------------ 3. table
def table(simulate: bool, repeats: int | None) -> dict[str, Any]:
    """``benchmarks/gpu.py`` at the check's sizes (the numba anchor on all cores of this host)."""
    argv = ["--n", ",".join(map(str, (1,) if simulate else TABLE_BATCHES))]
    if simulate:
        argv += ["--simulate", "--robots", "iiwa", "--partitions", "completely_fused"]
    if repeats is not None:
        argv += ["--repeats", str(repeats)]
    t0 = time.perf_counter()
    res = gpu_bench.run(gpu_bench.build_parser().parse_args(argv))
    res["seconds"] = time.perf_counter() - t0
    for e in res["entries"]:
        best = min(e["partitions"], key=lambda p: e["partitions"][p]["end_to_end_s"])
        e["best_partition"] = best
        e["ratio_best_vs_numba"] = e["partitions"][best]["end_to_end_s"] / e["numba_s"]
    return res


# ------------------------------------------------------------------ 4. closed loop
def closed_loop(backend: dynamics.Backend, horizon: int, duration: float, initial_iterations: int) -> dict[str, Any]:
    """``iiwa-reach``, iLQR, one iteration per update, lockstep, on ``backend``."""
    import tasks
    from mpc import MPC
    from sim import report
    from sim.runner import simulate
    task = tasks.get_task("iiwa-reach")
    dt = 0.01
    ctrl = MPC(task, solver="ilqr", backend=backend, horizon=horizon, dt=dt, initial_iterations=initial_iterations)
    warm = ctrl.warmup()
    h = float(task.model.mj_model.opt.timestep)
    r = simulate(task.model, ctrl, task.initial_state(), duration, mode="lockstep", update_every=max(1, round(dt / h)))
    tm = report.summarize(r, task, config={}, warmup_s=warm)["timing"]
    med = tm["update_latency_ms"]["median"]
    return {"control_loop_hz": tm["control_loop_hz"], "max_update_rate_hz": 1e3 / med if med else None,
            "update_latency_ms": tm["update_latency_ms"], "stage_ms": tm["stage_ms"], "updates": tm["updates"],
            "warmup_s": warm}


def loops(simulate: bool, duration: float) -> dict[str, Any]:
    """The closed loop on the gpu backend and on numba at each horizon."""
    horizons = (2,) if simulate else LOOP_HORIZONS
    out: dict[str, Any] = {"task": "iiwa-reach", "solver": "ilqr", "mode": "lockstep", "duration_s": duration,
                           "rows": []}
    gpu = dynamics.get_backend("gpu", simulate=simulate)
    cpu = gpu_bench.all_cores_numba()
    for N in horizons:
        row: dict[str, Any] = {"horizon": N}
        for name, be in (("gpu", gpu), ("numba", cpu)):
            t0 = time.perf_counter()
            row[name] = closed_loop(be, N, duration, 1 if simulate else 10)
            row[name]["seconds"] = time.perf_counter() - t0
        row["ratio_gpu_vs_numba_hz"] = row["gpu"]["control_loop_hz"] / row["numba"]["control_loop_hz"]
        out["rows"].append(row)
        print(f"closed loop N={N}: gpu {row['gpu']['control_loop_hz']:.1f} Hz, numba "
              f"{row['numba']['control_loop_hz']:.1f} Hz", file=sys.stderr)
    return out


# ------------------------------------------------------------------ report
def run(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    skip = {s for s in args.skip.split(",") if s}
    if args.simulate:
        skip.add("compile")   # PTX needs NVVM, not the simulator
    bad = skip - {"tests", "table", "loop", "compile"}
    if bad:
        raise SystemExit(f"--skip: unknown step(s) {', '.join(sorted(bad))}; use compile, tests, table, loop")
    result: dict[str, Any] = {"check": "gpu backend hardware check", "simulated": args.simulate,
                              "note": ("SIMULATOR RUN: kernels in Numba's CUDA simulator at tiny sizes; no figure "
                                       "here says anything about a GPU") if args.simulate else "real GPU run",
                              "environment": environment(args.simulate)}
    env = result["environment"]
    print(f"environment: gpu {env.get('gpu')}, numpy {env['numpy']}, numba-cuda {env['numba_cuda']}, cupy "
          f"{env.get('cupy')}, mujoco {env.get('mujoco')}; missing: {env['missing'] or 'nothing'}", file=sys.stderr)
    usable = env["gpu_backend"].startswith("available")
    for step, needs, fn in (("compile", [], compile_ahead),
                            ("table", [], lambda: table(args.simulate, args.repeats)),
                            ("loop", ["mujoco"], lambda: loops(args.simulate, args.duration or
                                                                (0.02 if args.simulate else 2.0)))):
        if step in skip:
            continue
        lacking = [n for n in needs if env.get(n) is None]
        if not usable or lacking:
            why = env["gpu_backend"] if not usable else f"{', '.join(lacking)} not installed"
            result[step] = {"not_run": why}
            print(f"{step}: not run ({why})", file=sys.stderr)
            continue
        try:
            result[step] = fn()
        except Exception as e:  # report and go on: the other steps still say something
            result[step] = {"failed": f"{type(e).__name__}: {e}"}
            print(f"{step}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    if "tests" not in skip:
        # last: compiling every kernel the 22 tests launch took about 6 minutes cold on the issue's
        # machine, so they get what is left of the budget (and at least two minutes)
        left = args.tests_timeout or max(120.0, BUDGET_S - (time.perf_counter() - t0))
        result["hardware_tests"] = hardware_tests(left)
        ht = result["hardware_tests"]
        print(f"hardware tests: {ht.get('counts') or ht.get('counts_before_timeout')}"
              f"{' (timed out)' if ht.get('timed_out') else ''}", file=sys.stderr)
    result["seconds"] = time.perf_counter() - t0
    return result


def format_table(result: dict[str, Any]) -> str:
    """The issue's table: per robot and N, numba / best gpu partition end to end [µs] and the split."""
    lines = []
    tab = result.get("table", {})
    for e in tab.get("entries", []):
        d = e["partitions"][e["best_partition"]]
        lines.append(f"{e['robot']:6s} N={e['n']:5d}  numba {e['numba_s'] * 1e6:8.0f} us   gpu[{e['best_partition']}] "
                     f"{d['end_to_end_s'] * 1e6:8.0f} us (device {d['compute_s'] * 1e6:.0f}, transfer "
                     f"{(d['h2d_s'] + d['d2h_s']) * 1e6:.0f}, host {d['host_s'] * 1e6:.0f})  "
                     f"ratio {e['ratio_best_vs_numba']:.2f}")
    for row in result.get("loop", {}).get("rows", []):
        lines.append(f"iiwa-reach ilqr N={row['horizon']}: gpu {row['gpu']['control_loop_hz']:.1f} Hz, numba "
                     f"{row['numba']['control_loop_hz']:.1f} Hz")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> bool:
    """The table's stacked bars (:func:`benchmarks.gpu.plot`) plus the closed-loop rates; False when
    matplotlib is missing (the JSON is still written)."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tab = result.get("table", {})
    rows = result.get("loop", {}).get("rows", [])
    if tab.get("entries"):
        gpu_bench.plot(tab, path.with_name(path.stem + "_table" + path.suffix))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    if rows:
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r["gpu"]["control_loop_hz"] for r in rows], 0.4, label="gpu")
        ax.bar(x + 0.2, [r["numba"]["control_loop_hz"] for r in rows], 0.4, label="numba (all cores)")
        ax.set_xticks(x, [f"N={r['horizon']}" for r in rows])
        ax.legend()
    ax.set_ylabel("control loop [Hz]")
    ax.set_title(("SIMULATOR — not GPU performance. " if result["simulated"] else "")
                 + "iiwa-reach, iLQR, lockstep", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = run(args)
    # numpy scalars as Python numbers (no sim import: the check must run without MuJoCo)
    text = json.dumps(result, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    print(format_table(result), file=sys.stderr)
    if not args.no_plot:
        path = args.plot or args.out.with_suffix(".png")
        if not plot(result, path):
            print("plot: matplotlib not installed (pip install \".[plot]\"); the JSON was written", file=sys.stderr)
    if not result["environment"]["gpu_backend"].startswith("available"):
        return 2          # nothing measured: the environment block says what is missing
    failed = [s for s in ("table", "loop") if "failed" in result.get(s, {})]
    tests = result.get("hardware_tests", {})
    return 1 if failed or tests.get("returncode") not in (None, 0, 5) or tests.get("timed_out") \
        or tests.get("counts_before_timeout", {}).get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
