"""Per-task controller defaults on the command line (``tasks.RunDefaults``): what ``mpc-accel run``
takes from the task and what from the flags, where they are shown, and the run summary's plain
statement of where DDP's second-order dynamics terms come from."""

from __future__ import annotations

import json

import pytest

import tasks
from mpc.cli import _penalty_cones_for_solver, build_parser, main, run_settings


def _settings(*flags, task="hyq-stand"):
    a = build_parser().parse_args(["run", task, *flags])
    cls = tasks.resolve_task(task)
    return run_settings(a, cls, 0.001)


def test_flags_override_the_tasks_defaults():
    d = tasks.resolve_task("hyq-stand").defaults
    assert (d.solver, d.horizon, d.dt, d.period) == ("csqp", 20, 0.02, 0.02)
    assert _settings() == ("csqp", 20, 0.02, 20, ["solver", "horizon", "dt", "update period", "iterations"])
    assert _settings("--solver", "ddp", "--horizon", "8") == ("ddp", 8, 0.02, 20, ["dt", "update period", "iterations"])
    # a given --dt: one update per knot (the task's update period goes with its own dt)
    assert _settings("--dt", "0.005") == ("csqp", 20, 0.005, 5, ["solver", "horizon", "iterations"])
    assert _settings("--update-every", "7")[3] == 7
    assert _settings("--dt", "0.005", "--update-every", "7")[3] == 7


def test_update_period_and_validation():
    d = tasks.RunDefaults(solver="ilqr", horizon=10, dt=0.02, update_period=0.04)
    assert d.period == 0.04 and d.describe() == "ilqr, horizon 10 x 20 ms, update every 40 ms"

    class Slow(tasks.Task):
        defaults = d
    a = build_parser().parse_args(["run", "x"])
    assert run_settings(a, Slow, 0.002)[3] == 20
    for bad in (dict(horizon=0), dict(dt=-1.0), dict(update_period=0.0)):
        with pytest.raises(ValueError, match="RunDefaults"):
            tasks.RunDefaults(**bad)

    class Wrong(tasks.Task):
        defaults = tasks.RunDefaults(solver="newton")
    with pytest.raises(ValueError, match="declares solver 'newton'"):
        run_settings(a, Wrong, 0.002)


def test_every_bundled_task_declares_defaults_and_they_are_listed(capsys):
    assert main(["tasks"]) == 0
    listing = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    helptext = capsys.readouterr().out
    assert "task defaults" in helptext
    for name in tasks.list_tasks():
        d = tasks.resolve_task(name).defaults
        assert isinstance(d, tasks.RunDefaults)
        assert f"defaults: {d.describe()}" in listing
        assert f"{name:<17} {d.describe()}" in helptext
    # the legged tasks default to hard cones, which only csqp enforces; with the cones as penalty
    # costs they are tuned for FDDP (DDP's contact second-order terms are finite differences)
    for name in ("hyq-stand", "hyq-trot", "atlas-balance"):
        cls = tasks.resolve_task(name)
        assert cls.defaults.solver == "csqp" and cls.solver_switches() == (("cones=penalty", "fddp"),)
        assert f"{name:<17} {cls.defaults.describe()} (solver fddp with cones=penalty)" in helptext


