"""fpga-sim timing model (dynamics.fpga_sim.timing / schedule): the published iiwa design points,
monotonicity in resources, dependency-respecting schedules, floating-base modes, pipelined and I/O
models."""

from __future__ import annotations

import pytest

import dynamics
from dynamics.fpga_sim import AcceleratorDesign, IOLink, schedule_tree
from dynamics.fpga_sim.schedule import (ScheduleTree, backward_tasks, check_schedule, forward_tasks, list_schedule,
                                        matmul_steps)


@pytest.fixture(scope="module")
def iiwa():
    return dynamics.load_model("iiwa")


def test_published_iiwa_design_points(iiwa):
    """RoboShape/Robomorphic iiwa: 829 cycles with 1/1/1, 34 cycles = 0.61 µs at 55.6 MHz with 7/7/7
    (Yang, Chen & Han 2023 quotes Robomorphic's 0.61 µs). Computed from the schedules, not stored."""
    d1 = AcceleratorDesign(iiwa, forward_pes=1, backward_pes=1, block_size=1, clock_hz=55.6e6)
    d7 = AcceleratorDesign(iiwa, forward_pes=7, backward_pes=7, block_size=7, clock_hz=55.6e6)
    assert (d1.forward_steps, d1.backward_steps, d1.matmul_steps) == (29, 56, 343)
    assert d1.latency_cycles == 829
    assert (d7.forward_steps, d7.backward_steps, d7.matmul_steps) == (8, 8, 1)
    assert d7.latency_cycles == 34
    assert round(d7.latency_s * 1e6, 2) == 0.61


@pytest.mark.parametrize("name,base,knobs,cycles", [
    ("iiwa", "link", (2, 1, 1), 790), ("iiwa", "link", (1, 2, 1), 463), ("iiwa", "link", (4, 4, 4), 65),
    ("iiwa", "link", (3, 5, 2), 104), ("iiwa", "link", (6, 2, 7), 67),
    ("hyq", "fixed", (1, 1, 1), 339), ("hyq", "fixed", (2, 1, 1), 306), ("hyq", "fixed", (1, 1, 3), 147),
    ("hyq", "fixed", (2, 6, 4), 82), ("hyq", "fixed", (1, 12, 12), 93)])
def test_more_points_of_the_roboshape_tables(name, base, knobs, cycles):
    """Further points of RoboShape's published design-space tables (iiwa; HyQ with its 12 leg
    joints, i.e. base="fixed")."""
    d = AcceleratorDesign(dynamics.load_model(name), *knobs, base=base)
    assert d.latency_cycles == cycles


def test_design_point_depends_on_tree_not_on_a_table():
    """The same knobs on other trees give other numbers: a 7-chain gives the iiwa's 29 forward
    steps on one PE; a branched tree of 7 links has fewer (link, column) tasks (22, not 28)."""
    chain = ScheduleTree(tuple(range(-1, 6)), (1,) * 7)
    fork = ScheduleTree((-1, 0, 1, 1, 3, 2, 5), (1,) * 7)
    assert list_schedule(forward_tasks(chain), 1).length == 29
    assert sum(t.kind == "dID" for t in forward_tasks(fork)) == 22
    assert list_schedule(forward_tasks(fork), 1).length == 23


@pytest.mark.parametrize("name,base", [("iiwa", "link"), ("hyq", "fixed"), ("hyq", "link"), ("atlas", "six")])
def test_scheduler_respects_every_dependency(name, base):
    m = dynamics.load_model(name)
    tree = schedule_tree(m, base)
    fg, bg = forward_tasks(tree), backward_tasks(tree)
    for pes in sorted({1, 2, 3, 5, tree.n}):
        for graph in (fg, bg):
            s = list_schedule(graph, pes)
            assert check_schedule(s) == []
            ran = [t for t in s.id_unit if t is not None] + [t for pe in s.pes for t in pe if t is not None]
            assert sorted(t.uid for t in ran) == list(range(len(graph)))       # every task exactly once
            assert all(t.on_id_unit for t in s.id_unit if t is not None)
            assert all(not t.on_id_unit for pe in s.pes for t in pe if t is not None)


def test_check_schedule_detects_a_violation(iiwa):
    s = list_schedule(forward_tasks(schedule_tree(iiwa)), 2)
    first = next(t for t in s.id_unit if t is not None)
    later = next(t for t in s.pes[0] if t is not None and first in t.prereqs)
    k = s.pes[0].index(later)
    s.pes[0][k] = None
    s.pes[0][0] = later            # run it at step 0, together with its prerequisite
    assert any("before its prerequisite" in v for v in check_schedule(s))


