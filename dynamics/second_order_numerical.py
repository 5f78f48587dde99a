"""Second-order forward-dynamics partials by differentiating the analytical first-order ones.

This is Singh, Russell & Wensing 2022's "Finite-Diff-2" baseline (and its complex-step variant): the tensors are the
central differences (or complex-step derivatives) of ``aba_derivatives`` along the tangent
perturbations of docs/conventions.md, evaluated for all perturbations in one batched call. It is
the fallback provider of DDP's second-order terms and the comparison point for the analytical
IDSVA-SO/FDSVA-SO path.

Index order ``[..., i, j, k]``: output ``a_i``, first variable ``j`` (the column of the
first-order matrix), second variable ``k`` (the direction the first-order matrix is differentiated
along). For configuration/configuration terms this is ``∂_k (∂_j a_i)`` where the ``k``-perturbation
is applied first: ``a(q ⊕ δ_k e_k ⊕ δ_j e_j)``; for single-DoF joints the order is immaterial.
"""

from __future__ import annotations

import numpy as np

from .inputs import as_array, broadcast_batch, unflatten


def aba_second_derivatives_numerical(backend, model, q, v, tau, fext=None, method: str = "central",
                                     eps: float | None = None):
    """``(d2a_dq2, d2a_dv2, d2a_dqdv, d2a_dqdtau)``, each (..., nv, nv, nv).

    method: ``"central"`` (step ``eps``, default 1e-5) or ``"complex"`` (complex step ``eps``,
    default 1e-20; needs a complex-capable backend — the numpy reference).
    ``∂²a/∂τ²`` and ``∂²a/∂v∂τ`` vanish identically and are not returned.
    """
    from .backend import get_backend
    be = get_backend(backend)
    if method not in ("central", "complex"):
        raise ValueError(f"unknown method '{method}'; use 'central' or 'complex'")
    if method == "complex" and not be.complex_step_safe:
        raise ValueError(f"complex step needs a complex-step-safe backend ('numpy'), not '{be.name}'")
    func = "aba_second_derivatives_numerical"
    arrays = {"q": (as_array("q", q, (model.nq,), func), 1), "v": (as_array("v", v, (model.nv,), func), 1),
              "tau": (as_array("tau", tau, (model.nv,), func), 1)}
    if fext is not None:
        arrays["fext"] = (as_array("fext", fext, (model.nbody, 6), func), 2)
    batch, flat = broadcast_batch(func, arrays)
    qf, vf, tf = flat[:3]
    ff = flat[3] if fext is not None else None
    B, nv = qf.shape[0], model.nv
    E = np.eye(nv)
    # perturbation blocks: q-directions, v-directions, tau-directions; each (nv, nv) direction set
    if method == "central":
        h = 1e-5 if eps is None else eps
        signs = (h, -h)
    else:
        h = 1e-20 if eps is None else eps
        signs = (1j * h,)
    Q, V, T, F = [], [], [], []
    for s in signs:
        for which in range(3):
            dq = E * s if which == 0 else np.zeros((nv, nv))
            dv = E * s if which == 1 else np.zeros((nv, nv))
            dt = E * s if which == 2 else np.zeros((nv, nv))
            qq = np.repeat(qf[:, None], nv, axis=1).astype(np.result_type(qf, dq))
            qq = model.integrate(qq, np.broadcast_to(dq, (B, nv, nv))) if which == 0 else qq
            Q.append(qq)
            V.append(vf[:, None] + dv)
            T.append(tf[:, None] + dt)
            if ff is not None:
                F.append(np.repeat(ff[:, None], nv, axis=1))
    Q = np.stack(Q, axis=1)           # (B, P, nv, nq) with P = len(signs) * 3
    V = np.stack(V, axis=1)
    T = np.stack(T, axis=1)
    Fx = np.stack(F, axis=1) if F else None
    if method == "complex":
        from .numpy_backend.aba_derivatives import aba_derivatives as kernel
        shp = Q.shape[:3]
        res = kernel(model, Q.reshape(-1, model.nq), V.reshape(-1, nv).astype(complex), T.reshape(-1, nv).astype(complex),
                     None if Fx is None else Fx.reshape(-1, model.nbody, 6).astype(complex))
        daq, dav, _ = (r.reshape(shp + (nv, nv)) for r in res)
        D_q, D_v = daq.imag / h, dav.imag / h          # (B, 3, nv_dir, nv, nv)
    else:
        daq, dav, _ = be.aba_derivatives(model, Q, V, T, Fx)
        D_q = (daq[:, 0:3] - daq[:, 3:6]) / (2 * h)
        D_v = (dav[:, 0:3] - dav[:, 3:6]) / (2 * h)
    # D_*[b, block, k, i, j] -> tensor[b, i, j, k]
    d2a_dq2 = np.moveaxis(D_q[:, 0], 1, -1)
    d2a_dqdv = np.moveaxis(D_q[:, 1], 1, -1)
    d2a_dv2 = np.moveaxis(D_v[:, 1], 1, -1)
    d2a_dqdtau = np.moveaxis(D_q[:, 2], 1, -1)
    out = (d2a_dq2, d2a_dv2, d2a_dqdv, d2a_dqdtau)
    return tuple(unflatten(batch, np.ascontiguousarray(x.real)) for x in out)


def contact_second_derivatives_numerical(backend, model, q, v, tau, contacts, eps: float = 1e-5):
    """Second-order partials of the *constrained* acceleration of
    :meth:`~dynamics.Backend.contact_dynamics`: ``(d2a_dq2, d2a_dv2, d2a_dqdv, d2a_dqdtau)``, each
    (B, nv, nv, nv), index order and perturbations as :func:`aba_second_derivatives_numerical`.

    Central differences (step ``eps``) of the analytical first-order
    ``contact_dynamics_derivatives``, all 6·nv perturbations of a state in one batched call — the
    numerical provider DDP uses on contact knots until an analytical form exists. q, v, tau:
    float64 (B, nq), (B, nv), (B, nv)."""
    from .backend import get_backend
    be = get_backend(backend)
    q, v, tau = (np.asarray(a, float) for a in (q, v, tau))
    B, nv = q.shape[0], model.nv
    E = np.eye(nv) * eps
    Z = np.zeros((nv, nv))
    Q, V, T = [], [], []
    for s in (1.0, -1.0):
        for which in range(3):
            qq = np.repeat(q[:, None], nv, axis=1)
            if which == 0:
                qq = model.integrate(qq, np.broadcast_to(s * E, (B, nv, nv)))
            Q.append(qq)
            V.append(v[:, None] + (s * E if which == 1 else Z))
            T.append(tau[:, None] + (s * E if which == 2 else Z))
    Q = np.stack(Q, axis=1).reshape(-1, model.nq)
    V = np.stack(V, axis=1).reshape(-1, nv)
    T = np.stack(T, axis=1).reshape(-1, nv)
    d = be.contact_dynamics_derivatives(model, Q, V, T, contacts)
    daq = np.asarray(d[0]).reshape(B, 6, nv, nv, nv)
    dav = np.asarray(d[1]).reshape(B, 6, nv, nv, nv)
    D_q = (daq[:, 0:3] - daq[:, 3:6]) / (2 * eps)      # [b, block, k, i, j]
    D_v = (dav[:, 0:3] - dav[:, 3:6]) / (2 * eps)
    return (np.moveaxis(D_q[:, 0], 1, -1), np.moveaxis(D_v[:, 1], 1, -1), np.moveaxis(D_q[:, 1], 1, -1),
            np.moveaxis(D_q[:, 2], 1, -1))
