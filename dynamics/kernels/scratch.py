"""Per-thread scratch space: one allocation per batch slice, carved into C-contiguous views, from a
declared layout.

A state's work arrays (placements, per-link vectors, per-dof columns, …) are views into one flat
float64 buffer allocated once per call of a ``*_range`` kernel, so a single-state call pays for one
allocation instead of one per work array. Each kernel declares its buffer as a :class:`Layout`:
named fields whose shapes are written in the model sizes :data:`LINKS` and :data:`DOFS`, each
starting on a multiple of :data:`ALIGN` entries;
the offsets and the total are computed from the declaration, in Python, once, as polynomials in
``(L, nv)`` (:class:`Size`). The kernel reads them through the layout's :attr:`Layout.spec` (a :class:`ScratchSpec`),
whose entries numba compiles in as constants, so the views cost what hand-counted offsets did::

    AB = Layout(("R", (LINKS, 3, 3)), ("J", (DOFS, 6)))
    _AB = AB.spec

    R = view3(buf, _AB.R, L, nv)
    J = view2(buf, _AB.J, L, nv)

The views are *borrowed*: they carry no reference to the buffer's memory (as numba's own parallel
loops hand arrays to their threads), so the passes that take them, their rows and the helpers they
call do no reference counting. Each count update is an atomic instruction; on the per-link rows of
a 7-dof arm they were 0.5-0.7 µs of a 4 µs ``aba_derivatives`` state (docs/backends.md).
The price is one rule, which ``tests/dynamics/kernels/test_scratch_lifetime.py`` checks in every
compiled source: **views are carved only from a buffer that is an argument of the carving
function**, never from one it allocated itself. numba frees a local array right after its last
use, which for a buffer is the carving; an argument lives until the call returns. So a kernel
allocates its buffer and hands it to a second function that carves and computes::

    @jit
    def kernel(li, v):
        _kernel(buffer(_AB.total, li.shape[0], v.shape[1]), li, v)

    @jit
    def _kernel(buf, li, v):
        L, nv = li.shape[0], v.shape[1]
        R = view3(buf, _AB.R, L, nv)
        J = view2(buf, _AB.J, L, nv)
        ...

and only the view functions (``view1``, ``view2``, ``view3``, ``*_views``) return views.

:data:`THREAD_PAD_ROWS` is the padding between rows that different worker threads write.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

from .jit import jit, jit_inline

#: rows between the slices of a per-candidate array that different worker threads write (a row
#: holds at least one float64, so this is at least one 64-byte cache line): threads writing to one
#: cache line evict each other's writes (false sharing), which made two rollout candidates on two
#: threads slower than one candidate on one thread
THREAD_PAD_ROWS = 8

#: fields start on multiples of ALIGN float64 (32 bytes, the alignment of a numba array's data):
#: BLAS and vector loads on a field then do not depend on where it sits in the layout
ALIGN = 4

#: the monomials ``L^i nv^j`` a size may contain, as (i, j); :func:`extent` evaluates them in this order
MONOMIALS = ((0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (0, 3))


class Size:
    """An integer polynomial in the model sizes L and nv (a dimension, an offset or a total)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[tuple[int, int], int]):
        self.terms = {m: int(c) for m, c in terms.items() if c != 0}

    @staticmethod
    def of(x: int | Size) -> Size:
        if isinstance(x, Size):
            return x
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0:
            return Size({(0, 0): int(x)})
        raise TypeError(f"a scratch size is a non-negative int or a Size, got {x!r}")

    def __add__(self, other: int | Size) -> Size:
        o = Size.of(other)
        terms = dict(self.terms)
        for m, c in o.terms.items():
            terms[m] = terms.get(m, 0) + c
        return Size(terms)

    __radd__ = __add__

    def __mul__(self, other: int | Size) -> Size:
        o = Size.of(other)
        terms: dict[tuple[int, int], int] = {}
        for (i, j), c in self.terms.items():
            for (k, m), d in o.terms.items():
                terms[(i + k, j + m)] = terms.get((i + k, j + m), 0) + c * d
        return Size(terms)

    __rmul__ = __mul__

    def __call__(self, L: int, nv: int) -> int:
        """The value for a model with L links and nv dofs."""
        return sum(c * L ** i * nv ** j for (i, j), c in self.terms.items())

    def coefficients(self) -> tuple[int, ...]:
        """The coefficients of :data:`MONOMIALS` (what :func:`extent` takes)."""
        extra = set(self.terms) - set(MONOMIALS)
        if extra:
            raise ValueError(f"scratch sizes are polynomials in the monomials {MONOMIALS} of (L, nv); got {extra}")
        return tuple(self.terms.get(m, 0) for m in MONOMIALS)

    def __repr__(self) -> str:
        names = {(0, 0): "", (1, 0): "L", (0, 1): "nv", (1, 1): "L*nv", (0, 2): "nv^2", (0, 3): "nv^3"}
        parts = [f"{c}*{names.get(m, m)}".rstrip("*") for m, c in sorted(self.terms.items())]
        return " + ".join(parts) or "0"


