"""Benchmark of the batched rigid-body dynamics functions of every available backend.

For each robot and batch size N it times each backend function on a batch of N random states,
and, in the same run, Pinocchio called in a Python loop over the same N states (the *anchor*).
Speed is quoted only as ``ratio = ours / pinocchio_loop`` (below 1: we are faster); raw seconds
are kept in the JSON for completeness. Second-order functions are also compared with the
numerical provider ``dynamics.second_order_numerical.aba_second_derivatives_numerical``
(central differences, and complex step for numpy), as Singh, Russell & Wensing 2022's Finite-Diff-2 baseline.

Run ``python benchmarks/dynamics.py --help`` for the options; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0], and this very file would shadow the package
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
# the kernels are timed on a fixed thread count (every worker; MPC_ACCEL_THREADS=1: one), not on the count the
# default policy would pick from the machine's load (dynamics.worker_threads); a user's setting wins
os.environ.setdefault("MPC_ACCEL_THREADS", "all")
from benchmarks.machine import load_average, machine_info, pinocchio_anchor  # noqa: E402
from benchmarks.output import emit_result  # noqa: E402
from benchmarks.timing import Timing, measure  # noqa: E402
from dynamics.second_order_numerical import aba_second_derivatives_numerical  # noqa: E402

FIRST_ORDER = ("rnea", "crba", "minv", "aba", "rnea_derivatives", "aba_derivatives")
SECOND_ORDER = ("rnea_second_derivatives", "aba_second_derivatives")
ALL_FUNCTIONS = FIRST_ORDER + SECOND_ORDER
DEFAULT_ROBOTS = ("iiwa", "hyq", "atlas")
DEFAULT_BATCH = (1, 16, 64, 256)
DEFAULT_BATCH_SECOND = (1, 16, 64)
ANCHOR = "pinocchio-loop"
FD_STEP = 1e-5  # central-difference step of the Pinocchio second-order anchor (as the project's FD provider)

# What the anchor runs for each function, once per state in a Python loop.
ANCHOR_CALLS = {
    "rnea": "pin.rnea(model, data, q, v, a)",
    "crba": "pin.crba(model, data, q)",
    "minv": "pin.computeMinverse(model, data, q)",
    "aba": "pin.aba(model, data, q, v, tau)",
    "rnea_derivatives": "pin.computeRNEADerivatives(model, data, q, v, a)",
    "aba_derivatives": "pin.computeABADerivatives(model, data, q, v, tau)",
    # Pinocchio has no Python binding for second-order derivatives: the anchor is the same
    # Finite-Diff-2 scheme as the project's numerical provider, on Pinocchio's first-order ones.
    "rnea_second_derivatives": f"central differences (step {FD_STEP}) of pin.computeRNEADerivatives along "
                               "q (pin.integrate) and v: 4*nv calls per state",
    "aba_second_derivatives": f"central differences (step {FD_STEP}) of pin.computeABADerivatives along "
                              "q (pin.integrate), v and tau: 6*nv calls per state",
}


# ------------------------------------------------------------------------------ arguments
def _csv(kind: type, what: str) -> Callable[[str], list]:
    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{what}: give a comma-separated list, e.g. "
                                             f"{'1,16' if kind is int else 'iiwa,hyq'}")
        out = []
        for t in items:
            try:
                x = kind(t)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{what}: '{t}' is not a valid {kind.__name__}") from None
            if kind is int and x < 1:
                raise argparse.ArgumentTypeError(f"{what}: batch sizes must be >= 1, got {x}")
            out.append(x)
        return out
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/dynamics.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Time the batched dynamics functions of every available backend (dynamics.available_backends())\n"
            "on batches of N random states, against Pinocchio called in a Python loop over the same states.\n\n"
            "Functions: " + ", ".join(FIRST_ORDER) + ";\n"
            "  second order (timed only where backend.supports(name)): " + ", ".join(SECOND_ORDER) + ".\n"
            "With aba_second_derivatives selected, the numerical provider\n"
            "  dynamics.second_order_numerical.aba_second_derivatives_numerical is timed too, per backend with\n"
            "  method='central' and with method='complex' (numpy only), and each analytical entry reports its\n"
            "  speedup over them (speedup_vs_central, speedup_vs_complex = baseline seconds / analytical seconds).\n\n"
            "Each backend's warmup(model) runs before timing. Each entry: one warm-up call (on the batch; on its\n"
            "first state only when the previous N predicts a call longer than --budget), calls shorter than\n"
            "--min-time are repeated in an inner loop (auto-ranged), then the median of --repeats samples;\n"
            "slow calls get fewer samples (at least one) so that an entry's samples last about --budget seconds.\n\n"
            "Anchor: when Pinocchio (`pin`) is importable, the same functions are timed with Pinocchio in a\n"
            "Python loop over the N states (model from pin.buildModelFromMJCF(model.path); quaternions\n"
            "converted w,x,y,z -> x,y,z,w beforehand, outside the timing). Second-order anchors are central\n"
            "differences of Pinocchio's first-order derivatives (Pinocchio has no Python binding for them).\n"
            "Every entry carries ratio_vs_pinocchio_loop = seconds / anchor seconds (< 1: faster than the\n"
            "anchor). Quote speed only as these ratios. The 'agreement' section holds, per robot, backend and\n"
            "function, the max |ours - Pinocchio| on one state: a check that both time the same quantity.\n\n"
            "Output: JSON on stdout (and in --out FILE); progress on stderr; --table adds a Markdown table\n"
            "on stderr. Defaults run in under ~3 minutes on 2 cores with the numpy backend."),
    )
    p.add_argument("--robots", type=_csv(str, "--robots"), default=None,
                   help="comma-separated bundled robot names or MJCF paths (default: iiwa,hyq,atlas)")
    p.add_argument("--batch", type=_csv(int, "--batch"), default=None,
                   help="batch sizes N for first-order functions (default: 1,16,64,256)")
    p.add_argument("--batch-second-order", type=_csv(int, "--batch-second-order"), default=None,
                   help="batch sizes N for second-order functions and their numerical baselines "
                        "(default: 1,16,64)")
    p.add_argument("--backends", type=_csv(str, "--backends"), default=None,
                   help="comma-separated backend names (default: every backend available on this machine; "
                        "naming an unavailable one is an error that says why)")
    p.add_argument("--functions", type=_csv(str, "--functions"), default=None,
                   help="comma-separated functions to time (default: all of " + ",".join(ALL_FUNCTIONS) + ")")
    p.add_argument("--repeats", type=int, default=None,
                   help="samples per entry; the median is reported (default 5)")
    p.add_argument("--min-time", type=float, default=0.02,
                   help="minimum duration of one sample [s]; faster calls are looped (default 0.02)")
    p.add_argument("--budget", type=float, default=1.0,
                   help="about how long an entry's samples may take together [s], warm-up excluded; "
                        "slow calls get fewer repeats, never fewer than one (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random states (default 0)")
    p.add_argument("--no-pinocchio", action="store_true", help="skip the Pinocchio anchor even if pin is installed")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: iiwa only, N in {1,16} (both orders), 1 repeat; explicit options still win")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    p.add_argument("--table", action="store_true", help="print a Markdown table of the results on stderr")
    p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    return p


@dataclass
class Settings:
    robots: list[str]
    batch: list[int]
    batch_second_order: list[int]
    backends: list[str]
    functions: list[str]
    repeats: int
    min_time: float
    budget: float
    seed: int
    pinocchio: bool
    quick: bool
    skipped_backends: dict[str, str] = field(default_factory=dict)


def resolve_settings(args: argparse.Namespace) -> Settings:
    """Fill defaults (``--quick`` aware) and validate names early, with messages that name the fix."""
    quick = args.quick
    robots = args.robots or (["iiwa"] if quick else list(DEFAULT_ROBOTS))
    batch = args.batch or ([1, 16] if quick else list(DEFAULT_BATCH))
    batch2 = args.batch_second_order or ([1, 16] if quick else list(DEFAULT_BATCH_SECOND))
    repeats = args.repeats if args.repeats is not None else (1 if quick else 5)
    if repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {repeats}")
    if not (args.min_time >= 0 and np.isfinite(args.min_time)):
        raise SystemExit(f"--min-time must be a finite number >= 0 seconds, got {args.min_time}")
    if not (args.budget > 0 and np.isfinite(args.budget)):
        raise SystemExit(f"--budget must be a finite number > 0 seconds, got {args.budget}")
    functions = args.functions or list(ALL_FUNCTIONS)
    unknown = [f for f in functions if f not in ALL_FUNCTIONS]
    if unknown:
        raise SystemExit(f"--functions: unknown {', '.join(unknown)}; choose from {', '.join(ALL_FUNCTIONS)}")
    for r in robots:
        if r not in dynamics.BUNDLED_ROBOTS and not Path(r).exists():
            raise SystemExit(f"--robots: '{r}' is neither a bundled robot ({', '.join(dynamics.BUNDLED_ROBOTS)}) "
                             f"nor an existing MJCF file")
    avail = dynamics.available_backends()
    skipped = {n: why for n, (ok, why) in avail.items() if not ok}
    if args.backends:
        for b in args.backends:
            if b not in avail:
                raise SystemExit(f"--backends: unknown backend '{b}'; known: {', '.join(avail)}")
            if not avail[b][0]:
                raise SystemExit(f"--backends: backend '{b}' is not available here: {avail[b][1]}")
        backends = list(args.backends)
    else:
        backends = [n for n, (ok, _) in avail.items() if ok]
    pin_ok = not args.no_pinocchio and _import_pin() is not None
    return Settings(robots=robots, batch=batch, batch_second_order=batch2, backends=backends,
                    functions=functions, repeats=repeats, min_time=args.min_time, budget=args.budget,
                    seed=args.seed, pinocchio=pin_ok, quick=quick, skipped_backends=skipped)


def _import_pin():
    try:
        import pinocchio as pin
        return pin
    except ImportError:
        return None


# ------------------------------------------------------------------------------ states
@dataclass(frozen=True)
class States:
    """N random states: q (N, nq) MuJoCo qpos, v (N, nv), u (N, nv) used as a (rnea) and tau (aba)."""

    q: np.ndarray
    v: np.ndarray
    u: np.ndarray


def make_states(model: dynamics.RobotModel, n: int, seed: int, robot_index: int) -> States:
    rng = np.random.default_rng([seed, robot_index, n])
    q = model.random_configuration(rng, size=n)
    return States(q=q, v=rng.normal(size=(n, model.nv)), u=rng.normal(size=(n, model.nv)))


def pin_q(model: dynamics.RobotModel, q: np.ndarray) -> np.ndarray:
    """MuJoCo qpos (..., nq) -> Pinocchio q: quaternions (w, x, y, z) -> (x, y, z, w)."""
    out = np.array(q, dtype=float, copy=True)
    for qa, _ in model.free_adr:
        out[..., qa + 3:qa + 7] = q[..., [qa + 4, qa + 5, qa + 6, qa + 3]]
    for qa, _ in model.ball_adr:
        out[..., qa:qa + 4] = q[..., [qa + 1, qa + 2, qa + 3, qa]]
    return out


# ------------------------------------------------------------------------------ callables
def ours_call(backend: dynamics.Backend, model, function: str, s: States) -> Callable[[], Any]:
    """The backend call of ``function`` on the whole batch."""
    f = getattr(backend, function)
    if function in ("crba", "minv"):
        return lambda: f(model, s.q)
    return lambda: f(model, s.q, s.v, s.u)


def numerical_call(backend: dynamics.Backend, model, method: str, s: States) -> Callable[[], Any]:
    """The numerical second-order provider (``method`` "central" or "complex") on the whole batch."""
    return lambda: aba_second_derivatives_numerical(backend, model, s.q, s.v, s.u, method=method)


class PinAnchor:
    """Pinocchio in a Python loop over the states of a batch (model built from the same MJCF)."""

    def __init__(self, pin, model: dynamics.RobotModel):
        if model.path is None:
            raise ValueError(f"model '{model.name}' has no MJCF path; Pinocchio needs the file")
        self.pin = pin
        self.pm = pin.buildModelFromMJCF(model.path)
        self.pd = self.pm.createData()
        if (self.pm.nq, self.pm.nv) != (model.nq, model.nv):
            raise ValueError(f"Pinocchio model of '{model.name}' has nq={self.pm.nq}, nv={self.pm.nv}; "
                             f"ours has nq={model.nq}, nv={model.nv}")
        self.model = model

    def rows(self, s: States) -> tuple[list, list, list]:
        qp = pin_q(self.model, s.q)
        return ([np.ascontiguousarray(x) for x in qp], [np.ascontiguousarray(x) for x in s.v],
                [np.ascontiguousarray(x) for x in s.u])

    def call(self, function: str, s: States) -> Callable[[], list]:
        """A callable running the anchor over all states of ``s``; returns the per-state outputs."""
        pin, pm, pd = self.pin, self.pm, self.pd
        qs, vs, us = self.rows(s)
        n = len(qs)
        simple = {"rnea": pin.rnea, "aba": pin.aba, "rnea_derivatives": pin.computeRNEADerivatives,
                  "aba_derivatives": pin.computeABADerivatives}
        if function in simple:
            f = simple[function]
            return lambda: [f(pm, pd, qs[i], vs[i], us[i]) for i in range(n)]
        if function == "crba":
            return lambda: [pin.crba(pm, pd, qs[i]) for i in range(n)]
        if function == "minv":
            return lambda: [pin.computeMinverse(pm, pd, qs[i]) for i in range(n)]
        if function == "aba_second_derivatives":
            return lambda: [self._aba_second_fd(qs[i], vs[i], us[i]) for i in range(n)]
        if function == "rnea_second_derivatives":
            return lambda: [self._rnea_second_fd(qs[i], vs[i], us[i]) for i in range(n)]
        raise ValueError(f"no Pinocchio anchor for '{function}'")

    def _fd(self, f, q, v, u, wrt: str, outputs: tuple[int, ...]) -> list[np.ndarray]:
        """Central differences of the first-order matrices ``f(q, v, u)[outputs]`` along every
        tangent direction of ``wrt``; returns, per output, the tensor [i, j, k] (k: direction)."""
        pin, pm, pd, nv, h = self.pin, self.pm, self.pd, self.model.nv, FD_STEP
        cols = [np.empty((nv, nv, nv)) for _ in outputs]
        e = np.zeros(nv)
        for k in range(nv):
            res = []
            for sgn in (h, -h):
                e[k] = sgn
                if wrt == "q":
                    r = f(pm, pd, pin.integrate(pm, q, e), v, u)
                elif wrt == "v":
                    r = f(pm, pd, q, v + e, u)
                else:
                    r = f(pm, pd, q, v, u + e)
                res.append([np.array(r[o]) for o in outputs])
                e[k] = 0.0
            for c, (p, m) in zip(cols, zip(*res)):
                c[:, :, k] = (p - m) / (2 * h)
        return cols

    def _aba_second_fd(self, q, v, tau):
        """(d2a_dq2, d2a_dv2, d2a_dqdv, d2a_dqdtau) as in aba_second_derivatives_numerical."""
        f = self.pin.computeABADerivatives
        d2a_dq2, = self._fd(f, q, v, tau, "q", (0,))
        d2a_dqdv, d2a_dv2 = self._fd(f, q, v, tau, "v", (0, 1))
        d2a_dqdtau, = self._fd(f, q, v, tau, "tau", (0,))
        return d2a_dq2, d2a_dv2, d2a_dqdv, d2a_dqdtau

    def _rnea_second_fd(self, q, v, a):
        """(d2tau_dq2, d2tau_dv2, d2tau_dqdv, dM_dq) with the same index convention."""
        f = self.pin.computeRNEADerivatives
        d2tau_dq2, dM_dq = self._fd(f, q, v, a, "q", (0, 2))
        d2tau_dqdv, d2tau_dv2 = self._fd(f, q, v, a, "v", (0, 1))
        return d2tau_dq2, d2tau_dv2, d2tau_dqdv, dM_dq


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def agreement(ours_out, pin_out, function: str) -> dict[str, float]:
    """max |ours - Pinocchio| over the outputs of one state, and max |Pinocchio| for scale.
    Pinocchio's RNEA derivatives also return dtau_da (= M), which ours leaves to crba."""
    o, p = _as_tuple(ours_out), _as_tuple(pin_out)
    p = p[:len(o)]
    diff = max(float(np.max(np.abs(np.asarray(a).reshape(np.shape(b)) - np.asarray(b)))) for a, b in zip(o, p))
    scale = max(float(np.max(np.abs(np.asarray(b)))) for b in p)
    return {"max_abs_diff": diff, "max_abs_pinocchio": scale}


