"""Parallel-in-depth rigid-body algorithms: scans and odd-even elimination (Yang, Wu & Pan 2016, 2017).

The recursive algorithms (RNEA, ABA) take n dependent steps for an n-link chain. These take
O(log n) dependent steps of batched array operations, at the price of more work:

* ``rnea(..., algorithm="scan")`` — inverse dynamics as a forward scan of velocities and
  accelerations (13×13 operands, or their SE(3)×se(3)² form) and a backward scan of joint
  forces (Yang, Wu & Pan 2017 §III-B/C, Algorithm 1); chains and trees (:mod:`.rnea_scan`).
* ``forward_dynamics(..., method="jsiia")`` — M by n scan IDs, then a factorisation (Yang, Wu & Pan 2017
  §III-D, Algorithm 2; Yang, Wu & Pan 2016 eq. (7)); any tree (:mod:`.jsiia`).
* ``method="abia"`` — serial articulated-inertia recursion, then scanned linear recursions
  (Yang, Wu & Pan 2017 §III-E, Algorithm 3; Yang, Wu & Pan 2016 eq. (8)); serial chains of 1-DoF joints (:mod:`.abia`).
* ``method="oee"`` — constraint force algorithm with odd-even elimination of its block
  tri-diagonal system (Yang, Wu & Pan 2016 §III–IV, Algorithms 1–2); serial chains of 1-DoF joints with
  invertible link inertias (:mod:`.cfa`, :mod:`.oee`).

Reached through the Backend API: ``be.rnea(model, q, v, a, algorithm="scan")``,
``be.forward_dynamics(model, q, v, tau, method="oee")``. Inputs are checked like every Backend
function, leading batch dimensions are kept, results are float64 ``(..., nv)``. The code is
written against an array namespace: CuPy when the inputs are CuPy arrays (results stay on the
device); the device namespace of a backend that has one (the ``gpu`` backend's ``rt.xp`` on a
GPU: host inputs are copied to the device and results back, like the backend's own functions);
NumPy otherwise.
The scan itself is selectable for chains (``scan="hillis-steele"`` (default), ``"blelloch"``,
``"serial"``), and the RNEA operand form (``operand="group"`` (default) or ``"matrix"``) when
calling these functions directly.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from ..model import RobotModel
from . import abia, cfa, jsiia
from .kinematics import link_external_forces, link_transforms
from .namespace import ModelArrays, check_args, model_arrays
from .rnea_scan import OPERANDS, rnea_scan
from .scan import METHODS as SCAN_METHODS

ALGORITHMS = ("recursive", "scan")
METHODS = ("aba", "minv", "jsiia", "abia", "oee")

__all__ = ["ALGORITHMS", "METHODS", "OPERANDS", "SCAN_METHODS", "MethodNotApplicableError", "applicable_methods",
           "forward_dynamics", "rnea"]


class MethodNotApplicableError(ValueError):
    """A forward-dynamics method was asked for on a model it does not handle."""


_FAILS: "weakref.WeakKeyDictionary[RobotModel, dict[str, str]]" = weakref.WeakKeyDictionary()


def _requirement_failures(model: RobotModel, c: ModelArrays) -> dict[str, str]:
    """Method -> why it does not apply to ``model`` (methods absent here apply); cached per model."""
    if model in _FAILS:
        return _FAILS[model]
    out: dict[str, str] = {}
    why = None
    if not c.topo.serial:
        why = (f"is not a serial chain (link parents {list(map(int, c.topo.parent))[:12]}"
               f"{'…' if model.nlinks > 12 else ''})")
    elif not c.single_dof:
        why = "has joints with more than one degree of freedom (ball/free); only hinge/slide joints are handled"
    if why is not None:
        out["abia"] = out["oee"] = why
    else:
        not_pd = np.any(np.linalg.eigvalsh(np.asarray(model.link_inertia)) <= 0, axis=1)
        if np.any(not_pd):
            out["oee"] = (f"has a link without positive-definite spatial inertia (link {int(np.flatnonzero(not_pd)[0])}, "
                          f"e.g. a massless link of a multi-joint body); the CFA needs every J_i invertible")
    _FAILS[model] = out
    return out


def applicable_methods(model: RobotModel) -> tuple[str, ...]:
    """The forward-dynamics methods that apply to ``model`` (always ``aba``, ``minv``, ``jsiia``)."""
    fails = _requirement_failures(model, model_arrays(model, np))
    return tuple(m for m in METHODS if m not in fails)


def _device_runtime(backend, xp):
    """The backend's device runtime (``rt`` with ``xp``, ``to_device``, ``to_host``; the ``gpu``
    backend on a GPU) when the inputs are host arrays, else None (simulators run on the host)."""
    rt = getattr(backend, "rt", None)
    dev = getattr(rt, "xp", None)
    if xp is not np or dev is None or dev is np or getattr(rt, "simulate", True):
        return None
    return rt


def _to_device(rt, arrays: list) -> list:
    return arrays if rt is None else [None if a is None else rt.to_device(a) for a in arrays]


def rnea(backend, model: RobotModel, q, v, a, fext=None, algorithm: str = "scan", *,
         operand: str = "group", scan: str = "hillis-steele"):
    """Inverse dynamics ``τ = M a + c(q, v) - Σ J_b^T fext_b`` (..., nv) [N m or N].

    algorithm: ``"scan"`` (Yang, Wu & Pan 2017, this package) or ``"recursive"`` (the backend's RNEA).
    operand: ``"group"`` (SE(3)×se(3)² triples, Yang, Wu & Pan 2017 eq. (13)) or ``"matrix"`` (dense 13×13
    and 7×7 operands, eqs. (12), (16)). scan: ``"hillis-steele"``, ``"blelloch"`` or ``"serial"``
    (chains; trees always use pointer jumping)."""
    if algorithm == "recursive":
        return backend.rnea(model, q, v, a, fext)
    if algorithm != "scan":
        raise ValueError(f"rnea: unknown algorithm '{algorithm}'; valid algorithms: {', '.join(ALGORITHMS)}")
    xp, batch, flat = check_args("rnea", model, fext, q=(q, "nq"), v=(v, "nv"), a=(a, "nv"))
    rt = _device_runtime(backend, xp)
    qf, vf, af, fe = _to_device(rt, flat)
    c = model_arrays(model, xp if rt is None else rt.xp)
    E, r = link_transforms(c, qf)
    tau = rnea_scan(c, E, r, vf, af, link_external_forces(c, fe), operand=operand, method=scan)
    tau = tau.reshape(batch + (model.nv,))
    return tau if rt is None else rt.to_host(tau)


def forward_dynamics(backend, model: RobotModel, q, v, tau, fext=None, method: str = "oee", *,
                     scan: str = "hillis-steele") -> Any:
    """Joint accelerations ``a = M^-1 (τ - c(q, v))`` (..., nv) by ``method``.

    ``"jsiia"``, ``"abia"``, ``"oee"`` run here; ``"aba"``, ``"minv"`` are passed to the backend.
    A method that does not apply to the model raises :class:`MethodNotApplicableError` naming the
    methods that do. scan: the scan used for the chain recursions (see :func:`rnea`)."""
    if method in ("aba", "minv"):
        return backend.forward_dynamics(model, q, v, tau, fext, method=method)
    if method not in METHODS:
        raise ValueError(f"forward_dynamics: unknown method '{method}'; valid methods: {', '.join(METHODS)}")
    xp, batch, flat = check_args("forward_dynamics", model, fext, q=(q, "nq"), v=(v, "nv"),
                                 tau=(tau, "nv"))
    fails = _requirement_failures(model, model_arrays(model, np))
    if method in fails:
        ok = ", ".join(m for m in METHODS if m not in fails)
        need = {"abia": "a serial chain of hinge/slide joints",
                "oee": "a serial chain of hinge/slide joints with invertible link inertias"}[method]
        raise MethodNotApplicableError(f"forward_dynamics: method '{method}' needs {need}, but model '{model.name}' "
                                       f"{fails[method]}. Methods that apply to this model: {ok}")
    rt = _device_runtime(backend, xp)
    qf, vf, tf, fe = _to_device(rt, flat)
    c = model_arrays(model, xp if rt is None else rt.xp)
    E, r = link_transforms(c, qf)
    fl = link_external_forces(c, fe)
    if method == "jsiia":
        out = jsiia.jsiia(c, E, r, vf, tf, fl, method=scan)
    elif method == "abia":
        out = abia.abia(c, E, r, vf, tf, fl, method=scan)
    else:
        out = cfa.cfa(c, E, r, vf, tf, fl, method=scan)
    out = out.reshape(batch + (model.nv,))
    return out if rt is None else rt.to_host(out)