#: the number of links (L) and of dofs (nv) of the model a kernel runs on
LINKS = Size({(1, 0): 1})
DOFS = Size({(0, 1): 1})


class ScratchSpec(ModuleType):
    """What a compiled kernel reads of a :class:`Layout`: one attribute per field (its flat entry, see
    :func:`_flat`) and ``total``. A module object because numba resolves a module's attribute at
    compile time as a constant of the attribute's own small type; a named-tuple global of every
    field is typed and lowered whole at each use, which cost seconds of compilation per kernel."""

    def __init__(self, fields: dict[str, tuple[int, ...]], total: tuple[int, ...]):
        super().__init__("scratch_spec")
        for name, flat in fields.items():
            setattr(self, name, flat)
        self.total = total


class Layout:
    """A kernel's scratch buffer: fields ``(name, shape)`` laid out one after the other in the given
    order, each shape 1 to 3 dimensions of ints or :class:`Size`.

    ``offset[name]``, ``shape[name]`` and ``total`` are :class:`Size`; :attr:`spec` is what the
    compiled kernel reads: a :class:`ScratchSpec` with, per field, the coefficients of its offset
    and of each dimension, and ``total``, the coefficients of the buffer's length."""

    def __init__(self, *fields: tuple[str, tuple]):
        self.offset: dict[str, Size] = {}
        self.shape: dict[str, tuple[Size, ...]] = {}
        o = Size.of(0)
        for name, shape in fields:
            if name in self.shape or name == "total" or not name.isidentifier():
                raise ValueError(f"scratch field name {name!r} is repeated, reserved or not an identifier")
            if not 1 <= len(shape) <= 3:
                raise ValueError(f"scratch field {name!r}: 1 to 3 dimensions, got {shape}")
            dims = tuple(Size.of(d) for d in shape)
            self.offset[name], self.shape[name] = o, dims
            n = Size.of(1)
            for d in dims:
                n = n * d
            o = o + n + (ALIGN - 1)       # slack: the field starts at ``align(offset)`` (see view1)
        self.total = o
        self.fields = tuple(fields)
        self.spec = ScratchSpec({n: _flat(self.offset[n], *self.shape[n]) for n in self.shape}, _flat(self.total))

    def then(self, *fields: tuple[str, tuple]) -> Layout:
        """This layout's fields, then ``fields``: views of this layout's fields (at the same offsets)
        are views of the new one's, so code written for this layout reads a longer buffer too."""
        return Layout(*self.fields, *fields)

    def start(self, name: str, L: int, nv: int) -> int:
        """Where field ``name`` starts in the buffer (float64 entries) for L links and nv dofs."""
        return align(self.offset[name](L, nv))

    def size(self, L: int, nv: int) -> int:
        """The buffer's length (float64 entries) for a model with L links and nv dofs."""
        return self.total(L, nv)