# ------------------------------------------------------------------------------ plan and run
@dataclass(frozen=True)
class Job:
    robot: str
    n: int
    function: str
    backend: str            # a backend name, or ANCHOR
    variant: str            # "analytical", "numerical-central", "numerical-complex"


def plan(st: Settings) -> list[Job]:
    """Every measurement the run will make, in order (for the progress bar)."""
    jobs: list[Job] = []
    backends = {b: dynamics.get_backend(b) for b in st.backends}
    for robot in st.robots:
        sizes = sorted(set(st.batch) | set(st.batch_second_order))
        for n in sizes:
            for fn in st.functions:
                second = fn in SECOND_ORDER
                if n not in (st.batch_second_order if second else st.batch):
                    continue
                for b, be in backends.items():
                    if be.supports(fn):
                        jobs.append(Job(robot, n, fn, b, "analytical"))
                    if fn == "aba_second_derivatives":
                        jobs.append(Job(robot, n, fn, b, "numerical-central"))
                        if b == "numpy":
                            jobs.append(Job(robot, n, fn, b, "numerical-complex"))
                if st.pinocchio:
                    # the second-order anchor is only worth timing if something is compared with it
                    if not second or any(j.robot == robot and j.n == n and j.function == fn for j in jobs):
                        jobs.append(Job(robot, n, fn, ANCHOR, "numerical-central" if second else "analytical"))
    return jobs


