"""fpga-sim fixed-point arithmetic (dynamics.fpga_sim.fixed_point): exact emulation against Python
integer arithmetic, rounding modes, saturation/wrap and their counting, and the rigour of the
running error bound."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dynamics.fpga_sim.fixed_point import (Fx, FxContext, FixedPointOverflowError, OverflowCounter, QFormat,
                                           quantize, shift_round, to_float)


def py_shift(x: int, s: int, mode: str) -> int:
    """Independent reference: x / 2^s rounded, with Python's exact integers and Fractions."""
    fr = Fraction(x, 1 << s)
    if mode == "truncate":
        return fr.numerator // fr.denominator
    if mode == "toward_zero":
        return int(fr)  # int() of a Fraction truncates toward zero
    if mode == "nearest":
        return (fr + Fraction(1, 2)).__floor__()
    if mode == "nearest_even":
        return round(fr)  # Fraction.__round__ rounds half to even
    raise AssertionError(mode)


def py_sat(x: int, fmt: QFormat) -> int:
    if fmt.overflow == "saturate":
        return max(fmt.min_int, min(fmt.max_int, x))
    w = 1 << fmt.word_bits
    return (x - fmt.min_int) % w + fmt.min_int


@pytest.mark.parametrize("mode", ["truncate", "nearest", "nearest_even", "toward_zero"])
def test_shift_round_matches_python_integers(mode):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.integers(-2 ** 62, 2 ** 62, 2000), np.arange(-40, 41),
                        np.array([2 ** 62 - 1, -2 ** 62, 5 * 2 ** 15, -5 * 2 ** 15, 3 * 2 ** 15, -3 * 2 ** 15])])
    for s in (0, 1, 5, 16, 20):
        got = shift_round(x, s, mode)
        want = [py_shift(int(v), s, mode) for v in x]
        assert [int(g) for g in got] == want, f"{mode}, shift {s}"


def test_rounding_modes_on_ties():
    """±2.5 and ±3.5 LSB ties: each mode's documented behaviour."""
    x = np.array([5, -5, 7, -7]) << 15      # ±2.5, ±3.5 after a 16-bit shift
    assert list(shift_round(x, 16, "truncate")) == [2, -3, 3, -4]
    assert list(shift_round(x, 16, "toward_zero")) == [2, -2, 3, -3]
    assert list(shift_round(x, 16, "nearest")) == [3, -2, 4, -3]
    assert list(shift_round(x, 16, "nearest_even")) == [2, -2, 4, -4]


@pytest.mark.parametrize("spec,overflow", [("Q16.16", "saturate"), ("Q12.5", "saturate"), ("Q8.8", "wrap"),
                                           ("Q20.12", "saturate")])
@pytest.mark.parametrize("mode", ["truncate", "nearest", "nearest_even", "toward_zero"])
def test_matmul_is_exact_integer_emulation(spec, overflow, mode):
    """Fx @ Fx equals the datapath computed with Python integers: each product rounded and
    saturated, exact sum, saturated write-back; the overflow count matches too."""
    fmt = QFormat.parse(spec, rounding=mode, overflow=overflow)
    rng = np.random.default_rng(7)
    A = rng.integers(fmt.min_int, fmt.max_int + 1, size=(3, 4, 5))
    B = rng.integers(fmt.min_int, fmt.max_int + 1, size=(3, 5, 2))
    A[0, 0, 0] = fmt.min_int                       # extreme words
    B[0, 0, 0] = fmt.min_int
    ctx = FxContext(fmt, OverflowCounter())
    got = (Fx(A, 0.0, ctx) @ Fx(B, 0.0, ctx)).v
    events = 0
    for b in range(3):
        for i in range(4):
            for j in range(2):
                acc = 0
                for k in range(5):
                    p = py_shift(int(A[b, i, k]) * int(B[b, k, j]), fmt.frac_bits, mode)
                    ps = py_sat(p, fmt)
                    events += ps != p
                    acc += ps
                out = py_sat(acc, fmt)
                events += out != acc
                assert int(got[b, i, j]) == out, (b, i, j)
    assert ctx.counter.total == events


