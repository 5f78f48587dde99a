"""The solver's workspace (solvers.problem_data.ProblemData): allocated once per solver, written in
place by every iteration and MPC update, and giving the same results as fresh arrays."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dynamics import get_backend
from mpc.controller import MPC
from solvers import ILQR
from tasks import get_task


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_derivatives_into_the_workspace_equal_fresh_arrays(backend):
    task = get_task("iiwa-reach")
    x0 = task.initial_state()
    p = task.build_problem(x0, horizon=6, dt=0.01, backend=backend)
    rng = np.random.default_rng(3)
    xs = np.tile(x0, (7, 1)) + 0.05 * rng.standard_normal((7, x0.size))
    us = 0.5 * rng.standard_normal((6, p.nu))
    fresh = p.derivatives(xs, us)
    data = p.create_data()
    into = p.derivatives(xs, us, data=data)
    for part in ("running", "terminal"):
        for f in ("l", "lx", "lu", "lxx", "lxu", "luu"):
            np.testing.assert_allclose(getattr(getattr(into, part), f), getattr(getattr(fresh, part), f),
                                       rtol=1e-12, atol=1e-12, err_msg=f"{part}.{f}")
    for f in ("xnext", "Fx", "Fu"):
        np.testing.assert_allclose(getattr(into.dynamics, f), getattr(fresh.dynamics, f), rtol=1e-12, atol=1e-12)
    # the results are the workspace's buffers, C-contiguous (the compiled backward pass copies nothing)
    assert into.dynamics.Fx is data.dynamics.Fx and into.running.lxx is data.running.lxx
    assert all(a.flags.c_contiguous for a in (into.dynamics.Fx, into.dynamics.Fu, into.running.lxx))


def test_aba_derivatives_out_buffers_match_and_are_checked():
    be = get_backend("numba")
    task = get_task("iiwa-reach")
    m = task.model
    rng = np.random.default_rng(0)
    q = rng.uniform(-1, 1, (5, m.nq))
    v, tau = rng.standard_normal((5, m.nv)), rng.standard_normal((5, m.nv))
    ref = be.aba_derivatives(m, q, v, tau, return_acceleration=True)
    D, a = np.empty((3, 5, m.nv, m.nv)), np.empty((5, m.nv))
    got = be.aba_derivatives(m, q, v, tau, return_acceleration=True, out=D, acceleration_out=a)
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(g, r)
    assert np.shares_memory(got[1], D) and np.shares_memory(got[0], a)
    # the numpy reference copies into the buffers
    got_np = get_backend("numpy").aba_derivatives(m, q, v, tau, out=D)
    np.testing.assert_allclose(D[2], got_np[2])
    with pytest.raises(ValueError, match="C-contiguous float64 array of shape"):
        be.aba_derivatives(m, q, v, tau, out=np.empty((3, 5, m.nv, m.nv), dtype=np.float32))
    with pytest.raises(ValueError, match="needs return_acceleration=True"):
        be.aba_derivatives(m, q, v, tau, out=D, acceleration_out=a)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_prepared_aba_derivatives_follow_their_buffers_and_are_checked(backend):
    be = get_backend(backend)
    m = get_task("iiwa-reach").model
    rng = np.random.default_rng(1)
    q, v, tau = rng.uniform(-1, 1, (4, m.nq)), rng.standard_normal((4, m.nv)), rng.standard_normal((4, m.nv))
    D, a = np.empty((3, 4, m.nv, m.nv)), np.empty((4, m.nv))
    run = be.prepare_aba_derivatives(m, q, v, tau, D, a)
    for _ in range(2):      # new contents of the same buffers, in place
        run()
        ref = get_backend("numpy").aba_derivatives(m, q, v, tau, return_acceleration=True)
        np.testing.assert_allclose(a, ref[0], rtol=1e-10, atol=1e-10)
        for i in range(3):
            np.testing.assert_allclose(D[i], ref[i + 1], rtol=1e-10, atol=1e-10)
        q += 0.1
        v *= -1.0
    with pytest.raises(ValueError, match=r"prepare_aba_derivatives: v must be a C-contiguous float64 array of shape"):
        be.prepare_aba_derivatives(m, q, v[:3], tau, D, a)
    with pytest.raises(ValueError, match=r"prepare_aba_derivatives: out must be a writeable C-contiguous"):
        be.prepare_aba_derivatives(m, q, v, tau, D[:2], a)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_aba_second_derivatives_out_buffer_matches_and_is_checked(backend):
    be = get_backend(backend)
    m = get_task("iiwa-reach").model
    rng = np.random.default_rng(1)
    q = rng.uniform(-1, 1, (2, 3, m.nq))
    v, tau = rng.standard_normal((2, 3, m.nv)), rng.standard_normal((2, 3, m.nv))
    ref = be.aba_second_derivatives(m, q, v, tau)
    out = np.empty((4, 2, 3, m.nv, m.nv, m.nv))
    got = be.aba_second_derivatives(m, q, v, tau, out=out)
    for r, g in zip(ref, got):
        np.testing.assert_array_equal(g, r)
        assert g.shape == (2, 3, m.nv, m.nv, m.nv) and np.shares_memory(g, out)
    with pytest.raises(ValueError, match=r"out must be a writeable C-contiguous float64 array of shape \(4, 2, 3"):
        be.aba_second_derivatives(m, q, v, tau, out=np.empty((4, 6, m.nv, m.nv, m.nv)))


def test_ddp_derivatives_into_the_workspace_equal_fresh_arrays():
    """DDP's second-order factors written into the workspace (and the Euclidean Fx assembled from
    the partials) equal the fresh-array path, for a robot with joint damping."""
    task = get_task("iiwa-reach")
    x0 = task.initial_state()
    p = task.build_problem(x0, horizon=5, dt=0.01, backend="numba")
    assert p.knot_dynamics(0)._has_damping
    rng = np.random.default_rng(4)
    xs = np.tile(x0, (6, 1)) + 0.05 * rng.standard_normal((6, x0.size))
    us = 0.5 * rng.standard_normal((5, p.nu))
    fresh = p.derivatives(xs, us, second_order=True)
    data = p.create_data()
    into = p.derivatives(xs, us, second_order=True, data=data)
    np.testing.assert_allclose(into.dynamics.F2, fresh.dynamics.F2, rtol=1e-12, atol=1e-12)
    # F2 is symmetric in its last two indices, and not all zero
    F2 = into.dynamics.F2
    np.testing.assert_allclose(F2, np.swapaxes(F2, -1, -2), atol=1e-12)
    assert np.abs(F2).max() > 1e-3
    assert any(into.dynamics.T is b for b in data.arrays().values())


def _warm_mpc(solver: str, N: int = 32):
    task = get_task("iiwa-reach")
    mpc = MPC(task, solver=solver, backend="numba", horizon=N, dt=0.01)
    x = task.initial_state()
    mpc.start(0.0, x)
    t = 0.0
    for _ in range(3):
        t += 0.01
        mpc.update(t, x)
    return mpc, x, t


def _transient_peak(fn) -> int:
    """Largest traced memory above the level before ``fn()`` while it runs [bytes]."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("solver", ["ilqr", "fddp", "ddp"])