def job_call(job: "Job", backend: dynamics.Backend, model, s: States) -> Callable[[], Any]:
    """The callable a (non-anchor) job times."""
    if job.variant == "analytical":
        return ours_call(backend, model, job.function, s)
    return numerical_call(backend, model, job.variant.removeprefix("numerical-"), s)


class _Progress:
    """tqdm on stderr if installed (it is optional), else one line per job."""

    def __init__(self, total: int, enabled: bool):
        self.enabled, self.bar, self.i, self.total = enabled, None, 0, total
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, file=sys.stderr, unit="entry", dynamic_ncols=True)
            except ImportError:
                self.bar = None

    def start(self, label: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_description(label)
        else:
            print(f"[{self.i + 1}/{self.total}] {label}", file=sys.stderr, flush=True)

    def done(self) -> None:
        self.i += 1
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(st: Settings, progress: bool = True) -> dict[str, Any]:
    """Run the benchmark described by ``st``; returns the JSON-ready result."""
    pin = _import_pin() if st.pinocchio else None
    jobs = plan(st)
    backends = {b: dynamics.get_backend(b) for b in st.backends}
    bar = _Progress(len(jobs), progress)
    entries: list[dict[str, Any]] = []
    agree: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    robots_info: dict[str, Any] = {}
    last: dict[tuple[str, str, str], tuple[int, float]] = {}   # job key -> (N, seconds) last timed
    load_start = load_average()
    try:
        for ri, robot in enumerate(st.robots):
            model = dynamics.load_model(robot)
            robots_info[robot] = {"name": model.name, "path": model.path, "nq": model.nq, "nv": model.nv,
                                  "nbody": model.nbody}
            for b, be in backends.items():
                be.warmup(model)
            anchor = PinAnchor(pin, model) if pin is not None else None
            for fn in st.functions:
                for b, be in backends.items():
                    if not be.supports(fn):
                        skipped.append({"robot": robot, "backend": b, "function": fn,
                                        "reason": f"backend '{b}' does not support {fn}"})
            checked: set[tuple[str, str, str]] = set()
            for job in (j for j in jobs if j.robot == robot):
                s = make_states(model, job.n, st.seed, ri)
                label = f"{robot} N={job.n} {job.function} [{job.backend}{'' if job.variant == 'analytical' else ' ' + job.variant}]"
                bar.start(label)
                call = anchor.call(job.function, s) if job.backend == ANCHOR else \
                    job_call(job, backends[job.backend], model, s)
                key = (job.backend, job.function, job.variant)
                # A call expected (from the previous N) to outlast the budget is warmed up on one
                # state: that runs the same code, and a 20-s call is not run twice for one sample.
                prev = last.get(key)
                small = prev is not None and prev[1] * job.n / prev[0] > st.budget
                warm = None
                if small:
                    s1 = make_states(model, 1, st.seed, ri)
                    warm = anchor.call(job.function, s1) if job.backend == ANCHOR else \
                        job_call(job, backends[job.backend], model, s1)
                t: Timing = measure(call, repeats=st.repeats, min_time=st.min_time, budget=st.budget, warmup=warm)
                last[key] = (job.n, t.seconds)
                entries.append({"robot": robot, "nq": model.nq, "nv": model.nv, "N": job.n,
                                "function": job.function, "backend": job.backend, "variant": job.variant,
                                "seconds": t.seconds, "seconds_per_state": t.seconds / job.n,
                                "timing": {**t.to_json(), "warmup_on": "first state" if small else "batch"}})
                if anchor is not None and job.backend != ANCHOR and key not in checked:
                    # one state is enough to show both sides compute the same quantity
                    checked.add(key)
                    s1 = make_states(model, 1, st.seed, ri)
                    ours1 = job_call(job, backends[job.backend], model, s1)()
                    ours1 = tuple(np.asarray(x)[0] for x in _as_tuple(ours1))
                    ref = anchor.call(job.function, s1)()[0]
                    agree.append({"robot": robot, "backend": job.backend, "function": job.function,
                                  "variant": job.variant, **agreement(ours1, ref, job.function)})
                bar.done()
    finally:
        bar.close()
    _attach_ratios(entries)
    targets = performance_targets(entries)
    overhead = dispatch_overhead(st, pin) if "numba" in backends else []
    return {
        "benchmark": "dynamics",
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "dynamics.py", *sys.argv[1:]]),
        "machine": machine_info(load_start),
        "settings": {"robots": st.robots, "batch": st.batch, "batch_second_order": st.batch_second_order,
                     "backends": st.backends, "functions": st.functions, "repeats": st.repeats,
                     "min_time_s": st.min_time, "budget_s": st.budget, "seed": st.seed, "quick": st.quick,
                     "pinocchio_anchor": st.pinocchio},
        "backends_not_available": st.skipped_backends,
        "robots": robots_info,
        "anchor": {"name": ANCHOR, "available": st.pinocchio, "calls": ANCHOR_CALLS if st.pinocchio else {},
                   **_anchor_version(pin)},
        "entries": entries,
        "agreement": agree,
        "targets": targets,
        "dispatch_overhead": overhead,
        "skipped": skipped,
        "notes": [
            "seconds: median time of one call on the whole batch of N states; ratio_vs_pinocchio_loop = "
            "seconds / seconds of the pinocchio-loop entry with the same robot, N and function (< 1: faster).",
            "speedup_vs_central / speedup_vs_complex (analytical second-order entries): seconds of the "
            "numerical provider (same backend for central; numpy for complex) / seconds of the analytical entry.",
            "agreement: max |ours - Pinocchio| on one state; second-order anchors are finite differences, so "
            "expect agreement only to about 1e-6 relative there.",
        ],
    }