def test_add_neg_and_quantize_saturate_and_count():
    fmt = QFormat(8, 8)
    ctx = FxContext(fmt, OverflowCounter())
    x = Fx.from_float(np.array([100.0, -100.0, 127.99, -128.0, 200.0, -1e6]), ctx)
    assert list(x.v) == [100 * 256, -100 * 256, int(np.floor(127.99 * 256)), -128 * 256, fmt.max_int, fmt.min_int]
    assert ctx.counter.counts == {"input": 2}
    assert np.isinf(x.e[4]) and np.isinf(x.e[5]) and np.all(np.isfinite(x.e[:4]))
    s = x[:2] + x[:2]                              # ±200 does not fit Q8.8
    assert list(s.v) == [fmt.max_int, fmt.min_int]
    n = -x[3:4]                                    # -(-128) = 128 does not fit either
    assert list(n.v) == [fmt.max_int]
    assert ctx.counter.counts == {"input": 2, "sum": 2, "negation": 1}


def test_quantize_is_exactly_rounded_and_to_float_inverts():
    fmt = QFormat(16, 16, "nearest")
    rng = np.random.default_rng(3)
    x = rng.uniform(-1000, 1000, 500)
    xi = quantize(x, fmt)
    for xv, q in zip(x, xi):
        assert int(q) == py_shift(int(Fraction(xv) * (1 << 32)), 16, "nearest")  # exact rational reference
    assert np.all(np.abs(to_float(xi, fmt) - x) <= fmt.rounding_unit)


def test_on_overflow_raise_names_problem_and_fix():
    fmt = QFormat(16, 16)
    ctx = FxContext(fmt, OverflowCounter("raise"), where="unit test")
    with pytest.raises(FixedPointOverflowError, match=r"Q16\.16.*unit test.*Q20\.12"):
        Fx.from_float(np.array([1e5]), ctx)


def test_error_bound_is_rigorous_for_chained_products():
    """Random chains of matrix products on inexact inputs: the running bound covers the distance
    to the exact (Fraction) result of the same products on the exact inputs."""
    fmt = QFormat(12, 14, "truncate")
    ctx = FxContext(fmt, OverflowCounter())
    rng = np.random.default_rng(11)
    mats = [rng.uniform(-2, 2, size=(3, 3)) for _ in range(4)]
    fx = [Fx.from_float(m, ctx) for m in mats]
    out = fx[0] @ fx[1] @ fx[2] @ fx[3]
    exact = [[Fraction(float(v)) for v in row] for row in mats[0]]
    for m in mats[1:]:
        mm = [[Fraction(float(v)) for v in row] for row in m]
        exact = [[sum(exact[i][k] * mm[k][j] for k in range(3)) for j in range(3)] for i in range(3)]
    err = np.array([[abs(float(exact[i][j]) - out.to_float()[i, j]) for j in range(3)] for i in range(3)])
    assert np.all(err <= out.e), (err, out.e)
    assert np.all(out.e < 1e-2)     # and it is not vacuous
    assert ctx.counter.total == 0


def test_format_parsing_and_errors():
    f = QFormat.parse("Q12.5")
    assert (f.int_bits, f.frac_bits, f.word_bits, f.name) == (12, 5, 17, "Q12.5")
    assert QFormat.parse("16.16", rounding="nearest").rounding_unit == 2.0 ** -17
    with pytest.raises(ValueError, match="Qm.n"):
        QFormat.parse("float32")
    with pytest.raises(ValueError, match="at most 32"):
        QFormat(20, 20)
    with pytest.raises(ValueError, match="unknown rounding"):
        QFormat(16, 16, "stochastic")
