"""Declared scratch layouts of the compiled kernels (dynamics/kernels/scratch.py): every kernel's
layout, evaluated for several model sizes, against the shapes it declares (fields one after the
other, no gap, no overlap, the total their sum); the compiled views against numpy slicing of the
same buffer."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

numba = pytest.importorskip("numba")

import dynamics.kernels  # noqa: E402
from dynamics.kernels.scratch import ALIGN, DOFS, LINKS, Layout, Size, buffer, view1, view2, view3  # noqa: E402

SIZES = [(1, 1), (8, 7), (13, 18), (31, 36)]    # (links, dofs): iiwa, HyQ, Atlas and a one-link model


def _layouts() -> dict[str, Layout]:
    out = {}
    for info in pkgutil.iter_modules(dynamics.kernels.__path__):
        mod = importlib.import_module(f"dynamics.kernels.{info.name}")
        out.update({f"{info.name}.{k}": v for k, v in vars(mod).items() if isinstance(v, Layout)})
    return out


LAYOUTS = _layouts()


def test_every_range_kernel_declares_its_scratch():
    names = {k.split(".", 1)[1] for k in LAYOUTS}
    assert {"ABA_SCRATCH", "ABA_DERIVATIVES_SCRATCH", "ABA_SECOND_DERIVATIVES_SCRATCH", "CRBA_SCRATCH", "MINV_SCRATCH",
            "RNEA_SCRATCH", "RNEA_DERIVATIVES_SCRATCH", "RNEA_SECOND_DERIVATIVES_SCRATCH", "PLACEMENTS_SCRATCH",
            "FRAMES_SCRATCH", "FRAME_JACOBIAN_SCRATCH", "COM_SCRATCH"} <= names


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("L, nv", SIZES)
def test_fields_tile_the_buffer(name, L, nv):
    lay = LAYOUTS[name]
    end = 0
    for field, dims in lay.shape.items():
        shape = [d(L, nv) for d in dims]
        start = lay.start(field, L, nv)
        assert start % ALIGN == 0 and end <= start < end + 2 * ALIGN, field     # aligned, no overlap, small slack
        end = start + int(np.prod(shape))
        spec = getattr(lay.spec, field)                     # what the kernel reads
        coeffs = np.array(spec).reshape(4, 6)               # offset, then up to 3 dimensions (zero-padded)
        mono = np.array([L ** i * nv ** j for i, j in ((0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (0, 3))])
        assert list(coeffs @ mono) == [lay.offset[field](L, nv), *shape] + [0] * (3 - len(shape))
    assert end <= lay.size(L, nv) < end + 2 * ALIGN


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="monomials"):
        Layout(("X", (LINKS, LINKS)))                       # L² is not a supported monomial
    with pytest.raises(ValueError, match="repeated"):
        Layout(("a", (3,)), ("a", (3,)))
    with pytest.raises(TypeError):
        Size.of(-1)
    assert repr(3 * LINKS + DOFS * DOFS + 2) == "2 + 1*nv^2 + 3*L"


_DEMO = Layout(("a", (LINKS, 3, 3)), ("b", (DOFS,)), ("c", (4, DOFS * DOFS)), ("d", (LINKS, DOFS, 6)))
_D = _DEMO.spec


@numba.njit
def _fill(L, nv):
    """Every field of the demo layout filled with its own number, through the compiled views."""
    buf = buffer(_D.total, L, nv)
    buf[:] = -1.0
    view3(buf, _D.a, L, nv)[:] = 1.0
    view1(buf, _D.b, L, nv)[:] = 2.0
    view2(buf, _D.c, L, nv)[:] = 3.0
    view3(buf, _D.d, L, nv)[:] = 4.0
    return buf, view3(buf, _D.a, L, nv).shape, view2(buf, _D.c, L, nv).shape, view3(buf, _D.d, L, nv).shape


@pytest.mark.parametrize("L, nv", SIZES)
def test_compiled_views_are_the_declared_slices(L, nv):
    buf, sa, sc, sd = _fill(L, nv)
    assert buf.shape == (_DEMO.size(L, nv),)
    assert (sa, sc, sd) == ((L, 3, 3), (4, nv * nv), (L, nv, 6))
    expect = np.full(_DEMO.size(L, nv), -1.0)                # slack between fields stays untouched
    for field, value in zip("abcd", (1.0, 2.0, 3.0, 4.0)):
        start = _DEMO.start(field, L, nv)
        expect[start:start + int(np.prod([d(L, nv) for d in _DEMO.shape[field]]))] = value
    np.testing.assert_array_equal(buf, expect)
