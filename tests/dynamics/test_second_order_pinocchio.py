"""IDSVA-SO / FDSVA-SO against a second, independent oracle: central differences of **Pinocchio's**
analytical first-order derivatives (issue 10).

``tests/solvers/test_second_order.py`` checks the second-order tensors against differences of *our own*
first-order code; here the reference uses nothing of ours but the model file: Pinocchio's MJCF reader
builds the robot (``pinocchio_models.oracle_from_mjcf``, itself checked against MuJoCo in
``tests/dynamics/test_oracle_pinocchio.py``), and ``pin.computeRNEADerivatives`` (∂τ/∂q, ∂τ/∂v, M) and
``pin.computeABADerivatives`` (∂a/∂q, ∂a/∂v, M⁻¹) are differenced along Pinocchio's own
``pin.integrate``. Robots: iiwa (nv 7), HyQ (nv 18, free base) and Atlas (nv 36, free base); three
random states each (random q on the manifold, v ~ N(0, 1), a ~ N(0, 1), τ ~ N(0, 10²)), once without
and once with random external forces; every backend from ``dynamics.available_backends()`` that is
available and ``supports`` the function.

Conventions (docs/second_order.md, docs/conventions.md). Entry ``[i, j, k]`` = output ``i``, first
variable ``j``, second variable ``k``; configuration derivatives are along right (local) tangent
perturbations, and in ``∂_k(∂_j f)`` the ``k`` perturbation is applied first. Our tangent vectors
are Pinocchio's up to the dof permutation ``PinOracle.v_index`` (free joint: (linear, angular) in the
body frame, exactly what pin's FreeFlyer uses — the first-order oracle tests feed v across unchanged),
so ``q ⊕ h e_k`` is ``pin.integrate(q_pin, h e_{v_index[k]})`` and the first-order matrix evaluated
there, differentiated along column ``j``, is exactly ``∂_k(∂_j f)``. Tensors are built in pin's dof
order and permuted with ``v_index`` on all three axes. What each difference gives:

=========================  ==============================================================  ===========
tensor                     reference                                                       direction
=========================  ==============================================================  ===========
``d2tau_dq2[:, :, k]``     ``(∂τ/∂q(q ⊕ h e_k) − ∂τ/∂q(q ⊖ h e_k)) / 2h``                   q
``dM_dq[:, :, k]``         same with M (pin's ∂τ/∂a)                                       q
``d2tau_dqdv[:, j, :]``    same with ∂τ/∂v along ``e_j`` (mixed partials of q and v commute) q
``d2tau_dqdv[:, :, k]``    ``(∂τ/∂q(v + h_v e_k) − ∂τ/∂q(v − h_v e_k)) / 2h_v``               v
``d2tau_dv2[:, :, k]``     same with ∂τ/∂v                                                 v
``d2a_dq2``, ``d2a_dqdv``  as for τ, with pin's ∂a/∂q, ∂a/∂v                               q and v
``d2a_dv2``                as ``d2tau_dv2`` with ∂a/∂v                                     v
``d2a_dqdtau[:, j, :]``    difference of pin's M⁻¹ along ``e_j`` (∂a/∂τ = M⁻¹)              q
``d2a_dqdtau[:, :, k]``    ``(∂a/∂q(τ + h_τ e_k) − ∂a/∂q(τ − h_τ e_k)) / 2h_τ``               τ
=========================  ==============================================================  ===========

Step sizes and tolerances (error analysis). A central difference of a smooth ``g`` has error
``≤ h²/6 · |g'''| + ε_g · |g| / h`` (truncation + the rounding ``ε_g`` of pin's first-order output,
amplified by ``1/h``). Errors are measured as ``max|ours − ref| / max|ref|`` per tensor and state.

* **v and τ directions: no truncation.** τ and a are quadratic in v and affine in τ, so every
  first-order matrix differenced along v or τ is a polynomial of degree ≤ 2 in that variable and the
  central difference is exact for any step; only rounding remains, so the steps are large:
  ``H_V = 1`` (v ~ N(0, 1)) and ``H_TAU = 10`` (τ ~ N(0, 10²)). Rounding: ``ε_g ≲ κ(M) · u`` for
  the ABA outputs (u = 1.1e-16; κ(M) ≈ 40 iiwa, 5e3 HyQ, 5e5 Atlas), a few hundred u for RNEA,
  giving ≲ 1e-11 relative; measured ≤ 2.4e-12 (Atlas ``d2a_dqdv``). Tolerance ``TOL_EXACT = 1e-10``.
* **q directions: truncation + rounding**, ``err ≈ C h² + R / h``. Measured on these states (step
  sweep 1e-3 … 1e-6): the truncation coefficient C (error / h² at steps 1e-3 and 3e-4, where the
  error scales as h²) is ≤ 0.7 for the RNEA tensors and ≤ 13 for the ABA tensors (Atlas
  ``d2a_dq2``); the rounding coefficient R (error · h at step 1e-6, where it scales as 1/h) is
  ≤ 3.3e-14 for RNEA and ≤ 3.5e-12 for ABA (Atlas ``d2a_dqdtau``: κ(M) ≈ 5e5 amplifies the
  rounding of pin's M⁻¹ and ∂a/∂q). The step minimising ``C h² + R / h`` is ``(R / 2C)^(1/3)``:
  ``H_Q_RNEA = 3e-5`` → bound 0.7·9e-10 + 3.3e-14/3e-5 ≈ 1.7e-9, tolerance ``TOL_Q_RNEA = 1e-7``;
  ``H_Q_ABA = 5e-5`` → bound 13·2.5e-9 + 3.5e-12/5e-5 ≈ 1.0e-7, tolerance ``TOL_Q_ABA = 1e-6``.
  A wrong index order, sign, frame or missing term gives errors of order 1e-3 to 1.

The largest errors seen are kept in ``ERRORS`` and printed at the end of the module (``pytest -s``).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

pin = pytest.importorskip("pinocchio", reason="Pinocchio is the oracle of these tests (pip install pin)")
mujoco = pytest.importorskip("mujoco")


from tests.helpers import pinocchio_models as pm_  # noqa: E402

import dynamics  # noqa: E402

ROBOTS = ("iiwa", "hyq", "atlas")
N_STATES = 3
H_Q_RNEA, H_Q_ABA, H_V, H_TAU = 3e-5, 5e-5, 1.0, 10.0    # steps: see the module docstring
TOL_Q_RNEA, TOL_Q_ABA, TOL_EXACT = 1e-7, 1e-6, 1e-10

RNEA_NAMES = ("d2tau_dq2", "d2tau_dv2", "d2tau_dqdv", "dM_dq")
ABA_NAMES = ("d2a_dq2", "d2a_dv2", "d2a_dqdv", "d2a_dqdtau")

# (robot, tensor, direction) -> largest relative error seen (over backends, states, fext on/off)
ERRORS: dict[tuple[str, str, str], float] = {}


def _backends(function: str) -> list[str]:
    """Available backends that implement ``function`` (others are not second-order providers)."""
    return [name for name, (ok, _) in dynamics.available_backends().items()
            if ok and dynamics.get_backend(name).supports(function)]


RNEA_BACKENDS = _backends("rnea_second_derivatives")
ABA_BACKENDS = _backends("aba_second_derivatives")
BRACKET_BACKENDS = _backends("aba_second_derivatives_bracket")


# ---------------------------------------------------------------- oracle
@functools.cache
def get_case(name: str):
    """Our model, and Pinocchio's built from the same MJCF file by its own reader."""
    model = dynamics.load_model(name)
    mj = mujoco.MjModel.from_xml_path(model.path)  # compiled afresh: the oracle never sees our loader
    return model, pm_.oracle_from_mjcf(model.path, mj)


