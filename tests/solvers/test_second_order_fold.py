"""DDP's second-order factors with ``−M⁻¹`` folded into C (docs/second_order.md, "What DDP keeps"):
on a backend that gives FDSVA-SO's bracketed terms B (``∂²a = −M⁻¹ B``,
``Backend.aba_second_derivatives_bracket``), the Euler knots keep T = the Hessian assembled from B
and C = ``−M⁻¹ᵀ [dt² Jwᵀ | dt I]``. The oracle for the contracted curvature ``V'_x · F2`` is the
Hessian of the scalar ``V'_xᵀ F(z)``, ``F(z) = f(x ⊕ dx, u + du) ⊖ f(x, u)``, by second differences
of the numpy reference's step values alone (no derivative code), on HyQ's free base (the SE(3)
integration Jacobian in C) and a floating tree with ball joints and passive forces, with the numba
backend (compiled fold) and the numpy one (numpy fold).
The compiled kernel's skipped rows of ``∂M/∂q`` are checked to be zero against the numpy reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics.kernels.aba_second_derivatives import chain_pairs
from dynamics.numba_backend import packed
from solvers.discrete_dynamics import DiscreteDynamics
from tests.helpers.random_trees import random_passive_tree_model, random_tree_model

N, DT = 4, 0.02


def _knots(m, rng):
    q = m.random_configuration(rng, size=N)
    q[:, :3] *= 0.1
    x = np.concatenate([q, 0.5 * rng.normal(size=(N, m.nv))], axis=-1)
    return x, rng.normal(size=(N, m.nu))


def _curvature_by_second_differences(item, m, x, u, Vx, h=1e-4):
    """Hessian (nz, nz) of ``φ(z) = Vxᵀ (f(x ⊕ dx, u + du) ⊖ f(x, u))`` at z = 0 by central second
    differences of the step's values (``item.step``, the numpy backend's), all 4 nz² points in one
    batch; ``⊕``/``⊖`` from the model's ``integrate``/``difference``."""
    nq, nv = m.nq, m.nv
    ndx, nz = 2 * nv, 2 * nv + m.nu
    E = np.eye(nz) * h
    signs = [(1, 1), (1, -1), (-1, 1), (-1, -1)]
    Z = np.stack([sa * E[:, None, :] + sb * E[None, :, :] for sa, sb in signs])   # (4, nz, nz, nz)
    Z = Z.reshape(-1, nz)
    xq = m.integrate(np.broadcast_to(x[:nq], (Z.shape[0], nq)), Z[:, :nv])
    xs = np.concatenate([xq, x[nq:] + Z[:, nv:ndx]], axis=-1)
    us = u + Z[:, ndx:]
    f0 = item.step(x[None], u[None])[0]
    f = item.step(xs, us)
    dF = np.concatenate([m.difference(np.broadcast_to(f0[:nq], (f.shape[0], nq)), f[:, :nq]),
                         f[:, nq:] - f0[nq:]], axis=-1)
    phi = (dF @ Vx).reshape(4, nz, nz)
    return (phi[0] - phi[1] - phi[2] + phi[3]) / (4 * h * h)


_MODELS: dict = {}


