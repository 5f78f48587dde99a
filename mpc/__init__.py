"""Receding-horizon control: the :class:`MPC` controller, its time-indexed :class:`Plan` (feed-forward,
reference and Riccati feedback applied between updates), and the ``mpc-accel`` command line.

>>> from tasks import get_task
>>> from mpc import MPC
>>> ctrl = MPC(get_task("iiwa-reach"), solver="ddp", horizon=32, dt=0.01)   # backend: dynamics.default_backend_name()
"""

from .controller import MPC, SOLVERS, STAGES, UpdateRecord
from .plan import Plan

__all__ = ["MPC", "SOLVERS", "STAGES", "UpdateRecord", "Plan"]