@functools.cache
def get_states(name: str):
    """(q, v, a, tau, fext) for N_STATES random states, fixed per robot."""
    model, _ = get_case(name)
    rng = np.random.default_rng(sum(map(ord, name)) + 10)
    S, nv = N_STATES, model.nv
    q = model.random_configuration(rng, size=S)
    v, a, tau = rng.normal(size=(S, nv)), rng.normal(size=(S, nv)), 10.0 * rng.normal(size=(S, nv))
    fext = 5.0 * rng.normal(size=(S, model.nbody, 6))
    return q, v, a, tau, fext


def _sym_upper(M) -> np.ndarray:
    """Pinocchio fills only the upper triangle of M / M⁻¹ in these routines: mirror it."""
    M = np.array(M)
    return np.triu(M) + np.triu(M, 1).T


def _pin_rnea_first(pm, qp, vp, ap, fp):
    """Pinocchio's (∂τ/∂q, ∂τ/∂v, M) in its own dof order, copied out of a fresh Data."""
    args = () if fp is None else (fp,)
    data = pm.createData()  # kept alive: pin returns views into it
    dq, dv, M = pin.computeRNEADerivatives(pm, data, qp, vp, ap, *args)
    return np.array(dq), np.array(dv), _sym_upper(M)


def _pin_aba_first(pm, qp, vp, tp, fp):
    """Pinocchio's (∂a/∂q, ∂a/∂v, M⁻¹) in its own dof order, copied out of a fresh Data."""
    args = () if fp is None else (fp,)
    data = pm.createData()  # kept alive: pin returns views into it
    dq, dv, Minv = pin.computeABADerivatives(pm, data, qp, vp, tp, *args)
    return np.array(dq), np.array(dv), _sym_upper(Minv)


