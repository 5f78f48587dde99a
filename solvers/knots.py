"""The knot structure of a shooting problem: its N running action models, checked, and grouped into
knots that are evaluated together — a *dynamics group* per integrated model (same dynamics
description and dt) and a *cost group* per cost object — so a problem of a few phases costs a few
batched calls per stage, not N.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .action_model import ActionModel, ImpulseDynamics


@dataclass(frozen=True)
class KnotGroup:
    """Knots evaluated together: ``knots`` (n,) sorted indices, ``item`` what they share (an
    :class:`~solvers.integrators.IntegratedModel` or a Cost); ``rows`` the knots as a slice when
    they are contiguous (cheaper views), else the index array."""

    knots: np.ndarray
    item: object
    rows: slice | np.ndarray = field(init=False)

    def __post_init__(self):
        k = self.knots
        rows = slice(int(k[0]), int(k[-1]) + 1) if k[-1] - k[0] + 1 == k.size else k
        object.__setattr__(self, "rows", rows)

    @property
    def contiguous(self) -> bool:
        return isinstance(self.rows, slice)


def _index(knots: list[int]) -> np.ndarray:
    a = np.asarray(knots, dtype=np.intp)
    a.setflags(write=False)
    return a


def _read_only(values: list[float]) -> np.ndarray:
    a = np.array(values, dtype=float)
    a.setflags(write=False)
    return a


def check_running_models(running_models, func: str, model=None) -> tuple[ActionModel, ...]:
    """``running_models`` as a tuple of ActionModels of one RobotModel (``model`` when given), each
    with dt > 0 unless it is an impact; raises a clear error otherwise."""
    running_models = tuple(running_models)
    if not running_models:
        raise ValueError(f"{func}: running_models is empty; give at least one ActionModel (horizon >= 1)")
    for t, am in enumerate(running_models):
        if not isinstance(am, ActionModel):
            raise TypeError(f"{func}: running_models[{t}] is a {type(am).__name__}, expected an ActionModel")
    model = running_models[0].model if model is None else model
    for t, am in enumerate(running_models):
        if am.model is not model:
            raise ValueError(f"{func}: running_models[{t}] describes another RobotModel than the problem's; every "
                             f"knot must use the same model object")
        if not am.dt > 0 and not isinstance(am.dynamics, ImpulseDynamics):
            raise ValueError(f"time step dt must be a positive finite number of seconds, got {am.dt} at knot {t}")
    return running_models


@dataclass(frozen=True)
class KnotStructure:
    """The running models of N knots and their groups (first-appearance order). ``dts`` (N,) [s];
    ``cost_scales`` (N,): what each knot's running cost is multiplied by (its dt, or 1 on an
    impulse knot); ``knot_dynamics`` (N,): each knot's integrated model; ``common_dt`` [s]: the
    knots' dt when they all share it, else None (read every MPC update: computed once here)."""

    running_models: tuple
    dts: np.ndarray
    cost_scales: np.ndarray
    dynamics_groups: tuple[KnotGroup, ...]
    cost_groups: tuple[KnotGroup, ...]
    knot_dynamics: np.ndarray
    common_dt: float | None = None

    @classmethod
    def build(cls, running_models: tuple, integrated: Callable) -> "KnotStructure":
        """Group ``running_models``; ``integrated(description, dt)`` gives the integrated model of
        a dynamics description over dt seconds."""
        dyn_knots: dict = {}
        cost_knots: dict = {}
        for t, am in enumerate(running_models):
            dyn_knots.setdefault((am.dynamics, am.dt), []).append(t)
            cost_knots.setdefault(id(am.cost), (am.cost, []))[1].append(t)
        dynamics_groups = tuple(KnotGroup(_index(ks), integrated(*key)) for key, ks in dyn_knots.items())
        cost_groups = tuple(KnotGroup(_index(ks), cost) for cost, ks in cost_knots.values())
        knot_dynamics = np.empty(len(running_models), dtype=object)
        for g in dynamics_groups:
            knot_dynamics[g.knots] = g.item
        dts = _read_only([am.dt for am in running_models])
        common = float(dts[0]) if dts.size and np.all(dts == dts[0]) else None
        return cls(running_models, dts, _read_only([am.cost_scale for am in running_models]), dynamics_groups,
                   cost_groups, knot_dynamics, common)
