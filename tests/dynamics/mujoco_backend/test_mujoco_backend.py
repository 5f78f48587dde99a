"""The ``mujoco`` backend (MuJoCo's dynamics, derivatives by central differences of it) against
the numpy reference and Pinocchio, on fixed-base robots (the iiwa, a random hinge/slide chain)
where the two dynamics are the same equations, and on a floating base (HyQ) for the free-joint
conversions.

Tolerances: MuJoCo's dynamics (aba, rnea, crba, minv, ∂a/∂τ = M⁻¹) agree with the reference to
rounding (1e-10 relative to max(1, |ref|)); the central-difference derivatives to the backend's
declared ``rtol`` (1e-5). The backend-wide checks of every public function (batches, broadcasting,
external forces, kinematics) are in tests/dynamics/test_backend_consistency.py, which runs every
registered backend at its declared tolerance.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

import dynamics  # noqa: E402
from dynamics.mujoco_backend import MujocoBackend  # noqa: E402
from tests.helpers.comparisons import check_all  # noqa: E402
from tests.helpers.random_chains import random_chain_model  # noqa: E402

EXACT = 1e-10
REF = dynamics.get_backend("numpy")


@pytest.fixture(scope="module")
def be() -> MujocoBackend:
    return dynamics.get_backend("mujoco")


@pytest.fixture(scope="module")
def robots(bundled) -> dict:
    return {"iiwa": bundled["iiwa"], "chain": random_chain_model(5, 9), "hyq": bundled["hyq"]}


def states(model, n: int, seed: int):
    rng = np.random.default_rng(seed)
    return (model.random_configuration(rng, size=(n,)), rng.normal(size=(n, model.nv)),
            3 * rng.normal(size=(n, model.nv)), rng.normal(size=(n, model.nbody, 6)))


def test_registered_and_capabilities(be):
    assert isinstance(be, MujocoBackend)
    assert dynamics.available_backends()["mujoco"][0]
    assert be.rtol == 1e-5
    assert not be.supports("aba_second_derivatives") and not be.supports("rnea_second_derivatives")
    assert not be.prefers_compiled_solver and not be.complex_step_safe
    m = dynamics.load_model("iiwa")
    q, v, a, _ = states(m, 1, 0)
    for fn in ("aba_second_derivatives", "rnea_second_derivatives"):
        with pytest.raises(NotImplementedError, match="numpy"):
            getattr(be, fn)(m, q, v, a)


@pytest.mark.parametrize("name", ("iiwa", "chain", "hyq"))
def test_dynamics_match_reference_to_rounding(be, robots, name):
    """aba, rnea (with and without external forces), crba, minv: the same equations, so rounding."""
    m = robots[name]
    q, v, x, fext = states(m, 3, 1)
    for fe in (None, fext):
        check_all(f"{name} aba", be.aba(m, q, v, x, fe), REF.aba(m, q, v, x, fe), EXACT)
        check_all(f"{name} rnea", be.rnea(m, q, v, x, fe), REF.rnea(m, q, v, x, fe), EXACT)
    check_all(f"{name} crba", be.crba(m, q), REF.crba(m, q), EXACT)
    check_all(f"{name} minv", be.minv(m, q), REF.minv(m, q), EXACT)
    check_all(f"{name} gravity", be.gravity_torques(m, q), REF.gravity_torques(m, q), EXACT)


@pytest.mark.parametrize("name", ("iiwa", "chain", "hyq"))
def test_derivatives_within_declared_tolerance(be, robots, name):
    """Central differences of mj_forward / mj_inverse: within rtol of the analytical reference, and
    not exact (a check that the differences are what is computed); ∂a/∂τ is exact."""
    m = robots[name]
    q, v, x, fext = states(m, 3, 2)
    for fe in (None, fext):
        ours, ref = be.aba_derivatives(m, q, v, x, fe), REF.aba_derivatives(m, q, v, x, fe)
        check_all(f"{name} aba_derivatives", ours, ref, be.rtol)
        check_all(f"{name} da_dtau", ours[2], ref[2], EXACT)
        assert np.abs(ours[0] - ref[0]).max() > 0.0
        check_all(f"{name} rnea_derivatives", be.rnea_derivatives(m, q, v, x, fe), REF.rnea_derivatives(m, q, v, x, fe),
                  be.rtol)


def test_derivatives_against_pinocchio(be, robots):
    """∂a/∂q, ∂a/∂v, ∂a/∂τ of the iiwa against Pinocchio's computeABADerivatives."""
    pin = pytest.importorskip("pinocchio")
    from tests.helpers.pinocchio_models import oracle_from_mjcf
    m = robots["iiwa"]
    orc = oracle_from_mjcf(m.path, mujoco.MjModel.from_xml_path(m.path))
    q, v, tau, _ = states(m, 3, 3)
    dq, dv, dtau = be.aba_derivatives(m, q, v, tau)
    for k in range(q.shape[0]):
        d = orc.model.createData()
        rq, rv, rt = (np.array(x) for x in pin.computeABADerivatives(orc.model, d, orc.q_to_pin(q[k]),
                                                                      orc.v_to_pin(v[k]), orc.v_to_pin(tau[k])))
        rt = np.triu(rt) + np.triu(rt, 1).T
        check_all("iiwa da_dq vs pinocchio", dq[k], orc.mat_from_pin(rq), be.rtol)
        check_all("iiwa da_dv vs pinocchio", dv[k], orc.mat_from_pin(rv), be.rtol)
        check_all("iiwa da_dtau vs pinocchio", dtau[k], orc.mat_from_pin(rt), EXACT)


