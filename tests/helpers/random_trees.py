"""Random kinematic trees as MJCF text, for oracle tests on more than the three bundled robots.

Trees mix hinge, slide and ball joints (optionally a free-floating root), branch at random, and
exercise the MuJoCo features the dynamics layer must map correctly: joint anchors away from the
body origin, several joints in one body, welded (joint-less) bodies, rotated inertia frames,
armature and hinge/slide reference positions. Each feature can be switched off for oracles that
do not support it.
"""

from __future__ import annotations

import numpy as np


def _fmt(x) -> str:
    return " ".join(f"{float(t):.17g}" for t in np.atleast_1d(x))


def _unit(rng, n=3):
    x = rng.normal(size=n)
    return x / np.linalg.norm(x)


def _inertial(rng) -> str:
    mass = rng.uniform(0.3, 3.0)
    # principal moments satisfying the triangle inequality
    a, b = rng.uniform(0.005, 0.05, size=2)
    c = rng.uniform(abs(a - b) + 1e-3, a + b - 1e-3) if a + b - abs(a - b) > 2e-3 else (a + b) / 2
    return (f'<inertial pos="{_fmt(rng.uniform(-0.1, 0.1, 3))}" quat="{_fmt(_unit(rng, 4))}" '
            f'mass="{mass:.17g}" diaginertia="{_fmt([a, b, c])}"/>')


def random_tree_mjcf(rng: np.random.Generator, nbodies: int = 12, *, free_root: bool = False,
                     ball: bool = True, slide: bool = True, multi_joint: bool = True,
                     welded: bool = True, anchors: bool = True, armature: bool = True,
                     refs: bool = False, branching: float = 0.5) -> str:
    """MJCF text of a random tree with ``nbodies`` bodies below the world.

    branching: probability that a body attaches to a random earlier body instead of the last one.
    """
    parents = [-1]
    for b in range(1, nbodies):
        parents.append(int(rng.integers(0, b)) if rng.random() < branching else b - 1)
    children: dict[int, list[int]] = {b: [] for b in range(nbodies)}
    for b, p in enumerate(parents):
        if p >= 0:
            children[p].append(b)

    def joint_xml(b: int, k: int, kind: str) -> str:
        name = f"j{b}_{k}"
        attrs = f'name="{name}" type="{kind}"'
        if kind in ("hinge", "slide"):
            attrs += f' axis="{_fmt(_unit(rng))}"'
            if kind == "hinge":
                attrs += ' range="-2.5 2.5"' if rng.random() < 0.5 else ""
            else:
                attrs += ' range="-0.5 0.5"'
            if refs and rng.random() < 0.5:
                attrs += f' ref="{rng.uniform(-0.3, 0.3):.17g}"'
        if anchors and kind in ("hinge", "ball"):
            attrs += f' pos="{_fmt(rng.uniform(-0.1, 0.1, 3))}"'
        if armature and rng.random() < 0.7:
            attrs += f' armature="{rng.uniform(0.0, 0.05):.17g}"'
        return f"<joint {attrs}/>"

    def body_xml(b: int, depth: int) -> str:
        ind = "  " * (depth + 2)
        pos = rng.uniform(-0.3, 0.3, 3)
        lines = [f'{ind}<body name="b{b}" pos="{_fmt(pos)}" quat="{_fmt(_unit(rng, 4))}">', f"{ind}  {_inertial(rng)}"]
        if b == 0 and free_root:
            lines.append(f'{ind}  <freejoint name="root"/>')
        else:
            r = rng.random()
            kinds: list[str]
            if welded and b > 0 and r < 0.1:
                kinds = []
            elif multi_joint and r < 0.25:
                kinds = ["hinge", "slide" if slide and rng.random() < 0.5 else "hinge"]
            elif ball and r < 0.45:
                kinds = ["ball"]
            elif slide and r < 0.55:
                kinds = ["slide"]
            else:
                kinds = ["hinge"]
            lines += [f"{ind}  {joint_xml(b, k, kind)}" for k, kind in enumerate(kinds)]
        lines.append(f'{ind}  <site name="s{b}" pos="{_fmt(rng.uniform(-0.1, 0.1, 3))}" quat="{_fmt(_unit(rng, 4))}"/>')
        for c in children[b]:
            lines.append(body_xml(c, depth + 1))
        lines.append(f"{ind}</body>")
        return "\n".join(lines)

    return ("<mujoco model=\"random_tree\">\n  <compiler angle=\"radian\" autolimits=\"true\"/>\n"
            "  <worldbody>\n" + body_xml(0, 0) + "\n  </worldbody>\n</mujoco>\n")


def random_tree_model(seed: int, nbodies: int = 12, **kwargs):
    """``(RobotModel, mujoco.MjModel)`` for a random tree (see :func:`random_tree_mjcf`)."""
    import mujoco

    from dynamics import from_mujoco
    rng = np.random.default_rng(seed)
    xml = random_tree_mjcf(rng, nbodies, **kwargs)
    m = mujoco.MjModel.from_xml_string(xml)
    return from_mujoco(m, name=f"random_tree_{seed}"), m


def random_passive_tree_model(seed: int, nbodies: int, *, name: str, **kwargs):
    """RobotModel of a random tree (:func:`random_tree_mjcf` with hinge/slide ``ref``, ``kwargs``
    passed on) in which every hinge/slide joint gets random damping, stiffness and spring reference,
    and every other hinge/slide joint a motor with a random gear (so B ≠ I and nu < nv)."""
    import re

    import mujoco

    from dynamics import from_mujoco
    rng = np.random.default_rng(seed)
    xml = random_tree_mjcf(rng, nbodies, refs=True, **kwargs)
    scalar = re.findall(r'<joint name="(j\d+_\d+)" type="(?:hinge|slide)"', xml)
    xml = re.sub(r'<joint name="j\d+_\d+" type="(?:hinge|slide)"',
                 lambda mt: mt.group(0) + f' damping="{rng.uniform(0.05, 0.5):.6g}" stiffness='
                 f'"{rng.uniform(0.5, 5.0):.6g}" springref="{rng.uniform(-0.3, 0.3):.6g}"', xml)
    motors = "".join(f'<motor joint="{j}" gear="{rng.uniform(0.5, 2):.6g}"/>' for j in scalar[::2])
    xml = xml.replace("</mujoco>", f"<actuator>{motors}</actuator>\n</mujoco>")
    return from_mujoco(mujoco.MjModel.from_xml_string(xml), name=name)
