"""mpc-accel dynamics layer: robot models and batched rigid-body algorithms with derivatives.

>>> import dynamics
>>> model = dynamics.load_model("iiwa")
>>> be = dynamics.get_backend("numpy")
>>> tau = be.rnea(model, q, v, a)            # (..., nv)
"""

from .worker_wait import configure_worker_wait

configure_worker_wait()   # before numba (or anything else) loads libgomp: see dynamics.worker_wait

from .backend import (Backend, BackendUnavailableError, available_backends, default_backend_name, get_backend,
                      register_backend)
from .contact import ContactSet
from .joints import JointType
from .model import BUNDLED_ROBOTS, RobotModel, UnsupportedModelError, from_mujoco, load_model

__all__ = [
    "Backend", "BackendUnavailableError", "available_backends", "default_backend_name", "get_backend", "register_backend", "JointType",
    "BUNDLED_ROBOTS", "RobotModel", "UnsupportedModelError", "from_mujoco", "load_model",
    "ContactSet",
]
