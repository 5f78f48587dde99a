"""Action models: the immutable description of one knot of a shooting problem.

An action model says what happens over one interval of the horizon: which dynamics (free or
contact dynamics with an integrator, or an impact), which cost, and how long the interval is. It
holds no workspace and never changes once built (Crocoddyl's ``ActionModelAbstract``). Its
dynamics description builds the integrated model that evaluates it (``integrated(model, backend,
dt)``, :mod:`solvers.integrators`); the :class:`solvers.ShootingProblem` groups knots of equal
structure and evaluates each group with one batched backend call, into the data of
:meth:`~solvers.ShootingProblem.create_data` (Crocoddyl's ``ActionData``).

>>> from solvers import ActionModel, FreeDynamics, ShootingProblem
>>> walk = ActionModel(model, cost_a, dt=0.01)
>>> settle = ActionModel(model, cost_b, dt=0.02, dynamics=FreeDynamics(integrator="rk4"))
>>> problem = ShootingProblem(x0, [walk] * 20 + [settle] * 10, ActionModel(model, terminal_cost, dt=0.0))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dynamics import RobotModel
from dynamics.backend import Backend

from .constraints import Constraint, as_constraint
from .costs import Cost, as_cost
from .integrators import ContactAcceleration, EulerModel, FreeAcceleration, ImpulseModel, IntegratedModel, RK4Model

INTEGRATORS = ("euler", "rk4")
_INTEGRATOR_CLASSES = {"euler": EulerModel, "rk4": RK4Model}


@dataclass(frozen=True)
class FreeDynamics:
    """Unconstrained robot dynamics ``a = ABA(q, v, B u + τ_passive(q, v))`` integrated over the
    knot's dt by ``integrator`` (``"euler"``: semi-implicit Euler, ``"rk4"``: Runge–Kutta on the
    tangent space; see :mod:`solvers.integrators`). passive_forces: joint damping and
    hinge/slide springs of the model."""

    integrator: str = "euler"
    passive_forces: bool = True

    def __post_init__(self):
        if self.integrator not in INTEGRATORS:
            raise ValueError(f"unknown integrator '{self.integrator}'; use one of {', '.join(INTEGRATORS)}")

    def integrated(self, model: RobotModel, backend: Backend, dt: float,
                   second_order: str = "auto") -> IntegratedModel:
        """The :class:`~solvers.integrators.IntegratedModel` of these dynamics over ``dt`` seconds;
        second_order: the source of DDP's ``∂²a`` (see :class:`solvers.ShootingProblem`)."""
        acc = FreeAcceleration(model, backend, second_order)
        return _INTEGRATOR_CLASSES[self.integrator](model, backend, dt, acc, second_order, self.passive_forces)


@dataclass(frozen=True, eq=False)
class ContactDynamics:
    """Rigid-contact dynamics: the frames of ``contacts`` (a :class:`dynamics.ContactSet`) do not
    accelerate (point contacts) or do not move (6-D contacts); ``a`` solves the KKT system
    ``M a + b = τ + Jᵀλ, J a + γ = 0`` (:meth:`dynamics.Backend.contact_dynamics`) and is integrated
    like :class:`FreeDynamics` (Mastalli et al. 2020's ``DifferentialActionModelContactFwdDynamics``).
    The first-order derivatives are analytical (Carpentier & Mansard 2018); DDP's second-order
    term on these knots comes from central differences of them
    (:func:`dynamics.second_order_numerical.contact_second_derivatives_numerical`), and the solve
    result says so. Knots share a group when they share this object."""

    contacts: object
    integrator: str = "euler"
    passive_forces: bool = True

    def __post_init__(self):
        from dynamics.contact import ContactSet
        if not isinstance(self.contacts, ContactSet):
            raise TypeError(f"ContactDynamics: contacts must be a dynamics.ContactSet, got "
                            f"{type(self.contacts).__name__}")
        if self.integrator not in INTEGRATORS:
            raise ValueError(f"unknown integrator '{self.integrator}'; use one of {', '.join(INTEGRATORS)}")

    def integrated(self, model: RobotModel, backend: Backend, dt: float,
                   second_order: str = "auto") -> IntegratedModel:
        """The integrator of ``integrator`` with the contact solve as its acceleration."""
        acc = ContactAcceleration(model, backend, self.contacts, second_order)
        return _INTEGRATOR_CLASSES[self.integrator](model, backend, dt, acc, second_order, self.passive_forces)


