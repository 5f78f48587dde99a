"""Offscreen video (sim/video.py): frame sampling, the camera path (a floating base stays in frame,
checked with MuJoCo's own camera pose from ``mjv_updateScene``, no OpenGL needed), graceful failure
without OpenGL, and — where an OpenGL back-end works (EGL/OSMesa on a headless machine) — that
frames are rendered and encoded, for an arm and for a quadruped walking out of a fixed view."""

from __future__ import annotations

import numpy as np
import pytest

import dynamics
from sim.video import camera_path, gl_candidates, render_video, sample_frames


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


def _hyq_walk(dx=(0.0, 4.0), dy=(0.0, -2.0)):
    """HyQ's standing keyframe with the trunk carried dx, dy [m] across the floor, (F, nq)."""
    model = dynamics.load_model("hyq")
    q = np.tile(model.keyframe("standing"), (len(dx), 1))
    q[:, 0] += dx
    q[:, 1] += dy
    return model, q


def _in_view(mj_model, qpos, path, frame: int, aspect: float = 4 / 3) -> bool:
    """Whether every body of configuration ``qpos[frame]`` projects inside the image of the
    camera ``path.camera(frame)``: the camera pose from MuJoCo's mjv_updateScene, the frustum
    from the model's vertical field of view and the image aspect ratio."""
    import mujoco
    d = mujoco.MjData(mj_model)
    d.qpos[:] = qpos[frame]
    mujoco.mj_forward(mj_model, d)
    scn = mujoco.MjvScene(mj_model, 2000)
    mujoco.mjv_updateScene(mj_model, d, mujoco.MjvOption(), mujoco.MjvPerturb(), path.camera(frame),
                           mujoco.mjtCatBit.mjCAT_ALL, scn)
    c = scn.camera[0]
    fwd, up = np.asarray(c.forward, float), np.asarray(c.up, float)
    right = np.cross(fwd, up)
    rel = np.asarray(d.xpos[1:]) - np.asarray(c.pos, float)
    depth = rel @ fwd
    half_h = np.tan(np.radians(mj_model.vis.global_.fovy) / 2)
    x, y = (rel @ right) / depth, (rel @ up) / depth
    return bool(np.all(depth > 0) and np.all(np.abs(x) < half_h * aspect) and np.all(np.abs(y) < half_h))


def test_camera_follows_a_floating_base_without_opengl():
    model, q = _hyq_walk(dx=(0.0, 2.0, 4.0), dy=(0.0, -1.0, -2.0))
    mj = model.mj_model
    path = camera_path(mj, q)
    assert path.tracked_body == model.body_id("trunk")
    np.testing.assert_allclose(path.lookat[2] - path.lookat[0], [4.0, -2.0, 0.0], atol=1e-12)
    assert all(_in_view(mj, q, path, f) for f in range(3))
    # a camera that stays where it started loses the robot: the check above can fail
    fixed = camera_path(mj, q[:1])
    fixed.lookat = np.repeat(fixed.lookat, 3, axis=0)
    assert _in_view(mj, q, fixed, 0) and not _in_view(mj, q, fixed, 2)


def test_camera_of_a_fixed_base_arm_stays_put():
    model = dynamics.load_model("iiwa")
    q = np.tile(model.keyframe("home"), (3, 1))
    q[:, 0] = [0.0, 1.0, 2.0]
    path = camera_path(model.mj_model, q)
    assert path.tracked_body is None
    np.testing.assert_array_equal(path.lookat[0], path.lookat[2])
    assert all(_in_view(model.mj_model, q, path, f) for f in range(3))
    with pytest.raises(ValueError, match="frames, nq"):
        camera_path(model.mj_model, q[:, :3])


def _gif_frames(path) -> list[np.ndarray]:
    from PIL import Image
    with Image.open(path) as im:
        out = []
        for i in range(im.n_frames):
            im.seek(i)
            out.append(np.asarray(im.convert("L"), float))
    return out


def test_render_a_floating_base_robot_that_walks_away(tmp_path, monkeypatch):
    """Frame 1 has the trunk 4 m further along. With the tracking camera the picture barely changes
    (same view translated: only the floor's checks shift); with a fixed camera the robot leaves
    the view, so the same comparison changes a lot."""
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    model, q = _hyq_walk(dx=(0.0, 4.0), dy=(0.0, 0.0))
    kw = dict(fps=10, width=160, height=120, timeout=120)
    tracked = render_video(model.mj_model, q, tmp_path / "tracked", **kw)
    if tracked.path is None:
        pytest.skip(f"no OpenGL back-end on this machine: {tracked.message}")
    if tracked.path.suffix != ".gif":
        pytest.skip("frames are read back from GIFs only (an MP4 encoder was found)")
    fixed = render_video(model.mj_model, q, tmp_path / "fixed", track=False, **kw)
    t, f = _gif_frames(tracked.path), _gif_frames(fixed.path)
    assert len(t) == len(f) == 2
    np.testing.assert_array_equal(t[0], f[0])             # same first view
    change_tracked, change_fixed = np.abs(t[1] - t[0]).mean(), np.abs(f[1] - f[0]).mean()
    assert change_tracked < 0.5 * change_fixed, (change_tracked, change_fixed)