def test_warm_mpc_update_reuses_the_workspace(solver):
    mpc, x, t = _warm_mpc(solver)
    data = mpc.solver.data
    before = {k: (a.__array_interface__["data"][0], a.shape) for k, a in data.arrays().items()}
    mpc.update(t + 0.01, x)
    after = {k: (a.__array_interface__["data"][0], a.shape) for k, a in data.arrays().items()}
    assert {k: after[k] for k in before} == before          # same buffers, written in place
    if solver == "ddp":      # the second-order tensors and factors C, T are workspace buffers too
        assert any(".T" in k for k in before) and any(".A2" in k for k in before)
    assert mpc.solver.data is data
    # what a warm update allocates on top: well under the workspace itself (before the workspace
    # existed it was ~1.4x the workspace's size: every derivative and rollout array was fresh)
    workspace = sum(a.nbytes for a in data.arrays().values())
    peak = _transient_peak(lambda: mpc.update(t + 0.02, x))
    assert peak < 0.6 * workspace, f"warm update allocated {peak / 1024:.0f} KiB, workspace {workspace / 1024:.0f} KiB"


def test_contact_stage_writes_into_the_workspace():
    """A legged problem's contact-dynamics derivatives land in the workspace's contact buffers,
    the same ones update after update."""
    task = get_task("hyq-stand", cones="penalty")
    mpc = MPC(task, solver="ilqr", backend="numba", horizon=8, dt=0.02, initial_iterations=3)
    x = task.initial_state()
    mpc.start(0.0, x)
    mpc.update(0.02, x)
    data = mpc.solver.data
    before = {k: (a.__array_interface__["data"][0], a.shape) for k, a in data.arrays().items()}
    assert any("contact" in k and k.endswith(".da") for k in before), sorted(before)
    mpc.update(0.04, x)
    after = {k: (a.__array_interface__["data"][0], a.shape) for k, a in data.arrays().items()}
    assert {k: after[k] for k in before} == before


