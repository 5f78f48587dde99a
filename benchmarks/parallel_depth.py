"""Parallel-in-depth vs recursive dynamics: time vs number of links and vs number of problems.

Mirrors Yang, Wu & Pan 2016 Figs. 2 and 3 (and Yang, Wu & Pan 2017 Figs. 1–3) on the backends present here:

* ``vs_links``: one problem (one random state) on random serial chains of 2 … 512 links;
* ``vs_problems``: N independent problems (N random states, one batched call) on a 10-link and a
  200-link chain.

Implementations timed (forward dynamics "FD", inverse dynamics "ID"):
numpy recursive ABA / RNEA (the reference backend: a Python loop over links, batched over
problems), numpy JSIIA / ABIA / OEE (CFA) and the numpy scan RNEA (Hillis–Steele and Blelloch)
from :mod:`dynamics.parallel_depth`, and numba's compiled recursive ABA / RNEA (the compiled
reference; parallel over problems with numba's default thread count, and with one thread). Chains are :func:`tests.random_chains.random_chain_model`.

Output: JSON on stdout (and ``--out``), plots ``parallel_depth_links.png`` and
``parallel_depth_problems.png`` in ``--plots`` (needs matplotlib), and a plain summary of which
implementation is fastest where, with the crossover sizes measured in this run. Raw seconds are
only comparable within one run on one machine (see benchmarks/README.md).

    python benchmarks/parallel_depth.py --out benchmarks/results/parallel_depth.json
    python benchmarks/parallel_depth.py --quick          # smoke run, tiny sizes (~10 s)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0], and benchmarks/dynamics.py would shadow the package
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
from benchmarks.machine import load_average, machine_info  # noqa: E402
from benchmarks.output import emit_result  # noqa: E402
from benchmarks.timing import measure  # noqa: E402
from dynamics import parallel_depth as pd  # noqa: E402
from tests.helpers.random_chains import random_chain_model, random_state  # noqa: E402


@dataclass(frozen=True)
class Impl:
    """One timed implementation: ``label`` (plot legend), backend name, kind (``"ID"``/``"FD"``)."""
    label: str
    backend: str
    kind: str
    algorithm: str
    call: Callable[[Any, dynamics.RobotModel, np.ndarray, np.ndarray, np.ndarray], Any]


@dataclass(frozen=True)
class Record:
    """One measurement: median seconds per batched call over ``repeats`` samples of ``loops`` calls."""
    experiment: str
    label: str
    backend: str
    kind: str
    algorithm: str
    nlinks: int
    problems: int
    seconds: float
    seconds_per_problem: float
    repeats: int
    loops: int


def implementations(backends: dict[str, dynamics.Backend]) -> list[Impl]:
    out = [
        Impl("numpy recursive RNEA", "numpy", "ID", "recursive", lambda be, m, q, v, x: be.rnea(m, q, v, x)),
        Impl("numpy scan RNEA", "numpy", "ID", "scan (Hillis-Steele)",
             lambda be, m, q, v, x: pd.rnea(be, m, q, v, x)),
        Impl("numpy scan RNEA (Blelloch)", "numpy", "ID", "scan (Blelloch)",
             lambda be, m, q, v, x: pd.rnea(be, m, q, v, x, scan="blelloch")),
        Impl("numpy recursive ABA", "numpy", "FD", "aba", lambda be, m, q, v, x: be.aba(m, q, v, x)),
        Impl("numpy JSIIA", "numpy", "FD", "jsiia", lambda be, m, q, v, x: be.forward_dynamics(m, q, v, x, method="jsiia")),
        Impl("numpy ABIA", "numpy", "FD", "abia", lambda be, m, q, v, x: be.forward_dynamics(m, q, v, x, method="abia")),
        Impl("numpy OEE (CFA)", "numpy", "FD", "oee", lambda be, m, q, v, x: be.forward_dynamics(m, q, v, x, method="oee")),
    ]
    if "numba" in backends:
        out += [Impl("numba recursive RNEA", "numba", "ID", "recursive", lambda be, m, q, v, x: be.rnea(m, q, v, x)),
                Impl("numba recursive ABA", "numba", "FD", "aba", lambda be, m, q, v, x: be.aba(m, q, v, x))]
    if "numba-1t" in backends:
        out += [Impl("numba recursive RNEA (1 thread)", "numba-1t", "ID", "recursive",
                     lambda be, m, q, v, x: be.rnea(m, q, v, x)),
                Impl("numba recursive ABA (1 thread)", "numba-1t", "FD", "aba", lambda be, m, q, v, x: be.aba(m, q, v, x))]
    return out


def run_series(experiment: str, sizes: list[tuple[int, int]], impls: list[Impl], backends: dict[str, dynamics.Backend],
               seed: int, repeats: int, budget: float, max_call: float, progress: bool) -> list[Record]:
    """Time every implementation on ``(nlinks, problems)`` sizes in increasing order; once a call of
    an implementation takes longer than ``max_call`` seconds, its larger sizes are skipped."""
    records: list[Record] = []
    too_slow: set[str] = set()
    models: dict[int, dynamics.RobotModel] = {}
    for n, N in sizes:
        if n not in models:  # compiled backends compile in measure()'s untimed warm-up call
            models[n] = random_chain_model(seed + n, n)
        m = models[n]
        q, v, x = random_state(m, np.random.default_rng(seed + 7 * n + N), N)
        for im in impls:
            if im.label in too_slow:
                continue
            be = backends[im.backend]
            if progress:
                print(f"[{experiment}] n={n} N={N} {im.label}", file=sys.stderr, flush=True)
            t = measure(lambda: im.call(be, m, q, v, x), repeats=repeats, min_time=0.02, budget=budget)
            records.append(Record(experiment, im.label, im.backend, im.kind, im.algorithm, n, N, t.seconds,
                                  t.seconds / N, t.repeats, t.loops))
            if t.seconds > max_call:
                too_slow.add(im.label)
    return records


# ------------------------------------------------------------------------------ summary
def _series(records: list[Record], label: str, key: str) -> dict[int, float]:
    return {getattr(r, key): r.seconds for r in records if r.label == label}


def crossover(records: list[Record], a: str, b: str, key: str) -> dict[str, Any]:
    """Where ``a`` is faster than ``b`` along ``key`` ("nlinks" or "problems"): the sizes, and the
    smallest size from which ``a`` stays faster (None if it never does at the largest size)."""
    sa, sb = _series(records, a, key), _series(records, b, key)
    common = sorted(set(sa) & set(sb))
    faster = [s for s in common if sa[s] < sb[s]]
    stays = None
    for s in reversed(common):
        if sa[s] < sb[s]:
            stays = s
        else:
            break
    ratio = {s: round(sb[s] / sa[s], 3) for s in common}
    return {"faster": a, "than": b, "along": key, "sizes_where_faster": faster, "faster_from": stays,
            "speedup_by_size": ratio}


def fastest(records: list[Record], kind: str, key: str, backend: str | None = None) -> dict[int, str]:
    """The fastest implementation of ``kind`` at each size (optionally within one backend)."""
    out: dict[int, tuple[float, str]] = {}
    for r in records:
        if r.kind != kind or (backend is not None and r.backend != backend):
            continue
        s = getattr(r, key)
        if s not in out or r.seconds < out[s][0]:
            out[s] = (r.seconds, r.label)
    return {s: out[s][1] for s in sorted(out)}


def _runs(d: dict[int, str]) -> str:
    """``{2: A, 4: A, 8: B}`` -> ``"A for 2–4, B for 8"``."""
    parts: list[list] = []
    for s, lab in d.items():
        if parts and parts[-1][0] == lab:
            parts[-1][2] = s
        else:
            parts.append([lab, s, s])
    return "; ".join(f"{lab} for {lo}" + (f"–{hi}" if hi != lo else "") for lab, lo, hi in parts)


PAIRS = [("numpy scan RNEA", "numpy recursive RNEA"), ("numpy scan RNEA (Blelloch)", "numpy recursive RNEA"),
         ("numpy scan RNEA", "numba recursive RNEA"),
         ("numpy ABIA", "numpy recursive ABA"), ("numpy OEE (CFA)", "numpy recursive ABA"),
         ("numpy JSIIA", "numpy recursive ABA"), ("numpy OEE (CFA)", "numpy ABIA"), ("numpy OEE (CFA)", "numpy JSIIA"),
         ("numpy ABIA", "numpy JSIIA"), ("numpy OEE (CFA)", "numba recursive ABA"), ("numpy ABIA", "numba recursive ABA"),
         ("numpy OEE (CFA)", "numba recursive ABA (1 thread)"), ("numpy ABIA", "numba recursive ABA (1 thread)"),
         ("numpy scan RNEA", "numba recursive RNEA (1 thread)")]


def summarize(links: list[Record], problems: list[Record]) -> tuple[list[str], list[dict[str, Any]]]:
    lines: list[str] = []
    cross: list[dict[str, Any]] = []
    for kind in ("FD", "ID"):
        lines.append(f"{kind} vs links (1 problem), fastest overall: {_runs(fastest(links, kind, 'nlinks'))}.")
        lines.append(f"{kind} vs links (1 problem), fastest numpy: {_runs(fastest(links, kind, 'nlinks', 'numpy'))}.")
        for n in sorted({r.nlinks for r in problems}):
            sub = [r for r in problems if r.nlinks == n]
            lines.append(f"{kind} vs problems, {n}-link chain, fastest overall: {_runs(fastest(sub, kind, 'problems'))}.")
            lines.append(f"{kind} vs problems, {n}-link chain, fastest numpy: "
                         f"{_runs(fastest(sub, kind, 'problems', 'numpy'))}.")
    for a, b in PAIRS:
        c = crossover(links, a, b, "nlinks")
        if c["speedup_by_size"]:
            cross.append({"experiment": "vs_links", **c})
            lines.append(f"vs links: {a} faster than {b} " + (f"from n = {c['faster_from']} links up to the largest "
                         f"measured" if c["faster_from"] is not None else "not at the largest size measured")
                         + (f"; faster at n = {c['sizes_where_faster']}" if c["sizes_where_faster"] else "; never faster")
                         + ".")
        for n in sorted({r.nlinks for r in problems}):
            sub = [r for r in problems if r.nlinks == n]
            c = crossover(sub, a, b, "problems")
            if c["speedup_by_size"]:
                cross.append({"experiment": f"vs_problems_{n}_links", **c})
    return lines, cross


# ------------------------------------------------------------------------------ plots
def plot(links: list[Record], problems: list[Record], folder: Path) -> list[str]:
    """Yang, Wu & Pan 2016 Fig. 2 (time vs links) and Fig. 3 (time vs problems, 10 and 200 links) analogues."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plots (pip install matplotlib)", file=sys.stderr)
        return []
    folder.mkdir(parents=True, exist_ok=True)
    style = {"recursive": "-", "aba": "-"}

    def panel(ax, recs, key, kind, xlabel, title):
        for lab in dict.fromkeys(r.label for r in recs if r.kind == kind):
            pts = sorted((getattr(r, key), r.seconds * 1e3) for r in recs if r.label == lab)
            algo = next(r.algorithm for r in recs if r.label == lab)
            ax.loglog(*zip(*pts), style.get(algo, "--"), marker="o", ms=3, label=lab)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("computation time per call (ms)")
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.legend(fontsize=7)

    files = []

    def save(fig, name):
        fig.tight_layout()
        p = folder / name
        fig.savefig(p, dpi=120)
        plt.close(fig)
        files.append(str(p))

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, kind, title in zip(axes, ("FD", "ID"), ("forward dynamics", "inverse dynamics")):
        panel(ax, links, "nlinks", kind, "number of links (one problem)",
              f"{title} vs link number (cf. Yang, Wu & Pan 2016 Fig. 2)")
    save(fig, "parallel_depth_links.png")
    ns = sorted({r.nlinks for r in problems})
    fig, axes = plt.subplots(2, max(1, len(ns)), figsize=(6 * max(1, len(ns)), 8), squeeze=False)
    for j, n in enumerate(ns):
        sub = [r for r in problems if r.nlinks == n]
        for i, (kind, title) in enumerate((("FD", "forward dynamics"), ("ID", "inverse dynamics"))):
            panel(axes[i, j], sub, "problems", kind, "number of independent problems (one batched call)",
                  f"{title}, {n}-link chain (cf. Yang, Wu & Pan 2016 Fig. 3)")
    save(fig, "parallel_depth_problems.png")
    return files


