"""What a reaching task needs to know about an arm description: checks that it can be controlled
(fixed base, torque actuators with limits that hold it up), its home posture, and targets inside
its own workspace.

Used by :class:`tasks.arm_reach.ArmReach`. Errors name the robot, the problem and the fix.
"""

from __future__ import annotations

import numpy as np

from dynamics import RobotModel, get_backend


def frame_hint(m: RobotModel) -> str:
    """A likely end-effector name to suggest: the last named site, else the last named body."""
    sites = [n for n in m.site_names if n]
    bodies = [n for n in m.body_names if n and n != "world"]
    return sites[-1] if sites else (bodies[-1] if bodies else "FRAME")


def check_arm(m: RobotModel, task: str, robot: str) -> None:
    """A ValueError unless ``m`` is a fixed-base chain of hinge/slide joints with torque actuators
    whose limits the file gives."""
    if m.free_adr or m.ball_adr:
        raise ValueError(f"{task}: '{robot}' has a free or ball joint; reaching needs a fixed-base arm of hinge and "
                         f"slide joints (legged robots: quadruped-stand, humanoid-balance)")
    if m.nu == 0:
        n_mj = int(m.mj_model.nu)
        if n_mj:
            raise ValueError(f"{task}: '{robot}' has {n_mj} actuators but no torque actuator: position or velocity "
                             f"servos (a gain on the joint position or a bias) are not used by the controller; "
                             f"replace them with <motor joint=\"...\" ctrlrange=\"-T T\" ctrllimited=\"true\"/> (T the "
                             f"joint's torque limit [N m])")
        raise ValueError(f"{task}: '{robot}' has no actuators; add one <motor joint=\"...\" ctrlrange=\"-T T\" "
                         f"ctrllimited=\"true\"/> per joint in an <actuator> block (T the torque limit [N m])")
    free = [m.actuator_names[k] or f"#{k}" for k in range(m.nu)
            if not (np.isfinite(m.u_lower[k]) and np.isfinite(m.u_upper[k]))]
    if free:
        raise ValueError(f"{task}: '{robot}' gives no torque limit for the actuator(s) {', '.join(free)}; set "
                         f"ctrlrange with ctrllimited=\"true\" (or forcerange with forcelimited=\"true\") on each, "
                         f"or actuatorfrcrange on its joint")


def check_holds_gravity(m: RobotModel, task: str, robot: str, u_gravity: np.ndarray, where: str = "home") -> None:
    """A ValueError naming the first actuator whose limit is below the torque that holds the arm
    still against gravity at the ``where`` posture."""
    over = np.flatnonzero((u_gravity > m.u_upper + 1e-9) | (u_gravity < m.u_lower - 1e-9))
    if over.size:
        k = int(over[0])
        raise ValueError(f"{task}: the actuators of '{robot}' cannot hold it still at its {where} posture: actuator "
                         f"'{m.actuator_names[k] or k}' needs {u_gravity[k]:.4g} N m against gravity, its limit is "
                         f"[{m.u_lower[k]:.4g}, {m.u_upper[k]:.4g}]; raise its ctrlrange/forcerange or check the "
                         f"link masses")


def home_configuration(m: RobotModel) -> tuple[np.ndarray, str]:
    """The home posture (nq,) and where it came from: the keyframe ``home``, else the reference
    configuration with every joint outside its range moved to the middle of the range."""
    if "home" in m.keyframes:
        return np.array(m.keyframe("home"), float), "keyframe 'home'"
    q = np.array(m.neutral(), float)
    lo, hi = np.asarray(m.q_lower, float), np.asarray(m.q_upper, float)
    out = np.isfinite(lo) & np.isfinite(hi) & ((q < lo) | (q > hi))
    q[out] = 0.5 * (lo[out] + hi[out])
    return q, ("the reference configuration (no keyframe 'home')" if not out.any() else
               "the reference configuration with joints outside their ranges at mid-range (no keyframe 'home')")


