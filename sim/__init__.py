"""Closed-loop simulation in MuJoCo: state conversions, the runner (lockstep / real-time timing),
run reports (JSON summary, trajectory), plots, offscreen video and the interactive viewer.

>>> from sim import simulate
>>> result = simulate(model, controller, x0, duration=8.0, mode="lockstep", update_every=10)
"""

from .runner import MODES, Controller, ControlLaw, SimResult, UpdateLog, simulate
from .state import ActuatorMap, read_state, write_state

__all__ = ["MODES", "Controller", "ControlLaw", "SimResult", "UpdateLog", "simulate", "ActuatorMap",
           "read_state", "write_state"]
