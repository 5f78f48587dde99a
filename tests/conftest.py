"""Shared fixtures for the dynamics tests: the bundled robots (loaded once) and a seeded RNG."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics


@pytest.fixture(scope="session")
def bundled() -> dict[str, dynamics.RobotModel]:
    """The three bundled robots, ``{"iiwa", "hyq", "atlas"}`` -> RobotModel (immutable, shared)."""
    return {name: dynamics.load_model(name) for name in ("iiwa", "hyq", "atlas")}


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, fixed-seed generator per test so every test is reproducible on its own."""
    return np.random.default_rng(20240521)