def _anchor_version(pin) -> dict[str, Any]:
    info = pinocchio_anchor(None if pin is None else pin.__version__)
    info.pop("line")
    return info


SINGLE_CALL = ("aba", "rnea_derivatives", "aba_derivatives")


def dispatch_overhead(st: Settings, pin) -> list[dict[str, Any]]:
    """Single-state calls of the numba backend split into the compiled kernel and the rest: the
    public function on one state ``(n,)`` vs the serial kernel it runs called through numba's dispatcher
    on preallocated, already prepared arrays (what no Python wrapper can go below), and one
    Pinocchio call. ``overhead_s`` = public - kernel: argument checks, allocation and dispatch."""
    from dynamics.kernels.packing import as_kernel_input as _f64
    from dynamics.kernels.packing import packed
    from dynamics.numba_backend import _k
    be = dynamics.get_backend("numba")
    k = _k()
    out = []
    for ri, robot in enumerate(st.robots):
        model = dynamics.load_model(robot)
        s = make_states(model, 1, st.seed, ri)
        anchor = PinAnchor(pin, model) if pin is not None else None
        pm, nv = packed(model), model.nv
        q, v, u = _f64(s.q), _f64(s.v), _f64(s.u)
        for fn in (f for f in SINGLE_CALL if f in st.functions):
            if fn == "aba":             # the public call's own single-state kernel
                o, q0, v0, u0 = np.empty(nv), q[0], v[0], u[0]
                kern = lambda: k.aba.aba_state(pm.li, pm.lf, pm.gv, q0, v0, u0, o)
            elif fn == "rnea_derivatives":
                o = np.empty((2, 1, nv, nv))
                kern = lambda: k.rnea_derivatives.rnea_derivatives_range(pm.li, pm.lf, pm.gv, pm.bl, pm.bf, q, v, u,
                                                                         pm.no_fext, o, 0, 1)
            else:
                o, acc = np.empty((3, 1, nv, nv)), np.empty((0, nv))
                kern = lambda: k.aba_derivatives.aba_derivatives_range(pm.li, pm.lf, pm.gv, pm.bl, pm.bf, q, v, u,
                                                                       pm.no_fext, pm.no_minv, o, acc, 0, 1)
            f = getattr(be, fn)
            q1, v1, u1 = s.q[0].copy(), s.v[0].copy(), s.u[0].copy()
            t_pub = measure(lambda: f(model, q1, v1, u1), repeats=st.repeats, min_time=st.min_time,
                            budget=st.budget).seconds
            t_ker = measure(kern, repeats=st.repeats, min_time=st.min_time, budget=st.budget).seconds
            t_pin = None if anchor is None else measure(anchor.call(fn, s), repeats=st.repeats, min_time=st.min_time,
                                                        budget=st.budget).seconds
            out.append({"robot": robot, "function": fn, "public_s": t_pub, "kernel_s": t_ker,
                        "overhead_s": t_pub - t_ker, "pinocchio_s": t_pin,
                        "ratio_public_vs_pinocchio": None if t_pin is None else t_pub / t_pin,
                        "ratio_kernel_vs_pinocchio": None if t_pin is None else t_ker / t_pin})
    return out


