"""Named frames of a MuJoCo model as MuJoCo itself places them: a site, a body or a geom, looked up
in that order (the order :meth:`dynamics.model.RobotModel.frame` uses), so that code reading
MuJoCo's kinematics (the simulator's measurements, the tasks' checks) and code using the model's
own kinematics mean the same frame by the same name.

Robot collections name feet differently: as sites, as bodies, or (MuJoCo Menagerie's quadrupeds)
as collision geoms; all three work wherever a frame name is taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import mujoco          # loaded as dynamics.model loads it (a broken MUJOCO_GL never breaks import)

#: object types searched, in order, with their ``MjData`` position/orientation arrays
_KINDS = (("site", mujoco.mjtObj.mjOBJ_SITE, "site_xpos", "site_xmat"),
          ("body", mujoco.mjtObj.mjOBJ_BODY, "xpos", "xmat"),
          ("geom", mujoco.mjtObj.mjOBJ_GEOM, "geom_xpos", "geom_xmat"))


@dataclass(frozen=True)
class MujocoFrame:
    """A named frame of a MuJoCo model: its kind (``"site"``, ``"body"`` or ``"geom"``), its id
    among objects of that kind and the id of the body that carries it."""

    name: str
    kind: str
    id: int
    body: int

    def position(self, data: mujoco.MjData) -> np.ndarray:
        """World position (3,) [m] after ``mj_kinematics``/``mj_forward`` on ``data`` (a view)."""
        return getattr(data, _ARRAYS[self.kind][0])[self.id]

    def rotation(self, data: mujoco.MjData) -> np.ndarray:
        """World rotation (3, 3) after ``mj_kinematics``/``mj_forward`` on ``data`` (a copy)."""
        return getattr(data, _ARRAYS[self.kind][1])[self.id].reshape(3, 3).copy()


_ARRAYS = {kind: (pos, mat) for kind, _, pos, mat in _KINDS}


def frame_names(mj: mujoco.MjModel) -> dict[str, list[str]]:
    """The named sites, bodies (the world excluded) and geoms of ``mj``, under the keys
    ``"sites"``, ``"bodies"`` and ``"geoms"``."""
    counts = {"site": mj.nsite, "body": mj.nbody, "geom": mj.ngeom}
    plural = {"site": "sites", "body": "bodies", "geom": "geoms"}
    out = {}
    for kind, obj, _, _ in _KINDS:
        names = (mujoco.mj_id2name(mj, obj, i) for i in range(counts[kind]))
        out[plural[kind]] = [n for n in names if n and n != "world"]
    return out


def listing(mj: mujoco.MjModel) -> str:
    """``"sites: a, b; bodies: c; geoms: (none)"``: the frame names of ``mj`` for an error message."""
    return "; ".join(f"{kind}: {', '.join(names) or '(none)'}" for kind, names in frame_names(mj).items())


def mujoco_frame(mj: mujoco.MjModel, name: str) -> MujocoFrame:
    """The site, body or geom named ``name`` (searched in that order); a KeyError listing the
    frames there are when none has that name."""
    for kind, obj, _, _ in _KINDS:
        i = mujoco.mj_name2id(mj, obj, name)
        if i >= 0:
            body = {"site": mj.site_bodyid, "geom": mj.geom_bodyid}.get(kind)
            return MujocoFrame(name, kind, int(i), int(body[i]) if body is not None else int(i))
    raise KeyError(f"no site, body or geom named '{name}'; {listing(mj)}")
