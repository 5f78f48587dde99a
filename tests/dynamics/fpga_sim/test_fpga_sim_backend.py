"""fpga-sim backend: fixed-point results against the float64 reference within the format-derived
bound (iiwa, HyQ, Atlas), saturation detection, timing report, construction options."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from dynamics.fpga_sim import AcceleratorDesign, FixedPointOverflowError, FpgaSimBackend

REF = dynamics.get_backend("numpy")
SLACK = 1e-10   # float64 rounding of the reference itself, relative to max(1, |ref|)


def within_bound(what, ours, ref, bound):
    ours, ref = np.asarray(ours), np.asarray(ref)
    bound = np.reshape(bound, ours.shape)
    slack = SLACK * max(1.0, float(np.abs(ref).max()))
    err = np.abs(ours - ref)
    bad = err > bound + slack
    assert not bad.any(), (f"{what}: {int(bad.sum())} entries outside the bound, worst err "
                           f"{err[bad].max():.3e} vs bound {bound[bad][np.argmax(err[bad])]:.3e}")


def state(m, B, seed):
    rng = np.random.default_rng(seed)
    return (m.random_configuration(rng, size=(B,)), rng.normal(size=(B, m.nv)), rng.normal(size=(B, m.nv)),
            rng.normal(size=(B, m.nbody, 6)))


@pytest.mark.parametrize("name", ["iiwa", "hyq", "atlas"])
def test_gradients_within_format_bound(bundled, name):
    """ΔID, ΔiFD (Plancher et al. 2021 completely fused: M⁻¹ given) and ΔFD in Q16.16 against the float64
    reference, elementwise within the rigorous bound, with external forces; and the bound is
    informative for ΔID (a wrong shift or wiring would exceed it)."""
    m = bundled[name]
    be = FpgaSimBackend()
    q, v, a, fext = state(m, 2, 1)
    ours = be.rnea_derivatives(m, q, v, a, fext)
    ref = REF.rnea_derivatives(m, q, v, a, fext)
    assert be.last_timing.overflow_total == 0
    for k in range(2):
        within_bound(f"{name} dID[{k}]", ours[k], ref[k], be.last_error_bound[k])
    assert be.rtol < 0.05, be.rtol                     # the ΔID bound is not vacuous
    Mi = REF.minv(m, q)
    ours = be.aba_derivatives(m, q, v, a, fext, minv=Mi)
    ref = REF.aba_derivatives(m, q, v, a, fext, minv=Mi)
    assert be.last_timing.function == "dIFD"
    for k in range(3):
        within_bound(f"{name} dIFD[{k}]", ours[k], ref[k], be.last_error_bound[k])
    ours = be.aba_derivatives(m, q, v, a, fext)
    ref = REF.aba_derivatives(m, q, v, a, fext)
    assert be.last_timing.function == "dFD"
    for k in range(3):
        within_bound(f"{name} dFD[{k}]", ours[k], ref[k], be.last_error_bound[k])


@pytest.mark.parametrize("name", ["iiwa", "hyq"])
def test_table1_functions_within_bound(bundled, name):
    m = bundled[name]
    be = FpgaSimBackend(fmt="Q12.20", rounding="nearest")
    q, v, a, fext = state(m, 3, 2)
    for fn, args in (("rnea", (q, v, a, fext)), ("crba", (q,)), ("minv", (q,)), ("aba", (q, v, a, fext))):
        ours = getattr(be, fn)(m, *args)
        within_bound(f"{name} {fn}", ours, getattr(REF, fn)(m, *args), be.last_error_bound)
        assert be.last_timing.overflow_total == 0


def test_fewer_fraction_bits_are_less_accurate(bundled):
    m = bundled["iiwa"]
    q, v, a, _ = state(m, 2, 3)
    ref = REF.rnea_derivatives(m, q, v, a)[0]
    errs = []
    for fmt in ("Q16.8", "Q16.12", "Q16.16"):
        errs.append(float(np.abs(FpgaSimBackend(fmt=fmt).rnea_derivatives(m, q, v, a)[0] - ref).max()))
    assert errs[0] > errs[1] > errs[2]


def test_saturation_detected_and_raise_option(bundled):
    """Velocities built to overflow Q12.8 (range ±2048): counted by default, an error on request."""
    m = bundled["iiwa"]
    q = m.neutral()
    v = np.full(m.nv, 3000.0)
    be = FpgaSimBackend(fmt="Q12.8")
    be.rnea(m, q, v, np.zeros(m.nv))
    assert be.last_timing.overflow_total > 0 and be.last_timing.overflow_counts.get("input", 0) == m.nv
    assert np.isinf(be.rtol)          # no bound once a value saturated
    strict = FpgaSimBackend(fmt="Q12.8", on_overflow="raise")
    with pytest.raises(FixedPointOverflowError, match=r"Q12\.8.*input"):
        strict.rnea(m, q, v, np.zeros(m.nv))
    # in range: no event, and the strict backend runs
    strict.rnea(m, q, np.full(m.nv, 0.5), np.zeros(m.nv))
    assert strict.last_timing.overflow_total == 0


def test_last_timing_uses_the_design(bundled):
    m = bundled["iiwa"]
    d = AcceleratorDesign(m, forward_pes=7, backward_pes=7, block_size=7, clock_hz=55.6e6)
    be = dynamics.get_backend("fpga-sim", design=d, fmt="Q16.16")
    q, v, a, _ = state(m, 16, 4)
    be.aba_derivatives(m, q, v, a, minv=REF.minv(m, q))
    t = be.last_timing
    assert (t.function, t.knots, t.cycles) == ("dIFD", 16, 16 * 34)
    assert t.compute_s == pytest.approx(16 * 34 / 55.6e6)
    assert t.end_to_end_s >= t.compute_s and t.io_s > 0 and t.simulated
    assert t.throughput_knots_per_s == pytest.approx(16 / t.end_to_end_s)
    assert t.host_wall_s > 0
    with pytest.raises(ValueError, match="generated for 'iiwa'.*'hyq'"):
        be.rnea(bundled["hyq"], bundled["hyq"].neutral(), np.zeros(18), np.zeros(18))


def test_defaults_options_and_delegation(bundled):
    be = dynamics.get_backend("fpga-sim")
    assert isinstance(be, FpgaSimBackend) and be.fmt.name == "Q16.16"
    assert FpgaSimBackend.rtol == 2.0 ** -16
    m = bundled["hyq"]
    q = m.neutral()
    R, p = be.frame_placement(m, q, "lf_foot")          # kinematics: float64 reference, exact
    R0, p0 = REF.frame_placement(m, q, "lf_foot")
    assert np.array_equal(R, R0) and np.array_equal(p, p0)
    assert not be.supports("aba_second_derivatives")
    with pytest.raises(NotImplementedError, match="numpy"):
        be.aba_second_derivatives(m, q, np.zeros(m.nv), np.zeros(m.nv))
    with pytest.raises(ValueError, match="on_overflow"):
        FpgaSimBackend(on_overflow="ignore")
    with pytest.raises(ValueError, match="Qm.n"):
        FpgaSimBackend(fmt="fp32")
    b = dynamics.get_backend("fpga-sim", fmt="Q20.12", base="six", mode="pipelined", forward_pes=2)
    b.rnea(m, q, np.zeros(m.nv), np.zeros(m.nv))
    assert b.design_for(m).base == "six" and b.last_timing.mode == "pipelined"
