"""CompiledCosts re-packs only a term's reference columns when only its reference was replaced (a
task moving its targets every update): the float rows then equal those of compiled costs packed
afresh from the same terms, for every kind whose reference is packed that way (state on a hinge
robot and on a free flyer, control, frame position, frame height, contact force)."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers.costs.compiled import _REFERENCE_COLS, CompiledCosts, _kind, _terms
from tasks.legged import with_penalty_cones

from .test_compiled_costs import _problem

pytest.importorskip("numba")


def _replace_references(p, rng) -> set:
    """Every reference-packed term of the problem gets a new reference (each object once); the kinds."""
    seen, kinds = set(), set()
    for cost in [g.item for g in p.cost_groups] + [p.terminal_cost]:
        for _, c, _ in _terms(cost):
            kind = _kind(c, p.model)
            if kind not in _REFERENCE_COLS or id(c) in seen:
                continue
            seen.add(id(c))
            kinds.add(kind)
            ref = np.asarray(c.reference)
            c.reference = ref + 0.01 * rng.normal(size=ref.shape)
    return kinds


def _check_against_fresh(p, rng) -> set:
    cc = p.costs.compiled()
    cc.refresh()
    before = cc.P.copy()
    weights = {id(tm): tm.packed_from[1] for tm in cc.terms}
    kinds = _replace_references(p, rng)
    cc.refresh()
    assert not np.array_equal(cc.P, before)
    assert all(tm.packed_from[1] is weights[id(tm)] for tm in cc.terms)      # the weights kept
    fresh = CompiledCosts(p, p.backend.compiled_kinematics(p.model))
    fresh.refresh()
    np.testing.assert_array_equal(cc.P, fresh.P)
    return kinds


def test_iiwa_references_repacked_as_packed_afresh():
    kinds = _check_against_fresh(_problem(tasks.get_task("iiwa-reach")), np.random.default_rng(0))
    assert len(kinds) >= 3                       # state, control, frame position


def test_legged_references_repacked_as_packed_afresh():
    rng = np.random.default_rng(1)
    trot = tasks.get_task("hyq-trot", **with_penalty_cones(tasks.resolve_task("hyq-trot"), {}))
    p = trot.build_problem(trot.initial_state(), 12, 0.02, backend="numba")
    trot.update_problem(p, trot.start_time + 0.1)        # swing knots: frame height and position terms
    kinds = _check_against_fresh(p, rng)
    stand = tasks.get_task("hyq-stand", **with_penalty_cones(tasks.resolve_task("hyq-stand"), {}))
    kinds |= _check_against_fresh(stand.build_problem(stand.initial_state(), 6, 0.02, backend="numba"), rng)
    from solvers.costs.compiled import CONTACT_FORCE, FRAME_HEIGHT, FRAME_POSITION, STATE_LIE
    assert {CONTACT_FORCE, FRAME_HEIGHT, FRAME_POSITION, STATE_LIE} <= kinds
