"""Cost interface: batched evaluation over knots, derivatives in tangent coordinates, weighted sums.

A cost ``l(x, u)`` is evaluated for B knots at once: ``x`` (B, nx), ``u`` (B, nu) — or ``None``
at the terminal knot — and ``knots`` (B,) integer knot indices ``0..N`` (N = terminal), used to
look up time-varying references and weights. Derivatives are taken along the tangent
perturbation ``l(x ⊕ dx, u + du)`` (docs/conventions.md), so ``lx`` has ndx = 2 nv entries.

Per-knot data (references, weights) is either constant (shape ``(dim,)``/scalar) or given per
knot with a leading axis covering the knots used: ``(K, dim)`` with ``K >= N`` for a running cost
and ``K >= N + 1`` if the same array also serves the terminal knot.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from dynamics import RobotModel
from dynamics.backend import Backend
from dynamics.inputs import sum_is_finite

from ..state_space import StateSpace


@dataclass
class CostContext:
    """What a cost sees: the robot, the backend, B knots of states/controls, and a small cache so
    several costs on the same frame share one kinematics evaluation.

    Set by :class:`solvers.ShootingProblem` for its own evaluations (defaults are always safe):
    ``checked`` — ``x`` is known to be a finite float64 (B, nx) array, so costs may skip the
    argument checks of the configuration-space functions; ``knot_range`` — ``(start, stop)`` when
    ``knots`` is ``arange(start, stop)`` (per-knot data is then sliced rather than gathered);
    ``parent``/``rows`` — a context over a larger batch whose rows ``rows`` (a slice or an index
    array) are this context's states: kinematics are computed once there and shared (e.g. by the
    running and terminal costs of one trajectory); ``contact_solves`` — the contact-dynamics
    solves of these knots from the dynamics stage or the forward pass (:meth:`contact_solve`)."""

    model: RobotModel
    backend: Backend
    state: StateSpace
    x: np.ndarray                  # (B, nx)
    u: np.ndarray | None           # (B, nu), None at the terminal knot
    knots: np.ndarray              # (B,) int
    cache: dict = field(default_factory=dict, repr=False)
    checked: bool = field(default=False, repr=False)
    knot_range: tuple | None = field(default=None, repr=False)
    parent: "CostContext | None" = field(default=None, repr=False)
    rows: object = field(default=None, repr=False)
    contact_solves: dict | None = field(default=None, repr=False)
    _q: np.ndarray | None = field(default=None, init=False, repr=False)

    @property
    def q(self) -> np.ndarray:
        """Configurations (B, nq), C-contiguous (what the backends take without copying)."""
        q = self._q
        if q is None:
            q = self._q = np.ascontiguousarray(self.x[:, :self.model.nq])
        return q

    @property
    def v(self) -> np.ndarray:
        return self.x[:, self.model.nq:]

    @property
    def batch(self) -> int:
        return self.x.shape[0]

    @property
    def terminal(self) -> bool:
        return self.u is None

    def contact_solve(self, contacts):
        """``(dynamics, lam (B, nc), dlam (3, B, nc, nv))`` that the problem's dynamics stage already
        computed for these knots with this :class:`~dynamics.ContactSet` in the same derivative
        evaluation, or ``(dynamics, lam, None)`` that the forward pass computed for the candidates
        whose cost this is (``dynamics`` is the :class:`~solvers.integrators.base.IntegratedModel`
        that did, for its ``actuation``), or None."""
        solves = self.contact_solves
        return None if solves is None else solves.get(id(contacts))

    def memo(self, key, fn):
        if key not in self.cache:
            self.cache[key] = fn()
        return self.cache[key]

    # shared kinematics
    def _kinematics(self, key, compute, part: int | None = None):
        """``compute(q)`` for this context's configurations (or element ``part`` of it), memoised;
        taken from the parent context's rows when it has it already or when this context is most
        of the parent's batch."""
        ck = key if part is None else (key, part)
        out = self.cache.get(ck)
        if out is not None:
            return out
        parent = self.parent
        if parent is not None and (key in parent.cache or 2 * self.x.shape[0] >= parent.x.shape[0]):
            full = parent._kinematics(key, compute)
            if part is not None:
                full = full[part]
            rows = self.rows
            out = tuple(a[rows] for a in full) if isinstance(full, tuple) else full[rows]
        elif part is not None:
            out = self._kinematics(key, compute)[part]
        else:
            out = compute(self.q)
        self.cache[ck] = out
        return out

    def frame_placement(self, frame: str):
        """World rotations (B, 3, 3) and positions (B, 3) of a frame."""
        return self._kinematics(("placement", frame),
                                lambda q: self.backend.frame_placement(self.model, q, frame))

    def frame_position(self, frame: str) -> np.ndarray:
        """World positions (B, 3) of a frame (``frame_placement(frame)[1]``)."""
        return self._kinematics(("placement", frame),
                                lambda q: self.backend.frame_placement(self.model, q, frame), part=1)

    def frame_jacobian(self, frame: str, reference: str):
        """Frame Jacobian (B, 6, nv) in ``reference``."""
        return self._kinematics(("jacobian", frame, reference),
                                lambda q: self.backend.frame_jacobian(self.model, q, frame, reference))

    def center_of_mass(self):
        """Centre of mass (B, 3) of the moving links."""
        return self._kinematics("com", lambda q: self.backend.center_of_mass(self.model, q))

    def com_jacobian(self):
        """Centre-of-mass Jacobian (B, 3, nv)."""
        return self._kinematics("com_jacobian", lambda q: self.backend.com_jacobian(self.model, q))

    def rows_of(self, name: str, data: np.ndarray, tail: tuple[int, ...]) -> np.ndarray:
        """Like :func:`per_knot`, but a constant comes back as is (``tail``-shaped, to broadcast)."""
        if data.shape == tail:
            return data
        kr = self.knot_range
        if kr is not None and kr[1] <= data.shape[0]:
            return data[kr[0]:kr[1]]
        return per_knot(name, data, self.knots, tail)


