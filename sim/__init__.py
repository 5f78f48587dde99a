"""Closed-loop simulation in MuJoCo: state conversions, the runner (lockstep / real-time timing),
run reports (JSON summary, trajectory), plots, offscreen video and the interactive viewer.

>>> from sim import simulate
>>> result = simulate(model, controller, x0, duration=8.0, mode="lockstep", update_every=10)
"""

# dynamics first: it loads MuJoCo even when the OpenGL back-end that MUJOCO_GL names is missing
# (rendering is optional), which the plain ``import mujoco`` of the modules below would not
import dynamics  # noqa: F401

from .runner import MODES, Controller, ControlLaw, SimResult, UpdateLog, simulate
from dynamics.mujoco_state import ActuatorMap, read_state, write_state

__all__ = ["MODES", "Controller", "ControlLaw", "SimResult", "UpdateLog", "simulate", "ActuatorMap",
           "read_state", "write_state"]
