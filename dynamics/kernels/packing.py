"""Flat arrays describing a :class:`~dynamics.model.RobotModel` for the compiled kernels.

Every kernel receives the model as a handful of plain float64 / int64 arrays (never a Python
object), so one compilation of each kernel serves every robot. The column layout of those arrays is
given by the module constants below; the kernels import them as compile-time constants.

Per link ``i`` (``li`` int64, ``lf`` float64):

* ``li[i]``: parent, joint type, qpos address, dof address, number of dofs, end (exclusive) of the
  contiguous dof range of the subtree rooted at ``i``, number of *supported* dofs (dofs of ``i`` and
  its ancestors, the only non-zero columns of every per-link derivative), then those dofs sorted.
* ``lf[i]``: the spatial inertia about the link origin in compact form (mass ``m``, first moment
  ``h = m c`` and rotational inertia ``Io`` about the link origin, row-major); pre-joint placement
  ``R0`` (row-major) and ``p0`` in the parent link frame; joint axis and anchor in the child frame;
  hinge/slide reference ``qpos0``; the motion subspace ``S`` stored as rows of ``S^T`` (one 6-vector per
  dof); the armature of each dof; the centre of mass ``c`` (zero for massless links).

``gv``: gravity (3) and the total moving mass. ``bl``/``bf``: link and placement (R row-major, p) of
every MuJoCo body in its link frame (for external forces and body frames).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from ..model import RobotModel

# ---- li columns
LI_PARENT, LI_TYPE, LI_QADR, LI_DOFADR, LI_NV, LI_SUBEND, LI_NSUP, LI_SUP = range(8)
# ---- lf columns (the compact inertia comes first so that kernels read it as a 13-column row)
LF_MASS = 0      # 1
LF_H = 1         # 3
LF_IO = 4        # 9
LF_R0 = 13       # 9
LF_P0 = 22       # 3
LF_AXIS = 25     # 3
LF_ANCHOR = 28   # 3
LF_QPOS0 = 31    # 1
LF_ST = 32       # 6 x 6: row k = S[:, k]
LF_ARM = 68      # 6
LF_COM = 74      # 3
LF_SIZE = 77
# ---- frame rows (bf, frame arrays): R row-major then p
FR_R = 0
FR_P = 9
FR_SIZE = 12

# joint types (MuJoCo mjtJoint numbering, as dynamics.joints.JointType)
J_FREE, J_BALL, J_SLIDE, J_HINGE = 0, 1, 2, 3


@dataclass(eq=False)
class PackedModel:
    """The model as flat arrays (see the module docstring for the layout)."""

    nq: int
    nv: int
    nlinks: int
    nbody: int
    li: np.ndarray
    lf: np.ndarray
    gv: np.ndarray
    bl: np.ndarray
    bf: np.ndarray
    site_link: np.ndarray
    site_frames: np.ndarray
    no_fext: np.ndarray   # (0, nbody, 6), read-only: "no external forces" for the kernels
    no_minv: np.ndarray   # (0, nv, nv), read-only: "no M^-1 given"
    frames: dict = field(default_factory=dict)   # frame name -> (link (1,), placement (1, 12))


def _readonly(x: np.ndarray) -> np.ndarray:
    """Kernel inputs are passed read-only (one compiled signature); see :func:`as_kernel_input`."""
    x.flags.writeable = False
    return x


def _frame_row(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    out = np.empty(FR_SIZE)
    out[FR_R:FR_R + 9] = np.asarray(R, float).reshape(9)
    out[FR_P:FR_P + 3] = p
    return out


def _subtree_dof_end(model: RobotModel) -> np.ndarray:
    """End (exclusive) of the dof range of each link's subtree, checking that the range is contiguous
    (MuJoCo numbers bodies depth-first, so a subtree's dofs always follow its root's)."""
    L, nv = model.nlinks, model.nv
    end = np.empty(L, dtype=np.int64)
    for i in range(L):
        in_sub = np.flatnonzero(model.link_ancestor[model.dof_link, i])
        start = model.link_dofadr[i]
        if in_sub.size != in_sub[-1] - start + 1 or in_sub[0] != start:
            raise ValueError(f"model '{model.name}': the dofs of the subtree of joint "
                             f"'{model.joint_names[i]}' are not contiguous; the numba backend needs "
                             f"MuJoCo's depth-first body order")
        end[i] = in_sub[-1] + 1
    assert np.all(end <= nv)
    return end


def pack(model: RobotModel) -> PackedModel:
    """Build the flat arrays of ``model`` (no caching; see :func:`packed`)."""
    L, nv = model.nlinks, model.nv
    li = np.zeros((L, LI_SUP + nv), dtype=np.int64)
    lf = np.zeros((L, LF_SIZE))
    li[:, LI_PARENT] = model.link_parent
    li[:, LI_TYPE] = model.link_type
    li[:, LI_QADR] = model.link_qadr
    li[:, LI_DOFADR] = model.link_dofadr
    li[:, LI_NV] = model.link_nv
    li[:, LI_SUBEND] = _subtree_dof_end(model)
    for i in range(L):
        sup = np.flatnonzero(model.dof_support[i])
        li[i, LI_NSUP] = sup.size
        li[i, LI_SUP:LI_SUP + sup.size] = sup
        I = model.link_inertia[i]
        lf[i, LF_R0:LF_R0 + 9] = model.link_R0[i].reshape(9)
        lf[i, LF_P0:LF_P0 + 3] = model.link_p0[i]
        lf[i, LF_AXIS:LF_AXIS + 3] = model.link_axis[i]
        lf[i, LF_ANCHOR:LF_ANCHOR + 3] = model.link_anchor[i]
        lf[i, LF_QPOS0] = model.link_qpos0[i]
        # compact spatial inertia: I = [[m 1, -[h]x], [[h]x, Io]] (exact entries of link_inertia)
        lf[i, LF_MASS] = I[0, 0]
        lf[i, LF_H:LF_H + 3] = (I[5, 1], I[3, 2], I[4, 0])
        lf[i, LF_IO:LF_IO + 9] = I[3:, 3:].reshape(9)
        S = model.link_S[i]
        d0 = model.link_dofadr[i]
        for k in range(model.link_nv[i]):
            lf[i, LF_ST + 6 * k:LF_ST + 6 * k + 6] = S[:, k]
            lf[i, LF_ARM + k] = model.dof_armature[d0 + k]
        lf[i, LF_COM:LF_COM + 3] = model.link_com[i]
    gv = np.zeros(4)
    gv[:3] = model.gravity
    gv[3] = model.total_mass
    bl = np.asarray(model.body_link, dtype=np.int64).copy()
    bf = np.stack([_frame_row(model.body_R[b], model.body_p[b]) for b in range(model.nbody)])
    nsite = len(model.site_names)
    site_link = np.empty(nsite, dtype=np.int64)
    site_frames = np.empty((nsite, FR_SIZE))
    for s in range(nsite):
        b = int(model.site_body[s])
        R = model.body_R[b] @ model.site_R[s]
        p = model.body_p[b] + model.body_R[b] @ model.site_p[s]
        site_link[s] = model.body_link[b]
        site_frames[s] = _frame_row(R, p)
    return PackedModel(nq=model.nq, nv=nv, nlinks=L, nbody=model.nbody, li=li, lf=lf, gv=gv, bl=bl,
                       bf=np.ascontiguousarray(bf), site_link=site_link, site_frames=site_frames,
                       no_fext=_readonly(np.zeros((0, model.nbody, 6))), no_minv=_readonly(np.zeros((0, nv, nv))))


_cache: "weakref.WeakKeyDictionary[RobotModel, PackedModel]" = weakref.WeakKeyDictionary()


def packed(model: RobotModel) -> PackedModel:
    """The (cached) flat arrays of ``model``; RobotModel is immutable, so packing once is enough."""
    pm = _cache.get(model)
    if pm is None:
        pm = pack(model)
        _cache[model] = pm
    return pm


def frame_arrays(model: RobotModel, pm: PackedModel, frame: str) -> tuple[np.ndarray, np.ndarray]:
    """``(link (1,), placement (1, 12))`` of a site or body name, resolved by ``model.frame``
    (sites win over bodies; unknown names raise KeyError listing the valid ones)."""
    hit = pm.frames.get(frame)
    if hit is None:
        link, R, p = model.frame(frame)
        hit = (np.array([link], dtype=np.int64), _frame_row(R, p)[None, :])
        pm.frames[frame] = hit
    return hit


def as_kernel_input(x: np.ndarray) -> np.ndarray:
    """``x`` as a read-only float64 C-contiguous array: the one input type the kernels are compiled
    for (numba compiles writeable and read-only arrays separately; inputs coming out of
    ``np.broadcast_to`` are read-only, so every input is passed read-only, as a view)."""
    if x.dtype != np.float64 or not x.flags.c_contiguous:
        if x.dtype.kind == "c":
            raise TypeError("kernels: complex inputs (complex-step differentiation) are not supported; "
                            "use the 'numpy' backend for complex-step derivatives")
        x = np.ascontiguousarray(x, dtype=np.float64)
    if x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x
