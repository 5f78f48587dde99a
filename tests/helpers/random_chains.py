"""Random serial chains (n links, one hinge or slide joint per body) as MuJoCo models, for the
parallel-in-depth tests and benchmark (Yang, Wu & Pan 2016, 2017 initialise the link parameters randomly).

Each body has a random offset and orientation from its parent, a random hinge (or slide) axis and
anchor, random mass (0.3–3 kg), centre of mass and rotational inertia (valid principal moments,
rotated principal axes) and optionally random armature, so every link inertia is positive
definite (the CFA needs ``J_i^-1``). Link lengths are scaled down with n so a 256-link chain stays
a few metres long.
"""

from __future__ import annotations

import numpy as np


def _unit(rng: np.random.Generator, n: int = 3) -> np.ndarray:
    x = rng.normal(size=n)
    return x / np.linalg.norm(x)


def random_chain_spec(rng: np.random.Generator, nlinks: int, *, slide: float = 0.2, armature: bool = True,
                      gravity: bool = True):
    """A ``mujoco.MjSpec`` of a random serial chain of ``nlinks`` bodies, each with one joint (hinge,
    or slide with probability ``slide``). Built programmatically: MJCF text cannot nest more than
    a few hundred bodies (MuJoCo's XML parser limit)."""
    import mujoco

    if nlinks < 1:
        raise ValueError(f"random_chain_spec: nlinks must be >= 1, got {nlinks}")
    scale = min(1.0, 8.0 / nlinks)  # keep long chains a few metres long
    spec = mujoco.MjSpec()
    spec.modelname = "random_chain"
    if not gravity:
        spec.option.gravity = [0.0, 0.0, 0.0]
    parent = spec.worldbody
    for b in range(nlinks):
        pos = rng.uniform(-0.3, 0.3, 3) * scale
        if b > 0:
            pos[2] += 0.25 * scale
        body = parent.add_body(name=f"b{b}", pos=pos, quat=_unit(rng, 4))
        mass = rng.uniform(0.3, 3.0)
        a, c = rng.uniform(0.005, 0.05, size=2)
        d = rng.uniform(abs(a - c) + 1e-3, a + c - 1e-3) if a + c - abs(a - c) > 2e-3 else (a + c) / 2
        body.explicitinertial = True
        body.ipos = rng.uniform(-0.1, 0.1, 3) * scale
        body.iquat = _unit(rng, 4)
        body.mass = mass
        body.inertia = np.array([a, c, d]) * scale
        kind = mujoco.mjtJoint.mjJNT_SLIDE if rng.random() < slide else mujoco.mjtJoint.mjJNT_HINGE
        joint = body.add_joint(name=f"j{b}", type=kind, axis=_unit(rng))
        if kind == mujoco.mjtJoint.mjJNT_HINGE:
            joint.pos = rng.uniform(-0.1, 0.1, 3) * scale
        if armature and rng.random() < 0.7:
            joint.armature = rng.uniform(0.0, 0.1)
        parent = body
    return spec


def random_chain_model(seed: int, nlinks: int, **kwargs):
    """A :class:`dynamics.RobotModel` of a random serial chain (see :func:`random_chain_spec`)."""
    from dynamics import from_mujoco
    rng = np.random.default_rng(seed)
    m = random_chain_spec(rng, nlinks, **kwargs).compile()
    return from_mujoco(m, name=f"random_chain_{nlinks}_{seed}")


def random_state(model, rng: np.random.Generator, batch=()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random ``(q, v, x)`` of shape ``batch + (nq,)``, ``batch + (nv,)``, ``batch + (nv,)``:
    uniform configuration, ``v ~ N(0, 1)``, ``x ~ N(0, 1)`` (an acceleration or a torque)."""
    batch = (batch,) if np.isscalar(batch) else tuple(batch)
    q = model.random_configuration(rng, size=batch)
    return q, rng.normal(size=batch + (model.nv,)), rng.normal(size=batch + (model.nv,))
