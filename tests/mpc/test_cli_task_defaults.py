"""Per-task controller defaults on the command line (``tasks.RunDefaults``): what ``mpc-accel run``
takes from the task and what from the flags, where they are shown, and the run summary's plain
statement of where DDP's second-order dynamics terms come from."""

from __future__ import annotations

import json

import pytest

import tasks
from mpc.cli import build_parser, main, run_settings


def _settings(*flags, task="hyq-stand"):
    a = build_parser().parse_args(["run", task, *flags])
    cls = tasks.resolve_task(task)
    return run_settings(a, cls, 0.001)


def test_flags_override_the_tasks_defaults():
    d = tasks.resolve_task("hyq-stand").defaults
    assert (d.solver, d.horizon, d.dt, d.period) == ("fddp", 20, 0.02, 0.02)
    assert _settings() == ("fddp", 20, 0.02, 20, ["solver", "horizon", "dt", "update period", "iterations"])
    assert _settings("--solver", "ddp", "--horizon", "8") == ("ddp", 8, 0.02, 20, ["dt", "update period", "iterations"])
    # a given --dt: one update per knot (the task's update period goes with its own dt)
    assert _settings("--dt", "0.005") == ("fddp", 20, 0.005, 5, ["solver", "horizon", "iterations"])
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
    # the legged tasks are tuned for FDDP (DDP's contact second-order terms are finite differences)
    for name in ("hyq-stand", "hyq-trot", "atlas-balance"):
        assert tasks.resolve_task(name).defaults.solver == "fddp"


def test_run_without_flags_uses_the_task_defaults(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "hyq-stand", "--duration", "0.06", "--initial-iterations", "2", "--quiet",
                 "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    cfg = s["config"]
    assert (cfg["solver"], cfg["horizon"], cfg["dt"], cfg["update_every"]) == ("fddp", 20, 0.02, 20)
    assert cfg["task_defaults_used"] == "solver, horizon, dt, update period, iterations"
    assert s["timing"]["updates"] == 2                                   # t = 0.02, 0.04 s (0: the first solve)
    assert s["second_order"] == {"used": False, "sources": []}          # FDDP takes no second-order terms
    assert "DDP second order" not in capsys.readouterr().out


def test_ddp_on_contact_knots_says_its_second_order_terms_are_finite_differences(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "hyq-stand", "--solver", "ddp", "--horizon", "4", "--duration", "0.04",
                 "--initial-iterations", "2", "--quiet", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["second_order"]["used"] is True
    assert s["second_order"]["sources"] == ["central differences of the analytical first-order contact-dynamics "
                                            "derivatives"]
    text = capsys.readouterr().out
    assert "DDP second order  central differences of the analytical first-order contact-dynamics derivatives" in text
    assert "--solver fddp" in text