@pytest.mark.parametrize("backend,task_name", [("numba", "hyq-stand"), ("numpy", "hyq-stand"),
                                               ("numba", "hyq-trot")])
def test_contact_force_costs_reuse_the_dynamics_contact_solve(backend, task_name, monkeypatch):
    """In a derivative evaluation, the contact-force and friction-cone costs take λ and ∂λ from the
    dynamics stage's contact solve of the same knots (one contact-dynamics-derivative call per
    group instead of two) and give the same derivatives as evaluating the costs on their own."""
    task = get_task(task_name)
    x0 = task.initial_state()
    N = 16 if task_name == "hyq-trot" else 6               # the trot: several contact phases
    p = task.build_problem(x0, horizon=N, dt=0.02, backend=backend)
    task.update_problem(p, 0.3)
    groups = len(p.dynamics_groups)
    assert groups > 1 if task_name == "hyq-trot" else groups == 1
    rng = np.random.default_rng(5)
    xs = np.tile(x0, (p.horizon + 1, 1))
    xs[:, p.model.nq:] += 0.1 * rng.standard_normal((p.horizon + 1, p.model.nv))
    us = 5.0 * rng.standard_normal((p.horizon, p.nu))
    be = p.backend
    calls, inside = [], []
    original = type(be).contact_dynamics_derivatives
    original_prepare = type(be).prepare_contact_dynamics_derivatives

    def counting(self, *a, **k):
        if not inside:                                 # not a prepared call's own (counted there)
            calls.append(1)
        return original(self, *a, **k)

    def counting_prepare(self, *a, **k):
        run = original_prepare(self, *a, **k)

        def counted() -> None:
            calls.append(1)
            inside.append(1)
            try:
                run()
            finally:
                inside.pop()
        return counted
    monkeypatch.setattr(type(be), "contact_dynamics_derivatives", counting)
    monkeypatch.setattr(type(be), "prepare_contact_dynamics_derivatives", counting_prepare)
    alone, _ = p.cost_derivatives(xs, us)            # no dynamics stage: the costs solve on their own
    n_alone = len(calls)
    into = p.derivatives(xs, us, data=p.create_data(second_order=False))
    n_into = len(calls) - n_alone
    n_dynamics = sum(g.item.contacts is not None and g.item.integrator == "euler" for g in p.dynamics_groups)
    # the dynamics stage makes one call per contact group; the costs of the knots it covers none
    assert n_into < n_dynamics + n_alone and (groups > 1 or (n_alone, n_into) == (1, 1)), (n_alone, n_into)
    for f in ("l", "lx", "lu", "lxx", "lxu", "luu"):
        np.testing.assert_allclose(getattr(into.running, f), getattr(alone, f), rtol=1e-10, atol=1e-9, err_msg=f)
    assert np.abs(alone.lu).max() > 1e-6                 # the contact-force terms contribute


