"""Benchmark of rigid contact dynamics and its derivatives (issue #11), next to Pinocchio.

For HyQ (four point feet) and Atlas (two 6-D soles) and each batch size N, times
``be.contact_dynamics`` and ``be.contact_dynamics_derivatives`` on N random states for every
backend asked for, and in the same run Pinocchio in a Python loop over the same N states (the
anchor): ``pin.constraintDynamics`` for the values, ``pin.constraintDynamics`` +
``pin.computeConstraintDynamicsDerivatives`` for the derivatives (Pinocchio needs the forward pass
first), with ``RigidConstraintModel``s built to our conventions (CONTACT_3D + LOCAL_WORLD_ALIGNED,
CONTACT_6D + LOCAL). Speed is quoted as ``ratio = ours / pinocchio_loop`` (below 1: faster).
A per-stage breakdown of the derivative call shows where the time goes.

    python benchmarks/contact_dynamics.py [--robots hyq,atlas] [--backends numpy,numba]
        [--batch 1,16,64,256] [--quick] [--out FILE]

Prints JSON (see benchmarks/README.md for the conventions shared with benchmarks/dynamics.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

_HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # as a script this folder is sys.path[0]; import the project from the repository root
    sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
# the kernels are timed on a fixed thread count (every worker, or --threads), not on the count the
# default policy would pick from the machine's load (dynamics.worker_threads); a user's setting wins
os.environ.setdefault("MPC_ACCEL_THREADS", "all")
from benchmarks.arguments import csv_list  # noqa: E402
from benchmarks.machine import load_average, machine_info, pinocchio_anchor  # noqa: E402
from benchmarks.output import emit_result  # noqa: E402
from benchmarks.timing import measure  # noqa: E402
from dynamics.contact import constraint_rows, forces, kinematics_derivatives, schur  # noqa: E402

CASES = {
    "hyq": (("lf_foot", "rf_foot", "lh_foot", "rh_foot"), "point"),
    "atlas": (("l_foot_site", "r_foot_site"), "6d"),
}
DEFAULT_BATCH = (1, 16, 64, 256)
ANCHOR = "pinocchio-loop"
TARGET = {"backend": "numba", "N": 64, "function": "contact_dynamics_derivatives", "max_ratio": 0.5}



def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--robots", type=csv_list(str), default=list(CASES), help="comma-separated: hyq,atlas")
    p.add_argument("--backends", type=csv_list(str), default=None,
                   help="comma-separated backend names (default: numpy and numba where available)")
    p.add_argument("--batch", type=csv_list(int), default=list(DEFAULT_BATCH), help="batch sizes N")
    p.add_argument("--repeats", type=int, default=7,
                   help="interleaved rounds (anchor, then each backend) per measurement; medians reported")
    p.add_argument("--threads", type=int, default=None,
                   help="worker threads of the numba backend (default: the backend's own, every core, as "
                        "benchmarks/dynamics.py's batches; --threads 1 compares one core with the single-threaded "
                        "Pinocchio loop, and is the steadier figure on a shared machine, where a parallel region "
                        "waits for every thread)")
    p.add_argument("--quick", action="store_true", help="N = 1, 4; one repeat; for smoke tests")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    a = p.parse_args(argv)
    for r in a.robots:
        if r not in CASES:
            p.error(f"unknown robot '{r}'; choose from {', '.join(CASES)}")
    if a.quick:
        a.batch, a.repeats = [1, 4], 1
    if any(n < 1 for n in a.batch):
        p.error("batch sizes must be >= 1")
    if a.backends is None:
        avail = dynamics.available_backends()
        a.backends = [b for b in ("numpy", "numba") if avail.get(b, (False,))[0]]
    return a


class PinAnchor:
    """Pinocchio constraint dynamics (+ derivatives) in a Python loop, to our contact conventions."""

    def __init__(self, model: dynamics.RobotModel, frames, kind: str):
        import mujoco
        import pinocchio as pin

        from tests.helpers import pinocchio_models as pm_
        self.pin = pin
        self.oracle = pm_.oracle_from_mjcf(model.path, mujoco.MjModel.from_xml_path(model.path))
        pm = self.oracle.model
        ct = pin.ContactType.CONTACT_3D if kind == "point" else pin.ContactType.CONTACT_6D
        ref = pin.LOCAL_WORLD_ALIGNED if kind == "point" else pin.LOCAL
        self.cms = []
        for f in frames:
            fr = pm.frames[self.oracle.frame_id(f)]
            self.cms.append(pin.RigidConstraintModel(ct, pm, fr.parentJoint, fr.placement, ref))
        self.cds = [c.createData() for c in self.cms]
        self.data = pm.createData()
        pin.initConstraintDynamics(pm, self.data, self.cms, self.cds)
        self.prox = pin.ProximalSettings(1e-12, 0.0, 1)

    def call(self, q, v, tau, derivatives: bool) -> Callable[[], Any]:
        o, pin, pm, pd = self.oracle, self.pin, self.oracle.model, self.data
        rows = [(o.q_to_pin(q[i]), o.v_to_pin(v[i]), o.v_to_pin(tau[i])) for i in range(q.shape[0])]
        cms, cds, prox = self.cms, self.cds, self.prox
        if derivatives:
            def run():
                for qq, vv, tt in rows:
                    pin.constraintDynamics(pm, pd, qq, vv, tt, cms, cds, prox)
                    pin.computeConstraintDynamicsDerivatives(pm, pd, cms, cds, prox)
        else:
            def run():
                for qq, vv, tt in rows:
                    pin.constraintDynamics(pm, pd, qq, vv, tt, cms, cds, prox)
        return run


def stage_breakdown(be, model, contacts, q, v, tau, repeats: int) -> dict[str, float]:
    """Seconds per stage of ``contact_dynamics_derivatives`` on the flat batch.

    The stages are those of the generic path (the math written on the backend's batched kernels,
    which numpy and every backend without a fused kernel run). For numba, whose public call runs
    the fused per-state kernel (dynamics/contact/numba_kernels.py), the fused kernel's total with
    and without derivatives is added ("fused: ..."); the generic stages then show what the kernels
    it inlines (minv, rnea, rnea_derivatives, frame motion derivatives) cost on their own."""
    st: dict[str, Callable[[], Any]] = {}
    if be.compiled_contact_dynamics(model, contacts) is not None:   # a backend with fused contact kernels
        from dynamics.contact import numba_kernels
        if numba_kernels.supports_fused(contacts, q, v, tau):
            st["fused: values (whole kernel)"] = lambda: numba_kernels.contact_dynamics_fused(
                be, model, q, v, tau, contacts, False)
            st["fused: values + derivatives (whole kernel)"] = lambda: numba_kernels.contact_dynamics_fused(
                be, model, q, v, tau, contacts, True)
    st["contact_rows (frame Jacobians, dJ, placements)"] = lambda: constraint_rows.contact_rows(be, model, q, v, contacts)
    st["minv"] = lambda: be.minv(model, q)
    st["bias (rnea)"] = lambda: be.bias_forces(model, q, v)
    J, gamma, R, _ = constraint_rows.contact_rows(be, model, q, v, contacts)
    Mi = be.minv(model, q)
    MiJt = Mi @ np.swapaxes(J, -1, -2)

    def solve_values():
        K = J @ MiJt
        s = schur.SchurSolver(K, contacts, "bench")
        return s.solve(-(gamma + np.einsum("bij,bj->bi", J, np.einsum("bij,bj->bi", Mi, tau))))
    st["schur values (J M^-1 J^T, solve)"] = solve_values
    a, lam = be.contact_dynamics(model, q, v, tau, contacts)
    st["frame_motion_derivatives"] = lambda: kinematics_derivatives.frame_motion_derivatives(be, model, q, v, a, contacts)
    fm = kinematics_derivatives.frame_motion_derivatives(be, model, q, v, a, contacts)
    st["constraint derivative rows"] = lambda: constraint_rows.acceleration_derivatives(fm, contacts)
    st["contact fext"] = lambda: forces.contact_fext(model, contacts, lam, fm.R)
    fext = forces.contact_fext(model, contacts, lam, fm.R)
    st["rnea_derivatives (fext)"] = lambda: be.rnea_derivatives(model, q, v, a, fext)
    dq, dv = be.rnea_derivatives(model, q, v, a, fext)
    sol = schur.SchurSolver(J @ MiJt, contacts, "bench")
    JMi = np.swapaxes(MiJt, -1, -2)

    def solve_derivs():
        lq = sol.solve(JMi @ dq)
        lv = sol.solve(JMi @ dv)
        lt = -sol.solve(JMi)
        return MiJt @ lq - Mi @ dq, MiJt @ lv - Mi @ dv, Mi + MiJt @ lt
    st["schur derivatives (matrix products)"] = solve_derivs
    return {k: measure(f, repeats=repeats, min_time=0.01).seconds for k, f in st.items()}


def run(args) -> dict[str, Any]:
    results = []
    stages = {}
    rng = np.random.default_rng(11)
    load_start = load_average()
    for robot in args.robots:
        frames, kind = CASES[robot]
        model = dynamics.load_model(robot)
        contacts = dynamics.ContactSet(model, frames, kind=kind)
        try:
            anchor = PinAnchor(model, frames, kind)
        except ImportError:
            anchor = None
        for be_name in args.backends:
            be = dynamics.get_backend(be_name)
            if hasattr(be, "set_threads") and args.threads is not None:
                be.set_threads(args.threads)
            if hasattr(be, "warmup"):
                be.warmup(model)
            q1 = model.random_configuration(rng, size=2)
            be.contact_dynamics_derivatives(model, q1, np.zeros((2, model.nv)), np.zeros((2, model.nv)), contacts)
        for N in args.batch:
            q = model.random_configuration(rng, size=N)
            v = rng.normal(size=(N, model.nv))
            tau = rng.normal(size=(N, model.nv)) * 10
            for fn in ("contact_dynamics", "contact_dynamics_derivatives"):
                calls = {}
                if anchor is not None:
                    calls[ANCHOR] = anchor.call(q, v, tau, fn.endswith("derivatives"))
                for be_name in args.backends:
                    f = getattr(dynamics.get_backend(be_name), fn)
                    calls[be_name] = (lambda f=f: f(model, q, v, tau, contacts))
                # interleaved rounds (anchor, then each backend): on a shared machine the load drifts,
                # so each round's ratio compares timings taken seconds apart; the medians are reported
                secs: dict[str, list[float]] = {k: [] for k in calls}
                for _ in range(args.repeats):
                    for k, c in calls.items():
                        secs[k].append(measure(c, repeats=1, min_time=0.02).seconds)
                for be_name in args.backends:
                    row = {"robot": robot, "kind": kind, "nc": contacts.nc, "nv": model.nv, "function": fn,
                           "backend": be_name, "N": N, "seconds": float(np.median(secs[be_name])),
                           "pinocchio_loop_seconds": float(np.median(secs[ANCHOR])) if anchor else None}
                    if anchor is not None:
                        ratios = np.array(secs[be_name]) / np.array(secs[ANCHOR])
                        row["ratio_vs_pinocchio_loop"] = float(np.median(ratios))
                        row["ratio_rounds"] = [float(x) for x in ratios]
                    results.append(row)
            for be_name in args.backends:
                be = dynamics.get_backend(be_name)
                if N == max(args.batch) or N == 64:
                    stages[f"{robot}/{be_name}/N={N}"] = stage_breakdown(be, model, contacts, q, v, tau,
                                                                          max(1, args.repeats // 2))
    target = [r for r in results if r["backend"] == TARGET["backend"] and r["N"] == TARGET["N"]
              and r["function"] == TARGET["function"] and "ratio_vs_pinocchio_loop" in r]
    machine = machine_info(load_start)
    return {
        "benchmark": "contact_dynamics",
        "date_utc": machine["utc"],
        "machine": machine,
        "numba_threads": args.threads if args.threads is not None else _default_threads(),
        "anchor": "pinocchio-loop: pin.constraintDynamics (+ pin.computeConstraintDynamicsDerivatives) per state "
                  "in a Python loop, ProximalSettings(1e-12, mu=0, max_iter=1)",
        "anchor_version": {k: v for k, v in pinocchio_anchor(machine["versions"].get("pinocchio")).items()
                           if k != "line"},
        "results": results,
        "stages_seconds": stages,
        "target": {**TARGET, "issue": "#13 legged update: contact-dynamics derivative stage at N = 64 <= 0.5x "
                                      "Pinocchio's computeConstraintDynamicsDerivatives loop",
                   "met": {f"{r['robot']}": r["ratio_vs_pinocchio_loop"] <= TARGET["max_ratio"] for r in target},
                   "result": {f"{r['robot']}": "pass" if r["ratio_vs_pinocchio_loop"] <= TARGET["max_ratio"] else "miss"
                              for r in target},
                   "ratios": {f"{r['robot']}": r["ratio_vs_pinocchio_loop"] for r in target},
                   "ratio_rounds": {f"{r['robot']}": r["ratio_rounds"] for r in target}},
    }


def _default_threads() -> int | None:
    try:
        return dynamics.get_backend("numba").threads
    except dynamics.BackendUnavailableError:      # numba not installed: no threads to report
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    out = run(args)
    out["wall_seconds"] = time.perf_counter() - t0
    emit_result(out, args.out)
    print(f"[contact_dynamics] {pinocchio_anchor(out['machine']['versions'].get('pinocchio'))['line']}",
          file=sys.stderr)
    for robot, res in out["target"]["result"].items():
        print(f"[contact_dynamics] target {TARGET['function']} numba N={TARGET['N']} <= {TARGET['max_ratio']}x "
              f"Pinocchio loop: {robot} {out['target']['ratios'][robot]:.2f} -> {res}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
