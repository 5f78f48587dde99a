"""Array namespace, argument checking and per-model constants for the parallel-in-depth algorithms.

Every algorithm in :mod:`dynamics.parallel_depth` is written against an array namespace ``xp``
(``numpy`` here; ``cupy`` when the inputs are CuPy arrays), so the same code runs on a GPU. This
module picks ``xp`` from the inputs, checks and flattens the arguments exactly like the Backend
API (:func:`dynamics.backend.batch_args`: same shape/finiteness checks and messages, leading batch
dimensions broadcast and flattened to one axis ``B``), and caches the model's constant arrays
(inertias, motion subspaces, joint data, CFA bases) once per model and namespace.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ..backend import batch_args
from ..inputs import ShapeError
from ..joints import JointType
from ..model import RobotModel
from ..spatial import skew


def array_namespace(*arrays: Any) -> ModuleType:
    """``cupy`` if any argument is a CuPy array, else ``numpy`` (CuPy is imported only then)."""
    for x in arrays:
        if x is not None and type(x).__module__.split(".")[0] == "cupy":
            import cupy
            return cupy
    return np


def to_numpy(x: Any) -> np.ndarray:
    """Host copy of an ``xp`` array (no-op for numpy)."""
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


def check_args(func: str, model: RobotModel, fext, **arrays) -> tuple[ModuleType, tuple[int, ...], list]:
    """``(xp, batch, [flat arrays..., fext or None])`` for ``arrays`` given as ``name=(x, "nq"|"nv")``.

    NumPy inputs go through :func:`dynamics.backend.batch_args` (the Backend API's own checks);
    CuPy inputs get the same checks on the device. Flat arrays are ``(B, n)`` float64, fext
    ``(B, nbody, 6)``."""
    xp = array_namespace(fext, *(x for x, _ in arrays.values()))
    if xp is np:
        batch, flat = batch_args(func, model, fext, **arrays)
        return np, batch, flat
    if not isinstance(model, RobotModel):
        raise TypeError(f"{func}: expected a RobotModel (from dynamics.load_model) as first argument, "
                        f"got {type(model).__name__}")
    checked = []
    for name, (x, n) in arrays.items():
        checked.append((name, _xp_array(xp, name, x, (getattr(model, n),), func), 1))
    if fext is not None:
        checked.append(("fext", _xp_array(xp, "fext", fext, (model.nbody, 6), func), 2))
    shapes = [a.shape[: a.ndim - nt] for _, a, nt in checked]
    try:
        batch = np.broadcast_shapes(*shapes)
    except ValueError:
        desc = ", ".join(f"{k}{a.shape}" for k, a, _ in checked)
        raise ShapeError(f"{func}: batch dimensions do not broadcast: {desc}") from None
    B = math.prod(batch)
    flat = []
    for _, a, nt in checked:
        tail = a.shape[a.ndim - nt:]
        flat.append(xp.ascontiguousarray(xp.broadcast_to(a, batch + tail).reshape((B,) + tail)))
    if fext is None:
        flat.append(None)
    return xp, batch, flat


def _xp_array(xp: ModuleType, name: str, x, tail: tuple[int, ...], func: str):
    arr = xp.asarray(x)
    if arr.dtype.kind in "iub":
        arr = arr.astype(xp.float64)
    elif arr.dtype.kind != "f":
        raise TypeError(f"{func}: {name} must be a real numeric array, got dtype {arr.dtype}")
    elif arr.dtype != xp.float64:
        arr = arr.astype(xp.float64)
    if arr.ndim < len(tail) or tuple(arr.shape[arr.ndim - len(tail):]) != tail:
        want = "(..., " + ", ".join(str(t) for t in tail) + ")"
        raise ShapeError(f"{func}: {name} has shape {tuple(arr.shape)}, expected {want} for this model; "
                         f"leading dimensions are batch dimensions")
    if not bool(xp.isfinite(arr).all()):
        raise ValueError(f"{func}: {name} contains non-finite values (NaN or inf); check the state/inputs passed in")
    return arr


# ---------------------------------------------------------------- model constants
@dataclass(frozen=True, eq=False)
class Topology:
    """Tree structure facts, host-side (numpy ints).

    parent: (L,) parent link, -1 for the world. serial: every link's parent is the previous link.
    depth: number of links on the longest root-to-leaf path. order: a depth-first preorder of the
    links; in it every subtree is the contiguous range ``[pos[i], end[i])``."""
    parent: np.ndarray
    serial: bool
    depth: int
    order: np.ndarray
    pos: np.ndarray
    end: np.ndarray


@dataclass(frozen=True, eq=False)
class ModelArrays:
    """A model's constant arrays in namespace ``xp`` (shapes in link count L, dof count nv).

    inertia: (L, 6, 6) link spatial inertias [kg, kg m, kg m^2]; smap: (nv, 6L) maps a velocity
    vector to the stacked joint motions ``S_i v_i`` (and, transposed, stacked link forces to joint
    forces); armature: (nv,); gravity_acc: (6,) base acceleration ``-g``; body_X: (nbody, 6, 6)
    force transforms body -> its link and body_sel: (L, nbody) 0/1 body-to-link incidence (map
    external forces to links); joint data for the link transforms; for models of 1-DoF joints
    ``S1`` (L, 6) the joint axes, and ``dof_per_link`` when dof i belongs to link i."""
    xp: ModuleType
    topo: Topology
    inertia: Any
    smap: Any
    armature: Any
    gravity_acc: Any
    body_X: Any
    body_sel: Any
    R0: Any
    p0: Any
    axis: Any
    anchor: Any
    qpos0: Any
    hinge: np.ndarray
    slide: np.ndarray
    ball: np.ndarray
    free: np.ndarray
    qadr: np.ndarray
    single_dof: bool
    dof_per_link: bool
    S1: Any


_CACHE: "weakref.WeakKeyDictionary[RobotModel, dict[str, ModelArrays]]" = weakref.WeakKeyDictionary()


def topology(model: RobotModel) -> Topology:
    """Host-side tree facts of ``model`` (see :class:`Topology`)."""
    parent = np.asarray(model.link_parent, dtype=np.int64)
    L = parent.shape[0]
    serial = bool(np.array_equal(parent, np.arange(L) - 1))
    depth_of = np.zeros(L, dtype=np.int64)
    children: list[list[int]] = [[] for _ in range(L)]
    roots = []
    for i in range(L):
        p = int(parent[i])
        depth_of[i] = 1 if p < 0 else depth_of[p] + 1
        (roots if p < 0 else children[p]).append(i)
    order: list[int] = []
    stack = roots[::-1]
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(children[i][::-1])
    order_a = np.asarray(order, dtype=np.int64)
    pos = np.empty(L, dtype=np.int64)
    pos[order_a] = np.arange(L)
    size = np.ones(L, dtype=np.int64)
    for i in range(L - 1, -1, -1):
        if parent[i] >= 0:
            size[parent[i]] += size[i]
    return Topology(parent=parent, serial=serial, depth=int(depth_of.max(initial=0)), order=order_a,
                    pos=pos, end=pos + size)


def model_arrays(model: RobotModel, xp: ModuleType = np) -> ModelArrays:
    """The constants of ``model`` in namespace ``xp``, built once and cached per model."""
    per_model = _CACHE.setdefault(model, {})
    key = xp.__name__
    if key in per_model:
        return per_model[key]
    L, nv = model.nlinks, model.nv
    smap = np.zeros((nv, 6 * L))
    for i in range(L):
        d0, nd = int(model.link_dofadr[i]), int(model.link_nv[i])
        smap[d0:d0 + nd, 6 * i:6 * i + 6] = np.asarray(model.link_S[i]).T
    body_X = np.zeros((model.nbody, 6, 6))
    body_sel = np.zeros((L, model.nbody))
    for b in range(1, model.nbody):
        lk = int(model.body_link[b])
        if lk < 0:
            continue
        Rb, pb = model.body_R[b], model.body_p[b]
        body_X[b, :3, :3] = Rb
        body_X[b, 3:, 3:] = Rb
        body_X[b, 3:, :3] = skew(pb) @ Rb
        body_sel[lk, b] = 1.0
    gacc = np.zeros(6)
    gacc[:3] = -np.asarray(model.gravity)
    types = np.asarray(model.link_type)
    single = bool(np.all(np.asarray(model.link_nv) == 1))
    S1 = np.stack([np.asarray(model.link_S[i])[:, 0] for i in range(L)]) if single else None
    A = xp.asarray
    out = ModelArrays(
        xp=xp, topo=topology(model), inertia=A(model.link_inertia), smap=A(smap),
        armature=A(model.dof_armature), gravity_acc=A(gacc), body_X=A(body_X), body_sel=A(body_sel),
        R0=A(model.link_R0),
        p0=A(model.link_p0), axis=A(model.link_axis), anchor=A(model.link_anchor), qpos0=A(model.link_qpos0),
        hinge=np.flatnonzero(types == JointType.HINGE), slide=np.flatnonzero(types == JointType.SLIDE),
        ball=np.flatnonzero(types == JointType.BALL), free=np.flatnonzero(types == JointType.FREE),
        qadr=np.asarray(model.link_qadr, dtype=np.int64), single_dof=single,
        dof_per_link=single and bool(np.array_equal(np.asarray(model.link_dofadr), np.arange(L))),
        S1=None if S1 is None else A(S1))
    per_model[key] = out
    return out
