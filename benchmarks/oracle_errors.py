"""Measured errors of the numpy reference backend against every independent oracle.

For each model (the bundled ``iiwa``, ``hyq``, ``atlas`` and two random ~30-body MJCF trees from
``tests/helpers/random_trees.py``, one free-floating and one fixed-base) and a few seeded random states
(``model.random_configuration(rng)``, v, a, tau ~ N(0, 1)), the numpy backend
(``dynamics.get_backend("numpy")``) is compared with:

* ``mujoco``      — MuJoCo with its equations of motion reduced to plain rigid-body dynamics
  (constraints, springs, dampers, actuators disabled, as in tests/dynamics/test_oracle_mujoco.py):
  ``mj_fullM`` vs ``crba``, ``qfrc_bias`` vs ``bias_forces``, ``mj_inverse`` vs ``rnea``, forward
  dynamics ``qacc`` vs ``aba``, ``xpos``/``xmat`` vs ``body_placements``, ``mj_jacBody`` /
  ``mj_jacSite`` vs ``frame_jacobian`` (local_world_aligned and local). Free-joint velocities are
  mapped through ``qvel = T v`` (``model.qvel_from_v`` etc., docs/conventions.md).
* ``pinocchio``   — a Pinocchio model of the same mechanism (tests/helpers/pinocchio_models.py: Pinocchio's
  MJCF reader for the bundled robots, a programmatically built model for the random trees):
  ``rnea``, ``crba``, ``computeMinverse`` vs ``minv``, ``aba``, ``computeRNEADerivatives`` vs
  ``rnea_derivatives``, ``computeABADerivatives`` vs ``aba_derivatives``. The oracle model itself is
  checked against MuJoCo's forward kinematics first (``oracle_self_checks`` in the JSON).
* ``central_diff`` / ``complex_step`` — central differences (step 1e-6) of the public batched
  functions and complex step (step 1e-20) of the numpy kernels, configurations perturbed along
  the tangent ``q ⊕ h e_j`` (as tests/dynamics/test_derivatives_numerical.py), vs ``rnea_derivatives`` and
  ``aba_derivatives``.
* ``second_order_central`` / ``second_order_complex`` — central differences (step 1e-5) and
  complex step of the analytical first-order derivatives (``rnea_derivatives``, ``crba``,
  ``aba_derivatives``; as tests/solvers/test_second_order.py) vs ``rnea_second_derivatives`` (including
  ``dM_dq`` against differences of ``crba``) and ``aba_second_derivatives``.

For each (model, oracle, quantity): ``max_abs = max |ours - oracle|`` and
``max_rel = max |ours - oracle| / max(1, max |oracle|)`` (per evaluated state, maximum over the
states), plus ``max_ref = max |oracle|``. An oracle that is not installed is reported under
``skipped`` with the reason; an oracle block that raises is reported under ``failed`` (exit code 1).

Output: JSON on stdout (and in --out FILE); progress on stderr; --table adds Markdown tables on
stderr. ``python benchmarks/oracle_errors.py --help`` for the options.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
import traceback
import zlib
from pathlib import Path
from typing import Any, Callable

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
if __name__ == "__main__":  # as a script this folder is sys.path[0], and benchmarks/dynamics.py would shadow the package
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))  # the project, benchmarks.machine and the test helpers (tests.helpers), whatever the working directory

import numpy as np  # noqa: E402

import dynamics  # noqa: E402

dynamics.worker_wait.configure_worker_wait()  # before Pinocchio/Crocoddyl load libgomp (dynamics.worker_wait)
from benchmarks.arguments import csv_list  # noqa: E402
from benchmarks.machine import machine_info  # noqa: E402
from benchmarks.output import emit_result  # noqa: E402
from dynamics.numpy_backend import aba as k_aba  # noqa: E402
from dynamics.numpy_backend import rnea as k_rnea  # noqa: E402
from dynamics.second_order_numerical import aba_second_derivatives_numerical  # noqa: E402
from tests.helpers.oracle_helpers import (  # noqa: E402
    H_CS,
    H_FD,
    H_FD2,
    cs,
    fd,
    mj_frame_jacobian,
    mj_frames,
    oracle_mjmodel,
    rnea_second_numerical,
)

BE = dynamics.get_backend("numpy")
BUNDLED = ("iiwa", "hyq", "atlas")
# random trees as in tests/dynamics/test_backend_consistency.py: (seed, nbodies, free_root)
TREES = {"tree30_free": (601, 30, True), "tree30_fixed": (602, 30, False)}
ALL_MODELS = (*BUNDLED, *TREES)
FIRST_ORDER_ORACLES = ("mujoco", "pinocchio", "central_diff", "complex_step")
SECOND_ORDER_ORACLES = ("second_order_central", "second_order_complex")
ALL_ORACLES = FIRST_ORDER_ORACLES + SECOND_ORDER_ORACLES
# numerical-differentiation steps H_FD (1e-6), H_CS (1e-20) and H_FD2 (1e-5): tests/helpers/oracle_helpers.py


# ------------------------------------------------------------------------------ error bookkeeping
class Recorder:
    """Max abs / rel error per (model, oracle, quantity) over all compared evaluations."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(self, model: str, oracle: str, quantity: str, ours, ref) -> None:
        ours, ref = np.asarray(ours), np.asarray(ref)
        if ours.shape != ref.shape:
            raise ValueError(f"{model}/{oracle}/{quantity}: shape {ours.shape} vs oracle {ref.shape}")
        ref_max = float(np.abs(ref).max(initial=0.0))
        err = float(np.abs(ours - ref).max(initial=0.0))
        if not (np.isfinite(err) and np.isfinite(ref_max)):
            err = float("inf")
        r = self.rows.setdefault((model, oracle, quantity), {"model": model, "oracle": oracle, "quantity": quantity,
                                                            "max_abs": 0.0, "max_rel": 0.0, "max_ref": 0.0,
                                                            "evaluations": 0})
        r["max_abs"] = max(r["max_abs"], err)
        r["max_rel"] = max(r["max_rel"], err / max(1.0, ref_max))
        r["max_ref"] = max(r["max_ref"], ref_max)
        r["evaluations"] += 1

    def results(self) -> list[dict[str, Any]]:
        return list(self.rows.values())