def inverse_kinematics(m: RobotModel, frame: str, target: np.ndarray, q0: np.ndarray, iterations: int = 300,
                       damping: float = 1e-4, tol: float = 1e-4) -> np.ndarray | None:
    """A configuration (nq,) within the joint ranges that puts ``frame`` at ``target`` (3,) [m]
    (within ``tol``), by damped least squares from ``q0`` with every step clipped to the ranges;
    None when it does not get there."""
    be = get_backend("numpy")
    lo, hi = np.asarray(m.q_lower, float), np.asarray(m.q_upper, float)
    q = np.clip(np.array(q0, float), lo, hi)
    for _ in range(iterations):
        e = target - be.frame_placement(m, q, frame)[1]
        if np.linalg.norm(e) < tol:
            return q
        J = be.frame_jacobian(m, q, frame, "local_world_aligned")[:3]
        step = J.T @ np.linalg.solve(J @ J.T + damping * np.eye(3), e)
        q = np.clip(q + np.clip(step, -0.2, 0.2), lo, hi)
    return None


def workspace_targets(m: RobotModel, frame: str, q_home: np.ndarray, n: int, fraction=(0.4, 0.7), seed: int = 0,
                      samples: int = 4000) -> tuple[np.ndarray, float]:
    """``(targets (n, 3), reach)``: ``n`` world points [m] for ``frame`` inside the arm's workspace,
    and the arm's reach [m] (the farthest ``frame`` gets from the first joint's body over ``samples``
    seeded random configurations within the joint ranges). A target lies at ``fraction`` of the
    reach from that body, no lower than that body, a fifth of the reach
    from the vertical through it (away from the shoulder singularity) and from the other targets and
    the home position, at most half the reach from the one before (the first: from home), and is
    reached by :func:`inverse_kinematics` from ``q_home``."""
    lo_f, hi_f = (float(v) for v in fraction)
    if not 0.0 < lo_f < hi_f < 1.0:
        raise ValueError(f"reach_fraction must be (low, high) with 0 < low < high < 1, got {fraction!r}")
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n_targets must be a positive integer, got {n!r}")
    be = get_backend("numpy")
    first_body = next(b for b in range(len(m.body_names)) if int(m.body_link[b]) == 0)
    origin = be.frame_placement(m, q_home, m.body_names[first_body])[1]
    rng = np.random.default_rng(seed)
    Q = m.random_configuration(rng, samples)
    P = be.frame_placement(m, Q, frame)[1]                                   # (S, 3)
    reach = float(np.linalg.norm(P - origin, axis=-1).max())
    if not reach > 1e-3:
        raise ValueError(f"frame '{frame}' does not move with the joints (reach {reach:.3g} m); give the "
                         f"end-effector frame (a site or body at the tip)")
    d = np.linalg.norm(P - origin, axis=-1)
    radial = np.linalg.norm((P - origin)[:, :2], axis=-1)
    ok = (d >= lo_f * reach) & (d <= hi_f * reach) & (P[:, 2] >= origin[2]) & (radial >= 0.2 * reach)
    home = be.frame_placement(m, q_home, frame)[1]
    chosen: list[np.ndarray] = []
    for i in rng.permutation(np.flatnonzero(ok)):
        p = P[i]
        if any(np.linalg.norm(p - c) < 0.2 * reach for c in [home, *chosen]):
            continue
        if np.linalg.norm(p - (chosen[-1] if chosen else home)) > 0.5 * reach:
            continue            # each move at most half the reach: one switch period is enough for it
        if inverse_kinematics(m, frame, p, q_home) is None:
            continue
        chosen.append(p)
        if len(chosen) == n:
            return np.stack(chosen), reach
    raise ValueError(f"could place only {len(chosen)} of {n} targets for '{frame}' at {lo_f:g}-{hi_f:g} of the reach "
                     f"({reach:.3f} m) that inverse kinematics reaches from home; give targets=..., fewer "
                     f"n_targets or another reach_fraction")
