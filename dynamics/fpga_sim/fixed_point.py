"""Exact emulation of two's-complement fixed-point arithmetic ``Qm.n`` on numpy int64.

A value ``x`` is stored as the integer ``X = x · 2^n`` in a word of ``W = m + n`` bits (``m`` integer
bits including the sign, ``n`` fraction bits), range ``[-2^(W-1), 2^(W-1) - 1] · 2^-n``. Plancher et al. 2021
(§IV-C, footnote 2) uses Q16.16: a 32-bit integer with 16 bits before and after the binary point.

Datapath semantics (one multiply-accumulate unit, as a DSP slice with a wide accumulator):

1. every product of two W-bit words is formed exactly (2W bits, 2n fraction bits, int64 holds it
   for W <= 32), rounded back to n fraction bits by the format's rounding mode (an integer shift)
   and saturated (or wrapped) to W bits — the multiplier's output register;
2. the products of one dot product are summed exactly (wide accumulator, int64 cannot overflow:
   at most 2^31 terms of magnitude <= 2^31);
3. the sum is saturated (or wrapped) to W bits when written back.

Every step is integer arithmetic; nothing is computed in floating point and rounded afterwards.
Saturation/wrap events are counted per kind in an :class:`OverflowCounter`.

Alongside each integer array :class:`Fx` carries a rigorous absolute error bound (float64, same
shape): the bound on ``|x_exact - x_fixed|`` where ``x_exact`` is the value the same algorithm
would produce in exact real arithmetic from the exact inputs. It is propagated by the standard
running error analysis (product ``x y``: ``|x̂| e_y + |ŷ| e_x + e_x e_y`` plus one rounding unit per
rounded product); a saturated element gets an infinite bound. This is the format-derived error
bound used by the tests and reported in ``FpgaSimBackend.last_error_bound``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

ROUNDING_MODES = ("truncate", "nearest", "nearest_even", "toward_zero")
OVERFLOW_MODES = ("saturate", "wrap")


class FixedPointOverflowError(ArithmeticError):
    """A fixed-point value left the format's range while ``on_overflow="raise"``."""


@dataclass(frozen=True)
class QFormat:
    """Fixed-point format ``Qm.n``: ``int_bits`` = m (sign included), ``frac_bits`` = n.

    rounding: ``"truncate"`` (floor: drop the low bits, the free arithmetic shift, default as in
    Xilinx ``AP_TRN``), ``"nearest"`` (round half up), ``"nearest_even"`` (convergent) or
    ``"toward_zero"``. overflow: ``"saturate"`` (clamp to the range, default) or ``"wrap"``
    (two's-complement wrap-around). Both modes count every event.
    """

    int_bits: int = 16
    frac_bits: int = 16
    rounding: str = "truncate"
    overflow: str = "saturate"

    def __post_init__(self) -> None:
        if not (isinstance(self.int_bits, (int, np.integer)) and isinstance(self.frac_bits, (int, np.integer))):
            raise TypeError("QFormat: int_bits and frac_bits must be integers")
        if self.int_bits < 1 or self.frac_bits < 0:
            raise ValueError(f"QFormat: need int_bits >= 1 (sign bit included) and frac_bits >= 0, got "
                             f"Q{self.int_bits}.{self.frac_bits}")
        if self.word_bits > 32:
            raise ValueError(f"QFormat: Q{self.int_bits}.{self.frac_bits} has {self.word_bits} bits; at most 32 "
                             f"are supported (products of two words must fit exactly in int64)")
        if self.rounding not in ROUNDING_MODES:
            raise ValueError(f"QFormat: unknown rounding '{self.rounding}'; use one of {', '.join(ROUNDING_MODES)}")
        if self.overflow not in OVERFLOW_MODES:
            raise ValueError(f"QFormat: unknown overflow '{self.overflow}'; use one of {', '.join(OVERFLOW_MODES)}")

    @classmethod
    def parse(cls, spec: "str | QFormat", rounding: str | None = None, overflow: str | None = None) -> "QFormat":
        """``"Q16.16"`` (or ``"16.16"``) -> QFormat; a QFormat is returned (with options replaced)."""
        if isinstance(spec, QFormat):
            fmt = spec
        else:
            mt = re.fullmatch(r"\s*[Qq]?(\d+)\.(\d+)\s*", str(spec))
            if mt is None:
                raise ValueError(f"fixed-point format '{spec}' not understood; write 'Qm.n', e.g. 'Q16.16' "
                                 f"(m integer bits including the sign, n fraction bits)")
            fmt = cls(int(mt.group(1)), int(mt.group(2)))
        kw = {}
        if rounding is not None:
            kw["rounding"] = rounding
        if overflow is not None:
            kw["overflow"] = overflow
        return cls(fmt.int_bits, fmt.frac_bits, kw.get("rounding", fmt.rounding), kw.get("overflow", fmt.overflow))

    @property
    def name(self) -> str:
        return f"Q{self.int_bits}.{self.frac_bits}"

    @property
    def word_bits(self) -> int:
        return self.int_bits + self.frac_bits

    @property
    def max_int(self) -> int:
        return (1 << (self.word_bits - 1)) - 1

    @property
    def min_int(self) -> int:
        return -(1 << (self.word_bits - 1))

    @property
    def resolution(self) -> float:
        """Value of one least-significant bit, ``2^-n``."""
        return 2.0 ** -self.frac_bits

    @property
    def max_value(self) -> float:
        return self.max_int * self.resolution

    @property
    def rounding_unit(self) -> float:
        """Largest error of one rounding to n fraction bits: ``2^-n`` (truncate, toward zero) or
        ``2^-(n+1)`` (round to nearest)."""
        return self.resolution if self.rounding in ("truncate", "toward_zero") else 0.5 * self.resolution