# ------------------------------------------------------------------------------ models and states
class Case:
    """One model: our RobotModel, a freshly compiled MjModel of the same file/XML, and its states."""

    def __init__(self, name: str, model, mj, source: str, xml_path: str | None):
        self.name, self.model, self.mj, self.source, self.xml_path = name, model, mj, source, xml_path
        self.q = self.v = self.a = self.tau = None

    def make_states(self, n: int, seed: int) -> None:
        rng = np.random.default_rng([seed, zlib.crc32(self.name.encode())])
        m = self.model
        self.q = np.stack([m.random_configuration(rng) for _ in range(n)])
        self.v = rng.normal(size=(n, m.nv))
        self.a = rng.normal(size=(n, m.nv))
        self.tau = rng.normal(size=(n, m.nv))


def load_case(name: str) -> Case:
    import mujoco
    if name in BUNDLED:
        model = dynamics.load_model(name)
        mj = mujoco.MjModel.from_xml_path(model.path)  # compiled afresh: the oracles never see our loader
        return Case(name, model, mj, f"bundled {Path(model.path).name}", model.path)
    from tests.helpers.random_trees import random_tree_model
    seed, nb, free = TREES[name]
    model, mj = random_tree_model(seed, nb, free_root=free, refs=True)
    return Case(name, model, mj, f"random_tree_model({seed}, {nb}, free_root={free}, refs=True)", None)