# ------------------------------------------------------------------------------ main
def _ints(text: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", type=_ints, default=[2, 4, 8, 16, 32, 64, 128, 256, 512],
                   help="chain lengths for the one-problem series (default 2,4,…,512)")
    p.add_argument("--problem-links", type=_ints, default=[10, 200],
                   help="chain lengths for the many-problems series (default 10,200)")
    p.add_argument("--problems", type=_ints, default=[1, 10, 100, 1000],
                   help="numbers of independent problems (default 1,10,100,1000)")
    p.add_argument("--max-problem-elements", type=int, default=20000,
                   help="skip many-problem sizes with links × problems above this (default 20000, i.e. "
                        "1000 problems at 10 links, 100 at 200 links)")
    p.add_argument("--repeats", type=int, default=5, help="timing samples per point (median reported)")
    p.add_argument("--budget", type=float, default=3.0, help="seconds of timed samples per point at most")
    p.add_argument("--max-call", type=float, default=2.0,
                   help="once one call of an implementation exceeds this [s], skip its larger sizes")
    p.add_argument("--backends", default=None, help="comma-separated backends (default: numpy, and numba if present)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, one repeat")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    p.add_argument("--plots", type=Path, default=_HERE / "results", help="folder for the PNG plots")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--progress", action="store_true", help="print each point on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.links, args.problem_links, args.problems, args.repeats, args.budget = [2, 4, 8], [3, 5], [1, 4], 1, 0.2
    wanted = args.backends.split(",") if args.backends else ["numpy", "numba"]
    avail = dynamics.available_backends()
    backends: dict[str, dynamics.Backend] = {}
    for name in wanted:
        if name not in avail:
            print(f"unknown backend '{name}'; known: {', '.join(avail)}", file=sys.stderr)
            return 2
        if avail[name][0]:
            backends[name] = dynamics.get_backend(name)
        elif args.backends:
            print(f"backend '{name}' is not available: {avail[name][1]}", file=sys.stderr)
            return 2
    if "numba" in backends:  # also single-threaded: no thread-pool wake-up on a busy machine
        backends["numba-1t"] = dynamics.get_backend("numba", threads=1)
    if "numpy" not in backends:
        print("the numpy backend is required (the parallel-depth methods run on it)", file=sys.stderr)
        return 2
    impls = implementations(backends)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    load0 = load_average()
    links = run_series("vs_links", [(n, 1) for n in sorted(args.links)], impls, backends, args.seed, args.repeats,
                       args.budget, args.max_call, args.progress)
    sizes = [(n, N) for n in sorted(args.problem_links) for N in sorted(args.problems)
             if n * N <= args.max_problem_elements or N == min(args.problems)]
    problems = []
    for n in sorted(args.problem_links):
        problems += run_series("vs_problems", [s for s in sizes if s[0] == n], impls, backends, args.seed,
                               args.repeats, args.budget, args.max_call, args.progress)
    lines, cross = summarize(links, problems)
    files = [] if args.no_plots else plot(links, problems, args.plots)
    data = {"benchmark": "parallel_depth", "started_utc": started, "machine": machine_info(),
            "load_average": {"start": load0, "end": load_average()},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "vs_links": [asdict(r) for r in links], "vs_problems": [asdict(r) for r in problems],
            "crossovers": cross, "summary": lines, "plots": files}
    emit_result(data, args.out, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