@dataclass(frozen=True, eq=False)
class ImpulseDynamics:
    """A rigid impact on the frames of ``contacts`` (touchdown): the configuration is unchanged and
    the velocity jumps to ``v⁺`` with ``M (v⁺ − v⁻) = Jᵀ Λ``, ``J v⁺ = −e J v⁻``
    (:meth:`dynamics.Backend.impulse_dynamics`, restitution e); Crocoddyl's
    ``ActionModelImpulseFwdDynamics``. The knot takes no time (its ActionModel's dt must be 0) and
    its cost is counted once, not integrated over a dt; the control has no effect on it, so give
    the knot a control regularisation. First-order derivatives are analytical; DDP's second-order
    term is central differences of them."""

    contacts: object
    restitution: float = 0.0

    def __post_init__(self):
        from dynamics.contact import ContactSet
        if not isinstance(self.contacts, ContactSet):
            raise TypeError(f"ImpulseDynamics: contacts must be a dynamics.ContactSet, got "
                            f"{type(self.contacts).__name__}")
        if not 0.0 <= float(self.restitution) <= 1.0:
            raise ValueError(f"ImpulseDynamics: restitution must be in [0, 1], got {self.restitution}")

    def integrated(self, model: RobotModel, backend: Backend, dt: float = 0.0,
                   second_order: str = "auto") -> IntegratedModel:
        """The :class:`~solvers.integrators.ImpulseModel` of this impact (dt is not used)."""
        return ImpulseModel(model, backend, self.contacts, self.restitution, second_order)


@dataclass(frozen=True, eq=False)
class ActionModel:
    """One knot: ``model`` (RobotModel), ``cost`` (a :class:`solvers.costs.Cost` or a plain-Python
    cost, see :mod:`solvers.costs.custom`), ``dt`` [s] (the interval it integrates over; a
    terminal model's dt is not used and may be 0; an impulse knot's is 0) and ``dynamics``
    (:class:`FreeDynamics` by default, :class:`ContactDynamics`, :class:`ImpulseDynamics`).

    The running cost is integrated over the interval: the knot contributes ``dt · l(x, u)``; a
    terminal model contributes ``l_N(x)`` unscaled (as Crocoddyl's integrated action models).
    Knots that share the same cost *object* are evaluated together in one batched call, so give
    knots of one phase the same cost object; per-knot references and weights are arrays with a
    leading knot axis inside that object (:mod:`solvers.costs.base`).

    constraints: terms ``lower ≤ g(x, u) ≤ upper`` on this knot (:mod:`solvers.constraints`, or
    plain-Python objects, :mod:`solvers.constraints.custom`), kept as a tuple; knots that share
    the same term objects are evaluated together. Only the constrained solver
    (:class:`solvers.CSQP`) enforces them; the other solvers ignore them."""

    model: RobotModel
    cost: Cost
    dt: float
    dynamics: FreeDynamics | ContactDynamics | ImpulseDynamics = field(default_factory=FreeDynamics)
    constraints: tuple[Constraint, ...] = ()

    def __post_init__(self):
        if not isinstance(self.model, RobotModel):
            raise TypeError(f"ActionModel: model must be a RobotModel (dynamics.load_model), got "
                            f"{type(self.model).__name__}")
        dt = float(self.dt)
        if not (np.isfinite(dt) and dt >= 0):
            raise ValueError(f"ActionModel: dt must be a finite number of seconds >= 0, got {self.dt}")
        if not isinstance(self.dynamics, (FreeDynamics, ContactDynamics, ImpulseDynamics)):
            raise TypeError(f"ActionModel: dynamics must be FreeDynamics(...), ContactDynamics(contacts) or "
                            f"ImpulseDynamics(contacts), got {type(self.dynamics).__name__}")
        contacts = getattr(self.dynamics, "contacts", None)
        if contacts is not None and contacts.model is not self.model:
            raise ValueError("ActionModel: the ContactSet was built for another RobotModel than this action model's")
        if isinstance(self.dynamics, ImpulseDynamics) and dt != 0.0:
            raise ValueError(f"ActionModel: an impulse knot takes no time; give it dt=0, not {dt}")
        cost = as_cost(self.cost, name="action model")
        cost.check_model(self.model)
        object.__setattr__(self, "dt", dt)
        object.__setattr__(self, "cost", cost)
        object.__setattr__(self, "constraints", self._checked_constraints())

    def _checked_constraints(self) -> tuple[Constraint, ...]:
        items = self.constraints
        if isinstance(items, Constraint) or callable(getattr(items, "residual", None)):
            items = (items,)
        try:
            items = tuple(items)
        except TypeError:
            raise TypeError(f"ActionModel: constraints must be a list of constraint terms, got "
                            f"{type(self.constraints).__name__}") from None
        out = tuple(as_constraint(c) for c in items)
        for c in out:
            c.check_model(self.model)
        if len(set(map(id, out))) != len(out):
            raise ValueError("ActionModel: the same constraint term appears twice on one knot")
        return out

    @property
    def nu(self) -> int:
        return self.model.nu

    @property
    def cost_scale(self) -> float:
        """What the knot's cost is multiplied by in the total: its dt (integrated over the
        interval), or 1 for an impulse knot (counted once)."""
        return 1.0 if isinstance(self.dynamics, ImpulseDynamics) else self.dt
