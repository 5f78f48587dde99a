"""mpc-accel dynamics layer: robot models and batched rigid-body algorithms with derivatives.

>>> import dynamics
>>> model = dynamics.load_model("iiwa")
>>> be = dynamics.get_backend("numpy")
>>> tau = be.rnea(model, q, v, a)            # (..., nv)
"""

from .backend import (Backend, BackendUnavailableError, available_backends, default_backend_name, get_backend,
                      register_backend)
from .contact import ContactSet
from .joints import JointType
from .model import BUNDLED_ROBOTS, RobotModel, UnsupportedModelError, from_mujoco, load_model
from . import worker_wait  # noqa: F401  (no side effect: applied when numba's workers start)

__all__ = [
    "Backend", "BackendUnavailableError", "available_backends", "default_backend_name", "get_backend", "register_backend", "JointType",
    "BUNDLED_ROBOTS", "RobotModel", "UnsupportedModelError", "from_mujoco", "load_model",
    "ContactSet",
]
