"""``ContactSet``: which frames of a model are in rigid contact, and how they are constrained.

Conventions (docs/conventions.md, section "Contacts"):

* ``kind="point"`` (3 rows per frame): the classical acceleration of the frame origin, in
  world-aligned axes, is constrained; λ is the force [N] the environment applies to the robot at
  that point, world-aligned axes (a robot standing still has λ_z > 0). Pinocchio's ``CONTACT_3D``
  with ``LOCAL_WORLD_ALIGNED``.
* ``kind="6d"`` (6 rows per frame): the spatial acceleration of the frame, expressed in the frame,
  is constrained; λ is the wrench (force [N], torque [N m]) the environment applies, in the frame
  at its origin. Pinocchio's ``CONTACT_6D`` with ``LOCAL``.
* Baumgarte stabilisation ``baumgarte=(kp, kd)`` [1/s², 1/s]: the constraint becomes
  ``α + kd·ν + kp·e = 0`` with α the constrained acceleration, ν the matching velocity
  (point: world velocity of the origin; 6-D: local twist) and e the position error (point:
  ``p - p_ref`` in world axes; 6-D: ``log6(M_ref⁻¹ M)``), as Pinocchio's
  ``BaumgarteCorrectorParameters``. ``kp != 0`` needs ``reference``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import RobotModel

KINDS = {"point": 3, "6d": 6}


class RankDeficientContactError(ValueError):
    """The contact Jacobian has dependent rows (e.g. more than three point contacts on one rigid
    foot), so the contact forces are not unique."""


@dataclass(frozen=True, eq=False)
class ContactSet:
    """Rigid contacts on sites, bodies or geoms of ``model`` (immutable).

    model: the RobotModel the frames belong to (contact functions refuse any other model).
    frames: site, body or geom names (searched in that order, :meth:`RobotModel.frame`).
    kind: ``"point"`` (3-D, world-aligned) or ``"6d"`` (6-D, local); see the module docstring.
    baumgarte: ``(kp, kd)`` gains [1/s², 1/s], default no stabilisation.
    reference: reference placements for the ``kp`` term: point: world positions (k, 3) [m];
        6-D: homogeneous world placements (k, 4, 4). Required when ``kp != 0``.
    damping: 0 (default) solves the contact Schur complement ``K = J M⁻¹ Jᵀ`` by a factorisation
        and raises :class:`RankDeficientContactError` if K is singular; ``damping = μ > 0`` uses
        proximal iterations ``(K + μ I) λ_{j+1} = r + μ λ_j`` (Pinocchio's proximal solve), which
        converge to the minimum-norm λ of a redundant set (the acceleration is unique).
    max_iter, tol: iteration limit and absolute tolerance on λ of the proximal iterations.
    """

    model: RobotModel = field(repr=False)
    frames: tuple[str, ...]
    kind: str = "point"
    baumgarte: tuple[float, float] = (0.0, 0.0)
    reference: np.ndarray | None = field(default=None, repr=False)
    damping: float = 0.0
    max_iter: int = 200
    tol: float = 1e-12
    # derived, per frame (set in __post_init__)
    links: np.ndarray = field(init=False, repr=False)        # (k,) link each frame is attached to
    frame_R: np.ndarray = field(init=False, repr=False)      # (k, 3, 3) frame in its link frame
    frame_p: np.ndarray = field(init=False, repr=False)      # (k, 3)
    bodies: np.ndarray = field(init=False, repr=False)       # (k,) MuJoCo body carrying the frame
    body_frame_R: np.ndarray = field(init=False, repr=False)  # (k, 3, 3) frame in its body frame
    body_frame_p: np.ndarray = field(init=False, repr=False)  # (k, 3)

    def __post_init__(self) -> None:
        model = self.model
        if not isinstance(model, RobotModel):
            raise TypeError(f"ContactSet: model must be a RobotModel (dynamics.load_model), got "
                            f"{type(model).__name__}")
        frames = (self.frames,) if isinstance(self.frames, str) else tuple(self.frames)
        if not frames or not all(isinstance(f, str) for f in frames):
            raise ValueError(f"ContactSet: frames must be a non-empty sequence of site/body names, got {self.frames!r}")
        if len(set(frames)) != len(frames):
            raise ValueError(f"ContactSet: frame names must be distinct, got {frames}")
        if self.kind not in KINDS:
            raise ValueError(f"ContactSet: unknown kind '{self.kind}'; use 'point' (3-D contact, "
                             f"world-aligned) or '6d' (6-D contact, local frame)")
        try:
            kp, kd = (float(x) for x in self.baumgarte)
        except (TypeError, ValueError):
            raise ValueError(f"ContactSet: baumgarte must be a pair (kp, kd) of numbers, got "
                             f"{self.baumgarte!r}") from None
        if not (np.isfinite(kp) and np.isfinite(kd)) or kp < 0 or kd < 0:
            raise ValueError(f"ContactSet: baumgarte gains must be finite and >= 0, got ({kp}, {kd})")
        damping = float(self.damping)
        if not np.isfinite(damping) or damping < 0:
            raise ValueError(f"ContactSet: damping must be a finite number >= 0, got {self.damping!r}")
        if int(self.max_iter) < 1 or not float(self.tol) > 0:
            raise ValueError("ContactSet: max_iter must be >= 1 and tol > 0")
        k = len(frames)
        ref = self.reference
        if ref is not None:
            shape = (k, 3) if self.kind == "point" else (k, 4, 4)
            ref = np.array(ref, dtype=float)
            if ref.shape != shape:
                raise ValueError(f"ContactSet: reference must have shape {shape} for {k} '{self.kind}' "
                                 f"contacts (point: world positions; 6d: 4x4 world placements), got {ref.shape}")
            if not np.all(np.isfinite(ref)):
                raise ValueError("ContactSet: reference contains non-finite values")
            if self.kind == "6d":
                R = ref[:, :3, :3]
                if not np.allclose(R @ np.swapaxes(R, -1, -2), np.eye(3), atol=1e-9) or \
                        not np.allclose(ref[:, 3], [0, 0, 0, 1]):
                    raise ValueError("ContactSet: 6d reference placements must be homogeneous 4x4 "
                                     "matrices with an orthonormal rotation block")
            ref.setflags(write=False)
        elif kp != 0.0:
            raise ValueError("ContactSet: baumgarte kp != 0 needs reference placements "
                             "(reference=(k, 3) world positions for point contacts, (k, 4, 4) for 6d)")
        links = np.empty(k, dtype=int)
        fR = np.empty((k, 3, 3))
        fp = np.empty((k, 3))
        bodies = np.empty(k, dtype=int)
        bR = np.empty((k, 3, 3))
        bp = np.empty((k, 3))
        for i, name in enumerate(frames):
            try:
                link, R, p = model.frame(name)
            except KeyError as e:
                raise KeyError(f"ContactSet: {e.args[0]}") from None
            if link < 0:
                raise ValueError(f"ContactSet: frame '{name}' is fixed to the world (no joint moves it); "
                                 f"a contact frame must be on a moving body")
            links[i], fR[i], fp[i] = link, R, p
            bodies[i], bR[i], bp[i] = model.body_frame(name)
        for a in (links, fR, fp, bodies, bR, bp):
            a.setflags(write=False)
        set_ = object.__setattr__
        set_(self, "frames", frames)
        set_(self, "baumgarte", (kp, kd))
        set_(self, "reference", ref)
        set_(self, "damping", damping)
        set_(self, "max_iter", int(self.max_iter))
        set_(self, "tol", float(self.tol))
        set_(self, "links", links)
        set_(self, "frame_R", fR)
        set_(self, "frame_p", fp)
        set_(self, "bodies", bodies)
        set_(self, "body_frame_R", bR)
        set_(self, "body_frame_p", bp)

    @property
    def dim(self) -> int:
        """Rows per contact: 3 (point) or 6 (6d)."""
        return KINDS[self.kind]

    @property
    def nc(self) -> int:
        """Number of constraint rows (size of λ): 3k or 6k."""
        return self.dim * len(self.frames)

    @property
    def reference_frame(self) -> str:
        """The Jacobian reference of the constraint rows: ``local_world_aligned`` or ``local``."""
        return "local_world_aligned" if self.kind == "point" else "local"

    def check(self, model: RobotModel, func: str) -> None:
        """Raise a clear error unless this set belongs to ``model``."""
        if model is not self.model:
            other = getattr(model, "name", type(model).__name__)
            same = " (another RobotModel object of the same name: frame indices may differ)" \
                if other == self.model.name else ""
            raise ValueError(f"{func}: the ContactSet was built for model '{self.model.name}', not for the "
                             f"model passed ('{other}'){same}; build it with ContactSet(model, ...) for the "
                             f"model object you pass")
