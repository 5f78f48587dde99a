"""MJCF of a test quadruped unlike HyQ, for the legged-task tests: a box trunk on a free joint, four
legs of three hinges (abduction x, hip y, knee y), sphere feet with sites ``<leg>_foot`` (the only
robot geoms that collide with the floor; the trunk collides only if it falls), torque motors."""

from __future__ import annotations

#: legs by name -> (sign along x, sign along y) of the hip
LEGS = {"fl": (1, 1), "fr": (1, -1), "hl": (-1, 1), "hr": (-1, -1)}
#: the foot sites, one per leg
FEET = tuple(f"{n}_foot" for n in LEGS)
FLOOR = '<geom name="floor" type="plane" size="5 5 0.1" friction="1.0 0.02 0.01"/>'


def quadruped_mjcf(*, half_length: float = 0.25, half_width: float = 0.12, thigh: float = 0.22, shank: float = 0.24,
                   trunk_mass: float = 10.0, leg_mass: float = 0.8, haa_range: str = "-0.6 0.6",
                   hfe_range: str = "-1.5 1.5", kfe_range: str | None = None, limit: float = 40.0,
                   named_motors: bool = True, foot_geom: bool = True, floor: str = FLOOR, belly: bool = False,
                   keyframes: str = "", feet_as: str = "site") -> str:
    """The quadruped's MJCF text. Lengths [m], masses [kg] (hip and shank ``leg_mass / 2``, thigh
    ``leg_mass``); joint ranges [rad] as MJCF ``range`` strings, ``kfe_range=None``: one-sided knees
    (front [-2.6, -0.6], hind [0.6, 2.6]); motors of ±``limit`` N m, named ``<leg>_<joint>_motor``
    or unnamed; ``foot_geom=False``: no collision geometry at the feet; ``floor``: the floor geom
    ("" for none); ``belly``: a box below the trunk that reaches lower than the feet;
    ``keyframes``: a ``<keyframe>`` element; ``feet_as="geom"``: the feet are named by their sphere
    geoms (as MuJoCo Menagerie's quadrupeds) and there are no foot sites."""
    legs = []
    for name, (sx, sy) in LEGS.items():
        knee = kfe_range or ("-2.6 -0.6" if sx > 0 else "0.6 2.6")
        foot_name = f'name="{name}_foot" ' if feet_as == "geom" else ""
        foot = (f'<geom {foot_name}type="sphere" pos="0 0 -{shank}" size="0.025" mass="0.05" friction="1.0 0.02 0.01"/>'
                if foot_geom else "")
        site = f'<site name="{name}_foot" pos="0 0 -{shank}"/>' if feet_as == "site" else ""
        legs.append(f"""
      <body name="{name}_hip" pos="{sx * half_length} {sy * half_width} 0">
        <joint name="{name}_haa" axis="1 0 0" range="{haa_range}"/>
        <geom type="sphere" size="0.04" mass="{leg_mass / 2}" contype="0" conaffinity="0"/>
        <body name="{name}_thigh" pos="0 {sy * 0.05} 0">
          <joint name="{name}_hfe" axis="0 1 0" range="{hfe_range}"/>
          <geom type="capsule" fromto="0 0 0 0 0 -{thigh}" size="0.025" mass="{leg_mass}" contype="0" conaffinity="0"/>
          <body name="{name}_shank" pos="0 0 -{thigh}">
            <joint name="{name}_kfe" axis="0 1 0" range="{knee}"/>
            <geom type="capsule" fromto="0 0 0 0 0 -{shank}" size="0.02" mass="{leg_mass / 2}" contype="0"
                  conaffinity="0"/>
            {foot}
            {site}
          </body>
        </body>
      </body>""")

    def motor(leg: str, joint: str) -> str:
        name = f'name="{leg}_{joint}_motor" ' if named_motors else ""
        return f'<motor {name}joint="{leg}_{joint}" ctrlrange="-{limit} {limit}" ctrllimited="true"/>'

    motors = "".join(motor(n, j) for n in LEGS for j in ("haa", "hfe", "kfe"))
    belly_geom = (f'<geom name="belly" type="box" pos="0 0 -{thigh + shank + 0.05}" size="0.1 0.05 0.02" '
                  f'mass="0.1"/>' if belly else "")
    return f"""<mujoco model="test_quadruped">
  <compiler angle="radian"/>
  <option timestep="0.001" integrator="implicitfast"/>
  <worldbody>
    {floor}
    <body name="trunk" pos="0 0 {thigh + shank + 0.1}">
      <freejoint/>
      <geom name="trunk_box" type="box" size="{half_length} {half_width} 0.05" mass="{trunk_mass}" contype="0"
            conaffinity="1"/>
      {belly_geom}
      {''.join(legs)}
    </body>
  </worldbody>
  <actuator>{motors}</actuator>
  {keyframes}
</mujoco>"""
