"""Rendering never breaks what does not render: with ``MUJOCO_GL`` naming an OpenGL back-end that
cannot load here (OSMesa not installed, or a value MuJoCo does not know), importing the packages,
``mpc-accel backends`` and ``mpc-accel run`` work, and ``--video`` says what is missing (which
back-end, what to install, which ``MUJOCO_GL`` to use) and the run goes on without video.

The commands run in subprocesses, since ``MUJOCO_GL`` is read when MuJoCo is first imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim import video
from sim.video import gl_unavailable, video_unavailable

ROOT = Path(__file__).resolve().parents[2]

OSMESA_MISSING = gl_unavailable("osmesa") is not None
#: MUJOCO_GL values that make a plain ``import mujoco`` fail on this machine
BROKEN_GL = [pytest.param("osmesa", marks=pytest.mark.skipif(
                 not OSMESA_MISSING, reason="OSMesa is installed here: MUJOCO_GL=osmesa loads")),
             "no-such-gl-backend"]


def _command(args: list[str], gl: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MUJOCO_GL=gl, PYTHONPATH=str(ROOT))
    env.pop("PYOPENGL_PLATFORM", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_reproduction_fails_without_the_fallback(tmp_path):
    """The premise: MuJoCo itself cannot be imported with such a MUJOCO_GL (were it importable, the
    tests below would not exercise the fallback)."""
    r = _command(["-c", "import mujoco"], "no-such-gl-backend", tmp_path)
    assert r.returncode != 0 and "MUJOCO_GL" in r.stderr


@pytest.mark.parametrize("gl", BROKEN_GL)
def test_packages_import_and_backends_lists(tmp_path, gl):
    r = _command(["-c", "import sim, sim.video, sim.viewer, tasks, mpc, mpc.cli"], gl, tmp_path)
    assert r.returncode == 0, r.stderr
    r = _command(["-m", "mpc", "backends"], gl, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "numpy" in r.stdout and "default:" in r.stdout


@pytest.mark.parametrize("gl", BROKEN_GL)
def test_run_with_video_names_what_is_missing_and_goes_on(tmp_path, gl):
    out = tmp_path / "run"
    r = _command(["-m", "mpc", "run", "iiwa-reach", "--backend", "numpy", "--horizon", "8", "--dt", "0.02",
                  "--initial-iterations", "5", "--duration", "0.1", "--video", "--out", str(out)], gl, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] and (out / "trajectory.npz").is_file()
    assert not list(out.glob("video.*"))
    note = next(n for n in summary["notes"] if n.startswith("no video"))
    assert f"MUJOCO_GL={gl}" in note and "the run itself is unaffected" in note
    if gl == "osmesa":
        assert "OSMesa" in note and "libosmesa6" in note and "MUJOCO_GL=egl" in note
    else:
        assert "not an OpenGL back-end" in note and "MUJOCO_GL=egl" in note
    assert f"note: {note}" in r.stdout
    # said before the run too, so a long run does not end in a surprise
    assert "--video: no video will be made" in r.stderr and "rendering video" not in r.stderr


def test_each_missing_piece_is_named_with_its_fix(monkeypatch):
    monkeypatch.setattr(video.sys, "platform", "linux")
    monkeypatch.setattr(video, "_library_loads", lambda name: False)
    osmesa = gl_unavailable("osmesa")
    assert "libOSMesa" in osmesa and "apt install libosmesa6" in osmesa and "MUJOCO_GL=egl" in osmesa
    egl = gl_unavailable("egl")
    assert "libEGL" in egl and "apt install libegl1" in egl and "MUJOCO_GL=osmesa" in egl
    glfw = gl_unavailable("glfw", env={})
    assert "display" in glfw and "MUJOCO_GL=egl" in glfw
    assert gl_unavailable("glfw", env={"DISPLAY": ":0"}) is None
    assert "switches MuJoCo's rendering off" in gl_unavailable("disable")
    # with MUJOCO_GL unset every candidate is tried; the video is unavailable only when all lack something
    both = video_unavailable({})
    assert "libOSMesa" in both and "libEGL" in both
    monkeypatch.setattr(video, "_library_loads", lambda name: name == "EGL")
    assert video_unavailable({}) is None
    assert gl_unavailable("egl") is None