# ------------------------------------------------------------------------------ MuJoCo oracle
def oracle_mujoco(c: Case, rec: Recorder) -> None:
    import mujoco
    model, name = c.model, c.name
    for _, va in model.free_adr:
        if np.any(model.dof_armature[va:va + 6] != 0):
            raise ValueError("armature on a free joint: MuJoCo applies it in world axes, not comparable")
    m = oracle_mjmodel(c.mj)
    S = c.q.shape[0]
    M = BE.crba(model, c.q)
    bias = BE.bias_forces(model, c.q, c.v)
    tau_id = BE.rnea(model, c.q, c.v, c.a)
    acc = BE.aba(model, c.q, c.v, c.tau)
    Rb, pb = BE.body_placements(model, c.q)
    frames = mj_frames(model)
    J_lwa = {f: BE.frame_jacobian(model, c.q, f) for f, _, _ in frames}
    J_loc = {f: BE.frame_jacobian(model, c.q, f, "local") for f, _, _ in frames}
    for k in range(S):
        q, v, a, tau = c.q[k], c.v[k], c.a[k], c.tau[k]
        T = np.stack([model.qvel_from_v(q, e) for e in np.eye(model.nv)], axis=1)  # qvel = T v
        # mass matrix and bias forces at (q, v)
        d = mujoco.MjData(m)
        d.qpos[:] = q
        d.qvel[:] = model.qvel_from_v(q, v)
        mujoco.mj_forward(m, d)
        Mmj = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, Mmj)
        rec.add(name, "mujoco", "crba (mj_fullM)", M[k], T.T @ Mmj @ T)
        # a = 0 is qacc = qacc_from_a(q, v, 0) != 0 for free joints (the ω × v term)
        qacc0 = model.qacc_from_a(q, v, np.zeros(model.nv))
        rec.add(name, "mujoco", "bias_forces (qfrc_bias)", bias[k], T.T @ (Mmj @ qacc0 + d.qfrc_bias))
        # kinematics (q only matters)
        rec.add(name, "mujoco", "body_placements position (xpos)", pb[k], d.xpos)
        rec.add(name, "mujoco", "body_placements rotation (xmat)", Rb[k], d.xmat.reshape(-1, 3, 3))
        for f, typ, i in frames:
            Jmj, R = mj_frame_jacobian(m, d, typ, i)
            Jw = Jmj @ T
            rec.add(name, "mujoco", "frame_jacobian lwa (mj_jacBody/Site)", J_lwa[f][k], Jw)
            rec.add(name, "mujoco", "frame_jacobian local (mj_jacBody/Site)", J_loc[f][k],
                    np.vstack([R.T @ Jw[:3], R.T @ Jw[3:]]))
        # inverse dynamics
        d.qacc[:] = model.qacc_from_a(q, v, a)
        mujoco.mj_inverse(m, d)
        rec.add(name, "mujoco", "rnea (mj_inverse)", tau_id[k], model.tau_from_qfrc(q, d.qfrc_inverse))
        # forward dynamics
        d = mujoco.MjData(m)
        d.qpos[:] = q
        d.qvel[:] = model.qvel_from_v(q, v)
        d.qfrc_applied[:] = model.qfrc_from_tau(q, tau)
        mujoco.mj_forward(m, d)
        rec.add(name, "mujoco", "aba (mj_forward qacc)", acc[k], model.a_from_qacc(q, v, d.qacc))


# ------------------------------------------------------------------------------ Pinocchio oracle
def _sym_upper(M: np.ndarray) -> np.ndarray:
    """Pinocchio fills only the upper triangle of M and M^-1: mirror it."""
    M = np.array(M)
    return np.triu(M) + np.triu(M, 1).T


def pin_oracle(c: Case):
    """The PinOracle of tests/helpers/pinocchio_models.py: MJCF reader for bundled robots, programmatic for trees."""
    import mujoco

    from tests.helpers import pinocchio_models as pm_
    if c.xml_path is not None:
        return pm_.oracle_from_mjcf(c.xml_path, mujoco.MjModel.from_xml_path(c.xml_path))
    return pm_.oracle_from_mujoco(c.mj)