def test_contact_solves_are_handed_to_the_cost_knots_they_cover():
    from types import SimpleNamespace
    from solvers.problem_costs import contact_solves_for
    buf = SimpleNamespace(lam=np.arange(8.0)[:, None] * np.ones((8, 3)), dl=np.zeros((3, 8, 3, 2)))
    dyn = SimpleNamespace(contacts=object())
    solves = [(slice(2, 10), dyn, buf)]
    got = contact_solves_for(slice(4, 7), solves)[id(dyn.contacts)]
    assert got[0] is dyn and got[2].shape == (3, 3, 3, 2)
    np.testing.assert_array_equal(got[1][:, 0], [2.0, 3.0, 4.0])        # knots 4..6 = entries 2..4 of the group
    assert contact_solves_for(slice(1, 4), solves) is None               # not covered: the cost solves itself


def test_workspace_belongs_to_its_problem():
    task = get_task("iiwa-reach")
    x0 = task.initial_state()
    p6 = task.build_problem(x0, horizon=6, dt=0.01, backend="numpy")
    p4 = task.build_problem(x0, horizon=4, dt=0.01, backend="numpy")
    xs, us = np.tile(x0, (7, 1)), np.zeros((6, p6.nu))
    with pytest.raises(ValueError, match="created for another problem"):
        p6.derivatives(xs, us, data=p4.create_data())


def test_solver_returns_copies_not_workspace_views():
    task = get_task("iiwa-reach")
    x0 = task.initial_state()
    p = task.build_problem(x0, horizon=8, dt=0.01, backend="numpy")
    s = ILQR(p)
    r1 = s.solve(max_iter=3)
    xs1 = r1.xs.copy()
    s.solve(max_iter=5)                                        # overwrites the workspace
    np.testing.assert_array_equal(r1.xs, xs1)
    assert not any(np.shares_memory(r1.xs, a) for a in s.data.arrays().values())


@pytest.mark.parametrize("solver", ["ILQR", "FDDP"])
def test_diverging_first_rollout_returns_a_failed_result(solver):
    """A failure before the first iterate exists (the initial rollout diverges) is reported in the
    result (NaN trajectory, converged False, the reason), not raised as an attribute error."""
    import solvers
    task = get_task("iiwa-reach")
    p = task.build_problem(task.initial_state(), horizon=5, dt=0.01, backend="numpy")
    res = getattr(solvers, solver)(p, box=False).solve(us_init=np.full((5, p.nu), 1e200), max_iter=2)
    assert not res.converged and "diverged" in res.reason
    assert np.isnan(res.xs).all()


def _addresses(data) -> dict:
    return {k: (a.__array_interface__["data"][0], a.shape) for k, a in data.arrays().items()}