@dataclass
class CostDerivatives:
    """Value and derivatives of a cost at B knots: ``l`` (B,), ``lx`` (B, ndx), ``lu`` (B, nu),
    ``lxx`` (B, ndx, ndx), ``lxu`` (B, ndx, nu), ``luu`` (B, nu, nu)."""

    l: np.ndarray
    lx: np.ndarray
    lu: np.ndarray
    lxx: np.ndarray
    lxu: np.ndarray
    luu: np.ndarray

    @classmethod
    def zeros(cls, B: int, ndx: int, nu: int) -> "CostDerivatives":
        return cls(np.zeros(B), np.zeros((B, ndx)), np.zeros((B, nu)), np.zeros((B, ndx, ndx)),
                   np.zeros((B, ndx, nu)), np.zeros((B, nu, nu)))

    _FIELDS = ("l", "lx", "lu", "lxx", "lxu", "luu")

    def rows(self, rows: slice) -> "CostDerivatives":
        """Views of knots ``rows`` (a slice: the views share this object's memory)."""
        return CostDerivatives(*(getattr(self, f)[rows] for f in self._FIELDS))

    def set_rows(self, rows, other: "CostDerivatives") -> None:
        """Copy ``other`` into knots ``rows`` (an index array or a slice)."""
        for f in self._FIELDS:
            getattr(self, f)[rows] = getattr(other, f)

    def fill(self, value: float) -> None:
        for f in self._FIELDS:
            getattr(self, f).fill(value)

    def scale(self, s: float) -> None:
        """Multiply every field by ``s`` in place."""
        for f in self._FIELDS:
            getattr(self, f).__imul__(s)

    def scale_rows(self, w: np.ndarray) -> None:
        """Multiply knot b's fields by ``w[b]`` in place, w (B,)."""
        self.l *= w
        self.lx *= w[:, None]
        self.lu *= w[:, None]
        self.lxx *= w[:, None, None]
        self.lxu *= w[:, None, None]
        self.luu *= w[:, None, None]

    def add_scaled(self, other: "CostDerivatives", w: np.ndarray) -> None:
        """``self += w * other`` with ``w`` (B,) per-knot weights."""
        self.l += w * other.l
        self.lx += w[:, None] * other.lx
        self.lu += w[:, None] * other.lu
        self.lxx += w[:, None, None] * other.lxx
        self.lxu += w[:, None, None] * other.lxu
        self.luu += w[:, None, None] * other.luu

    def scaled(self, s: float) -> "CostDerivatives":
        return CostDerivatives(s * self.l, s * self.lx, s * self.lu, s * self.lxx, s * self.lxu, s * self.luu)

    def _add_weighted(self, other: "CostDerivatives", w) -> None:
        """``self += w * other`` with ``w`` a float or (B,) per-knot weights."""
        if isinstance(w, float):
            w1 = w2 = w
        else:
            w1, w2 = w[:, None], w[:, None, None]
        self.l += w * other.l
        self.lx += w1 * other.lx
        self.lu += w1 * other.lu
        self.lxx += w2 * other.lxx
        self.lxu += w2 * other.lxu
        self.luu += w2 * other.luu