def oracle_pinocchio(c: Case, rec: Recorder, self_checks: Recorder) -> None:
    import mujoco
    import pinocchio as pin
    orc = pin_oracle(c)
    pm, model, name = orc.model, c.model, c.name
    if (pm.nq, pm.nv) != (model.nq, model.nv):
        raise ValueError(f"oracle has (nq, nv) = {(pm.nq, pm.nv)}, ours {(model.nq, model.nv)}")
    # the oracle model itself against MuJoCo's forward kinematics (independent of our loader)
    d = mujoco.MjData(orc.mj_model)
    pd = pm.createData()
    for q in c.q:
        d.qpos[:] = q
        mujoco.mj_kinematics(orc.mj_model, d)
        pin.framesForwardKinematics(pm, pd, orc.q_to_pin(q))
        for b in range(1, orc.mj_model.nbody):
            jid, Mb = orc.body_frames[b]
            oMb = pd.oMi[jid] * Mb
            self_checks.add(name, "pinocchio", "oracle body positions vs MuJoCo xpos", oMb.translation, d.xpos[b])
            self_checks.add(name, "pinocchio", "oracle body rotations vs MuJoCo xmat", oMb.rotation,
                            d.xmat[b].reshape(3, 3))
    self_checks.add(name, "pinocchio", "oracle total mass vs ours", model.total_mass, pin.computeTotalMass(pm))

    tau_id = BE.rnea(model, c.q, c.v, c.a)
    M, Minv = BE.crba(model, c.q), BE.minv(model, c.q)
    acc = BE.aba(model, c.q, c.v, c.tau)
    rq, rv = BE.rnea_derivatives(model, c.q, c.v, c.a)
    aq, av, at = BE.aba_derivatives(model, c.q, c.v, c.tau)
    for k in range(c.q.shape[0]):
        qp, vp = orc.q_to_pin(c.q[k]), orc.v_to_pin(c.v[k])
        ap, tp = orc.v_to_pin(c.a[k]), orc.v_to_pin(c.tau[k])
        d = pm.createData()
        rec.add(name, "pinocchio", "rnea", tau_id[k], orc.vec_from_pin(pin.rnea(pm, d, qp, vp, ap)))
        rec.add(name, "pinocchio", "crba", M[k], orc.mat_from_pin(_sym_upper(pin.crba(pm, d, qp))))
        rec.add(name, "pinocchio", "minv (computeMinverse)", Minv[k],
                orc.mat_from_pin(_sym_upper(pin.computeMinverse(pm, d, qp))))
        rec.add(name, "pinocchio", "aba", acc[k], orc.vec_from_pin(pin.aba(pm, d, qp, vp, tp)))
        d = pm.createData()
        pq, pv, _ = (np.array(x) for x in pin.computeRNEADerivatives(pm, d, qp, vp, ap))
        rec.add(name, "pinocchio", "rnea_derivatives dtau_dq", rq[k], orc.mat_from_pin(pq))
        rec.add(name, "pinocchio", "rnea_derivatives dtau_dv", rv[k], orc.mat_from_pin(pv))
        d = pm.createData()
        pq, pv, pt = (np.array(x) for x in pin.computeABADerivatives(pm, d, qp, vp, tp))
        rec.add(name, "pinocchio", "aba_derivatives da_dq", aq[k], orc.mat_from_pin(pq))
        rec.add(name, "pinocchio", "aba_derivatives da_dv", av[k], orc.mat_from_pin(pv))
        rec.add(name, "pinocchio", "aba_derivatives da_dtau", at[k], orc.mat_from_pin(_sym_upper(pt)))


# ------------------------------------------------------------------------------ numerical oracles
# fd, cs (and rnea_second_numerical below): tests/helpers/oracle_helpers.py, shared with the tests
def oracle_numerical(c: Case, rec: Recorder, method: str) -> None:
    model, name = c.model, c.name
    oracle = "central_diff" if method == "central" else "complex_step"
    rq, rv = BE.rnea_derivatives(model, c.q, c.v, c.a)
    aq, av, at = BE.aba_derivatives(model, c.q, c.v, c.tau)
    rnea = lambda *x: BE.rnea(model, *x)  # noqa: E731
    aba = lambda *x: BE.aba(model, *x)  # noqa: E731
    for k in range(c.q.shape[0]):
        r_args = (c.q[k], c.v[k], c.a[k], None)
        a_args = (c.q[k], c.v[k], c.tau[k], None)
        for which, D, qn in ((0, rq, "dtau_dq"), (1, rv, "dtau_dv")):
            ref = fd(rnea, model, r_args, which) if method == "central" else cs(k_rnea.rnea, model, r_args, which)
            rec.add(name, oracle, f"rnea_derivatives {qn}", D[k], ref)
        for which, D, qn in ((0, aq, "da_dq"), (1, av, "da_dv"), (2, at, "da_dtau")):
            ref = fd(aba, model, a_args, which) if method == "central" else cs(k_aba.aba, model, a_args, which)
            rec.add(name, oracle, f"aba_derivatives {qn}", D[k], ref)


# ------------------------------------------------------------------------------ second order
RNEA2_NAMES = ("d2tau_dq2", "d2tau_dv2", "d2tau_dqdv", "dM_dq")
ABA2_NAMES = ("d2a_dq2", "d2a_dv2", "d2a_dqdv", "d2a_dqdtau")