def test_run_without_flags_uses_the_task_defaults(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "hyq-stand", "--duration", "0.06", "--initial-iterations", "2", "--quiet",
                 "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    cfg = s["config"]
    assert (cfg["solver"], cfg["horizon"], cfg["dt"], cfg["update_every"]) == ("csqp", 20, 0.02, 20)
    assert cfg["task_defaults_used"] == "solver, horizon, dt, update period, iterations"
    assert "task_args" not in cfg and s["notes"] == []
    assert s["evaluation"]["details"]["cones"]["mode"] == "hard"         # the default: hard cones, csqp
    assert s["timing"]["updates"] == 2                                   # t = 0.02, 0.04 s (0: the first solve)
    assert s["second_order"] == {"used": False, "sources": []}          # CSQP takes no second-order terms
    assert "DDP second order" not in capsys.readouterr().out


def test_ddp_on_contact_knots_says_its_second_order_terms_are_finite_differences(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "hyq-stand", "--solver", "ddp", "--horizon", "4", "--duration", "0.04",
                 "--initial-iterations", "2", "--quiet", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    # an explicit solver without constraints: the run takes the penalty cones and says so
    assert s["config"]["task_args"] == {"cones": "penalty"}
    assert s["evaluation"]["details"]["cones"]["mode"] == "penalty"
    assert len(s["notes"]) == 1 and s["notes"][0].startswith("--solver ddp does not enforce constraints")
    assert s["second_order"]["used"] is True
    assert s["second_order"]["sources"] == ["central differences of the analytical first-order contact-dynamics "
                                            "derivatives"]
    text = capsys.readouterr().out
    assert "DDP second order  central differences of the analytical first-order contact-dynamics derivatives" in text
    assert "--solver fddp" in text


def test_explicit_solver_with_the_default_hard_cones():
    """The rule for an explicit ``--solver`` on a task whose hard cones are its default: a solver
    that enforces constraints (csqp) keeps them; one that does not (fddp, ddp, ilqr, the sampling
    planners) gets the penalty cones, with a note; an explicit ``cones=hard`` with such a solver is
    an error naming both ways out."""
    stand = tasks.get_task("hyq-stand")
    note = _penalty_cones_for_solver(stand, "fddp", {})
    assert note is not None and "cones=penalty" in note and "--solver csqp" in note
    for solver in ("ilqr", "ddp", "sampling"):
        assert _penalty_cones_for_solver(stand, solver, {}) is not None
    assert _penalty_cones_for_solver(stand, "csqp", {}) is None          # csqp enforces them
    assert _penalty_cones_for_solver(stand, None, {}) is None            # the task's default: csqp
    assert _penalty_cones_for_solver(stand, "fddp", {"cones": "hard"}) is None   # asked for: error below
    pen = tasks.get_task("hyq-stand", cones="penalty")
    assert _penalty_cones_for_solver(pen, "fddp", {"cones": "penalty"}) is None
    iiwa = tasks.get_task("iiwa-reach")                                  # no cones option
    assert _penalty_cones_for_solver(iiwa, "ddp", {}) is None


def test_explicit_hard_cones_with_an_unconstrained_solver_is_refused(capsys):
    assert main(["run", "hyq-stand", "--solver", "fddp", "--task-arg", "cones=hard", "--duration", "0.04",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "cones=hard are constraints and only --solver csqp or alddp enforces them (got --solver fddp)" in err
    assert "--task-arg cones=penalty" in err


def test_penalty_switch_builds_the_task_once(monkeypatch, capsys):
    """An explicit unconstrained solver on a hard-cone task is decided on the task's class, so the
    task is built once, with ``cones=penalty``."""
    import mpc.cli as cli
    built = []

    def record(spec, kwargs=None):
        built.append((spec, dict(kwargs or {})))
        raise cli._ArgError("stop after building")        # the rest of the run is not this test's

    monkeypatch.setattr(cli, "_load_task", record)
    assert main(["run", "hyq-stand", "--solver", "fddp", "--duration", "0.04", "--quiet"]) == 2
    assert built == [("hyq-stand", {"cones": "penalty"})]
    assert _penalty_cones_for_solver(tasks.resolve_task("hyq-stand"), "fddp", {}) is not None  # class default


def test_python_mpc_takes_the_tasks_solver():
    """``MPC(task)`` without ``solver`` uses the task's own (csqp for the legged hard cones), so the
    Python entry point runs what ``mpc-accel run TASK`` runs; an explicit solver still wins."""
    from mpc import MPC
    stand = tasks.get_task("hyq-stand")
    assert MPC(stand, backend="numpy", horizon=4, dt=0.02).solver_name == "csqp"
    assert MPC(stand, solver="CSQP", backend="numpy", horizon=4, dt=0.02).solver_name == "csqp"
    assert MPC(tasks.get_task("iiwa-reach"), backend="numpy", horizon=4).solver_name == "ddp"
