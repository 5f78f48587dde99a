"""A legged robot's scene and the checks before a run: loading a scene file that includes the robot
(MuJoCo Menagerie's ``scene.xml`` layout) or a bare robot file (a floor is then added), and one
check per way a standing robot fails before its first step, each with its own message and fix:
a foot frame that does not exist, a foot without collision geometry, no ground the feet can touch,
feet that cannot reach the ground, actuators that cannot hold the robot up.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from dynamics import BUNDLED_ROBOTS, RobotModel, from_mujoco, load_model
from dynamics.mujoco_frames import listing, mujoco_frame

FLOOR_NOTE = "a floor was added at z = 0 (the robot file has no ground geometry)"


def _collides(mj, g: int) -> bool:
    return bool(mj.geom_contype[g] or mj.geom_conaffinity[g])


def _world_geoms(mj) -> list[int]:
    """Collision geoms fixed to the world (on the world body or bodies welded to it)."""
    return [g for g in range(mj.ngeom) if int(mj.body_weldid[mj.geom_bodyid[g]]) == 0 and _collides(mj, g)]


def load_legged_scene(robot: str) -> tuple[RobotModel, str | None]:
    """``(model, note)``: the robot (a bundled name, a scene file that includes it, or a bare robot
    file) and, when a floor had to be added because the file has no collision geometry fixed to the
    world, :data:`FLOOR_NOTE` (else None)."""
    if str(robot) in BUNDLED_ROBOTS:
        return load_model(robot), None
    path = Path(robot)
    if not path.is_file():
        return load_model(robot), None          # its error names the bundled robots
    try:
        mj = mujoco.MjModel.from_xml_path(str(path))
    except ValueError as e:
        raise ValueError(f"MuJoCo could not load '{path}': {e}") from e
    if _world_geoms(mj):
        return from_mujoco(mj, name=path.stem, path=str(path)), None
    spec = mujoco.MjSpec.from_file(str(path))
    spec.worldbody.add_geom(name="floor_added", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05],
                            contype=1, conaffinity=1)
    try:
        mj = spec.compile()
    except ValueError as e:
        raise ValueError(f"MuJoCo could not compile '{path}' with a floor added: {e}") from e
    return from_mujoco(mj, name=path.stem, path=str(path)), FLOOR_NOTE


def frame_body(mj, frame: str) -> int:
    """MuJoCo body id carrying the site, body or geom named ``frame`` (:func:`mujoco_frame`)."""
    return mujoco_frame(mj, frame).body


def check_feet_exist(m: RobotModel, task: str, robot: str, feet) -> None:
    """A ValueError naming a foot frame that is neither a site, a body nor a geom, and the frames
    there are."""
    for f in feet:
        try:
            m.body_frame(f)
        except KeyError:
            raise ValueError(f"{task}: foot frame '{f}' not found in '{robot}'; {listing(m.mj_model)}. Give the feet with "
                             f"--feet (sites, bodies or geoms at the feet, comma-separated)") from None


def check_feet_collide(m: RobotModel, task: str, robot: str, feet) -> None:
    """A ValueError naming a foot frame whose body has no collision geometry (the foot would sink
    through the floor in MuJoCo)."""
    mj = m.mj_model
    for f in feet:
        b = frame_body(mj, f)
        if not any(int(mj.geom_bodyid[g]) == b and _collides(mj, g) for g in range(mj.ngeom)):
            raise ValueError(f"{task}: foot frame '{f}' of '{robot}' is on body '{m.body_names[b]}', which has no "
                             f"collision geometry: in MuJoCo the foot would pass through the floor. Add a collision "
                             f"geom to that body at the foot (e.g. <geom type=\"sphere\" size=\"0.02\" pos=\"...\"/>, "
                             f"contype/conaffinity not both 0), or give the frame of a body that has one")


def check_ground(m: RobotModel, task: str, robot: str, feet) -> None:
    """A ValueError when no collision geometry fixed to the world can touch the feet' geoms
    (MuJoCo's contype/conaffinity rule: a pair collides when one's contype meets the other's
    conaffinity)."""
    mj = m.mj_model
    world = _world_geoms(mj)
    foot_geoms = [g for f in feet for g in range(mj.ngeom)
                  if int(mj.geom_bodyid[g]) == frame_body(mj, f) and _collides(mj, g)]

    def pair(a: int, b: int) -> bool:
        return bool((mj.geom_contype[a] & mj.geom_conaffinity[b]) or (mj.geom_contype[b] & mj.geom_conaffinity[a]))

    if not any(pair(w, g) for w in world for g in foot_geoms):
        names = ", ".join(mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_GEOM, w) or f"#{w}" for w in world) or "(none)"
        raise ValueError(f"{task}: '{robot}' has no ground geometry the feet can touch: the world's collision geoms "
                         f"({names}) and the foot geoms have no matching contype/conaffinity bits. Give the floor "
                         f"contype=\"1\" conaffinity=\"1\" (and the foot geoms conaffinity=\"1\"), or pass a scene "
                         f"file with a floor (a bare robot file gets one added)")


def check_feet_lowest(m: RobotModel, task: str, robot: str, q: np.ndarray, feet, source: str,
                      tol: float = 0.01) -> None:
    """A ValueError when, at the standing configuration q with the feet on the floor, another
    collision geom of the robot is below the floor by more than ``tol`` [m] (the robot would rest on
    it, not on its feet)."""
    mj = m.mj_model
    d = mujoco.MjData(mj)
    d.qpos[:] = q
    mujoco.mj_kinematics(mj, d)
    foot_bodies = {frame_body(mj, f) for f in feet}
    feet_z = min(float(mujoco_frame(mj, f).position(d)[2]) for f in feet)
    worst, which = 0.0, None
    for g in range(mj.ngeom):
        b = int(mj.geom_bodyid[g])
        if int(mj.body_weldid[b]) == 0 or b in foot_bodies or not _collides(mj, g):
            continue
        below = feet_z - float(d.geom_xpos[g][2])       # the geom's centre below the lowest foot frame
        if below > tol and below > worst:
            worst, which = below, (g, b)
    if which is not None:
        g, b = which
        name = mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_GEOM, g) or f"#{g}"
        raise ValueError(f"{task}: the feet of '{robot}' cannot reach the ground in its standing posture ({source}): "
                         f"geom '{name}' of body '{m.body_names[b]}' is {100 * worst:.1f} cm below the feet. Check "
                         f"the foot frames (--feet) or give a keyframe named 'standing'")


def check_torques(m: RobotModel, task: str, robot: str, u: np.ndarray, source: str) -> None:
    """A ValueError naming the joint whose actuator cannot give the static torque that holds the
    robot up in its standing posture, the torque and the limit."""
    over = np.flatnonzero((u > m.u_upper + 1e-9) | (u < m.u_lower - 1e-9))
    if over.size:
        k = int(over[np.argmax(np.maximum(u[over] - m.u_upper[over], m.u_lower[over] - u[over]))])
        dof = int(np.flatnonzero(np.asarray(m.actuation_matrix)[:, k])[0])
        joint = m.joint_names[int(m.dof_link[dof])] or f"dof {dof}"
        raise ValueError(f"{task}: the actuators of '{robot}' cannot hold it up in its standing posture ({source}): "
                         f"joint '{joint}' needs {u[k]:.4g} N m, its actuator's limit is [{m.u_lower[k]:.4g}, "
                         f"{m.u_upper[k]:.4g}] N m. Raise the limit (ctrlrange/forcerange), lighten the robot, or "
                         f"give a keyframe 'standing' with straighter legs")
