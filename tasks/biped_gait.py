"""The periodic contact schedule of a biped walk: which sole is on the ground when, where the
touchdown impulses fall in a horizon of knots, and to which side the centre of mass leans.

Times are measured from ``start_time`` (both soles down before it). One cycle is
``2 · (swing_time + double_support_time)``: sole 0 swings for ``swing_time``, both soles are down
for ``double_support_time``, sole 1 swings, both are down again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .quadruped_trot import QuadrupedTrot


def smoothstep(s) -> np.ndarray:
    """Cubic smoothstep of s clipped to [0, 1] (zero slope at both ends)."""
    s = np.clip(np.asarray(s, float), 0.0, 1.0)
    return s * s * (3.0 - 2.0 * s)


@dataclass
class BipedGait:
    """swing_time, double_support_time, start_time [s]; shift_time: before the first swing the CoM
    leans over sole 1 during this many seconds [s] (the first stance sole)."""

    swing_time: float
    double_support_time: float
    start_time: float
    shift_time: float = 0.3

    def __post_init__(self):
        if not (np.isfinite(self.swing_time) and self.swing_time > 0):
            raise ValueError(f"BipedGait: swing_time must be a positive time [s], got {self.swing_time!r}")
        for key in ("double_support_time", "start_time", "shift_time"):
            val = getattr(self, key)
            if not (np.isfinite(val) and val >= 0):
                raise ValueError(f"BipedGait: {key} must be a time >= 0 [s], got {val!r}")

    @property
    def cycle(self) -> float:
        """Seconds of one gait cycle (two steps)."""
        return 2.0 * (self.swing_time + self.double_support_time)

    @property
    def stance_time(self) -> float:
        """Seconds a sole stays down between two of its swings."""
        return self.swing_time + 2.0 * self.double_support_time

    def _tau(self, t) -> np.ndarray:
        # rounded to 1 ns: a knot whose middle sits on a phase switch gets the same phase at every update
        t = np.round(np.asarray(t, float), 9)
        return np.round(np.mod(t - self.start_time, self.cycle), 9)

    def contact_state(self, t) -> np.ndarray:
        """Which soles (..., 2) the schedule has on the ground at times t [s]."""
        t = np.round(np.asarray(t, float), 9)
        tau = self._tau(t)
        sw, ds = self.swing_time, self.double_support_time
        walking = t >= self.start_time
        out = np.ones(t.shape + (2,), dtype=bool)
        out[..., 0] = ~(walking & (tau < sw))
        out[..., 1] = ~(walking & (tau >= sw + ds) & (tau < 2 * sw + ds))
        return out

    #: the soles that swing together, in the order they swing (for :meth:`swing_window`)
    pairs = ((0,), (1,))
    # (lift-off, touchdown) of the swing of a sole that contains t, or of its next swing: the trot's
    swing_window = QuadrupedTrot.swing_window

    def knot_schedule(self, t: float, horizon: int, dt: float) -> list:
        """The horizon's knots from time t: ``horizon`` entries (time [s], kind), kind a contact
        mask (2 bools, the soles down over that knot, judged at its middle) or ``("impulse", j)``
        for the touchdown of sole j (a knot that takes no time). A sole the schedule has in the air at
        t and down at the first knot's middle lands inside that knot: its impulse is the first knot
        (else the first knot would hold the still-falling sole as a rigid contact at its velocity)."""
        knots: list = []
        tk = float(t)
        prev = tuple(bool(c) for c in self.contact_state(tk))
        while len(knots) < horizon:
            mask = tuple(bool(c) for c in self.contact_state(tk + 0.5 * dt))
            landing = [j for j in range(2) if mask[j] and not prev[j]]
            if landing and not (knots and knots[-1][1][0] == "impulse"):
                knots.append((tk, ("impulse", landing[0])))
                continue
            knots.append((tk, mask))
            prev = mask
            tk += dt
        return knots

    # a :meth:`knot_schedule`'s swing knots before a touchdown, knot times and the times at which
    # each knot finds its swing (:meth:`swing_window`): the trot's, whose schedules have the same form
    touchdown_next = staticmethod(QuadrupedTrot.touchdown_next)
    knot_times = staticmethod(QuadrupedTrot.knot_times)
    swing_probes = staticmethod(QuadrupedTrot.swing_probes)

    def com_side(self, t) -> np.ndarray:
        """Where the CoM leans at times t (...,) in [-1, 1]: +1 over sole 0, -1 over sole 1, 0 between
        them. Over the stance sole during a swing, moving smoothly across it during each double
        support (and over ``shift_time`` before the first swing, from 0)."""
        t = np.round(np.asarray(t, float), 9)
        tau = self._tau(t)
        sw, ds = self.swing_time, self.double_support_time
        half = sw + ds
        side = np.where(tau < sw, -1.0, np.where(tau < half, -1.0 + 2.0 * smoothstep((tau - sw) / max(ds, 1e-9)),
                                                 np.where(tau < half + sw, 1.0,
                                                          1.0 - 2.0 * smoothstep((tau - half - sw) / max(ds, 1e-9)))))
        before = -smoothstep((t - (self.start_time - self.shift_time)) / max(self.shift_time, 1e-9))
        return np.where(t >= self.start_time, side, before)