def _flat(*sizes: Size) -> tuple[int, ...]:
    """The coefficients of up to four sizes (an offset and up to three dimensions), concatenated and
    zero-padded to 4 × len(MONOMIALS) ints: every field's entry has one small type."""
    flat = [c for s in sizes for c in s.coefficients()]
    return tuple(flat + [0] * (4 * len(MONOMIALS) - len(flat)))


# The views are inlined into the kernels (numba IR), so carving a buffer costs no calls; `extent` is
# a plain compiled function (LLVM still inlines it): inlining it into every view as well made numba
# re-type each kernel once per extent and added seconds to each kernel's first compilation.
@jit
def extent(f, k, L, nv):
    """The value at (L, nv) of size ``k`` of the flat entry ``f`` (coefficients of :data:`MONOMIALS`)."""
    c = 6 * k
    return f[c] + L * (f[c + 1] + f[c + 3] * nv) + nv * (f[c + 2] + nv * (f[c + 4] + f[c + 5] * nv))


@jit
def align(o):
    """``o`` rounded up to a multiple of :data:`ALIGN`."""
    return (o + ALIGN - 1) // ALIGN * ALIGN


@jit
def buffer(total, L, nv):
    """The uninitialised buffer of length ``total`` (a :attr:`Layout.spec`'s ``total``) for L links and nv dofs."""
    return np.empty(extent(total, 0, L, nv))


@jit_inline
def view1(buf, f, L, nv):
    """Field ``f`` (an entry of a :attr:`Layout.spec`, one dimension) of ``buf``."""
    return carve(buf, align(extent(f, 0, L, nv)), (extent(f, 1, L, nv),))


@intrinsic
def carve(typingctx, buf, start, shape):
    """The C-contiguous array of shape ``shape`` (a tuple of ints) whose entries are ``buf[start:]``,
    sharing ``buf``'s memory and borrowing it: no memory-info or parent object, so no reference
    counting where it goes (the module's rule keeps ``buf`` alive meanwhile). ``buf[a:b].reshape(shape)``
    would call numba's C helper for a general no-copy reshape and check the new shape for every
    view: in a small kernel's per-call setup (an ABA call carves 20 views) those calls cost more
    than the allocation. No bounds check: a :class:`Layout` sizes the buffer to hold every field."""
    if not (isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C"
            and isinstance(start, types.Integer) and isinstance(shape, types.UniTuple)
            and isinstance(shape.dtype, types.Integer)):
        return None
    out_type = types.Array(buf.dtype, shape.count, "C", readonly=not buf.mutable)

    def codegen(context, builder, sig, args):
        src = make_array(sig.args[0])(context, builder, args[0])
        first = context.cast(builder, args[1], sig.args[1], types.intp)
        dims = [context.cast(builder, d, sig.args[2].dtype, types.intp) for d in cgutils.unpack_tuple(builder, args[2])]
        strides = [src.itemsize]              # C order: the last dimension's stride is one entry
        for d in reversed(dims[1:]):
            strides.insert(0, builder.mul(strides[0], d))
        view = make_array(out_type)(context, builder)
        populate_array(view, data=cgutils.gep_inbounds(builder, src.data, first), shape=dims, strides=strides,
                       itemsize=src.itemsize, meminfo=cgutils.get_null_value(src.meminfo.type),
                       parent=cgutils.get_null_value(src.parent.type))
        return view._getvalue()

    return out_type(buf, start, shape), codegen


@jit_inline
def view2(buf, f, L, nv):
    """Field ``f`` (two dimensions) of ``buf``, as a C-contiguous (n0, n1) array."""
    return carve(buf, align(extent(f, 0, L, nv)), (extent(f, 1, L, nv), extent(f, 2, L, nv)))


@jit_inline
def view3(buf, f, L, nv):
    """Field ``f`` (three dimensions) of ``buf``, as a C-contiguous (n0, n1, n2) array."""
    return carve(buf, align(extent(f, 0, L, nv)), (extent(f, 1, L, nv), extent(f, 2, L, nv), extent(f, 3, L, nv)))
