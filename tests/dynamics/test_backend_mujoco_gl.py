"""An OpenGL back-end that cannot load (``MUJOCO_GL=osmesa`` without OSMesa) must not take down
commands that do not render: dynamics.model.import_mujoco loads MuJoCo without rendering then.

The failure is made deterministic on any machine by a stand-in ``OpenGL`` package whose ``GL``
raises what PyOpenGL raises when ``libOSMesa`` is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mujoco")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def broken_gl(tmp_path):
    gl = tmp_path / "OpenGL" / "GL"
    gl.mkdir(parents=True)
    (tmp_path / "OpenGL" / "__init__.py").write_text("")
    (gl / "__init__.py").write_text("raise AttributeError(\"'NoneType' object has no attribute 'glGetError'\")\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYOPENGL_PLATFORM",)}
    env.update(MUJOCO_GL="osmesa", PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def _run(args, env):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def test_backends_listing_survives_a_broken_gl_backend(broken_gl):
    r = _run(["-m", "mpc", "backends"], broken_gl)
    assert r.returncode == 0, r.stderr
    assert "numpy" in r.stdout and "available" in r.stdout
    assert "MUJOCO_GL=osmesa could not be loaded" in r.stderr and "glGetError" in r.stderr


def test_models_load_and_simulate_and_the_users_choice_is_kept(broken_gl):
    code = ("import os, warnings; warnings.simplefilter('ignore'); import dynamics, mujoco; "
            "from dynamics import model as dm; m = dynamics.load_model('iiwa'); d = mujoco.MjData(m.mj_model); "
            "mujoco.mj_step(m.mj_model, d); "
            "print(m.nv, os.environ['MUJOCO_GL'], os.environ.get('PYOPENGL_PLATFORM'), 'glGetError' in dm.MUJOCO_GL_ERROR)")
    r = _run(["-c", code], broken_gl)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["7", "osmesa", "None", "True"]


def test_a_working_setting_is_left_alone():
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    env.update(MUJOCO_GL="disable")
    code = "import dynamics.model as dm; print(dm.MUJOCO_GL_ERROR)"
    r = _run(["-W", "error::RuntimeWarning", "-c", code], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None"]