def shift_round(x: np.ndarray, s: int, rounding: str) -> np.ndarray:
    """Exact ``x / 2^s`` rounded to an integer by ``rounding``; x int64 (any shape), s >= 0."""
    x = np.asarray(x, dtype=np.int64)
    if s == 0:
        return x.copy()
    if rounding == "truncate":
        return x >> s                                   # arithmetic shift = floor
    if rounding == "nearest":
        return (x + (1 << (s - 1))) >> s                # floor(x/2^s + 1/2): half rounds up
    if rounding == "toward_zero":
        return np.where(x >= 0, x >> s, -((-x) >> s))
    if rounding == "nearest_even":
        q = x >> s
        r = x - (q << s)                                # 0 <= r < 2^s
        half = 1 << (s - 1)
        up = (r > half) | ((r == half) & ((q & 1) == 1))
        return q + up
    raise ValueError(f"unknown rounding '{rounding}'; use one of {', '.join(ROUNDING_MODES)}")


@dataclass
class OverflowCounter:
    """Counts of out-of-range events by kind (``"input"``, ``"product"``, ``"sum"``, …).

    on_overflow: ``"count"`` (saturate/wrap and count) or ``"raise"`` (raise
    :class:`FixedPointOverflowError` at the first event, naming where it happened)."""

    on_overflow: str = "count"
    counts: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.on_overflow not in ("count", "raise"):
            raise ValueError(f"on_overflow must be 'count' or 'raise', got '{self.on_overflow}'")

    @property
    def total(self) -> int:
        return int(sum(self.counts.values()))

    def add(self, kind: str, n: int, fmt: QFormat, where: str = "") -> None:
        if n <= 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + int(n)
        if self.on_overflow == "raise":
            raise FixedPointOverflowError(
                f"{n} value(s) left the range of {fmt.name} (±{fmt.max_value:.6g}) at a {kind}"
                f"{' in ' + where if where else ''}; use a format with more integer bits (e.g. "
                f"fmt='Q{fmt.int_bits + 4}.{max(fmt.frac_bits - 4, 0)}') or scale the inputs down")

    def reset(self) -> None:
        self.counts = {}


def clamp(x: np.ndarray, fmt: QFormat, counter: OverflowCounter | None, kind: str,
          where: str = "") -> tuple[np.ndarray, np.ndarray | None]:
    """Bring int64 ``x`` into the W-bit range by saturation or wrap; returns ``(x, mask)`` with
    mask the out-of-range elements (None if there were none)."""
    hi, lo = fmt.max_int, fmt.min_int
    bad = (x > hi) | (x < lo)
    n = int(np.count_nonzero(bad))
    if n == 0:
        return x, None
    if counter is not None:
        counter.add(kind, n, fmt, where)
    if fmt.overflow == "saturate":
        return np.clip(x, lo, hi), bad
    w = 1 << fmt.word_bits
    return ((x - lo) % w) + lo, bad


