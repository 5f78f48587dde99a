"""benchmarks.machine.pinocchio_anchor: which Pinocchio the dynamics anchors timed, and whether it
is the newest release the benchmarks know of."""

from __future__ import annotations

from benchmarks.machine import NEWEST_PINOCCHIO, pinocchio_anchor


def test_an_older_pinocchio_is_flagged_with_the_recipe():
    a = pinocchio_anchor("4.0.0")
    assert a["pinocchio_version"] == "4.0.0" and a["newest_known"] == NEWEST_PINOCCHIO and not a["is_newest"]
    assert "older than the newest release" in a["line"] and "benchmarks/README.md" in a["line"]


def test_the_newest_and_later_releases_are_not_flagged():
    assert pinocchio_anchor(NEWEST_PINOCCHIO)["is_newest"]
    assert pinocchio_anchor(NEWEST_PINOCCHIO)["line"] == f"anchor: Pinocchio {NEWEST_PINOCCHIO}"
    assert pinocchio_anchor("4.10.0")["is_newest"]          # compared as numbers, not as text
    assert not pinocchio_anchor("3.9.9")["is_newest"]


def test_no_pinocchio():
    a = pinocchio_anchor(None)
    assert a["pinocchio_version"] is None and not a["is_newest"] and "not importable" in a["line"]