def _model(name: str):
    if name not in _MODELS:
        _MODELS[name] = dynamics.load_model(name) if name == "hyq" else random_passive_tree_model(
            5, 7, name="floating_ball_tree", free_root=True, ball=True, slide=True)
    return _MODELS[name]


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("robot", ["hyq", "tree"])
def test_folded_curvature_matches_second_differences_on_a_floating_base(robot, backend):
    """HyQ's free base; a random floating tree with ball joints, damping, springs and B ≠ I."""
    m = _model(robot)
    item = DiscreteDynamics(m, dynamics.get_backend(backend), DT)
    oracle = DiscreteDynamics(m, dynamics.get_backend("numpy"), DT)
    assert item._fold and item.acc.bracket_second_order        # the folded path is the one tested
    rng = np.random.default_rng(5)
    x, u = _knots(m, rng)
    d = item.derivatives(x, u, second_order=True)
    nv, ndx = m.nv, 2 * m.nv
    # C's acceleration rows are −M⁻¹ᵀ [dt² Jwᵀ | dt I]: not the unfolded constant pattern
    assert np.abs(d.C[:, :nv, nv:ndx] + DT * np.swapaxes(d.states.acc.partials[2], -1, -2)).max() < 1e-12 * \
        np.abs(d.C).max()
    for t in (0, N - 1):
        Vx = rng.normal(size=ndx)
        got = d.curvature(t, Vx)
        ref = _curvature_by_second_differences(oracle, m, x[t], u[t], Vx)
        scale = np.abs(ref).max()
        assert np.abs(got - ref).max() <= 1e-5 * scale, (t, np.abs(got - ref).max(), scale)
        # the comparison can fail: C without the −M⁻¹ fold (the tensors' T kept) is far off
        C0 = np.zeros_like(d.C[t])
        C0[:nv, :nv] = DT * DT * d.Jw[t].T
        C0[np.arange(nv), nv + np.arange(nv)] = DT
        C0[nv:] = d.C[t, nv:]
        wrong = np.tensordot(C0 @ Vx, d.T[t], axes=(0, 0))
        assert np.abs(wrong - ref).max() > 1e-2 * scale


@pytest.mark.parametrize("name", ["iiwa", "hyq", "atlas", "tree-free", "tree-fixed"])
def test_skipped_rows_of_dM_dq_are_zero(name):
    """The compiled FDSVA-SO multiplies only the rows (l, j) of ``∂M_ml/∂q_j`` with l and j on one
    chain and j not a root joint's dof (:func:`dynamics.kernels.aba_second_derivatives.chain_pairs`);
    on the numpy reference's ∂M/∂q every other row is zero at random states, and the kept rows are
    a strict subset, so rows are really skipped."""
    if name.startswith("tree"):
        m = random_tree_model(3 if name == "tree-free" else 8, 9, free_root=name == "tree-free", branching=0.6)[0]
    else:
        m = dynamics.load_model(name)
    rng = np.random.default_rng(2)
    q = m.random_configuration(rng, size=3)
    v, a = rng.normal(size=(3, m.nv)), rng.normal(size=(3, m.nv))
    dM = dynamics.get_backend("numpy").rnea_second_derivatives(m, q, v, a)[3]   # [b, m, l, j] = ∂M_ml/∂q_j
    nv = m.nv
    pos, rows = np.empty(nv * nv, np.int64), np.empty(nv * nv, np.int64)
    n = chain_pairs(packed(m).li, nv, pos, rows)
    kept = (pos >= 0).reshape(nv, nv)
    assert n == kept.sum() < nv * nv and np.array_equal(rows[:n], np.flatnonzero(kept))
    row_norm = np.abs(dM).max(axis=(0, 1))                  # (l, j)
    assert row_norm[~kept].max() == 0.0
    assert (row_norm[kept] > 0).mean() > 0.5                 # the kept rows are mostly nonzero


def test_no_row_to_multiply():
    """A lone floating body: every row of ∂M/∂q is a root dof's, so the compiled kernel's product
    is empty (zero rows); both forms still match the numpy reference."""
    m = random_tree_model(2, 1, free_root=True)[0]
    nv = m.nv
    pos, rows = np.empty(nv * nv, np.int64), np.empty(nv * nv, np.int64)
    assert nv == 6 and chain_pairs(packed(m).li, nv, pos, rows) == 0
    rng = np.random.default_rng(3)
    q = m.random_configuration(rng, size=2)
    v, tau = rng.normal(size=(2, nv)), rng.normal(size=(2, nv))
    nb, ref = dynamics.get_backend("numba"), dynamics.get_backend("numpy")
    for fn in ("aba_second_derivatives", "aba_second_derivatives_bracket"):
        for x, r in zip(getattr(nb, fn)(m, q, v, tau), getattr(ref, fn)(m, q, v, tau)):
            np.testing.assert_allclose(x, r, rtol=0, atol=1e-12 * max(1.0, np.abs(r).max()))