def _central(f, x, h: float, n: int, step=None) -> list:
    """Per tangent direction ``k < n``: ``[(g(x ⊕ h e_k) − g(x ⊖ h e_k)) / 2h for g in f's outputs]``;
    ``step(x, e)`` is ``x ⊕ e`` (default ``x + e``)."""
    step = step or (lambda x_, e_: x_ + e_)
    out = []
    for k in range(n):
        e = np.zeros(n)
        e[k] = h
        out.append([(p - m) / (2 * h) for p, m in zip(f(step(x, e)), f(step(x, -e)))])
    return out  # out[k][output]


def _to_ours(orc, T: np.ndarray) -> np.ndarray:
    """A (nv, nv, nv) tensor in pin's dof order on all axes -> ours."""
    vi = orc.v_index
    return T[np.ix_(vi, vi, vi)]


def _pin_state(name: str, k: int, third: int, with_fext: bool):
    """``(oracle, nv, q, v, u, fext)`` of state ``k`` in Pinocchio's form, where ``u`` is entry
    ``third`` of :func:`get_states` (2: a, 3: τ) and fext is None unless ``with_fext``."""
    model, orc = get_case(name)
    states = get_states(name)
    fp = orc.fext_to_pin(states[4][k]) if with_fext else None
    return (orc, model.nv, orc.q_to_pin(states[0][k]), orc.v_to_pin(states[1][k]),
            orc.v_to_pin(states[third][k]), fp)


@functools.cache
def rnea_reference(name: str, k: int, with_fext: bool) -> dict[tuple[str, str], np.ndarray]:
    """(tensor, direction) -> reference tensor (ours dof order) at state ``k``."""
    orc, nv, qp, vp, ap, fp = _pin_state(name, k, 2, with_fext)
    pm = orc.model
    T = {key: np.zeros((nv, nv, nv)) for key in ("qq", "qv_q", "M", "vv", "qv_v")}
    dq_ = _central(lambda x: _pin_rnea_first(pm, x, vp, ap, fp), qp, H_Q_RNEA, nv,
                   lambda x, e: pin.integrate(pm, x, e))
    dv_ = _central(lambda x: _pin_rnea_first(pm, qp, x, ap, fp), vp, H_V, nv)
    for kk in range(nv):
        T["qq"][:, :, kk], T["qv_q"][:, kk, :], T["M"][:, :, kk] = dq_[kk]
        T["qv_v"][:, :, kk], T["vv"][:, :, kk], _ = dv_[kk]
    return {("d2tau_dq2", "q"): _to_ours(orc, T["qq"]), ("d2tau_dv2", "v"): _to_ours(orc, T["vv"]),
            ("d2tau_dqdv", "q"): _to_ours(orc, T["qv_q"]), ("d2tau_dqdv", "v"): _to_ours(orc, T["qv_v"]),
            ("dM_dq", "q"): _to_ours(orc, T["M"])}