def _col(w):
    """A float or (B,) per-knot weight, shaped to scale (B, n) rows."""
    return w if isinstance(w, float) else w[:, None]


def _half_sq(W: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``½ Σ_i W_i r_i²`` over the last axis, W (nr,) or (B, nr), r (B, nr): (B,). A row-wise sum
    (not a BLAS product): a knot's value does not depend on the batch it is evaluated in."""
    return 0.5 * (W * r * r).sum(axis=-1)


def _add_diagonal(A: np.ndarray, d) -> None:
    """``A[b, i, i] += d[b, i]`` (or ``d[i]``) in place, for a C-contiguous (B, n, n) array ``A``."""
    n = A.shape[-1]
    A.reshape(A.shape[0], n * n)[:, ::n + 1] += d


def _plain(obj, cls, names=("value", "derivatives", "residual", "residual_jacobian")) -> bool:
    """Whether ``obj`` (an instance of ``cls``) uses ``cls``'s own ``names`` (a subclass that
    overrides one of them must not take ``cls``'s fused fast paths)."""
    t = type(obj)
    if t is cls:
        return True
    key = (t, cls, names)
    plain = _PLAIN.get(key)
    if plain is None:
        plain = _PLAIN[key] = all(getattr(t, n) is getattr(cls, n) for n in names)
    return plain


_PLAIN: dict = {}


def per_knot(name: str, data: np.ndarray, knots: np.ndarray, tail: tuple[int, ...],
             out: np.ndarray | None = None, kmax: int | None = None) -> np.ndarray:
    """Select per-knot rows of ``data`` (constant ``tail`` or ``(K,) + tail``) for ``knots``: (B,) + tail,
    written into ``out`` (a (B,) + tail array or view) when given. kmax: ``knots.max()`` when the
    caller knows it (None: computed here, when data is per knot)."""
    if data.shape == tail:
        if out is not None:
            out[...] = data
            return out
        return np.broadcast_to(data, knots.shape + tail)
    K = data.shape[0]
    if kmax is None and knots.size:
        kmax = int(knots.max())
    if kmax is not None and kmax >= K:
        raise IndexError(f"{name} is given for {K} knots but knot {kmax} was requested; give "
                         f"horizon rows for a running cost or horizon + 1 rows to also cover the terminal knot")
    if out is not None:          # mode "clip" after the check above: no index check, no temporary
        return np.take(data, knots, axis=0, out=out, mode="clip")
    return data[knots]


#: the arrays that :func:`check_per_knot` returned, by (id, tail), while they live: one of them
#: handed to it again (one value assigned to several costs) comes back as it is, without another
#: copy and check (they are read-only: validated once, they stay valid)
_CHECKED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _already_checked(value, tail: tuple[int, ...]) -> bool:
    """Whether ``value`` is a read-only array :func:`check_per_knot` returned for this ``tail``."""
    return type(value) is np.ndarray and not value.flags.writeable and _CHECKED.get((id(value), tail)) is value


def check_per_knot(name: str, value, tail: tuple[int, ...]) -> np.ndarray:
    """Validate a constant ``tail``-shaped or per-knot ``(K,) + tail`` array of finite floats: a
    read-only copy (or ``value`` itself when it is such a copy, made for the same ``tail``)."""
    if _already_checked(value, tail):
        return value
    arr = np.array(value, dtype=float)
    if arr.shape != tail and not (arr.ndim == len(tail) + 1 and arr.shape[1:] == tail and arr.shape[0] > 0):
        want = f"{tail} or (K, {', '.join(map(str, tail))})" if tail else "a scalar or (K,)"
        raise ValueError(f"{name} has shape {arr.shape}; expected {want} (K = number of knots)")
    return _sealed(name, arr, tail)[0]


def check_per_knot_rows(name: str, values, tail: tuple[int, ...]) -> list[np.ndarray]:
    """:func:`check_per_knot` of each row of ``values`` (n, K) + tail at once (one copy, one
    finiteness check): n read-only per-knot (K,) + tail arrays (views of one copy), each taken by a
    cost's reference setter as it is, like the arrays :func:`check_per_knot` returns (e.g. the
    targets of several feet, computed together)."""
    arr = np.array(values, dtype=float)
    if arr.ndim != len(tail) + 2 or arr.shape[2:] != tail or arr.shape[1] == 0:
        raise ValueError(f"{name} has shape {arr.shape}; expected (n, K, {', '.join(map(str, tail))})"
                         .replace(", )", ")"))
    return _sealed(name, arr, tail, rows=True)


def _sealed(name: str, arr: np.ndarray, tail: tuple[int, ...], rows: bool = False) -> list[np.ndarray]:
    """``arr`` (or, with ``rows``, its rows) checked finite, made read-only and remembered as
    checked for ``tail`` (so a setter given it again takes it as it is)."""
    if not sum_is_finite(arr):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    arr.setflags(write=False)
    out = list(arr) if rows else [arr]
    for a in out:
        _CHECKED[(id(a), tail)] = a
    return out


#: how many times any CostSum's terms changed (a term added, replaced or removed, a weight set, a
#: terms dict assigned): what depends on the terms of a problem's costs (the compiled costs' layout
#: signature) is looked at again only when this moved, not at every evaluation
_TERM_CHANGES = [0]
#: how many times any cost's packed data was replaced (a reference or target assigned, weights set,
#: a CostSum's terms changed): the compiled costs re-pack their float rows only when this moved
_DATA_CHANGES = [0]


def term_changes() -> int:
    """The count of changes to any :class:`CostSum`'s terms so far (see ``_TERM_CHANGES``)."""
    return _TERM_CHANGES[0]


def data_changes() -> int:
    """The count of replaced references, targets, weights and terms of any cost so far (see
    ``_DATA_CHANGES``)."""
    return _DATA_CHANGES[0]


def _terms_changed() -> None:
    _TERM_CHANGES[0] += 1
    _DATA_CHANGES[0] += 1


class PerKnotReference:
    """A residual cost's reference (``target`` or ``reference``) as a descriptor: reading gives the
    stored array (attribute ``store``); assigning validates the value with :func:`check_per_knot`
    against the shape ``tail`` (a tuple, or a function of the cost giving it) or with ``check(label,
    value)`` where given, ``label`` (``{name}`` is the cost's name) naming it in the errors."""

    def __init__(self, store: str, label: str, tail=(), check=None):
        self.store, self.label, self.tail, self.check = store, label, tail, check

    def __get__(self, cost, owner=None):
        return self if cost is None else getattr(cost, self.store)

    def __set__(self, cost, value) -> None:
        if self.check is not None:
            value = self.check(self.label.format(name=cost.name), value)
        else:
            tail = self.tail(cost) if callable(self.tail) else self.tail
            if not _already_checked(value, tail):       # (a validated array is stored as it is)
                value = check_per_knot(self.label.format(name=cost.name), value, tail)
        setattr(cost, self.store, value)
        _DATA_CHANGES[0] += 1


def assign_reference(costs, value, attr: str = "reference") -> None:
    """``cost.<attr> = value`` for every cost of ``costs`` (a sequence), ``attr`` a
    :class:`PerKnotReference` of their class (e.g. one trajectory of references shared by the state
    costs of several phases): the value is validated by the first cost's setter, and the others of
    the same class and reference shape take the validated array as their setters would take it
    (it is read-only and remembered as checked), without each setter's look-ups; a cost of another
    class or shape goes through its own setter."""
    first = costs[0]
    setattr(first, attr, value)
    cls = type(first)
    desc = getattr(cls, attr)
    if type(desc) is not PerKnotReference or desc.check is not None:
        for c in costs[1:]:
            setattr(c, attr, value)
        return
    value = getattr(first, desc.store)      # the validated array
    tail = desc.tail
    shape = tail(first) if callable(tail) else tail
    store = desc.store
    for c in costs[1:]:
        if type(c) is cls and (not callable(tail) or tail(c) == shape):
            c.__dict__[store] = value
        else:
            setattr(c, attr, value)
    _DATA_CHANGES[0] += 1


class Cost:
    """A cost term. Subclasses implement :meth:`value` and :meth:`derivatives` on a
    :class:`CostContext`. ``hessian`` says which second derivative :meth:`derivatives` returns:
    ``"exact"`` or ``"gauss-newton"``. Costs combine with ``+`` and scalar ``*`` into a
    :class:`CostSum`."""

    hessian: str = "exact"
    name: str = "cost"
    uses_control: bool = False

    def value(self, ctx: CostContext) -> np.ndarray:
        raise NotImplementedError

    def derivatives(self, ctx: CostContext) -> CostDerivatives:
        raise NotImplementedError

    def check_model(self, model: RobotModel) -> None:
        """Raise if this cost was built for another robot."""
        own = getattr(self, "model", None)
        if own is not None and own is not model and (own.name != model.name or own.nq != model.nq):
            raise ValueError(f"cost '{self.name}' was built for model '{own.name}', not '{model.name}'")

    def _accumulate(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        """``out += w * derivatives(ctx)`` with ``w`` a float or (B,) per-knot weights. Built-in
        costs fuse this: no full-size (B, ndx, ndx) intermediates for blocks that are zero, the
        same floating-point operations on the others (the result is bitwise that of
        ``derivatives``)."""
        out._add_weighted(self.derivatives(ctx), w)

    def _require_control(self, ctx: CostContext) -> np.ndarray:
        if ctx.u is None:
            raise ValueError(f"cost '{self.name}' depends on the control and cannot be part of a terminal cost")
        return ctx.u

    def __add__(self, other) -> "CostSum":
        return CostSum.of(self) + other

    def __radd__(self, other) -> "CostSum":
        if isinstance(other, (int, float)) and other == 0:  # sum([...]) support
            return CostSum.of(self)
        return NotImplemented

    def __mul__(self, w) -> "CostSum":
        return CostSum({self.name: (self, w)})

    __rmul__ = __mul__


class ResidualCost(Cost):
    """``l = ½ Σ_i w_i r_i²`` of a residual ``r(x, u)`` (B, nr) with diagonal weights ``w`` (nr,)
    (or per knot (K, nr)). Gauss–Newton Hessian ``R^T W R``; it is exact when ``r`` is affine in
    the tangent coordinates. Subclasses give :meth:`residual` and :meth:`residual_jacobian`."""

    hessian = "gauss-newton"
    nr: int = 0

    def __init__(self, weights=None):
        self.weights = np.ones(self.nr) if weights is None else weights

    @property
    def weights(self) -> np.ndarray:
        return self._weights

    @weights.setter
    def weights(self, w) -> None:
        w = np.broadcast_to(np.asarray(w, float), (self.nr,)) if np.ndim(w) == 0 else w
        w = check_per_knot(f"{self.name} weights", w, (self.nr,))
        if np.any(w < 0):
            raise ValueError(f"{self.name} weights must be non-negative")
        self._weights = w
        _DATA_CHANGES[0] += 1

    def residual(self, ctx: CostContext) -> np.ndarray:
        raise NotImplementedError

    def residual_jacobian(self, ctx: CostContext) -> tuple[np.ndarray, np.ndarray | None]:
        """``(Rx (B, nr, ndx), Ru (B, nr, nu) or None)``."""
        raise NotImplementedError

    def _w(self, ctx: CostContext) -> np.ndarray:
        return per_knot(f"{self.name} weights", self._weights, ctx.knots, (self.nr,))

    def _wk(self, ctx: CostContext) -> np.ndarray:
        """The weights for the context's knots, (nr,) when constant (broadcasts) else (B, nr)."""
        return ctx.rows_of(f"{self.name} weights", self._weights, (self.nr,))

    def value(self, ctx: CostContext) -> np.ndarray:
        return _half_sq(self._wk(ctx), self.residual(ctx))

    def derivatives(self, ctx: CostContext) -> CostDerivatives:
        r = self.residual(ctx)
        w = self._wk(ctx)
        Rx, Ru = self.residual_jacobian(ctx)
        wr = w * r
        B, nu = ctx.batch, ctx.model.nu
        WRx = w[..., None] * Rx
        # Gauss–Newton products as batched matrix products (np.einsum's generic loop was ~70x
        # slower for (B, nr, ndx) = (20, 72, 72)); each knot is its own product, so a knot's
        # result does not depend on the batch it is evaluated in
        RxT = np.swapaxes(Rx, -1, -2)
        lx = (RxT @ wr[..., None])[..., 0]
        lxx = RxT @ WRx
        if Ru is None:
            lu, lxu, luu = np.zeros((B, nu)), np.zeros((B, Rx.shape[-1], nu)), np.zeros((B, nu, nu))
        else:
            RuT = np.swapaxes(Ru, -1, -2)
            lu = (RuT @ wr[..., None])[..., 0]
            lxu = np.swapaxes(WRx, -1, -2) @ Ru
            luu = RuT @ (w[..., None] * Ru)
        return CostDerivatives(0.5 * np.sum(wr * r, axis=-1), lx, lu, lxx, lxu, luu)


class CostTerms(dict):
    """A CostSum's terms, ``name -> (cost, weight)``: a dict whose every change is counted
    (:func:`term_changes`), however it is made (``add``, ``set_weight``, or the dict's own methods)."""

    __slots__ = ()

    def __setitem__(self, key, value) -> None:
        _terms_changed()
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        _terms_changed()
        super().__delitem__(key)

    def __ior__(self, other):
        _terms_changed()
        return super().__ior__(other)

    def update(self, *args, **kw) -> None:
        _terms_changed()
        super().update(*args, **kw)

    def setdefault(self, key, default=None):
        _terms_changed()
        return super().setdefault(key, default)

    def pop(self, *args):
        _terms_changed()
        return super().pop(*args)

    def popitem(self):
        _terms_changed()
        return super().popitem()

    def clear(self) -> None:
        _terms_changed()
        super().clear()


class CostSum(Cost):
    """Weighted sum ``Σ_k w_k(t) l_k`` of named costs; a weight is a scalar or per knot (K,).

    >>> total = CostSum({"ee": (ee_cost, 1e3), "reg": (state_cost, 1e-2)})
    >>> total["ee"].reference = targets        # change a term's reference in place
    >>> total.set_weight("ee", np.linspace(1, 10, N + 1))
    """

    name = "sum"

    def __init__(self, terms: dict | None = None):
        self._terms = CostTerms()        # (a new object: nothing kept can depend on it yet, no count)
        for name, item in (terms or {}).items():
            cost, w = item if isinstance(item, tuple) else (item, 1.0)
            self.add(name, cost, w)

    @property
    def terms(self) -> CostTerms:
        """``name -> (cost, weight)`` (a :class:`CostTerms`: its changes are counted)."""
        return self._terms

    @terms.setter
    def terms(self, terms: dict) -> None:
        _terms_changed()
        self._terms = CostTerms(terms)

    @classmethod
    def of_terms(cls, terms: dict) -> "CostSum":
        """A new CostSum of ``terms`` (name -> (cost, weight), already checked) as they are, not
        counted as a change (e.g. the Python part of a group cost, made at every evaluation)."""
        out = cls()
        out._terms = CostTerms(terms)
        return out

    @classmethod
    def of(cls, cost: Cost) -> "CostSum":
        return cost if isinstance(cost, CostSum) else cls({cost.name: (cost, 1.0)})

    def add(self, name: str, cost, weight=1.0) -> "CostSum":
        """Add (or replace) term ``name``. ``cost`` may be a :class:`Cost` or a plain-Python object
        with ``value``/``residual`` methods (see :mod:`solvers.costs.custom`)."""
        from .custom import as_cost
        if not isinstance(name, str) or not name:
            raise ValueError("cost term names must be non-empty strings")
        self.terms[name] = (as_cost(cost, name=name), check_per_knot(f"weight of cost term '{name}'", weight, ()))
        return self

    def set_weight(self, name: str, weight) -> None:
        cost = self[name]
        self.terms[name] = (cost, check_per_knot(f"weight of cost term '{name}'", weight, ()))

    def __getitem__(self, name: str) -> Cost:
        if name not in self.terms:
            raise KeyError(f"no cost term '{name}'; terms: {', '.join(self.terms) or '(none)'}")
        return self.terms[name][0]

    def __contains__(self, name: str) -> bool:
        return name in self.terms

    def __mul__(self, w) -> "CostSum":
        out = CostSum()
        for name, (c, wk) in self.terms.items():
            out.terms[name] = (c, check_per_knot(f"weight of cost term '{name}'", np.asarray(wk) * w, ()))
        return out

    __rmul__ = __mul__

    def __add__(self, other) -> "CostSum":
        out = CostSum()
        out.terms.update(self.terms)
        other = other if isinstance(other, CostSum) else CostSum.of(other)
        for name, item in other.terms.items():
            key, i = name, 2
            while key in out.terms:          # keep both terms when names collide
                key, i = f"{name}_{i}", i + 1
            out.terms[key] = item
        return out

    @property
    def uses_control(self) -> bool:  # type: ignore[override]
        return any(c.uses_control for c, _ in self.terms.values())

    @property
    def hessian(self) -> str:  # type: ignore[override]
        return "exact" if all(c.hessian == "exact" for c, _ in self.terms.values()) else "gauss-newton"

    def check_model(self, model: RobotModel) -> None:
        for c, _ in self.terms.values():
            c.check_model(model)

    def _term_weight(self, name: str, w: np.ndarray, ctx: CostContext):
        """Weight of term ``name`` at the context's knots: a float when constant, else (B,)."""
        if w.ndim == 0:
            return float(w)
        return ctx.rows_of(f"weight of '{name}'", w, ())

    def value(self, ctx: CostContext) -> np.ndarray:
        total = np.zeros(ctx.batch)
        for name, (c, w) in self.terms.items():
            total += self._term_weight(name, w, ctx) * c.value(ctx)
        return total

    def derivatives(self, ctx: CostContext) -> CostDerivatives:
        # each term added in place with its weight; the built-in costs fuse this (Cost._accumulate)
        out = CostDerivatives.zeros(ctx.batch, ctx.state.ndx, ctx.model.nu)
        self._accumulate(ctx, out, 1.0)
        return out

    def _accumulate(self, ctx: CostContext, out: CostDerivatives, w) -> None:
        for name, (c, tw) in self.terms.items():
            tw = self._term_weight(name, tw, ctx)
            c._accumulate(ctx, out, tw if (isinstance(w, float) and w == 1.0) else tw * w)

    def __repr__(self) -> str:
        return "CostSum(" + ", ".join(f"{n}: {type(c).__name__}" for n, (c, _) in self.terms.items()) + ")"
