"""Cost terms for shooting problems, evaluated batched over knots (leading dim B).

Built-in: :class:`StateCost`, :class:`ControlCost`, :class:`FramePositionCost`,
:class:`FrameRotationCost`, :class:`FramePlacementCost`, :class:`ComPositionCost`,
:class:`JointLimitCost`, on contact forces :class:`ContactForceCost` and :class:`FrictionConeCost`;
weighted sums :class:`CostSum` (also via ``w * cost + …``); plain-Python
costs through :func:`as_cost` / :class:`CustomCost`.
"""

from .base import Cost, CostContext, CostDerivatives, CostSum, ResidualCost
from .com import ComPositionCost
from .contact import ContactForceCost, FrictionConeCost, friction_pyramid
from .custom import CustomCost, as_cost
from .foot import FrameHeightCost, FrameVelocityCost
from .frame import FramePlacementCost, FramePositionCost, FrameRotationCost
from .limits import JointLimitCost
from .state import ControlCost, StateCost, gravity_compensation
from .wrench import WrenchConeCost, wrench_cone_rows

__all__ = ["Cost", "CostContext", "CostDerivatives", "CostSum", "ResidualCost", "ComPositionCost", "ContactForceCost", "FrictionConeCost", "CustomCost",
           "FrameHeightCost", "FrameVelocityCost",
           "as_cost", "FramePlacementCost", "FramePositionCost", "FrameRotationCost", "JointLimitCost",
           "ControlCost", "StateCost", "gravity_compensation", "WrenchConeCost", "wrench_cone_rows",
           "friction_pyramid"]
