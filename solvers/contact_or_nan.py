"""Contact and impulse dynamics evaluated for a batch of a solver's candidate states: a state that
cannot be evaluated (non-finite input from a diverging line-search candidate, or a contact Jacobian
that lost rank because a candidate stretched a leg straight) gets NaN results, as ABA's result does
on divergence, so that the candidate is rejected instead of ending the solve. The compiled rollout
(:mod:`solvers.contact_rollout_numba`) rejects the same candidates."""

from __future__ import annotations

import numpy as np

from dynamics.contact import RankDeficientContactError


def contact_dynamics_or_nan(backend, model, q: np.ndarray, v: np.ndarray, tau: np.ndarray, contacts):
    """``(a (..., nv), lam (..., nc))`` of ``backend.contact_dynamics``, NaN for the states that
    cannot be evaluated. q (..., nq), v and tau (..., nv) float64."""
    ok = np.isfinite(q).all(axis=-1) & np.isfinite(v).all(axis=-1) & np.isfinite(tau).all(axis=-1)
    if np.all(ok):
        try:
            return tuple(backend.contact_dynamics(model, q, v, tau, contacts))
        except RankDeficientContactError:
            pass
    lead = v.shape[:-1]
    a = np.full(lead + (model.nv,), np.nan)
    lam = np.full(lead + (contacts.nc,), np.nan)
    qf, vf, tf = q.reshape(-1, q.shape[-1]), v.reshape(-1, model.nv), tau.reshape(-1, model.nv)
    af, lf = a.reshape(-1, model.nv), lam.reshape(-1, contacts.nc)
    for b in np.flatnonzero(np.reshape(ok, -1)):
        try:
            af[b], lf[b] = backend.contact_dynamics(model, qf[b], vf[b], tf[b], contacts)
        except RankDeficientContactError:
            pass
    return a, lam


def impulse_dynamics_or_nan(backend, model, q: np.ndarray, v: np.ndarray, contacts, restitution: float):
    """``(v_plus (..., nv), impulse (..., nc))`` of ``backend.impulse_dynamics``, NaN for the states
    that cannot be evaluated. q (..., nq), v (..., nv) float64."""
    ok = np.isfinite(q).all(axis=-1) & np.isfinite(v).all(axis=-1)
    if np.all(ok):
        try:
            return tuple(backend.impulse_dynamics(model, q, v, contacts, restitution))
        except RankDeficientContactError:
            pass
    lead = v.shape[:-1]
    vp = np.full(lead + (model.nv,), np.nan)
    imp = np.full(lead + (contacts.nc,), np.nan)
    qf, vf = q.reshape(-1, q.shape[-1]), v.reshape(-1, model.nv)
    pf, mf = vp.reshape(-1, model.nv), imp.reshape(-1, contacts.nc)
    for b in np.flatnonzero(np.reshape(ok, -1)):
        try:
            pf[b], mf[b] = backend.impulse_dynamics(model, qf[b], vf[b], contacts, restitution)
        except RankDeficientContactError:
            pass
    return vp, imp