def test_data_is_allocated_when_built_and_follows_re_phasing():
    """A multi-phase problem's data holds every buffer from construction (an evaluation adds or
    replaces none); after re-phasing, the next evaluation gives data to the new groups and keeps
    that of groups whose integrated model and knots did not change, and the results equal fresh
    data's (including a group of non-contiguous knots)."""
    task = get_task("hyq-trot", cones="penalty")
    x0 = task.initial_state()
    p = task.build_problem(x0, horizon=16, dt=0.02, backend="numpy")
    task.update_problem(p, 0.5)                  # stance, impact, four feet down, stance of the other pair
    assert len(p.dynamics_groups) == 4
    rng = np.random.default_rng(6)
    xs = np.tile(x0, (p.horizon + 1, 1))
    xs[:, p.model.nq:] += 0.1 * rng.standard_normal((p.horizon + 1, p.model.nv))
    us = np.tile(p.default_controls(), (p.horizon, 1)) + rng.standard_normal((p.horizon, p.nu))
    data = p.create_data(second_order=False, max_candidates=3)
    before = _addresses(data)
    p.derivatives(xs, us, data=data)
    assert _addresses(data) == before
    old_groups = [(g.item, g.knots.copy(), d) for g, d in data.groups]
    models = list(p.running_models)
    p.set_running_models(models[:9] + [models[0]] * 7)   # knots 9-15 join knots 0-5's group
    assert len(p.dynamics_groups) == 3 and not p.dynamics_groups[0].contiguous
    into = p.derivatives(xs, us, data=data)
    kept = 0
    for g, d in data.groups:
        same = [d0 for item, knots, d0 in old_groups if item is g.item and np.array_equal(knots, g.knots)]
        assert (d is same[0]) if same else all(d is not d0 for _, _, d0 in old_groups)
        kept += bool(same)
    assert kept == 2                                      # the impact and the four-feet knots
    fresh = p.derivatives(xs, us)
    for f in ("xnext", "Fx", "Fu"):
        np.testing.assert_array_equal(getattr(into.dynamics, f), getattr(fresh.dynamics, f), err_msg=f)
    np.testing.assert_array_equal(into.running.lxx, fresh.running.lxx)
    unchanged = ("running", "terminal", "rollout", "dynamics.xnext", "dynamics.Fx", "dynamics.Fu")
    assert {k: v for k, v in _addresses(data).items() if k.startswith(unchanged)} == \
        {k: v for k, v in before.items() if k.startswith(unchanged)}
    # a gait's shift moves every group by a knot (same models, same sizes): each takes over the data
    # of its former self, re-pointed at its new rows, and the results still equal fresh data's
    shifted = [(g.item, g.knots.size, d) for g, d in data.groups]
    models = list(p.running_models)
    for shift in (1, 6, 4):                   # 6: the split group becomes contiguous, 4: split again
        p.set_running_models(models[shift:] + models[:shift])
        into = p.derivatives(xs, us, data=data)
        for g, d in data.groups:
            assert [d0 for item, n, d0 in shifted if item is g.item and n == g.knots.size] == [d]
        fresh = p.derivatives(xs, us)
        for f in ("xnext", "Fx", "Fu"):
            np.testing.assert_array_equal(getattr(into.dynamics, f), getattr(fresh.dynamics, f), err_msg=f)


def test_second_order_buffers_and_rollouts_are_declared():
    task = get_task("iiwa-reach")
    x0 = task.initial_state()
    p = task.build_problem(x0, horizon=5, dt=0.01, backend="numpy")
    xs, us = p.initial_guess()
    data = p.create_data(second_order=False, max_candidates=4)
    assert not any(k.endswith((".T", ".C", ".A2")) for k in data.arrays())
    with pytest.raises(ValueError, match="second-order buffers"):
        p.derivatives(xs, us, second_order=True, data=data)
    data.enable_second_order()
    T = data.dynamics.factors[1]
    data.enable_second_order()                                # once: the same buffers
    assert data.dynamics.factors[1] is T
    got = p.derivatives(xs, us, second_order=True, data=data)
    np.testing.assert_allclose(got.dynamics.F2, p.derivatives(xs, us, second_order=True).dynamics.F2,
                               rtol=1e-12, atol=1e-12)
    # a buffer set per candidate count, none sharing memory (two candidate batches can be held at once)
    sets = [data.rollout(S) for S in range(1, 5)]
    assert [b.X.shape[0] for b in sets] == [1, 2, 3, 4]
    assert not any(np.shares_memory(a.X, b.X) for i, a in enumerate(sets) for b in sets[i + 1:])
    with pytest.raises(ValueError, match="max_candidates=5"):
        data.rollout(5)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_dropped_groups_data_is_pooled_and_reused_after_re_phasing(backend):
    """A gait's groups change size every few updates and come back to sizes met before: their data
    is taken back from the pool of dropped groups' data (not made anew), and the derivatives into
    it equal those into data built fresh for that knot structure."""
    if backend == "numba":
        pytest.importorskip("numba")
    task = get_task("hyq-trot", cones="penalty")
    x0 = task.initial_state()
    N, dt = 10, 0.02
    p = task.build_problem(x0, horizon=N, dt=dt, backend=backend)
    rng = np.random.default_rng(8)
    xs = np.tile(x0, (N + 1, 1))
    xs[:, p.model.nq:] += 0.1 * rng.standard_normal((N + 1, p.model.nv))
    us = np.tile(p.default_controls(), (N, 1)) + rng.standard_normal((N, p.nu))
    data = p.create_data(second_order=False)
    seen: list = []             # every data object the groups held so far
    pooled = 0
    for t in np.arange(task.start_time - 2 * dt, task.start_time + task.cycle + 4 * dt, dt):
        task.update_problem(p, float(t))
        dropped = [d for _, _, d in data._pool.values()]
        into = p.derivatives(xs, us, data=data)
        for g, d in data.groups:
            assert any(d is d0 for d0 in seen) or all(d is not d0 for d0 in dropped)
            pooled += any(d is d0 for d0 in dropped)
            if not any(d is d0 for d0 in seen):
                seen.append(d)
        fresh = p.derivatives(xs, us, data=p.create_data(second_order=False))
        for f in ("xnext", "Fx", "Fu"):
            np.testing.assert_array_equal(getattr(into.dynamics, f), getattr(fresh.dynamics, f), err_msg=f"{t}: {f}")
        for f in ("l", "lx", "lu", "lxx", "lxu", "luu"):
            np.testing.assert_array_equal(getattr(into.running, f), getattr(fresh.running, f), err_msg=f"{t}: {f}")
        assert sum(n for _, n, _ in data._pool.values()) <= data.pool_knots * N
    assert pooled > 0