def oracle_second_order(c: Case, rec: Recorder, method: str, n_states: int) -> None:
    model, name = c.model, c.name
    oracle = "second_order_central" if method == "central" else "second_order_complex"
    q, v, a, tau = c.q[:n_states], c.v[:n_states], c.a[:n_states], c.tau[:n_states]
    ours = BE.rnea_second_derivatives(model, q, v, a)
    ref = rnea_second_numerical(model, q, v, a, None, method)
    for qn, x, r in zip(RNEA2_NAMES, ours, ref):
        label = ("rnea_second_derivatives dM_dq (differences of crba)" if qn == "dM_dq"
                 else f"rnea_second_derivatives {qn}")
        for k in range(q.shape[0]):
            rec.add(name, oracle, label, x[k], r[k])
    ours = BE.aba_second_derivatives(model, q, v, tau)
    ref = aba_second_derivatives_numerical("numpy", model, q, v, tau, None, method=method)
    for qn, x, r in zip(ABA2_NAMES, ours, ref):
        for k in range(q.shape[0]):
            rec.add(name, oracle, f"aba_second_derivatives {qn}", x[k], r[k])


# ------------------------------------------------------------------------------ driver

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/oracle_errors.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("--models", type=csv_list(), default=None,
                   help="comma-separated models (default: " + ",".join(ALL_MODELS) + ")")
    p.add_argument("--oracles", type=csv_list(), default=None,
                   help="comma-separated oracles (default: " + ",".join(ALL_ORACLES) + ")")
    p.add_argument("--states", type=int, default=16, help="random states per model (default 16)")
    p.add_argument("--second-order-states", type=int, default=2,
                   help="states (the first ones) for the second-order oracles (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random states (default 0)")
    p.add_argument("--quick", action="store_true", help="smoke run: iiwa only, 2 states, no second order")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    p.add_argument("--table", action="store_true", help="print Markdown tables of the results on stderr")
    p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    return p


def _oracle_availability() -> dict[str, str | None]:
    """None if the oracle can run, else the reason it is skipped."""
    import importlib
    reasons: dict[str, str | None] = {}
    try:
        importlib.import_module("mujoco")
        mj_reason = None
    except ImportError as e:
        mj_reason = f"mujoco is not installed ({e})"
    reasons["mujoco"] = mj_reason
    try:
        importlib.import_module("pinocchio")
        reasons["pinocchio"] = mj_reason  # the oracle model is checked against / built from MuJoCo
    except ImportError as e:
        reasons["pinocchio"] = f"Pinocchio is not installed (pip install pin): {e}"
    for o in ("central_diff", "complex_step", *SECOND_ORDER_ORACLES):
        reasons[o] = None
    for o in SECOND_ORDER_ORACLES:
        for fn in ("rnea_second_derivatives", "aba_second_derivatives"):
            if not BE.supports(fn):
                reasons[o] = f"the numpy backend does not support {fn}"
    return reasons