def quantize(x, fmt: QFormat, counter: OverflowCounter | None = None, kind: str = "input",
             where: str = "") -> np.ndarray:
    """Host-side float -> fixed conversion: ``round(x · 2^n)`` by the format's rounding mode, then
    saturation/wrap. Scaling by a power of two and ``floor``/``rint`` are exact in float64, so the
    result is the exactly rounded integer of the float64 input (|x| < 2^52 · 2^-n)."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"quantize: non-finite input{' (' + where + ')' if where else ''}")
    s = np.ldexp(x, fmt.frac_bits)
    big = np.abs(s) > 2.0 ** 62
    s = np.where(big, np.sign(s) * 2.0 ** 62, s)
    if fmt.rounding == "truncate":
        r = np.floor(s)
    elif fmt.rounding == "toward_zero":
        r = np.trunc(s)
    elif fmt.rounding == "nearest":
        r = np.floor(s + 0.5)    # exact: s + 0.5 is exact whenever s has a fraction part
    else:
        r = np.rint(s)           # IEEE round half to even
    xi, _ = clamp(r.astype(np.int64), fmt, counter, kind, where)
    return xi


def to_float(xi: np.ndarray, fmt: QFormat) -> np.ndarray:
    """Fixed -> float64 (exact for W <= 53)."""
    return np.ldexp(np.asarray(xi, dtype=np.float64), -fmt.frac_bits)


@dataclass
class FxContext:
    """Format, overflow counter and a ``where`` label shared by the arrays of one computation."""

    fmt: QFormat
    counter: OverflowCounter
    where: str = ""


class Fx:
    """A fixed-point array: int64 words ``v`` (exact), absolute error bound ``e`` (float64, real
    units, broadcastable to ``v``) and the :class:`FxContext` it is computed in.

    Operations (``@``, ``*`` by a constant array, ``+``, ``-``, indexing) follow the datapath
    semantics of the module docstring and propagate the error bound.
    """

    __slots__ = ("v", "e", "ctx")

    def __init__(self, v: np.ndarray, e, ctx: FxContext):
        self.v = v
        self.e = np.broadcast_to(np.asarray(e, dtype=np.float64), v.shape) if np.ndim(e) else \
            np.full(v.shape, float(e))
        self.ctx = ctx

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_float(cls, x, ctx: FxContext, kind: str = "input", exact_error: bool = True) -> "Fx":
        """Convert float64 ``x`` (host side). The error bound is the actual conversion error
        ``|x - fixed(x)|`` (known exactly on the host) when ``exact_error``; saturated -> inf."""
        x = np.asarray(x, dtype=np.float64)
        xi = quantize(x, ctx.fmt, ctx.counter, kind, ctx.where)
        err = np.abs(x - to_float(xi, ctx.fmt)) if exact_error else np.full(x.shape, ctx.fmt.rounding_unit)
        # out of range (saturated or wrapped): the word no longer represents x
        sat = (x > ctx.fmt.max_value) | (x < ctx.fmt.min_int * ctx.fmt.resolution)
        if np.any(sat):
            err = np.where(sat, np.inf, err)
        return cls(xi, err, ctx)

    @classmethod
    def zeros(cls, shape, ctx: FxContext) -> "Fx":
        return cls(np.zeros(shape, dtype=np.int64), 0.0, ctx)

    def to_float(self) -> np.ndarray:
        return to_float(self.v, self.ctx.fmt)

    @property
    def shape(self):
        return self.v.shape

    @property
    def abs_value(self) -> np.ndarray:
        return np.abs(self.to_float())

    def _new(self, v, e) -> "Fx":
        return Fx(v, e, self.ctx)

    def _clamp(self, v, e, kind):
        v, bad = clamp(v, self.ctx.fmt, self.ctx.counter, kind, self.ctx.where)
        if bad is not None:
            e = np.where(bad, np.inf, np.broadcast_to(e, v.shape))
        return self._new(v, e)

    # ---------------------------------------------------------------- structure (exact)
    def __getitem__(self, idx) -> "Fx":
        return self._new(self.v[idx], self.e[idx])

    def swapaxes(self, a: int, b: int) -> "Fx":
        return self._new(np.swapaxes(self.v, a, b), np.swapaxes(self.e, a, b))

    @property
    def T(self) -> "Fx":
        """Transpose of the last two axes (a change of wiring, no arithmetic)."""
        return self.swapaxes(-1, -2)

    def copy(self) -> "Fx":
        return self._new(self.v.copy(), np.array(self.e, copy=True))

    def set(self, idx, other: "Fx") -> None:
        """In-place ``self[idx] = other`` (a register write)."""
        if not self.v.flags.writeable:
            self.v = self.v.copy()
        if not self.e.flags.writeable:
            self.e = np.array(self.e, copy=True)
        self.v[idx] = other.v
        self.e[idx] = other.e

    @staticmethod
    def stack(items: list["Fx"], axis: int = 0) -> "Fx":
        return Fx(np.stack([x.v for x in items], axis=axis), np.stack([x.e for x in items], axis=axis), items[0].ctx)

    @staticmethod
    def concatenate(items: list["Fx"], axis: int = -1) -> "Fx":
        return Fx(np.concatenate([x.v for x in items], axis=axis), np.concatenate([x.e for x in items], axis=axis),
                  items[0].ctx)

    # ---------------------------------------------------------------- arithmetic
    def __neg__(self) -> "Fx":
        return self._clamp(-self.v, self.e, "negation")

    def __add__(self, other: "Fx") -> "Fx":
        return self._clamp(self.v + other.v, self.e + other.e, "sum")

    def __sub__(self, other: "Fx") -> "Fx":
        return self._clamp(self.v - other.v, self.e + other.e, "sum")

    def mul(self, other: "Fx") -> "Fx":
        """Elementwise product (broadcasting), one rounding per product."""
        fmt = self.ctx.fmt
        p = shift_round(self.v * other.v, fmt.frac_bits, fmt.rounding)
        e = self._prod_err(self, other) + (fmt.rounding_unit if fmt.frac_bits else 0.0)
        return self._clamp(p, _nan_to_inf(e), "product")

    @staticmethod
    def _prod_err(a: "Fx", b: "Fx"):
        return a.abs_value * b.e + a.e * b.abs_value + a.e * b.e

    def __matmul__(self, other: "Fx") -> "Fx":
        """``(..., i, k) @ (..., k, j)``: each product rounded and saturated, exact sum, saturated
        write-back (module docstring). Use :meth:`mv` for a matrix-vector product."""
        B = other
        fmt = self.ctx.fmt
        prods = self.v[..., :, :, None] * B.v[..., None, :, :]
        prods = shift_round(prods, fmt.frac_bits, fmt.rounding)
        prods, pbad = clamp(prods, fmt, self.ctx.counter, "product", self.ctx.where)
        s = prods.sum(axis=-2)
        av, ae = self.abs_value, self.e
        bv, be = B.abs_value, B.e
        # sum_k |a_ik| e_kj + e_ik |b_kj| + e_ik e_kj  (as matrix products of non-negative floats)
        e = av @ be + ae @ bv + ae @ be
        nz = (self.v[..., :, :, None] != 0) & (B.v[..., None, :, :] != 0)
        if fmt.frac_bits:
            e = e + fmt.rounding_unit * np.count_nonzero(nz, axis=-2)
        if pbad is not None:
            e = np.where(np.any(pbad, axis=-2), np.inf, e)
        return self._clamp(s, _nan_to_inf(e), "sum")

    def mv(self, x: "Fx") -> "Fx":
        """Matrix-vector product ``(..., i, k) · (..., k) -> (..., i)``."""
        return (self @ x[..., None])[..., 0]

    def scale_const(self, c: np.ndarray) -> "Fx":
        """Multiply by a float constant array quantized to this format (a constant coefficient
        stored on chip), elementwise with broadcasting."""
        cf = Fx.from_float(c, self.ctx, kind="constant")
        return self.mul(cf)


def _nan_to_inf(e):
    """An error bound of ``inf · 0`` is unknown: keep it conservative (inf)."""
    e = np.asarray(e, dtype=np.float64)
    return np.where(np.isnan(e), np.inf, e)


def cross_matrix_motion(v: Fx) -> Fx:
    """``v×`` (Plancher et al. 2021 eq. 2) as a (..., 6, 6) Fx built by wiring (copies and negations of v's
    entries), for motion vectors ``(linear, angular)``."""
    lin, ang = v[..., :3], v[..., 3:]
    z = Fx.zeros(v.shape[:-1] + (6, 6), v.ctx)
    sw = skew(ang)
    z.set((..., slice(0, 3), slice(0, 3)), sw)
    z.set((..., slice(3, 6), slice(3, 6)), sw)
    z.set((..., slice(0, 3), slice(3, 6)), skew(lin))
    return z


def cross_matrix_force(v: Fx) -> Fx:
    """``v×* = -(v×)^T`` (..., 6, 6)."""
    return -(cross_matrix_motion(v).T)


def cross_matrix_force_rhs(f: Fx) -> Fx:
    """Matrix of ``v -> v ×* f`` for a fixed force f, (..., 6, 6) (as ``spatial.force_cross_rhs_matrix``)."""
    z = Fx.zeros(f.shape[:-1] + (6, 6), f.ctx)
    sf = -skew(f[..., :3])
    z.set((..., slice(0, 3), slice(3, 6)), sf)
    z.set((..., slice(3, 6), slice(0, 3)), sf)
    z.set((..., slice(3, 6), slice(3, 6)), -skew(f[..., 3:]))
    return z


def skew(w: Fx) -> Fx:
    """``[w]×`` (..., 3, 3) from (..., 3)."""
    z = Fx.zeros(w.shape[:-1] + (3, 3), w.ctx)
    n = -w
    for (r, c, src, sign) in ((0, 1, 2, -1), (0, 2, 1, 1), (1, 0, 2, 1), (1, 2, 0, -1), (2, 0, 1, -1), (2, 1, 0, 1)):
        z.set((..., r, c), (w if sign > 0 else n)[..., src])
    return z
