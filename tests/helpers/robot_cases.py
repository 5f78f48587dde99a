"""The robots the convention and numerical-derivative tests run on: the three bundled robots and two
small random trees (tests/helpers/random_trees.py, with hinge/slide ``ref``), one on a fixed base and
one with a free-floating root."""

from __future__ import annotations

import dynamics
from tests.helpers.random_trees import random_tree_model

#: name -> (seed, nbodies, free_root) of the random trees
TREES = {"tree_fixed": (13, 10, False), "tree_free": (16, 10, True)}
ROBOT_CASES = ["iiwa", "hyq", "atlas", *TREES]


def robot_case(name: str, bundled: dict[str, dynamics.RobotModel]) -> dynamics.RobotModel:
    """The model named ``name`` in :data:`ROBOT_CASES`: a random tree, or the bundled robot taken
    from ``bundled`` (the session fixture of tests/conftest.py)."""
    if name in TREES:
        seed, nb, free = TREES[name]
        return random_tree_model(seed, nb, free_root=free, refs=True)[0]
    return bundled[name]
