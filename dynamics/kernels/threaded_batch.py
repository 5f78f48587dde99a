"""One batch driver for every serial kernel: splits a batch of states over the worker threads and
calls the kernel's compiled code by address.

A ``numba.prange`` driver that calls a serial kernel directly links the kernel's whole call tree
into the driver and has LLVM optimise and emit it again (twice: once for the parallel region's
function, once for the driver), which costs about as much compile time as the kernel itself. Here
the driver calls the kernel through a function pointer (numba's own calling convention, as its
first-class functions do), so each driver compiles in a fraction of a second and the kernel's
code exists once.

Two conventions, each with its driver and its Python entry (which looks the address up once per
kernel and argument kinds):

* :func:`run_threaded` / :func:`run_slices`: ``kernel(*args, start, stop)`` on ``nt`` contiguous
  slices ``[start, stop)`` of a batch of B states (the ``*_range`` kernels of this library);
* :func:`run_threaded_parts` / :func:`run_parts`: ``kernel(*args, c, nt)`` for ``c < nt``, the
  kernel choosing its own share (the solvers' rollouts and cost kernel split candidates or knots
  and pad their rows).

An address must come from a kernel compiled for arguments of the same dtypes, dimensions and
contiguity as ``args`` (what its machine code depends on); the Python entries see to it.
"""

from __future__ import annotations

import numpy as np
from numba import prange, types
from numba._dispatcher import compute_fingerprint as _fingerprint   # what numba's dispatch keys on
from numba.core import cgutils
from numba.core.typing import signature
from numba.extending import intrinsic, models, register_model

from .jit import jit_parallel


class ArgumentPack(types.Type):
    """A kernel's arguments (a tuple, possibly holding tuples of arrays) as one opaque value: a
    parallel loop hands it to every thread as it is (numba's parallel loops take arrays, scalars
    and flat tuples of arrays only)."""

    def __init__(self, args: types.BaseTuple):
        self.args = args
        super().__init__(name=f"ArgumentPack({args})")


@register_model(ArgumentPack)
class _ArgumentPackModel(models.PrimitiveModel):
    """The tuple in numba's data representation (booleans as bytes), as value and as data alike: a
    parallel loop stores and loads its scalar arguments without converting them."""

    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, dmm.lookup(fe_type.args).get_data_type())


def _borrowed(context, builder, typ, value):
    """``value`` of type ``typ`` with every array in it (at any tuple depth) as a borrowed view: no
    memory-info or parent object, as numba's own parallel loops hand arrays to their threads. The
    kernel then does no reference counting on them: two threads atomically updating the counts of
    the same arrays fight over one cache line, which cost a 2-thread batch its whole speed-up
    (docs/backends.md). The caller keeps the arrays alive for the call."""
    if isinstance(typ, types.Array):
        ary = context.make_array(typ)(context, builder, value=value)
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()
    if isinstance(typ, types.BaseTuple):
        for i, t in enumerate(typ.types):
            value = builder.insert_value(value, _borrowed(context, builder, t, builder.extract_value(value, i)), i)
    return value


@intrinsic
def _pack(typingctx, args):
    """``args`` (a tuple) as an :class:`ArgumentPack`, its arrays borrowed (:func:`_borrowed`)."""
    if not isinstance(args, types.BaseTuple):
        return None

    def codegen(context, builder, sig_, llargs):
        value = _borrowed(context, builder, args, llargs[0])
        return context.data_model_manager[args].as_data(builder, value)

    return signature(ArgumentPack(args), args), codegen


