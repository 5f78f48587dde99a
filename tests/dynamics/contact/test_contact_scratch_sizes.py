"""The contact kernels carve their work arrays from one buffer sized by rows_size, state_size and
contact_size: each size must be exactly what its view function carves (a smaller one would let two
arrays overlap, a larger one waste memory)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from dynamics.contact import numba_kernels as ck


@njit
def _carved(buf, chain, L, nv, k, nc):
    # the views stay in here: they borrow buf (dynamics.kernels.scratch), only offsets go out
    rw, o1 = ck.rows_views(buf, 0, chain, L, nv, k, nc)
    sw, o2 = ck.state_views(buf, o1, L, nv)
    cw, o3 = ck.contact_views(buf, o2, nv, nc)
    ends = np.empty(3, dtype=np.int64)
    ends[0], ends[1], ends[2] = o1, o2 - o1, o3 - o2
    # the last entry of each group's last array sits just below the group's end
    first_zero = rw[16][3, k - 1, 5, nv - 1] + sw[21][7, nv - 1, 5]
    return ends, first_zero, cw[16].shape[0]


@pytest.mark.parametrize("L, nv, k, point", [(8, 7, 1, True), (13, 18, 4, True), (13, 18, 2, False), (31, 36, 2, True)])
def test_each_size_is_what_its_views_carve(L: int, nv: int, k: int, point: bool):
    nc = (3 if point else 6) * k
    sizes = (ck.rows_size(L, nv, k, nc), ck.state_size(L, nv), ck.contact_size(nv, nc))
    buf = np.full(sum(sizes) + 1, np.nan)
    ends, zeros, rows = _carved(buf, np.empty(L, dtype=np.int64), L, nv, k, nc)
    assert tuple(int(e) for e in ends) == sizes
    assert zeros == 0.0 and rows == nv       # F and cols were zeroed; MD is (nv, 2 nv)
    assert np.isnan(buf[-1])                 # nothing written past the three groups