def test_given_minv_is_used_as_by_the_reference(be, robots):
    """With ``minv`` given, ∂a/∂x = -minv ∂τ/∂x (Dadu-RBD's use), as the numpy backend defines it."""
    m = robots["chain"]
    q, v, tau, _ = states(m, 2, 4)
    Mi = 0.5 * REF.minv(m, q)        # deliberately not M⁻¹(q): the product must use what is given
    check_all("minv given", be.aba_derivatives(m, q, v, tau, minv=Mi), REF.aba_derivatives(m, q, v, tau, minv=Mi),
              be.rtol)


def test_passive_forces_and_actuation_are_not_applied(be, robots):
    """The iiwa has joint damping and actuators in its MJCF: τ is the whole generalised force
    (the action models add damping), so the backend's private model disables them; the caller's
    MjModel is left as it was."""
    m = robots["iiwa"]
    assert np.any(m.dof_damping != 0)
    flags = m.mj_model.opt.disableflags
    q, v, tau, _ = states(m, 2, 5)
    check_all("aba at high velocity", be.aba(m, q, 10 * v, tau), REF.aba(m, q, 10 * v, tau), EXACT)
    assert m.mj_model.opt.disableflags == flags


def test_bad_input():
    with pytest.raises(ValueError, match="fd_step"):
        MujocoBackend(fd_step=0.0)
    with pytest.raises(ValueError, match="fd_step"):
        MujocoBackend(fd_step=0.1)
    be = MujocoBackend()
    m = dynamics.load_model("iiwa")
    with pytest.raises(ValueError, match="non-finite"):
        be.aba(m, np.full(m.nq, np.nan), np.zeros(m.nv), np.zeros(m.nv))
    # free-joint armature: MuJoCo applies it in world axes, the dynamics layer in body axes
    hyq = dynamics.load_model("hyq")
    mj = copy.deepcopy(hyq.mj_model)
    mj.dof_armature[:6] = 0.1
    arm = dynamics.from_mujoco(mj, name="hyq_armature")
    with pytest.raises(dynamics.UnsupportedModelError, match="armature on a free joint"):
        be.aba(arm, arm.neutral(), np.zeros(arm.nv), np.zeros(arm.nv))
