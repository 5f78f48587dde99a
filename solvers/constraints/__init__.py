"""Constraint terms ``lower ≤ g(x, u) ≤ upper`` for the knots of a shooting problem, evaluated
batched over the knots that share them (``ActionModel(..., constraints=[...])``; solved by
:class:`solvers.CSQP`, docs/solvers.md).

Built-in: :class:`JointPositionBounds`, :class:`JointVelocityBounds`, :class:`FrameHalfSpace`
(obstacles, tables), :class:`ControlBounds`, on contact knots :class:`FrictionCone` (linearised
pyramid with unilateral normal force) and :class:`WrenchCone` (6-D contacts of flat feet:
friction, centre of pressure, yaw torque); plain-Python constraints through :func:`as_constraint` /
:class:`CustomConstraint`. On the numba backend the library terms are evaluated compiled
(:mod:`.compiled`).
"""

from .base import Constraint, check_bounds
from .contact import FrictionCone, WrenchCone
from .control import ControlBounds
from .custom import CustomConstraint, as_constraint
from .frame import FrameHalfSpace
from .joints import JointPositionBounds, JointVelocityBounds

__all__ = [
           "Constraint",
           "ControlBounds",
           "CustomConstraint",
           "FrameHalfSpace",
           "FrictionCone",
           "JointPositionBounds",
           "JointVelocityBounds",
           "WrenchCone",
           "as_constraint",
           "check_bounds",
]