def test_a_structure_met_again_takes_its_kept_data():
    """A knot structure met before (a gait's horizon a cycle later) takes the data its groups had,
    their outputs pointed back at its rows, without sharing a data object with another group or
    the pool of dropped data; second-order buffers reach data only a kept structure holds; the
    derivatives equal those into fresh data at every step."""
    task = get_task("hyq-trot", cones="penalty")
    x0 = task.initial_state()
    p = task.build_problem(x0, horizon=16, dt=0.02, backend="numpy")
    task.update_problem(p, 0.5)
    rng = np.random.default_rng(11)
    xs = np.tile(x0, (p.horizon + 1, 1))
    xs[:, p.model.nq:] += 0.1 * rng.standard_normal((p.horizon + 1, p.model.nv))
    us = np.tile(p.default_controls(), (p.horizon, 1)) + rng.standard_normal((p.horizon, p.nu))
    data = p.create_data(second_order=False)
    data.pool_knots = 0                     # no pool: dropped groups' data lives on in kept structures only
    a = list(p.running_models)
    b = a[:9] + [a[0]] * 7                  # knots 9-15 join knots 0-5's group (not contiguous)
    c = a[3:] + a[:3]                       # every group moved
    met: dict = {}
    for step, models in enumerate((a, b, a, c, b, a, c)):
        p.set_running_models(models)
        into = p.derivatives(xs, us, data=data)
        now = [d for _, d in data.groups]
        assert len({id(d) for d in now}) == len(now)
        assert not {id(d) for d in now} & {id(d) for _, _, d in data._pool.values()}
        key = tuple(map(id, models))
        if key in met:                      # the same data objects as when first met
            assert [id(d) for d in now] == met[key]
        met.setdefault(key, [id(d) for d in now])
        fresh = p.derivatives(xs, us)
        for f in ("xnext", "Fx", "Fu"):
            np.testing.assert_array_equal(getattr(into.dynamics, f), getattr(fresh.dynamics, f),
                                          err_msg=f"step {step}: {f}")
        if step == 4:                       # b current: a's and c's data partly only in kept entries
            data.enable_second_order()
    # every data object met has its second-order buffers (the kept structures' too)
    assert all(d.factors is not None for _, d in data.groups)
    assert all(d.factors is not None for _, kept in data._kept.values() for d, _ in kept)
    p.set_running_models(c)
    p.derivatives(xs, us, second_order=True, data=data)