def _attach_ratios(entries: list[dict[str, Any]]) -> None:
    by = {(e["robot"], e["N"], e["function"], e["backend"], e["variant"]): e for e in entries}
    for e in entries:
        if e["backend"] == ANCHOR:
            continue
        a = next((x for k, x in by.items() if k[:4] == (e["robot"], e["N"], e["function"], ANCHOR)), None)
        e["ratio_vs_pinocchio_loop"] = e["seconds"] / a["seconds"] if a else None
        if e["function"] in SECOND_ORDER and e["variant"] == "analytical":
            c = by.get((e["robot"], e["N"], e["function"], e["backend"], "numerical-central"))
            x = by.get((e["robot"], e["N"], e["function"], "numpy", "numerical-complex"))
            e["speedup_vs_central"] = c["seconds"] / e["seconds"] if c else None
            e["speedup_vs_complex"] = x["seconds"] / e["seconds"] if x else None


# The numba backend's performance targets (issue "numba backend"): (name, function, N, robots,
# measured quantity, limit, stretch limit). A single state always runs on the calling thread, so
# the N = 1 second-order entry is the single-thread time per knot.
TARGETS = (
    ("aba_derivatives N=64 vs Pinocchio loop", "aba_derivatives", 64, None, "ratio", 0.5, 0.25),
    ("aba_derivatives N=1 vs one Pinocchio call", "aba_derivatives", 1, None, "ratio", 1.5, None),
    ("aba_second_derivatives per knot, one thread [s]", "aba_second_derivatives", 1, ("atlas",), "seconds", 2.1e-3,
     None),
)


