"""Conversions between a MuJoCo ``MjData`` and the model state ``x = concat(q, v)``, and where the
model's controls go in MuJoCo's ``ctrl``: what the simulator (:mod:`sim.runner`) and the tasks
(settling a robot on the floor, reading its contacts) share.

``q`` is MuJoCo's ``qpos``; ``v`` differs from ``qvel`` only for free joints, whose linear velocity
MuJoCo stores in world coordinates and the model in body coordinates (``docs/conventions.md``).
Controls: the model's ``u`` are actuator forces; MuJoCo's ``ctrl`` is ``u / gain`` for the fixed-gain
torque actuators the model keeps (``model.actuator_names``).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from .inputs import as_array
from .model import RobotModel


def read_state(model: RobotModel, data: mujoco.MjData) -> np.ndarray:
    """The measured state ``x = concat(qpos, v_from_qvel(qpos, qvel))`` (nq + nv,)."""
    if not model.free_adr:          # no free joint: v is qvel (the conversion is the identity)
        return np.concatenate([data.qpos, data.qvel]).astype(float, copy=False)
    q = np.array(data.qpos, dtype=float)
    return np.concatenate([q, model.v_from_qvel(q, np.asarray(data.qvel, float))])


def write_state(model: RobotModel, data: mujoco.MjData, x) -> None:
    """Set ``data.qpos``/``data.qvel`` from a model state ``x`` (nq + nv,) (no ``mj_forward``)."""
    x = as_array("x", x, (model.nq + model.nv,), "write_state")
    if x.ndim != 1:
        raise ValueError(f"write_state: x must be a single state of shape ({model.nq + model.nv},), got {x.shape}")
    q, v = x[:model.nq], x[model.nq:]
    data.qpos[:] = q
    data.qvel[:] = model.qvel_from_v(q, v)


@dataclass(frozen=True)
class ActuatorMap:
    """Where the model's controls go in MuJoCo: ``data.ctrl[ids] = u / gain``.

    ids: (nu,) MuJoCo actuator ids of the model's torque actuators; gain: (nu,) their fixed gains
    (``actuator_gainprm[:, 0]``) so that the actuator force equals ``u``."""

    ids: np.ndarray
    gain: np.ndarray

    @classmethod
    def for_model(cls, model: RobotModel, mj_model: mujoco.MjModel | None = None) -> "ActuatorMap":
        m = model.mj_model if mj_model is None else mj_model
        ids = []
        for k, name in enumerate(model.actuator_names):
            i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, name) if name else -1
            if i < 0 and not name and m is model.mj_model:
                i = k       # an unnamed actuator of the model's own scene: same index
            if i < 0:
                raise ValueError(f"actuator '{name}' (model control {k}) is not in the MuJoCo scene; the scene "
                                 f"must be loaded from the same MJCF as the model")
            ids.append(i)
        ids = np.array(ids, dtype=int)
        gain = np.array(m.actuator_gainprm[ids, 0], dtype=float) if len(ids) else np.zeros(0)
        if np.any(gain == 0):
            raise ValueError("an actuator has zero gain; cannot map actuator forces to controls")
        return cls(ids=ids, gain=gain)

    def apply(self, data: mujoco.MjData, u: np.ndarray) -> None:
        """Write actuator forces ``u`` (nu,) into ``data.ctrl``."""
        data.ctrl[self.ids] = u / self.gain

    def forces(self, data: mujoco.MjData) -> np.ndarray:
        """The actuator forces MuJoCo applied at the last step (nu,) (``data.actuator_force``)."""
        return np.array(data.actuator_force[self.ids], dtype=float)
