"""KUKA iiwa reaching: the :class:`tasks.arm_reach.ArmReach` preset for the bundled iiwa, with four
fixed targets (reachable from the keyframe "home", inside the workspace, away from singularities)
and the end-effector site ``"ee"``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .arm_reach import ArmReach
from .base import RunDefaults
from .registry import register_task

# reachable from "home" (ee at (0.669, 0, 0.285) m), inside the workspace, away from singularities
DEFAULT_TARGETS = ((0.55, 0.25, 0.45), (0.45, -0.25, 0.55), (0.65, -0.2, 0.30), (0.50, 0.20, 0.35))


@register_task("iiwa-reach", "KUKA iiwa: end effector visits 4 targets in turn, one every 2 s "
                             "(reach each within 2 cm in 1.5 s, torque limits respected; arm-reach preset; "
                             "--task-arg wall=y<=0.1: a wall the end effector must not cross, solved by csqp)")
@dataclass
class IiwaReach(ArmReach):
    """KUKA iiwa end-effector reaching through a sequence of targets."""

    robot: str = "iiwa"
    ee: str | None = "ee"
    targets: np.ndarray | None = field(default_factory=lambda: np.array(DEFAULT_TARGETS))
    name: str = "iiwa-reach"
    description: str = "KUKA iiwa end-effector reaching through a sequence of targets"
    defaults = RunDefaults(solver="ddp", horizon=32, dt=0.01)

    def __post_init__(self):
        if self.robot != "iiwa":
            raise ValueError(f"{self.name} is the preset of the bundled iiwa (its targets are the iiwa's); for "
                             f"'{self.robot}' run arm-reach --robot {self.robot} --ee FRAME")
        super().__post_init__()