def performance_targets(entries: list[dict[str, Any]], backend: str = "numba") -> list[dict[str, Any]]:
    """The measured value of each target in :data:`TARGETS` for ``backend`` (where it was timed),
    with ``met`` (value <= limit) and ``stretch_met``."""
    out = []
    for name, fn, n, robots, what, limit, stretch in TARGETS:
        for e in entries:
            if (e["backend"], e["function"], e["N"], e["variant"]) != (backend, fn, n, "analytical"):
                continue
            if robots is not None and e["robot"] not in robots:
                continue
            value = e.get("ratio_vs_pinocchio_loop") if what == "ratio" else e["seconds_per_state"]
            out.append({"target": name, "robot": e["robot"], "backend": backend, "value": value, "limit": limit,
                        "met": None if value is None else bool(value <= limit),
                        "stretch_limit": stretch,
                        "stretch_met": None if value is None or stretch is None else bool(value <= stretch)})
    return out


def format_table(result: dict[str, Any]) -> str:
    """Markdown table: robot × N × function × implementation, seconds and ratio vs the anchor."""
    lines = ["| robot | N | function | implementation | seconds | ratio vs pinocchio-loop | speedup vs FD central / complex |",
             "|---|---:|---|---|---:|---:|---:|"]
    order = {f: i for i, f in enumerate(ALL_FUNCTIONS)}
    robots = list(result["robots"])
    ents = sorted(result["entries"], key=lambda e: (robots.index(e["robot"]), order.get(e["function"], 99), e["N"],
                                                     e["backend"] == ANCHOR, e["backend"], e["variant"]))
    for e in ents:
        impl = e["backend"] + ("" if e["variant"] == "analytical" else f" ({e['variant']})")
        r = e.get("ratio_vs_pinocchio_loop")
        ratio = "anchor" if e["backend"] == ANCHOR else ("—" if r is None else f"{r:.3g}")
        sp = ""
        if "speedup_vs_central" in e:
            c, x = e["speedup_vs_central"], e["speedup_vs_complex"]
            sp = f"{'—' if c is None else f'{c:.3g}'} / {'—' if x is None else f'{x:.3g}'}"
        lines.append(f"| {e['robot']} | {e['N']} | {e['function']} | {impl} | {e['seconds']:.3e} | {ratio} | {sp} |")
    if result.get("dispatch_overhead"):
        lines += ["", "| robot | single call (numba) | public [us] | kernel alone [us] | overhead [us] | Pinocchio [us] "
                  "| public / Pinocchio |", "|---|---|---:|---:|---:|---:|---:|"]
        for d in result["dispatch_overhead"]:
            p = "—" if d["pinocchio_s"] is None else f"{d['pinocchio_s'] * 1e6:.2f}"
            r = "—" if d["ratio_public_vs_pinocchio"] is None else f"{d['ratio_public_vs_pinocchio']:.2f}"
            lines.append(f"| {d['robot']} | {d['function']} | {d['public_s'] * 1e6:.2f} | {d['kernel_s'] * 1e6:.2f} "
                         f"| {d['overhead_s'] * 1e6:.2f} | {p} | {r} |")
    if result.get("targets"):
        lines += ["", "| target | robot | value | limit | met |", "|---|---|---:|---:|---|"]
        for t in result["targets"]:
            v = "—" if t["value"] is None else f"{t['value']:.3g}"
            lines.append(f"| {t['target']} | {t['robot']} | {v} | {t['limit']:.3g} | {t['met']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    st = resolve_settings(args)
    pin = _import_pin() if st.pinocchio else None
    print(f"[dynamics] {pinocchio_anchor(None if pin is None else pin.__version__)['line']}", file=sys.stderr)
    result = run(st, progress=not args.no_progress)
    emit_result(result, args.out, format_table(result) if args.table else None)
    return result


if __name__ == "__main__":
    main()