@functools.cache
def aba_reference(name: str, k: int, with_fext: bool) -> dict[tuple[str, str], np.ndarray]:
    """(tensor, direction) -> reference tensor (ours dof order) at state ``k``."""
    orc, nv, qp, vp, tp, fp = _pin_state(name, k, 3, with_fext)
    pm = orc.model
    T = {key: np.zeros((nv, nv, nv)) for key in ("qq", "qv_q", "qt_q", "vv", "qv_v", "qt_t")}
    dq_ = _central(lambda x: _pin_aba_first(pm, x, vp, tp, fp), qp, H_Q_ABA, nv,
                   lambda x, e: pin.integrate(pm, x, e))
    dv_ = _central(lambda x: _pin_aba_first(pm, qp, x, tp, fp), vp, H_V, nv)
    dt_ = _central(lambda x: _pin_aba_first(pm, qp, vp, x, fp), tp, H_TAU, nv)
    for kk in range(nv):
        T["qq"][:, :, kk], T["qv_q"][:, kk, :], T["qt_q"][:, kk, :] = dq_[kk]
        T["qv_v"][:, :, kk], T["vv"][:, :, kk], _ = dv_[kk]
        T["qt_t"][:, :, kk] = dt_[kk][0]
    return {("d2a_dq2", "q"): _to_ours(orc, T["qq"]), ("d2a_dv2", "v"): _to_ours(orc, T["vv"]),
            ("d2a_dqdv", "q"): _to_ours(orc, T["qv_q"]), ("d2a_dqdv", "v"): _to_ours(orc, T["qv_v"]),
            ("d2a_dqdtau", "q"): _to_ours(orc, T["qt_q"]), ("d2a_dqdtau", "tau"): _to_ours(orc, T["qt_t"])}


def _check(label: str, robot: str, tensor: str, direction: str, ours: np.ndarray, ref: np.ndarray,
           tol: float) -> None:
    """Assert ``max|ours − ref| <= tol · max|ref|`` (ref must not vanish) and record the error."""
    assert ours.shape == ref.shape, f"{label} {tensor}: shape {ours.shape}, reference {ref.shape}"
    scale = float(np.abs(ref).max())
    assert scale > 0, f"{label} {tensor}: reference is identically zero, nothing is compared"
    diff = np.abs(ours - ref)
    err = float(diff.max())
    rel = err / scale
    key = (robot, tensor, direction)
    ERRORS[key] = max(ERRORS.get(key, 0.0), rel)
    assert rel <= tol, (f"{label} {tensor} vs central differences of Pinocchio's first-order derivatives "
                        f"along {direction}: max|ours - ref| = {err:.3e} = {rel:.2e} x max|ref| ({scale:.3e}) "
                        f"> tol {tol:.0e}; worst at [i, j, k] = {np.unravel_index(np.argmax(diff), diff.shape)}")


TOL = {("rnea", "q"): TOL_Q_RNEA, ("aba", "q"): TOL_Q_ABA}


# ---------------------------------------------------------------- tests
# kind -> (backend function, its tensors in output order, reference, index of its third input in get_states)
KINDS = {"rnea": ("rnea_second_derivatives", RNEA_NAMES, rnea_reference, 2),   # IDSVA-SO, third input a
         "aba": ("aba_second_derivatives", ABA_NAMES, aba_reference, 3)}        # FDSVA-SO, third input tau


