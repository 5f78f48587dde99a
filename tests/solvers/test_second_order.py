"""Analytical second-order dynamics derivatives (IDSVA-SO / FDSVA-SO, Singh, Russell & Wensing 2022)
against independent oracles: complex step and central differences of the analytical first-order
derivatives (``rnea_derivatives`` / ``aba_derivatives``, themselves checked against Pinocchio
elsewhere) and of CRBA; plus the structural properties the tensors must have (Hessian symmetries,
the Lie-bracket asymmetry of ball/free-joint blocks, branch-induced zeros) and the contraction
helper.

Error metrics follow Singh, Russell & Wensing 2022 §V-C: maximum absolute error, and the maximum
relative error taken over the entries whose reference magnitude is above 1e-6 of the tensor's
largest entry.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest


import dynamics  # noqa: E402
from dynamics.second_order_contraction import (aba_second_order_contraction, contract_output,  # noqa: E402
                                               rnea_second_order_contraction)
from dynamics.second_order_numerical import aba_second_derivatives_numerical  # noqa: E402
from dynamics.spatial import motion_cross  # noqa: E402
from tests.helpers.oracle_helpers import rnea_second_numerical  # noqa: E402
from tests.helpers.random_trees import random_tree_model  # noqa: E402

BE = dynamics.get_backend("numpy")
RNEA_NAMES = ("d2tau_dq2", "d2tau_dv2", "d2tau_dqdv", "dM_dq")
ABA_NAMES = ("d2a_dq2", "d2a_dv2", "d2a_dqdv", "d2a_dqdtau")
# tolerances relative to each tensor's largest entry: complex step is exact to rounding; central
# differences (step 1e-5) carry O(h²) truncation and O(ε/h) rounding
TOL = {"complex": 1e-10, "central": 1e-6}

_MODELS: dict[str, dynamics.RobotModel] = {}


def _model(name: str) -> dynamics.RobotModel:
    if name not in _MODELS:
        if name.startswith("tree"):
            seed, free = {"tree-free": (3, True), "tree-fixed": (8, False), "tree-refs": (11, True)}[name]
            _MODELS[name] = random_tree_model(seed, 9, free_root=free, refs=name == "tree-refs", branching=0.6)[0]
        else:
            _MODELS[name] = dynamics.load_model(name)
    return _MODELS[name]


ROBOTS = ("iiwa", "hyq", "atlas", "tree-free", "tree-fixed", "tree-refs")


def _state(model, rng, B=2, fext=True):
    q = model.random_configuration(rng, size=B)
    v = rng.normal(size=(B, model.nv))
    a = rng.normal(size=(B, model.nv))
    fe = rng.normal(size=(B, model.nbody, 6)) if fext else None
    return q, v, a, fe


def _errors(x, ref):
    scale = np.abs(ref).max()
    err = np.abs(x - ref)
    big = np.abs(ref) > 1e-6 * max(scale, 1e-300)
    rel = (err[big] / np.abs(ref[big])).max() if big.any() else 0.0
    return err.max(), rel, scale


@pytest.mark.parametrize("method", ["complex", "central"])
@pytest.mark.parametrize("robot", ROBOTS)
def test_rnea_second_derivatives_match_numerical(robot, method):
    model = _model(robot)
    q, v, a, fe = _state(model, np.random.default_rng(zlib.crc32(robot.encode())))
    an = BE.rnea_second_derivatives(model, q, v, a, fe)
    ref = rnea_second_numerical(model, q, v, a, fe, method)
    for name, x, r in zip(RNEA_NAMES, an, ref):
        assert x.shape == (2, model.nv, model.nv, model.nv)
        mae, _, scale = _errors(x, r)
        assert mae <= TOL[method] * max(scale, 1.0), f"{robot} {name} vs {method}: max abs err {mae:.3e} (scale {scale:.3e})"


@pytest.mark.parametrize("method", ["complex", "central"])
@pytest.mark.parametrize("robot", ROBOTS)
def test_aba_second_derivatives_match_numerical(robot, method):
    model = _model(robot)
    q, v, tau, fe = _state(model, np.random.default_rng(zlib.crc32(robot.encode()) + 1))
    an = BE.aba_second_derivatives(model, q, v, tau, fe)
    ref = aba_second_derivatives_numerical("numpy", model, q, v, tau, fe, method=method)
    for name, x, r in zip(ABA_NAMES, an, ref):
        mae, _, scale = _errors(x, r)
        assert mae <= TOL[method] * max(scale, 1.0), f"{robot} {name} vs {method}: max abs err {mae:.3e} (scale {scale:.3e})"


def test_external_forces_change_only_the_configuration_hessian():
    model = _model("atlas")
    q, v, a, fe = _state(model, np.random.default_rng(5))
    with_f = BE.rnea_second_derivatives(model, q, v, a, fe)
    without = BE.rnea_second_derivatives(model, q, v, a)
    assert np.abs(with_f[0] - without[0]).max() > 1e-3   # body-fixed forces rotate with q
    for x, y in zip(with_f[1:], without[1:]):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("robot", ["iiwa", "tree-fixed"])
def test_single_dof_hessians_are_symmetric(robot):
    """v-Hessians and ∂M/∂q (in i, j) are always symmetric; the q-Hessian is symmetric on the
    dofs of single-dof joints (all of iiwa's)."""
    model = _model(robot)
    q, v, a, _ = _state(model, np.random.default_rng(2), fext=False)
    qq, vv, _, dM = BE.rnea_second_derivatives(model, q, v, a)
    aqq, avv, _, _ = BE.aba_second_derivatives(model, q, v, a)
    sw = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    np.testing.assert_allclose(vv, sw(vv), atol=1e-12 * np.abs(vv).max())
    np.testing.assert_allclose(avv, sw(avv), atol=1e-12 * np.abs(avv).max())
    np.testing.assert_allclose(dM, np.swapaxes(dM, 1, 2), atol=1e-12 * np.abs(dM).max())  # M symmetric
    single = np.repeat(model.link_nv == 1, model.link_nv)          # dofs of single-dof joints
    blk = np.ix_(np.arange(model.nv), single, single)
    if robot == "iiwa":
        assert single.all()
    np.testing.assert_allclose(qq[(slice(None),) + blk], sw(qq)[(slice(None),) + blk], atol=1e-11 * np.abs(qq).max())
    np.testing.assert_allclose(aqq[(slice(None),) + blk], sw(aqq)[(slice(None),) + blk], atol=1e-11 * np.abs(aqq).max())


@pytest.mark.parametrize("robot", ["hyq", "tree-free"])
def test_multi_dof_configuration_hessian_asymmetry_is_the_lie_bracket(robot):
    """For right perturbations X_j X_k − X_k X_j = X_[e_j, e_k]: ``T[:, j, k] − T[:, k, j] =
    ∂τ/∂q · (e_k × e_j)`` for two dofs of one free or ball joint, zero for every other pair."""
    model = _model(robot)
    q, v, a, fe = _state(model, np.random.default_rng(3))
    qq = BE.rnea_second_derivatives(model, q, v, a, fe)[0]
    dq = BE.rnea_derivatives(model, q, v, a, fe)[0]
    pred = np.zeros_like(qq)
    for li in range(model.nlinks):
        if model.link_nv[li] < 3:
            continue
        d0, nd = model.link_dofadr[li], model.link_nv[li]
        emb = np.eye(6) if nd == 6 else np.vstack([np.zeros((3, 3)), np.eye(3)])   # tangent -> motion vector
        for j in range(nd):
            for k in range(nd):
                br = motion_cross(emb[:, k], emb[:, j])
                coef = br if nd == 6 else br[3:]
                pred[:, :, d0 + j, d0 + k] = dq[:, :, d0:d0 + nd] @ coef
    asym = qq - np.swapaxes(qq, -1, -2)
    assert np.abs(pred).max() > 1e-3
    np.testing.assert_allclose(asym, pred, atol=1e-10 * np.abs(qq).max())


def _chain_triples(model):
    """Boolean (nv, nv, nv): True where the three dofs lie on one root-to-leaf chain."""
    anc = model.link_ancestor
    lk = model.dof_link
    comp = anc[lk][:, lk] | anc[lk][:, lk].T                         # dof pair on one chain
    return comp[:, :, None] & comp[:, None, :] & comp[None, :, :]


@pytest.mark.parametrize("robot", ["hyq", "atlas", "tree-fixed"])
def test_branch_induced_zeros(robot):
    """Entries whose three dofs are not all on one chain vanish exactly, and the complex-step
    reference agrees that they are zero (the sparsity is physical, not an omission)."""
    model = _model(robot)
    q, v, a, fe = _state(model, np.random.default_rng(4))
    off = ~_chain_triples(model)
    assert off.sum() > 0.2 * off.size
    an = BE.rnea_second_derivatives(model, q, v, a, fe)
    ref = rnea_second_numerical(model, q, v, a, fe, "complex")
    for name, x, r in zip(RNEA_NAMES, an, ref):
        assert (x[:, off] == 0).all(), name
        assert np.abs(r[:, off]).max() <= 1e-10 * max(np.abs(r).max(), 1.0), name
    # example from the brief: two legs of HyQ do not interact in M's configuration derivative
    if robot == "hyq":
        lf, rh = model.link_dofadr[1], model.link_dofadr[model.nlinks - 1]
        l1, l2 = model.dof_link[lf], model.dof_link[rh]
        assert not model.link_ancestor[l1, l2] and not model.link_ancestor[l2, l1]
        assert (an[3][:, lf, rh, :] == 0).all() and (an[3][:, :, lf, rh] == 0).all()


@pytest.mark.parametrize("robot", ROBOTS)
def test_every_tensor_entry_is_written_once(robot):
    """The contracted kernel accumulates instead of assigning, which is only equal to contracting
    the tensor if no entry is written twice; and the written entries must cover every chain
    triple for the velocity Hessian (which has no structurally zero entries within a chain)."""
    from dynamics.numpy_backend.rnea_second_derivatives import _TENSORS, _plan
    model = _model(robot)
    nv = model.nv
    plans = _plan(model)
    keys = np.concatenate([lp.tensor * nv**3 + lp.out * nv**2 + lp.fs for lp in plans])
    assert np.unique(keys).size == keys.size
    vv = np.zeros(nv**3, bool)
    sel = keys // nv**3 == _TENSORS.index("vv")
    vv[keys[sel] % nv**3] = True
    np.testing.assert_array_equal(vv.reshape(nv, nv, nv), _chain_triples(model))


def test_dM_dq_matches_crba_differences():
    model = _model("tree-free")
    q, _, _, _ = _state(model, np.random.default_rng(6), fext=False)
    z = np.zeros((q.shape[0], model.nv))
    dM = BE.rnea_second_derivatives(model, q, z, z)[3]
    h = 1e-6
    for k in range(model.nv):
        d = np.zeros(model.nv)
        d[k] = h
        Mp = BE.crba(model, model.integrate(q, d))
        Mm = BE.crba(model, model.integrate(q, -d))
        np.testing.assert_allclose(dM[..., k], (Mp - Mm) / (2 * h), atol=1e-7 * np.abs(dM).max())


@pytest.mark.parametrize("robot", ["atlas", "tree-refs"])
def test_contraction_matches_materialised_and_numerical(robot):
    model = _model(robot)
    rng = np.random.default_rng(7)
    q = model.random_configuration(rng, size=(2, 2))
    v, x = rng.normal(size=(2, 2, model.nv)), rng.normal(size=(2, 2, model.nv))
    lam = rng.normal(size=(2, 2, model.nv))
    fe = rng.normal(size=(model.nbody, 6))                                   # broadcast over the batch
    # inverse dynamics: contracted inside IDSVA-SO == λᵀ of the materialised tensors
    T = BE.rnea_second_derivatives(model, q, v, x, fe)
    C = rnea_second_order_contraction(model, q, v, x, lam, fe)
    ref = contract_output(lam, *T)
    for got, r in zip((C.qq, C.vv, C.qv, C.qa), ref[:3] + (np.swapaxes(ref[3], -1, -2),)):
        assert got.shape == (2, 2, model.nv, model.nv)
        np.testing.assert_allclose(got, r, atol=1e-12 * max(np.abs(r).max(), 1.0))
    # forward dynamics: against the complex-step provider (independent of IDSVA-SO)
    Ca = aba_second_order_contraction(model, q, v, x, lam, fe)
    num = aba_second_derivatives_numerical("numpy", model, q, v, x, fe, method="complex")
    for got, r in zip((Ca.qq, Ca.vv, Ca.qv, Ca.qtau), contract_output(lam, *num)):
        np.testing.assert_allclose(got, r, atol=1e-10 * max(np.abs(r).max(), 1.0))


def test_batch_shapes_and_input_errors():
    model = _model("iiwa")
    rng = np.random.default_rng(8)
    q = model.random_configuration(rng, size=(3, 2))
    v = rng.normal(size=model.nv)                                           # broadcasts
    tau = rng.normal(size=(3, 2, model.nv))
    out = BE.aba_second_derivatives(model, q, v, tau)
    assert all(t.shape == (3, 2, model.nv, model.nv, model.nv) for t in out)
    single = BE.aba_second_derivatives(model, q[1, 0], v, tau[1, 0])
    for t, s in zip(out, single):
        np.testing.assert_allclose(t[1, 0], s, rtol=1e-12, atol=1e-12)
    assert BE.supports("rnea_second_derivatives") and BE.supports("aba_second_derivatives")
    with pytest.raises(ValueError, match="lam has shape"):
        aba_second_order_contraction(model, q, v, tau, np.zeros(model.nv + 1))
    with pytest.raises(ValueError, match="non-finite"):
        aba_second_order_contraction(model, q, v, tau, np.full(model.nv, np.nan))
    with pytest.raises(ValueError, match="v has shape"):
        BE.rnea_second_derivatives(model, q, np.zeros(model.nv - 1), tau)
    with pytest.raises(TypeError, match="RobotModel"):
        rnea_second_order_contraction("iiwa", q, v, tau, v)
    with pytest.raises(ValueError, match="output axis"):
        contract_output(np.zeros(model.nv), np.zeros((model.nv + 1, 2, 2)))
