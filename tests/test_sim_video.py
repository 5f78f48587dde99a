"""Offscreen video (sim/video.py): frame sampling, graceful failure without OpenGL, and — where an
OpenGL back-end works (EGL/OSMesa on a headless machine) — that frames are rendered and encoded."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from sim.video import gl_candidates, render_video, sample_frames


def test_sample_frames_picks_steps_at_the_frame_rate():
    t = np.arange(1000) * 1e-3
    idx, times = sample_frames(t, None, fps=10)
    np.testing.assert_allclose(times, np.arange(10) * 0.1)
    np.testing.assert_array_equal(idx, np.arange(10) * 100)
    assert sample_frames(np.zeros(0), None, 30)[0].size == 0


def test_gl_candidates():
    assert gl_candidates({"MUJOCO_GL": "osmesa"}) == ["osmesa"]
    import sys
    if sys.platform.startswith("linux"):
        assert gl_candidates({}) == ["egl", "osmesa"]
        assert gl_candidates({"DISPLAY": ":0"})[0] == "glfw"


def test_missing_opengl_degrades_to_a_message(monkeypatch, tmp_path):
    model = dynamics.load_model("iiwa")
    monkeypatch.setenv("MUJOCO_GL", "no-such-gl-backend")
    out = render_video(model.mj_model, np.tile(model.keyframe("home"), (2, 1)), tmp_path / "v", fps=10, timeout=120)
    assert out.path is None
    assert out.message.startswith("no video") and "no-such-gl-backend" in out.message and "MUJOCO_GL" in out.message


def test_render_when_an_opengl_backend_works(tmp_path, monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    model = dynamics.load_model("iiwa")
    q = np.tile(model.keyframe("home"), (3, 1))
    q[:, 0] = [0.0, 0.3, 0.6]
    out = render_video(model.mj_model, q, tmp_path / "v", fps=10, width=160, height=120, timeout=120,
                       markers=np.tile([0.5, 0.0, 0.5], (3, 1)))
    if out.path is None:
        pytest.skip(f"no OpenGL back-end on this machine: {out.message}")
    assert out.path.exists() and out.path.stat().st_size > 1000 and out.path.suffix in (".mp4", ".gif")
    if out.path.suffix == ".gif":
        from PIL import Image
        with Image.open(out.path) as im:
            assert im.n_frames == 3 and im.size == (160, 120)
