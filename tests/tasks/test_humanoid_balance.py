"""Humanoid balance (Atlas, both soles as 6-D contacts) and the flat-foot contact wrench cone.

* The cone's rows against independent computations: the centre of pressure of point forces
  spread over the sole (Σ p f_z / Σ f_z, positions and forces drawn here), and the yaw-torque
  bounds against a linear program over corner forces inside their friction pyramids (scipy).
* The cost's gradient against central differences of the problem's cost, and its Hessian in the
  controls against central differences of its gradient (the wrench is affine in the controls,
  so the Gauss–Newton Hessian is exact there).
* A lockstep closed loop in MuJoCo: Atlas squats and comes back with both soles flat on the floor,
  judged from MuJoCo's state (pelvis and CoM heights, sole tilt and corner heights).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

import dynamics
from dynamics import ContactSet
from solvers import ActionModel, ContactDynamics, ShootingProblem
from solvers.costs import WrenchConeCost, wrench_cone_rows
from tasks import HumanoidBalance, get_task

X, Y, MU = 0.13, 0.064, 0.5


def _wrench_of_point_forces(points: np.ndarray, forces: np.ndarray) -> np.ndarray:
    """Wrench (f, τ) at the frame origin of point forces (n, 3) at points (n, 3), τ = Σ p × f."""
    return np.r_[forces.sum(axis=0), np.cross(points, forces).sum(axis=0)]


def test_cop_rows_match_the_geometric_centre_of_pressure(rng):
    A, b = wrench_cone_rows(X, Y, MU, f_min=5.0)
    for _ in range(50):
        n = rng.integers(1, 6)
        # points on the sole plane, some outside the rectangle; forces pushing up, inside the pyramid
        pts = np.c_[rng.uniform(-1.5 * X, 1.5 * X, n), rng.uniform(-1.5 * Y, 1.5 * Y, n), np.zeros(n)]
        fz = rng.uniform(1.0, 200.0, n)
        f = np.c_[rng.uniform(-MU, MU, n) * fz, rng.uniform(-MU, MU, n) * fz, fz]
        w = _wrench_of_point_forces(pts, f)
        g = A @ w + b
        cop = (pts[:, :2] * fz[:, None]).sum(axis=0) / fz.sum()      # geometric CoP
        Fz = fz.sum()
        np.testing.assert_allclose(g[5:9], Fz * np.array([cop[1] - Y, -cop[1] - Y, cop[0] - X, -cop[0] - X]),
                                   rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(g[0], 5.0 - Fz, rtol=1e-12)
        inside = np.all(np.abs(pts[:, 0]) <= X) and np.all(np.abs(pts[:, 1]) <= Y)
        if inside:      # forces inside their pyramids at points of the sole: a feasible wrench
            assert g.max() <= 1e-9, g
        assert (g[5:9].max() > 0) == (abs(cop[0]) > X or abs(cop[1]) > Y)


def test_yaw_rows_match_a_linear_program_over_corner_forces(rng):
    A, b = wrench_cone_rows(X, Y, MU)
    corners = np.array([[X, Y, 0], [X, -Y, 0], [-X, Y, 0], [-X, -Y, 0]])
    # wrench of the 12 corner-force components, and the pyramids |f_x|, |f_y| <= μ f_z, f_z >= 0
    W = np.stack([_wrench_of_point_forces(corners, e.reshape(4, 3)) for e in np.eye(12)], axis=1)
    G = np.kron(np.eye(4), np.array([[1, 0, -MU], [-1, 0, -MU], [0, 1, -MU], [0, -1, -MU], [0, 0, -1.0]]))
    for _ in range(20):
        fz = rng.uniform(0.0, 100.0, 4)
        f = np.c_[rng.uniform(-MU, MU, 4) * fz, rng.uniform(-MU, MU, 4) * fz, fz].reshape(-1)
        w = W @ f
        lp = [linprog(s * W[5], A_ub=G, b_ub=np.zeros(20), A_eq=W[:5], b_eq=w[:5], bounds=[(None, None)] * 12)
              for s in (-1.0, 1.0)]
        assert all(r.status == 0 for r in lp)
        tz_max, tz_min = -lp[0].fun, lp[1].fun
        g = A @ w + b
        assert g.max() <= 1e-9                          # a wrench the corners produce is in the cone
        # the yaw rows are τ_z + c (max rows) and −τ_z + c (min rows): their bounds on τ_z
        rows_max, rows_min = g[9:13] - w[5], g[13:17] + w[5]
        assert -rows_max.max() == pytest.approx(tz_max, abs=1e-7 * (1 + abs(tz_max)))
        assert rows_min.max() == pytest.approx(tz_min, abs=1e-7 * (1 + abs(tz_min)))


@pytest.fixture(scope="module")
def atlas_contact_problem():
    m = dynamics.load_model("atlas")
    cs = ContactSet(m, frames=("l_foot_site", "r_foot_site"), kind="6d")
    x0 = np.concatenate([m.keyframe("standing"), np.zeros(m.nv)])
    # a small sole, low friction and a high minimum force: many rows active
    cost = WrenchConeCost(m, cs, half_length=0.01, half_width=(0.005, 0.008), mu=0.1, f_min=900.0, weights=1e-3)
    p = ShootingProblem(x0, [ActionModel(m, cost, 0.02, ContactDynamics(cs))], None, backend="numba")
    return m, cs, cost, p


def test_wrench_cone_cost_gradient_and_hessian_match_central_differences(atlas_contact_problem, rng):
    m, cs, cost, p = atlas_contact_problem
    ss = p.state
    x = ss.integrate(p.x0, 0.02 * rng.normal(size=ss.ndx))
    xs = np.stack([x, x])
    us = 30 * rng.normal(size=(1, m.nu))
    run, _ = p.cost_derivatives(xs, us)
    assert run.l[0] > 0
    # the value is the penalty of the wrenches contact_dynamics gives
    be = dynamics.get_backend("numba")
    tau = np.r_[np.zeros(6), us[0]] - np.asarray(m.dof_damping) * x[m.nq:]
    lam = be.contact_dynamics(m, x[:m.nq], x[m.nq:], tau, cs)[1]
    g = cost.constraint_values(lam)
    assert (g > 0).sum() >= 4
    assert run.l[0] == pytest.approx(0.02 * 0.5 * 1e-3 * np.sum(np.maximum(g, 0) ** 2), rel=1e-10)

    def cost_at(dx, du):
        return p.running_costs(np.stack([ss.integrate(x, dx), x]), us + du)[0]

    nz, h = ss.ndx + m.nu, 1e-6
    grad = np.empty(nz)
    for i in range(nz):
        e = np.zeros(nz)
        e[i] = h
        grad[i] = (cost_at(e[:ss.ndx], e[ss.ndx:]) - cost_at(-e[:ss.ndx], -e[ss.ndx:])) / (2 * h)
    an = np.r_[run.lx[0], run.lu[0]]
    assert np.abs(an - grad).max() <= 1e-5 * max(1.0, np.abs(grad).max()), np.abs(an - grad).max()
    # Hessian in u: central differences of the analytical gradient lu
    hu = 1e-3
    H = np.empty((m.nu, m.nu))
    for j in range(m.nu):
        du = np.zeros((1, m.nu))
        du[0, j] = hu
        lp = p.cost_derivatives(xs, us + du)[0].lu[0]
        lm = p.cost_derivatives(xs, us - du)[0].lu[0]
        H[:, j] = (lp - lm) / (2 * hu)
    assert np.abs(run.luu[0] - H).max() <= 1e-6 * np.abs(H).max(), np.abs(run.luu[0] - H).max()
    np.testing.assert_allclose(run.lxu[0].shape, (ss.ndx, m.nu))


def test_bad_arguments():
    m = dynamics.load_model("atlas")
    points = ContactSet(m, frames=("l_foot_site", "r_foot_site"), kind="point")
    with pytest.raises(ValueError, match="6-D contacts"):
        WrenchConeCost(m, points, 0.1, 0.05)
    soles = ContactSet(m, frames=("l_foot_site", "r_foot_site"), kind="6d")
    with pytest.raises(ValueError, match="half-extents"):
        WrenchConeCost(m, soles, -0.1, 0.05)
    with pytest.raises(ValueError, match="one per foot"):
        WrenchConeCost(m, soles, (0.1, 0.1, 0.1), 0.05)
    with pytest.raises(ValueError, match="mu"):
        wrench_cone_rows(0.1, 0.05, mu=0.0)
    with pytest.raises(ValueError, match="free-floating pelvis"):
        HumanoidBalance(robot="iiwa", feet=("ee", "ee2"))
    with pytest.raises(ValueError, match="2 sole frames"):
        HumanoidBalance(feet=("l_foot_site",))
    with pytest.raises(ValueError, match="foot frame 'no_such_sole' not found in 'atlas'; sites: .*l_foot_site"):
        HumanoidBalance(feet=("l_foot_site", "no_such_sole"))
    with pytest.raises(ValueError, match="waypoints"):
        HumanoidBalance(waypoints=((0.5, 0.0, 0.0),))
    with pytest.raises(ValueError, match="lean"):
        HumanoidBalance(waypoints=((0.0, 0.0, 0.0), (1.0, 0.0, 1.5)))


def _mujoco_soles(task, states):
    """From MuJoCo (mj_kinematics on the recorded states): per state, the largest sole tilt [deg]
    (angle of the sole sites' z axes from world z), the highest and lowest sole-box bottom corner
    heights [m], and the CoM height of the whole robot [m]."""
    import mujoco
    from dynamics.mujoco_state import write_state
    mj = task.model.mj_model
    d = mujoco.MjData(mj)
    sites = [mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_SITE, f) for f in task.feet]
    boxes = [g for g in range(mj.ngeom) if mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX
             and mj.geom_bodyid[g] in {mj.site_bodyid[s] for s in sites}]
    assert len(boxes) == 2
    signs = np.array([[sx, sy, -1.0] for sx in (-1, 1) for sy in (-1, 1)])
    tilt, top, bottom, com = [], [], [], []
    for x in states:
        write_state(task.model, d, x)
        mujoco.mj_kinematics(mj, d)
        mujoco.mj_comPos(mj, d)
        tilt.append(max(np.degrees(np.arccos(np.clip(d.site_xmat[s].reshape(3, 3)[2, 2], -1, 1))) for s in sites))
        z = [d.geom_xpos[g][2] + (d.geom_xmat[g].reshape(3, 3) @ (signs * mj.geom_size[g]).T)[2] for g in boxes]
        top.append(np.max(z))
        bottom.append(np.min(z))
        com.append(d.subtree_com[1][2])          # body 1: the pelvis, root of the robot
    return np.array(tilt), np.array(top), np.array(bottom), np.array(com)


def test_atlas_squats_and_returns_with_both_soles_flat():
    from mpc import MPC
    from sim.runner import simulate
    # down 10 cm in 0.5 s, hold 0.15 s, back up in 0.5 s; a short coarse horizon (8 × 40 ms) keeps
    # the test cheap (about 15 s of CPU; the wall time grows with the machine's load)
    task = get_task("atlas-balance", waypoints=((0.0, 0.0, 0.0), (0.1, 0.0, 0.0), (0.6, -0.10, 0.0),
                                                (0.75, -0.10, 0.0), (1.25, 0.0, 0.0)), duration_s=1.5,
                    cones="penalty")                       # FDDP: the wrench cone as a cost
    horizon, dt = 8, 0.04
    ctrl = MPC(task, solver="fddp", backend="numba", horizon=horizon, dt=dt)
    ctrl.warmup()
    h = float(task.model.mj_model.opt.timestep)
    r = simulate(task.model, ctrl, task.initial_state(), task.duration, mode="lockstep",
                 update_every=int(round(dt / h)), disturbances=task.disturbances())
    assert r.aborted is None, r.aborted
    t, x = r.t, r.x
    tilt, top, bottom, com = _mujoco_soles(task, x[::10])
    z0, c0 = x[0, 2], com[0]
    # went down by most of the 10 cm and came back
    assert c0 - com.min() > 0.07, f"CoM went down only {c0 - com.min():.3f} m"
    assert z0 - x[:, 2].min() > 0.07, f"pelvis went down only {z0 - x[:, 2].min():.3f} m"
    assert abs(com[-1] - c0) < 0.02 and abs(x[-1, 2] - z0) < 0.02, (com[-1] - c0, x[-1, 2] - z0)
    # both soles flat on the floor throughout (MuJoCo's soft contact penetrates ~1 mm)
    assert tilt.max() < 2.0, f"a sole tilted {tilt.max():.2f} deg"
    assert top.max() < 0.005 and bottom.min() > -0.005, (top.max(), bottom.min())
    # every joint inside its range (MuJoCo's soft limits allow a little), no joint spinning
    m = task.model
    q = x[:, 7:m.nq]
    assert np.all(q >= m.q_lower[7:] - 0.05) and np.all(q <= m.q_upper[7:] + 0.05)
    assert np.abs(x[:, m.nq + 6:]).max() < 5.0, np.abs(x[:, m.nq + 6:]).max()
    ev = task.evaluate(t, x, r.u)
    assert ev["no fall"].passed and ev["soles flat"].passed and ev["soles on the floor"].passed
    assert ev["least sole normal force"].value > 0.2 * task.weight / 2     # both soles stayed loaded
