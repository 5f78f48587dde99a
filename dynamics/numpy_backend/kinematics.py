"""Forward kinematics, frame Jacobians and their time variation, centre of mass.

Reference frames follow Pinocchio's ``ReferenceFrame``: ``"local"`` (frame axes, frame origin),
``"world"`` (world axes, velocity of the point at the world origin) and ``"local_world_aligned"``
(world axes, frame origin). Spatial vectors are (linear, angular).
"""

from __future__ import annotations

import numpy as np

from ..spatial import adjoint, motion_cross_matrix, motion_transform, skew
from .transforms import link_transforms

REFERENCE_FRAMES = ("local", "world", "local_world_aligned")


def check_reference(reference: str) -> str:
    if reference not in REFERENCE_FRAMES:
        raise ValueError(f"unknown reference frame '{reference}'; use one of {', '.join(REFERENCE_FRAMES)}")
    return reference


def link_placements(model, q):
    """World placements of all links: oR (B, L, 3, 3), op (B, L, 3), plus the parent-to-child X."""
    X, R, p = link_transforms(model, q)
    oR = np.empty_like(R)
    op = np.empty_like(p)
    for i in range(model.nlinks):
        lam = model.link_parent[i]
        if lam < 0:
            oR[:, i], op[:, i] = R[:, i], p[:, i]
        else:
            oR[:, i] = oR[:, lam] @ R[:, i]
            op[:, i] = op[:, lam] + (oR[:, lam] @ p[:, i, :, None])[..., 0]
    return oR, op, X


def _frame_world(model, oR, op, link, Rf, pf):
    B = oR.shape[0]
    if link < 0:
        return np.broadcast_to(Rf, (B, 3, 3)).copy(), np.broadcast_to(pf, (B, 3)).copy()
    return oR[:, link] @ Rf, op[:, link] + oR[:, link] @ pf


def frame_placement(model, q, frame: str):
    """World rotation (B, 3, 3) and position (B, 3) of a site, body or geom frame."""
    link, Rf, pf = model.frame(frame)
    oR, op, _ = link_placements(model, q)
    return _frame_world(model, oR, op, link, Rf, pf)


def body_placements(model, q):
    """World rotations (B, nbody, 3, 3) and positions (B, nbody, 3) of all MuJoCo bodies
    (MuJoCo's ``xmat``/``xpos``)."""
    oR, op, _ = link_placements(model, q)
    B = q.shape[0]
    bR = np.empty((B, model.nbody, 3, 3), dtype=oR.dtype)
    bp = np.empty((B, model.nbody, 3), dtype=op.dtype)
    for b in range(model.nbody):
        bR[:, b], bp[:, b] = _frame_world(model, oR, op, model.body_link[b], model.body_R[b], model.body_p[b])
    return bR, bp


def site_placements(model, q):
    """World rotations (B, nsite, 3, 3) and positions (B, nsite, 3) of all sites (``site_xmat``/``site_xpos``)."""
    bR, bp = body_placements(model, q)
    sb = model.site_body
    R = bR[:, sb] @ model.site_R
    p = bp[:, sb] + (bR[:, sb] @ model.site_p[..., None])[..., 0]
    return R, p


def _world_jacobian_columns(model, oR, op):
    """World-frame Jacobian columns of every dof (B, 6, nv): ``Ad(oM_link(k)) S_k``."""
    Ad = adjoint(oR, op)  # (B, L, 6, 6)
    return np.einsum("bkij,kj->bik", Ad[:, model.dof_link], model.dof_S)


def _to_reference(J_world, oRf, opf, reference):
    if reference == "world":
        return J_world
    if reference == "local":
        return motion_transform(oRf, opf) @ J_world
    out = J_world.copy()
    out[:, :3] -= skew(opf) @ J_world[:, 3:]
    return out


def frame_jacobian(model, q, frame: str, reference: str = "local_world_aligned"):
    """Frame Jacobian (B, 6, nv) mapping v to the frame's spatial velocity in ``reference``."""
    check_reference(reference)
    link, Rf, pf = model.frame(frame)
    oR, op, _ = link_placements(model, q)
    oRf, opf = _frame_world(model, oR, op, link, Rf, pf)
    Jw = _world_jacobian_columns(model, oR, op)
    if link < 0:
        Jw[:] = 0
    else:
        Jw[:, :, ~model.dof_support[link]] = 0
    return _to_reference(Jw, oRf, opf, reference)


def frame_jacobian_time_variation(model, q, v, frame: str, reference: str = "local_world_aligned"):
    """Frame Jacobian J (B, 6, nv) and its time derivative dJ/dt (B, 6, nv) along velocity v."""
    check_reference(reference)
    link, Rf, pf = model.frame(frame)
    oR, op, _ = link_placements(model, q)
    oRf, opf = _frame_world(model, oR, op, link, Rf, pf)
    Jw = _world_jacobian_columns(model, oR, op)
    B, nv = q.shape[0], model.nv
    if link < 0:
        z = np.zeros((B, 6, nv), dtype=Jw.dtype)
        return z, z.copy()
    # world-frame spatial velocity of each link: sum of the columns that move it
    ov = np.einsum("bik,lk,bk->bli", Jw, model.dof_support.astype(float), v)
    dJw = np.einsum("bkij,bjk->bik", motion_cross_matrix(ov[:, model.dof_link]), Jw)
    mask = ~model.dof_support[link]
    Jw[:, :, mask] = 0
    dJw[:, :, mask] = 0
    if reference == "world":
        return Jw, dJw
    J = _to_reference(Jw, oRf, opf, reference)
    if reference == "local":
        vf = np.einsum("bik,bk->bi", J, v)
        dJ = motion_transform(oRf, opf) @ dJw - motion_cross_matrix(vf) @ J
        return J, dJ
    pdot = np.einsum("bik,bk->bi", J[:, :3], v)
    dJ = _to_reference(dJw, oRf, opf, "local_world_aligned")
    dJ[:, :3] -= skew(pdot) @ Jw[:, 3:]
    return J, dJ


def center_of_mass(model, q):
    """Centre of mass of the moving links in world coordinates (B, 3)."""
    oR, op, _ = link_placements(model, q)
    x = op + (oR @ model.link_com[..., None])[..., 0]
    return np.einsum("l,bli->bi", model.link_mass, x) / model.total_mass


def com_jacobian(model, q):
    """Jacobian of the centre of mass (B, 3, nv) and the centre of mass (B, 3)."""
    oR, op, _ = link_placements(model, q)
    x = op + (oR @ model.link_com[..., None])[..., 0]
    msub = model.link_mass.astype(float).copy()
    mx = model.link_mass[None, :, None] * x
    for i in range(model.nlinks - 1, -1, -1):
        lam = model.link_parent[i]
        if lam >= 0:
            msub[lam] += msub[i]
            mx[:, lam] += mx[:, i]
    Jw = _world_jacobian_columns(model, oR, op)
    lk = model.dof_link
    J = msub[lk] * Jw[:, :3] + np.cross(Jw[:, 3:], mx[:, lk], axisa=1, axisb=2, axisc=1)
    M = model.total_mass
    return J / M, np.einsum("l,bli->bi", model.link_mass, x) / M
