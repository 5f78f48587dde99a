"""The constrained problems the tests of this folder solve: the iiwa reaching past a wall with a
joint bound, and HyQ standing under a lateral push with hard friction cones. Defined once, in
benchmarks/problems.py (``benchmarks/constrained.py`` times the same problems)."""

from benchmarks.problems import JOINT_1_LOWER, TARGET, WALL, hyq_push, iiwa_wall

__all__ = ["JOINT_1_LOWER", "TARGET", "WALL", "hyq_push", "iiwa_wall"]
