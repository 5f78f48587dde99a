"""The per-state work arrays that the recursive passes share, declared once and laid out at the
start of every ``*_range`` kernel's scratch in one order, so one compiled function carves them
for every kernel.

Three nested layouts, each the previous one then more fields (:meth:`~.scratch.Layout.then`):

- :data:`PLACEMENTS`: link placements in the parent (``R`` (L, 3, 3), ``p`` (L, 3)) and in the
  world (``oR``, ``op``), external forces per link ``fl`` (L, 6)
  and four spatial vectors of scratch ``tmp`` (4, 6);
- :data:`MOTION`: then the world-frame joint motion subspaces ``J`` (nv, 6), link velocities
  ``ov`` (L, 6) and joint velocities ``vJ`` (L, 6), and world inertias ``oY`` (L, 13);
- :data:`ARTICULATED`: then ABA's articulated inertias ``IA``, ``U``, ``UD``, ``Dinv`` (L, 6, 6),
  its 6×6 work matrices ``tmp66``, ``chol``, bias forces ``cb``, ``pA`` (L, 6), accelerations
  ``oa`` (L, 6) and ``u`` (nv,).

A kernel declares ``GROUP.then(its own fields)`` and reads the group with :func:`placement_views`,
:func:`motion_views` and :func:`articulated_views`, its own fields with :func:`~.scratch.view2`
etc.
"""

from __future__ import annotations

from .jit import jit
from .scratch import DOFS, LINKS, Layout, view1, view2, view3

PLACEMENTS = Layout(
    ("R", (LINKS, 3, 3)),
    ("p", (LINKS, 3)),
    ("oR", (LINKS, 3, 3)),
    ("op", (LINKS, 3)),
    ("fl", (LINKS, 6)),
    ("tmp", (4, 6)),
)
MOTION = PLACEMENTS.then(
    ("J", (DOFS, 6)),
    ("ov", (LINKS, 6)),
    ("vJ", (LINKS, 6)),
    ("oY", (LINKS, 13)),
)
ARTICULATED = MOTION.then(
    ("IA", (LINKS, 6, 6)),
    ("U", (LINKS, 6, 6)),
    ("UD", (LINKS, 6, 6)),
    ("Dinv", (LINKS, 6, 6)),
    ("tmp66", (6, 6)),
    ("chol", (6, 6)),
    ("cb", (LINKS, 6)),
    ("pA", (LINKS, 6)),
    ("oa", (LINKS, 6)),
    ("u", (DOFS,)),
)
_A = ARTICULATED.spec       # the offsets of PLACEMENTS' and MOTION's fields are the same in it


@jit
def placement_views(buf, L, nv):
    """``(R, p, oR, op, fl, tmp)`` of a buffer laid out from :data:`PLACEMENTS`."""
    return (view3(buf, _A.R, L, nv), view2(buf, _A.p, L, nv), view3(buf, _A.oR, L, nv), view2(buf, _A.op, L, nv),
            view2(buf, _A.fl, L, nv), view2(buf, _A.tmp, L, nv))


@jit
def motion_views(buf, L, nv):
    """``(J, ov, vJ, oY)`` of a buffer laid out from :data:`MOTION`."""
    return view2(buf, _A.J, L, nv), view2(buf, _A.ov, L, nv), view2(buf, _A.vJ, L, nv), view2(buf, _A.oY, L, nv)


@jit
def articulated_views(buf, L, nv):
    """``(IA, U, UD, Dinv, tmp66, chol, cb, pA, oa, u)`` of a buffer laid out from :data:`ARTICULATED`."""
    return (view3(buf, _A.IA, L, nv), view3(buf, _A.U, L, nv), view3(buf, _A.UD, L, nv), view3(buf, _A.Dinv, L, nv),
            view2(buf, _A.tmp66, L, nv), view2(buf, _A.chol, L, nv), view2(buf, _A.cb, L, nv),
            view2(buf, _A.pA, L, nv), view2(buf, _A.oa, L, nv), view1(buf, _A.u, L, nv))
