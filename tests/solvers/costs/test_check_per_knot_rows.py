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