def run(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    models = args.models or (["iiwa"] if args.quick else list(ALL_MODELS))
    oracles = args.oracles or (list(FIRST_ORDER_ORACLES) if args.quick else list(ALL_ORACLES))
    n_states = 2 if args.quick and args.states == 16 else args.states
    n2 = min(args.second_order_states, n_states) if any(o in SECOND_ORDER_ORACLES for o in oracles) else 0
    bad = [m for m in models if m not in ALL_MODELS] + [o for o in oracles if o not in ALL_ORACLES]
    if bad:
        raise SystemExit(f"unknown model/oracle: {', '.join(bad)} (models: {', '.join(ALL_MODELS)}; "
                         f"oracles: {', '.join(ALL_ORACLES)})")
    if n_states < 1:
        raise SystemExit("--states must be >= 1")
    progress = (lambda msg: print(msg, file=sys.stderr, flush=True)) if not args.no_progress else (lambda msg: None)
    t_start = time.perf_counter()
    rec, self_checks = Recorder(), Recorder()
    available = _oracle_availability()
    skipped: list[dict[str, str]] = []
    failed: list[dict[str, str]] = []
    timings: dict[str, dict[str, float]] = {}
    model_info: dict[str, dict[str, Any]] = {}
    for name in models:
        try:
            c = load_case(name)
            c.make_states(n_states, args.seed)
        except Exception as e:  # e.g. mujoco missing: the random trees and the bundled loader need it
            reason = f"{type(e).__name__}: {e}"
            (skipped if isinstance(e, ImportError) else failed).append(
                {"model": name, "oracle": "*", "reason": reason})
            progress(f"[{name}] cannot build the model: {reason}")
            continue
        m = c.model
        model_info[name] = {"source": c.source, "nq": m.nq, "nv": m.nv, "nbody": m.nbody, "states": n_states,
                            "second_order_states": n2}
        timings[name] = {}
        blocks: dict[str, Callable[[], None]] = {
            "mujoco": lambda: oracle_mujoco(c, rec),
            "pinocchio": lambda: oracle_pinocchio(c, rec, self_checks),
            "central_diff": lambda: oracle_numerical(c, rec, "central"),
            "complex_step": lambda: oracle_numerical(c, rec, "complex"),
            "second_order_central": lambda: oracle_second_order(c, rec, "central", n2),
            "second_order_complex": lambda: oracle_second_order(c, rec, "complex", n2),
        }
        for oracle in oracles:
            if available[oracle] is not None:
                skipped.append({"model": name, "oracle": oracle, "reason": available[oracle]})
                progress(f"[{name}] {oracle}: skipped ({available[oracle]})")
                continue
            t0 = time.perf_counter()
            try:
                blocks[oracle]()
            except Exception as e:
                failed.append({"model": name, "oracle": oracle, "reason": f"{type(e).__name__}: {e}",
                               "traceback": traceback.format_exc(limit=6)})
                progress(f"[{name}] {oracle}: FAILED {type(e).__name__}: {e}")
            dt = time.perf_counter() - t0
            timings[name][oracle] = round(dt, 4)
            progress(f"[{name}] {oracle}: {dt:.2f} s")
    result = {
        "script": "benchmarks/oracle_errors.py",
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "backend": BE.name,
        "settings": {"models": models, "oracles": oracles, "states": n_states, "second_order_states": n2,
                     "seed": args.seed, "quick": bool(args.quick), "fd_step": H_FD, "complex_step": H_CS,
                     "second_order_fd_step": H_FD2},
        "metric": {"max_abs": "max |ours - oracle| over every entry and state",
                   "max_rel": "max over states of max|ours - oracle| / max(1, max|oracle|)",
                   "max_ref": "max |oracle| over states"},
        "models": model_info,
        "results": rec.results(),
        "oracle_self_checks": self_checks.results(),
        "timings_seconds": timings,
        "skipped": skipped,
        "failed": failed,
        "total_seconds": round(time.perf_counter() - t_start, 3),
    }
    return result, not failed


def format_table(result: dict[str, Any]) -> str:
    lines = ["| model | oracle | quantity | max abs | max rel | max abs(oracle) |", "|---|---|---|---:|---:|---:|"]
    for r in result["results"]:
        lines.append(f"| {r['model']} | {r['oracle']} | {r['quantity']} | {r['max_abs']:.2e} | {r['max_rel']:.2e} "
                     f"| {r['max_ref']:.2e} |")
    if result["oracle_self_checks"]:
        lines += ["", "Oracle self-checks (the Pinocchio oracle model against MuJoCo, not our code):", "",
                  "| model | oracle | check | max abs | max rel |", "|---|---|---|---:|---:|"]
        for r in result["oracle_self_checks"]:
            lines.append(f"| {r['model']} | {r['oracle']} | {r['quantity']} | {r['max_abs']:.2e} "
                         f"| {r['max_rel']:.2e} |")
    oracles = result["settings"]["oracles"]
    lines += ["", "Time per oracle block [s] (ours + oracle, all states):", "",
              "| model | " + " | ".join(oracles) + " |", "|---|" + "---:|" * len(oracles)]
    for model, t in result["timings_seconds"].items():
        lines.append(f"| {model} | " + " | ".join(f"{t[o]:.2f}" if o in t else "—" for o in oracles) + " |")
    for kind in ("skipped", "failed"):
        for s in result[kind]:
            lines.append(f"\n{kind}: {s['model']} / {s['oracle']}: {s['reason']}")
    lines.append(f"\ntotal {result['total_seconds']:.1f} s; states {result['settings']['states']}, second order "
                 f"{result['settings']['second_order_states']}; git {result['machine']['git_commit']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result, ok = run(args)
    emit_result(result, args.out, format_table(result) if args.table else None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
