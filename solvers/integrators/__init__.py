"""Integrated models: the discrete dynamics ``x⁺ = f(x, u)`` of one kind of knot, with exact
tangent-space Jacobians and DDP's second-order tensor, each evaluated for a group of knots in
batched backend calls (Crocoddyl's integrated action models, the dynamics part).

One class per kind, each with its own data (allocated by ``create_data(n)``, written in place by
``calc_diff``):

* :class:`EulerModel` — semi-implicit Euler (``IntegratedActionModelEuler``), :mod:`.euler`;
* :class:`RK4Model` — Runge–Kutta 4 on the tangent space (``IntegratedActionModelRK``), :mod:`.rk4`;
* :class:`ImpulseModel` — a rigid impact (``ActionModelImpulseFwdDynamics``), :mod:`.impulse`.

Contact dynamics is not a kind of its own: it is the free dynamics with the acceleration replaced
by the contact solve, so Euler and RK4 take an *acceleration provider*
(:class:`FreeAcceleration` or :class:`ContactAcceleration`, :mod:`.acceleration`), as Crocoddyl
composes a differential action model (free or contact forward dynamics) into an integrator. What
the kinds share is written once: the batched interface and the second-order differences
(:mod:`.base`), the torque map with passive forces, the acceleration partials' chain rule and the
acceleration Hessian (:mod:`.actuated`), and the Euclidean/Lie integration with its SO(3)/SE(3)
second-order terms (:mod:`.lie`).

An :class:`~solvers.action_model.ActionModel`'s dynamics description builds its integrated model
(``FreeDynamics(...).integrated(model, backend, dt)`` and the like).
"""

from .acceleration import AccelerationBuffers, ContactAcceleration, FreeAcceleration
from .actuated import ActuatedModel, StateBuffers
from .base import SECOND_ORDER_MODES, DynamicsDerivatives, IntegratedData, IntegratedModel
from .euler import EulerData, EulerModel
from .impulse import ImpulseModel
from .rk4 import RK4Data, RK4Model

__all__ = ["DynamicsDerivatives", "IntegratedData", "IntegratedModel", "SECOND_ORDER_MODES", "ActuatedModel",
           "StateBuffers", "AccelerationBuffers", "FreeAcceleration", "ContactAcceleration", "EulerModel",
           "EulerData", "RK4Model", "RK4Data", "ImpulseModel"]