@pytest.mark.parametrize("with_fext", [False, True], ids=["no_fext", "fext"])
@pytest.mark.parametrize("robot", ROBOTS)
@pytest.mark.parametrize("kind, backend", [("rnea", b) for b in RNEA_BACKENDS] + [("aba", b) for b in ABA_BACKENDS])
def test_second_derivatives_vs_pinocchio(kind, backend, robot, with_fext):
    """IDSVA-SO / FDSVA-SO (all four tensors, batched over the states) against the Pinocchio reference."""
    function, names, reference, third = KINDS[kind]
    model, _ = get_case(robot)
    states = get_states(robot)
    q, v, fext = states[0], states[1], states[4]
    out = getattr(dynamics.get_backend(backend), function)(model, q, v, states[third],
                                                           fext=fext if with_fext else None)
    assert len(out) == 4
    for k in range(N_STATES):
        ref = reference(robot, k, with_fext)
        label = f"[{backend}] {robot} state {k}{' with fext' if with_fext else ''}:"
        for (tensor, direction), r in ref.items():
            ours = np.asarray(out[names.index(tensor)][k])
            _check(label, robot, tensor, direction, ours, r, TOL.get((kind, direction), TOL_EXACT))


@pytest.mark.parametrize("with_fext", [False, True], ids=["no_fext", "fext"])
@pytest.mark.parametrize("robot", ROBOTS)
@pytest.mark.parametrize("backend", BRACKET_BACKENDS)
def test_bracketed_terms_vs_pinocchio(backend, robot, with_fext):
    """FDSVA-SO's bracketed terms B (``aba_second_derivatives_bracket``, what DDP's Euler knots
    take): ``−M⁻¹ B`` (M⁻¹ from the backend's ``minv``) against the same Pinocchio reference as the
    full tensors."""
    model, _ = get_case(robot)
    q, v, _, tau, fext = get_states(robot)
    be = dynamics.get_backend(backend)
    out = be.aba_second_derivatives_bracket(model, q, v, tau, fext=fext if with_fext else None)
    Mi = be.minv(model, q)
    nv = model.nv
    for k in range(N_STATES):
        ref = aba_reference(robot, k, with_fext)
        label = f"[{backend} bracket] {robot} state {k}{' with fext' if with_fext else ''}:"
        for (tensor, direction), r in ref.items():
            B = np.asarray(out[ABA_NAMES.index(tensor)][k])
            ours = -(Mi[k] @ B.reshape(nv, nv * nv)).reshape(nv, nv, nv)
            _check(label, robot, tensor, direction, ours, r, TOL.get(("aba", direction), TOL_EXACT))


def test_reference_sees_the_lie_bracket():
    """The oracle itself must not be symmetric in q where the manifold says it is not: for two
    angular dofs of HyQ's free base, ``d2tau_dq2[:, j, k] − d2tau_dq2[:, k, j] = ∂τ/∂q · [e_k, e_j]``
    (docs/second_order.md), with Pinocchio's ∂τ/∂q on the right. This checks the perturbation order
    and tangent mapping of the reference independently of our second-order code."""
    model, orc = get_case("hyq")
    assert model.free_adr, "HyQ has a free base"
    va = model.free_adr[0][1]
    q, v, a, _, _ = get_states("hyq")
    ref = rnea_reference("hyq", 0, False)[("d2tau_dq2", "q")]
    dq = orc.mat_from_pin(_pin_rnea_first(orc.model, orc.q_to_pin(q[0]), orc.v_to_pin(v[0]),
                                          orc.v_to_pin(a[0]), None)[0])
    j, k = va + 3, va + 4                     # angular x and y of the base
    bracket = np.zeros(model.nv)
    bracket[va + 5] = 1.0                     # [e_k, e_j] = e_y × e_x = −e_z: sign checked below
    lhs = ref[:, j, k] - ref[:, k, j]
    rhs = -dq @ bracket
    scale = float(np.abs(ref).max())
    err = float(np.abs(lhs - rhs).max()) / scale
    assert np.abs(rhs).max() > 1e-3 * scale, "the bracket term is too small to test anything"
    assert err <= TOL_Q_RNEA, f"Lie-bracket identity of the reference: rel error {err:.2e} > tol {TOL_Q_RNEA:.0e}"


@pytest.fixture(scope="module", autouse=True)
def _print_errors():
    """Print the largest relative errors per robot, tensor and difference direction (pytest -s)."""
    yield
    if ERRORS:
        print("\nworst max|ours - ref| / max|ref| (over backends, states, fext on/off):")
        for (robot, tensor, direction), rel in sorted(ERRORS.items()):
            print(f"  {robot:6s} {tensor:11s} along {direction:3s}: {rel:.1e}")
