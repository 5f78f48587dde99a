"""Contact and impulse dynamics evaluated for a batch of a solver's candidate states: a state that
cannot be evaluated (non-finite input from a diverging line-search candidate, or a contact Jacobian
that lost rank because a candidate stretched a leg straight) gets NaN results, as ABA's result does
on divergence, so that the candidate is rejected instead of ending the solve. The compiled rollout
(:mod:`solvers.contact_rollout_numba`) rejects the same candidates."""

from __future__ import annotations

import numpy as np

from dynamics.contact import RankDeficientContactError


def _or_nan(evaluate, model, contacts, *states: np.ndarray):
    """``(nv-vector, nc-vector)`` results of ``evaluate(*states)`` for a batch of states (the arrays
    ``states``, each (..., n)): all at once where every state is finite and the call succeeds, else
    state by state, NaN for the non-finite states and those whose contact Jacobian lost rank."""
    ok = np.logical_and.reduce([np.isfinite(s).all(axis=-1) for s in states])
    if np.all(ok):
        try:
            return tuple(evaluate(*states))
        except RankDeficientContactError:
            pass
    lead = states[0].shape[:-1]
    first = np.full(lead + (model.nv,), np.nan)
    second = np.full(lead + (contacts.nc,), np.nan)
    flat = [s.reshape(-1, s.shape[-1]) for s in states]
    ff, sf = first.reshape(-1, model.nv), second.reshape(-1, contacts.nc)
    for b in np.flatnonzero(np.reshape(ok, -1)):
        try:
            ff[b], sf[b] = evaluate(*(s[b] for s in flat))
        except RankDeficientContactError:
            pass
    return first, second


def contact_dynamics_or_nan(backend, model, q: np.ndarray, v: np.ndarray, tau: np.ndarray, contacts):
    """``(a (..., nv), lam (..., nc))`` of ``backend.contact_dynamics``, NaN for the states that
    cannot be evaluated. q (..., nq), v and tau (..., nv) float64."""
    return _or_nan(lambda q, v, tau: backend.contact_dynamics(model, q, v, tau, contacts), model, contacts, q, v, tau)


def impulse_dynamics_or_nan(backend, model, q: np.ndarray, v: np.ndarray, contacts, restitution: float):
    """``(v_plus (..., nv), impulse (..., nc))`` of ``backend.impulse_dynamics``, NaN for the states
    that cannot be evaluated. q (..., nq), v (..., nv) float64."""
    return _or_nan(lambda q, v: backend.impulse_dynamics(model, q, v, contacts, restitution), model, contacts, q, v)
