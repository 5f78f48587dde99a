"""check_per_knot_rows: several costs' per-knot references validated in one pass (a gait's four feet),
each row taken by the reference setters as it is, with check_per_knot's errors."""

from __future__ import annotations

import numpy as np
import pytest

import tasks
from solvers.costs import FrameHeightCost, FramePositionCost
from solvers.costs.base import check_per_knot, check_per_knot_rows


def test_rows_are_taken_by_the_setters_without_a_copy():
    m = tasks.get_task("iiwa-reach").model
    rng = np.random.default_rng(0)
    xy = rng.normal(size=(4, 6, 3))
    z = rng.normal(size=(4, 6))
    xy_rows = check_per_knot_rows("targets", xy, (3,))
    z_rows = check_per_knot_rows("heights", z, ())
    assert len(xy_rows) == 4 and all(not r.flags.writeable for r in xy_rows)
    for j in range(4):
        np.testing.assert_array_equal(xy_rows[j], xy[j])
        np.testing.assert_array_equal(z_rows[j], z[j])
        # what check_per_knot would return for the row: the row itself
        assert check_per_knot("t", xy_rows[j], (3,)) is xy_rows[j]
    c = FramePositionCost(m, "ee", np.zeros((6, 3)))
    c.target = xy_rows[2]
    assert c.target is xy_rows[2]
    h = FrameHeightCost(m, "ee", np.zeros(6))
    h.target = z_rows[1]
    assert h.target is z_rows[1]
    xy[0, 0, 0] = 99.0                      # the rows are a copy of the input
    assert xy_rows[0][0, 0] != 99.0


def test_bad_rows_name_the_problem():
    with pytest.raises(ValueError, match="targets contains non-finite"):
        check_per_knot_rows("targets", np.full((2, 3, 3), np.nan), (3,))
    with pytest.raises(ValueError, match=r"targets has shape \(2, 3\); expected \(n, K, 3\)"):
        check_per_knot_rows("targets", np.zeros((2, 3)), (3,))
    with pytest.raises(ValueError, match=r"heights has shape \(2, 0\); expected \(n, K\)"):
        check_per_knot_rows("heights", np.zeros((2, 0)), ())


def test_assign_reference_validates_once_and_shares_the_array():
    """assign_reference: one value for several costs' references — validated (a copy, read-only,
    non-finite and wrong shapes refused as by the setter), the same array in every cost of the
    first's class and shape, each change counted (the compiled costs re-pack on it), and a cost of
    another shape validated by its own setter (which refuses what does not fit it)."""
    from solvers import StateCost
    from solvers.costs.base import assign_reference, data_changes

    m = tasks.get_task("iiwa-reach").model
    arm = [StateCost(m, None, np.ones(2 * m.nv)) for _ in range(3)]
    refs = np.random.default_rng(1).normal(size=(5, m.nq + m.nv))
    before = data_changes()
    assign_reference(arm, refs)
    assert data_changes() > before
    assert all(c.reference is arm[0].reference for c in arm)
    np.testing.assert_array_equal(arm[0].reference, refs)
    assert arm[0].reference is not refs and not arm[0].reference.flags.writeable
    with pytest.raises(ValueError, match="state reference contains non-finite"):
        assign_reference(arm, np.full_like(refs, np.nan))
    with pytest.raises(ValueError, match="state reference has shape"):
        assign_reference(arm, refs[:, :3])
    legged = StateCost(tasks.get_task("hyq-stand").model)
    with pytest.raises(ValueError, match="state reference has shape"):
        assign_reference(arm + [legged], refs)
    pos = [FramePositionCost(m, "ee", np.zeros(3)) for _ in range(2)]
    assign_reference(pos, refs[:, :3], "target")
    assert pos[1].target is pos[0].target
    np.testing.assert_array_equal(pos[1].target, refs[:, :3])