@intrinsic
def _call_at(typingctx, address, pack, a, b):
    """``kernel(*args, a, b)`` for the kernel compiled at ``address`` (int64), with numba's calling
    convention; ``pack`` an :class:`ArgumentPack` of ``args``. Returns nothing (the kernels write
    into their arguments)."""
    if not isinstance(address, types.Integer) or not isinstance(pack, ArgumentPack):
        return None
    argtypes = tuple(pack.args.types) + (a, b)
    sig = signature(types.none, address, pack, a, b)

    def codegen(context, builder, sig_, llargs):
        addr, packed, va, vb = llargs
        tup = context.data_model_manager[pack.args].from_data(builder, packed)
        values = [builder.extract_value(tup, i) for i in range(len(pack.args.types))] + [va, vb]
        fnty = context.call_conv.get_function_type(types.none, argtypes)
        fn = builder.inttoptr(addr, fnty.as_pointer())
        status, _ = context.call_conv.call_function(builder, fn, types.none, argtypes, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return sig, codegen


def packed_call(name: str, restype):
    """An intrinsic ``call(address, pack)``: ``kernel(*args)`` for the kernel compiled at ``address``
    (int64, numba's calling convention) that returns ``restype``, ``pack`` an :class:`ArgumentPack`
    of ``args`` (:func:`_call_at` without its two trailing arguments; ``args`` may end in a tuple,
    which is how a driver's ``*args`` arrive, :func:`driver_address`)."""
    def call(typingctx, address, pack):
        if not isinstance(address, types.Integer) or not isinstance(pack, ArgumentPack):
            return None
        argtypes = tuple(pack.args.types)

        def codegen(context, builder, sig_, llargs):
            addr, packed = llargs
            tup = context.data_model_manager[pack.args].from_data(builder, packed)
            values = [builder.extract_value(tup, i) for i in range(len(argtypes))]
            fnty = context.call_conv.get_function_type(restype, argtypes)
            fn = builder.inttoptr(addr, fnty.as_pointer())
            status, out = context.call_conv.call_function(builder, fn, restype, argtypes, values)
            with cgutils.if_unlikely(builder, status.is_error):
                context.call_conv.return_status_propagate(builder, status)
            return out if restype != types.none else context.get_dummy_value()

        return signature(restype, address, pack), codegen
    call.__name__ = call.__qualname__ = name
    return intrinsic(call)


#: public names for compiled loops elsewhere that call a kernel by address (a rollout that scores
#: its own candidates with the cost kernel, :mod:`solvers.rollout_numba`; the solvers' derivative
#: stage and first iteration, which call :func:`run_slices` / :func:`run_parts` by address too)
pack_arguments = _pack
call_at = _call_at
call_none_at = packed_call("call_none_at", types.none)


@jit_parallel
def run_slices(address, B, nt, *args):
    """Run the kernel at ``address`` as ``kernel(*args, start, stop)`` on ``nt`` slices of the batch
    of ``B`` states, in parallel."""
    pack = _pack(args)
    for c in prange(nt):
        _call_at(address, pack, c * B // nt, (c + 1) * B // nt)


@jit_parallel
def run_parts(address, nt, *args):
    """Run the kernel at ``address`` as ``kernel(*args, c, nt)`` for ``c < nt``, in parallel."""
    pack = _pack(args)
    for c in prange(nt):
        _call_at(address, pack, c, nt)


def _compiled(kernel, args: tuple):
    """numba's compile result of ``kernel`` for the types of ``args`` (its whole argument list);
    compiles the kernel, or loads it from numba's cache, when needed."""
    sig = tuple(kernel.typeof_pyval(a) for a in args)
    kernel.compile(sig)
    return kernel.overloads[sig]


def kernel_address(kernel, args: tuple) -> int:
    """Address of ``kernel``'s compiled code (numba's calling convention) for the types of ``args``."""
    cres = _compiled(kernel, args)
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


def driver_address(driver, head: tuple, args: tuple) -> int:
    """Address of :func:`run_slices` (``head = (address, B, nt)``) or :func:`run_parts` (``head =
    (address, nt)``) compiled for the kernel arguments ``args``, for another compiled loop to call by
    address as ``driver(*head, args)`` (:data:`call_none_at` on a pack of ``(*head, args)``: the
    compiled driver takes its ``*args`` as one tuple). The same compiled code (and on-disk cache entry)
    as the Python calls :func:`run_threaded` / :func:`run_threaded_parts` make."""
    return kernel_address(driver, (*head, tuple(args)))


def entry_point(kernel, args: tuple):
    """``kernel``'s compiled entry point for the types of ``args``: a Python callable that skips the
    dispatcher's per-call type resolution (the caller keeps it for arguments of the same kinds)."""
    return _compiled(kernel, args).entry_point


def _abi(args: tuple) -> tuple:
    """What the machine code of a kernel depends on in its arguments: each array's dimensions,
    dtype and C-contiguity (a kernel compiled for contiguous arrays assumes unit strides), each
    scalar's type."""
    nd = np.ndarray
    return tuple([(a.ndim, a.dtype.num, a.flags.c_contiguous) if isinstance(a, nd) else type(a) for a in args])


_addresses: dict = {}   # (kernel, _abi(args)) -> address: compiled code does not move within a process
_by_fingerprint: dict = {}  # (kernel, numba's type fingerprint of args) -> the same addresses


def _address(kernel, args: tuple, tail: tuple) -> tuple[int, bool]:
    """``(address, new)``: the address of ``kernel`` compiled for ``(*args, *tail)``'s kinds
    (:func:`_abi`), found by numba's own type fingerprint of ``args`` (computed in C: ≈ 0.2 µs for a
    kernel's dozen arguments against ≈ 1.4 µs for :func:`_abi`); ``new``: it was not known yet. The
    fingerprint also tells read-only from writeable arrays, which :func:`_abi` does not (the machine
    code is the same): its miss falls back to the :func:`_abi` table, so no kernel is compiled
    again."""
    try:
        fkey = (kernel, _fingerprint(args))
    except (NotImplementedError, TypeError, ValueError):    # an argument numba has no fingerprint for
        fkey = None
    address = _by_fingerprint.get(fkey)
    if address is not None:
        return address, False
    key = (kernel, _abi(args))
    address = _addresses.get(key)
    new = address is None
    if new:
        address = _addresses[key] = kernel_address(kernel, (*args, *tail))
    if fkey is not None:
        _by_fingerprint[fkey] = address
    return address, new


def run_threaded(kernel, B: int, nt: int, *args) -> None:
    """``kernel(*args, start, stop)`` on ``nt`` contiguous slices of a batch of ``B`` states, one per
    worker thread (``nt <= B``; the thread count set with ``numba.set_num_threads``)."""
    run_slices(_address(kernel, args, (0, B))[0], B, nt, *args)


def run_threaded_parts(kernel, nt: int, *args) -> None:
    """``kernel(*args, c, nt)`` for ``c < nt``, one part per worker thread (the thread count set with
    ``numba.set_num_threads``); on the calling thread when ``nt`` is 1. The first call for a kernel
    and argument kinds runs through the parallel driver whatever ``nt``, so that a warm-up compiles
    the driver too (not a later call in the control loop)."""
    if nt <= 1 and kernel in _prepared:
        kernel(*args, 0, 1)
        return
    address, new = _address(kernel, args, (0, max(nt, 1)))
    if new:
        _prepared.add(kernel)
    run_parts(address, max(nt, 1), *args)


_prepared: set = set()     # kernels run_threaded_parts has compiled the driver for