@pytest.mark.parametrize("name,base", [("iiwa", "link"), ("hyq", "fixed"), ("hyq", "link")])
def test_latency_monotone_in_pes(name, base):
    """More forward or backward PEs never make a design slower (block size fixed); a larger block
    size is not monotone because of padding (ceil(n/b)·b), which the design space shows."""
    m = dynamics.load_model(name)
    d = AcceleratorDesign(m, base=base)
    n, nc = d.tree.n, d.tree.ncolumns
    fwd = [d.forward_schedule(p).length for p in range(1, n + 1)]
    bwd = [d.backward_schedule(p).length for p in range(1, n + 1)]
    assert all(a >= b for a, b in zip(fwd, fwd[1:])), fwd
    assert all(a >= b for a, b in zip(bwd, bwd[1:])), bwd
    for bs in (1, 2, nc):
        mm = [matmul_steps(d.tree, bs, p) for p in range(1, n + 1)]
        assert all(a >= b for a, b in zip(mm, mm[1:]))
    lat = {(f, b): 3 * fwd[f - 1] + bwd[b - 1] + 2 * matmul_steps(d.tree, 1, b)
           for f in range(1, n + 1) for b in range(1, n + 1)}
    for (f, b), v in lat.items():
        if f < n:
            assert lat[(f + 1, b)] <= v
        if b < n:
            assert lat[(f, b + 1)] <= v


def test_design_space_and_pareto(iiwa):
    pts = AcceleratorDesign(iiwa).design_space()
    assert len(pts) == 7 * 7 * 7
    by = {(p.forward_pes, p.backward_pes, p.block_size): p for p in pts}
    assert by[(1, 1, 1)].latency_cycles == 829 and by[(7, 7, 7)].latency_cycles == 34
    front = [p for p in pts if p.pareto]
    assert by[(1, 1, 1)].pareto and min(p.latency_cycles for p in front) == min(p.latency_cycles for p in pts)
    for p in front:    # nothing dominates a Pareto point
        assert not any(q.latency_cycles <= p.latency_cycles and q.dsp_proxy <= p.dsp_proxy and
                       (q.latency_cycles, q.dsp_proxy) != (p.latency_cycles, p.dsp_proxy) for q in pts)


def test_floating_base_modes():
    """HyQ: legs only (as published, 12 columns) vs base as one 6-column link vs six 1-DoF links."""
    m = dynamics.load_model("hyq")
    fixed, link, six = (AcceleratorDesign(m, base=b) for b in ("fixed", "link", "six"))
    assert (fixed.tree.n, fixed.tree.ncolumns) == (12, 12)
    assert (link.tree.n, link.tree.ncolumns) == (13, 18)
    assert (six.tree.n, six.tree.ncolumns) == (18, 18)
    assert fixed.latency_cycles == 57          # RoboShape's HyQ table at 12/12/12
    assert fixed.latency_cycles < link.latency_cycles < six.latency_cycles
    with pytest.raises(ValueError, match="unknown base mode"):
        AcceleratorDesign(m, base="floating")


def test_pipelined_mode_and_n_knots(iiwa):
    d = AcceleratorDesign(iiwa, 7, 7, 7, clock_hz=125e6, mode="pipelined")
    ii, lat = d.initiation_interval, d.pipeline_latency_cycles
    assert ii == max(d.pipeline_stages().values())
    for n in (1, 16, 128):
        assert d.compute_cycles("dIFD", n) == lat + (n - 1) * ii
    lat_mode = d.replace(mode="latency")
    assert lat_mode.compute_cycles("dIFD", 16) == 16 * 34
    # deeper links carry more columns: fewer lanes make the deepest forward stage the bottleneck
    narrow = d.replace(forward_pes=1)
    assert narrow.pipeline_stages()["Df[joint7]"] == 3 * 7 and narrow.initiation_interval >= 21


def test_io_model(iiwa):
    io = IOLink(gen=3, lanes=16, bus_bits=512)
    assert io.padded_bytes(1) == 64 and io.padded_bytes(16) == 64 and io.padded_bytes(17) == 128
    d = AcceleratorDesign(iiwa, 7, 7, 7, io=io)
    win, wout = d.words_per_knot("dIFD")
    assert (win, wout) == (7 * 2 + 7 + 7 + 49, 2 * 49)
    t = d.time("dIFD", 32)
    assert t.cycles == 32 * 34 and t.compute_s == pytest.approx(32 * 34 / 55.6e6)
    assert t.io_s == pytest.approx(32 * (io.seconds(win) + io.seconds(wout)))
    serial = d.replace(overlap_io=False).time("dIFD", 32)
    assert serial.end_to_end_s == pytest.approx(io.latency_s + t.io_s + t.compute_s)
    assert t.end_to_end_s < serial.end_to_end_s
    slow = d.replace(io=IOLink(gen=1, lanes=1)).time("dIFD", 32)
    assert slow.end_to_end_s > t.end_to_end_s
    with pytest.raises(ValueError, match="PCIe generation"):
        IOLink(gen=9)


def test_bad_knobs_are_refused(iiwa):
    with pytest.raises(ValueError, match="block_size must be in 1..7"):
        AcceleratorDesign(iiwa, block_size=8)
    with pytest.raises(ValueError, match="forward_pes"):
        AcceleratorDesign(iiwa, forward_pes=0)
    with pytest.raises(TypeError, match="RobotModel"):
        AcceleratorDesign("iiwa")
