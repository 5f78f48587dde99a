"""Offscreen video of a run through MuJoCo's renderer (``mujoco.Renderer``), optional.

Rendering needs an OpenGL context. On a headless Linux machine that means EGL or OSMesa, chosen by
the ``MUJOCO_GL`` environment variable *before* MuJoCo is imported; since this process has already
imported MuJoCo, frames are rendered in a child process (``python -m sim.video``) that tries each
candidate in turn (``$MUJOCO_GL`` if set; else ``glfw`` when a display is available, then ``egl``,
then ``osmesa``). A candidate whose library is not installed (:func:`gl_unavailable`) is not
tried: the outcome names what is missing and the fix. A crash or failure there never affects the
run: :func:`render_video` returns a :class:`VideoOutcome` saying what happened. (A ``MUJOCO_GL``
naming a missing library does not stop MuJoCo from loading either: :mod:`dynamics` loads it
without rendering then, so every command that does not render works.)

Camera: a 3/4 view framed on the first configuration; for a floating-base robot (a free joint) the
view translates with the base body so that a walking or drifting robot stays in frame
(:func:`camera_path`, computed without OpenGL).

Encoding: MP4 through ``imageio`` (with its ffmpeg plugin) or an ``ffmpeg`` executable on PATH;
otherwise an animated GIF through Pillow; otherwise no video (neither is a dependency).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np


@dataclass
class VideoOutcome:
    """path: the file written (None when no video could be made); message: what happened and why."""

    path: Path | None
    message: str
    gl_backend: str | None = None


def sample_frames(t: np.ndarray, qpos: np.ndarray, fps: float) -> tuple[np.ndarray, np.ndarray]:
    """Indices into the per-step arrays and frame times for a video at ``fps`` frames per second."""
    if len(t) == 0:
        return np.zeros(0, dtype=int), np.zeros(0)
    times = np.arange(0.0, t[-1] + 1e-12, 1.0 / fps)
    idx = np.clip(np.searchsorted(t, times - 1e-12), 0, len(t) - 1)
    return idx, times


def gl_candidates(env: dict | None = None) -> list[str | None]:
    """OpenGL back-ends to try, in order (None = MuJoCo's platform default)."""
    env = os.environ if env is None else env
    if env.get("MUJOCO_GL"):
        return [env["MUJOCO_GL"]]
    if sys.platform.startswith("linux"):
        cands: list[str | None] = []
        if env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
            cands.append("glfw")
        return cands + ["egl", "osmesa"]
    return [None]


#: what each OpenGL back-end needs on Linux, and how to get it (the fix a failed video names)
GL_NEEDS = {
    "osmesa": ("the OSMesa software renderer (libOSMesa)",
               "install it (Debian/Ubuntu: apt install libosmesa6; Fedora: dnf install mesa-libOSMesa; conda: "
               "conda install -c conda-forge mesalib) or use MUJOCO_GL=egl (a GPU driver with EGL)"),
    "egl": ("EGL (libEGL) with a GPU driver",
            "install it (Debian/Ubuntu: apt install libegl1) or use MUJOCO_GL=osmesa (software rendering, "
            "apt install libosmesa6)"),
    "glfw": ("a display (DISPLAY or WAYLAND_DISPLAY) for a GLFW window",
             "run it where a display is available, or use MUJOCO_GL=egl or MUJOCO_GL=osmesa on a headless machine"),
}
_GL_LIBRARIES = {"osmesa": "OSMesa", "egl": "EGL"}
#: MUJOCO_GL values that switch MuJoCo's rendering off, and those it accepts on Linux
_GL_OFF = ("disable", "disabled", "off", "false", "0")
_GL_LINUX = ("enable", "enabled", "on", "true", "1", "glfw", "glx", "egl", "osmesa")


def _library_loads(name: str) -> bool:
    """Whether the shared library ``lib<name>`` can be loaded (as PyOpenGL loads it: the plain name,
    then versioned names, honouring LD_LIBRARY_PATH)."""
    found = ctypes.util.find_library(name)
    for candidate in ([found] if found else []) + [f"lib{name}.so"] + [f"lib{name}.so.{v}" for v in range(12, -1, -1)]:
        try:
            ctypes.CDLL(candidate)
            return True
        except OSError:
            continue
    return False


def gl_unavailable(gl: str | None, env: dict | None = None) -> str | None:
    """Why MuJoCo's OpenGL back-end ``gl`` (a ``MUJOCO_GL`` value; None: the platform default)
    cannot render here, naming what is missing and the fix; None when it may work (only a render
    tells for sure: a library can load and still find no device). Linux only: elsewhere None."""
    env = os.environ if env is None else env
    if gl is None or not sys.platform.startswith("linux"):
        return None
    key = gl.strip().lower()
    if key in _GL_OFF:
        return f"MUJOCO_GL={gl} switches MuJoCo's rendering off; unset it or use MUJOCO_GL=egl or MUJOCO_GL=osmesa"
    if key not in _GL_LINUX:
        return (f"MUJOCO_GL={gl} is not an OpenGL back-end MuJoCo knows (on Linux: egl, osmesa, glfw); "
                f"use MUJOCO_GL=egl or MUJOCO_GL=osmesa, or unset it to try each")
    if key in ("glfw", "glx") and not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        what, fix = GL_NEEDS["glfw"]
        return f"MUJOCO_GL={gl} needs {what}, and none is set: {fix}"
    lib = _GL_LIBRARIES.get(key)
    if lib is not None:
        what, fix = GL_NEEDS[key]
        if not _library_loads(lib):
            return f"MUJOCO_GL={gl} needs {what}, which is not installed here (lib{lib}.so not found): {fix}"
        if importlib.util.find_spec("OpenGL") is None:
            return f"MUJOCO_GL={gl} needs PyOpenGL, which is not installed: pip install PyOpenGL"
    return None


def video_unavailable(env: dict | None = None) -> str | None:
    """Why none of the back-ends :func:`render_video` would try can render here (what each one
    lacks, and the fix), or None when one may."""
    problems = [gl_unavailable(gl, env) for gl in gl_candidates(env)]
    return "; ".join(problems) if all(problems) else None


@dataclass
class CameraPath:
    """Where MuJoCo's free camera looks in each video frame.

    lookat: (F, 3) world point per frame [m]; distance [m], azimuth and elevation [deg] are fixed
    for the whole video (framed on the first configuration); tracked_body: MuJoCo body id of the
    floating base the camera follows (None: a fixed camera, e.g. a fixed-base arm)."""

    lookat: np.ndarray
    distance: float
    azimuth: float
    elevation: float
    tracked_body: int | None = None

    def camera(self, frame: int):
        """A ``mujoco.MjvCamera`` (free camera) for frame ``frame``."""
        cam = mujoco.MjvCamera()
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.lookat[:] = self.lookat[frame]
        cam.distance, cam.azimuth, cam.elevation = self.distance, self.azimuth, self.elevation
        return cam


def floating_base_body(mj_model) -> int | None:
    """The body the camera should follow: the free-joint body carrying the most mass (the robot's
    trunk rather than a loose object), or None when no body has a free joint."""
    free = [int(mj_model.jnt_bodyid[j]) for j in range(mj_model.njnt)
            if mj_model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    if not free:
        return None
    return max(free, key=lambda b: float(mj_model.body_subtreemass[b]))


def camera_path(mj_model, qpos: np.ndarray, azimuth: float = 135.0, elevation: float = -20.0,
                track: bool = True) -> CameraPath:
    """Camera for a video of configurations ``qpos`` (F, nq), computed without OpenGL.

    Framing: a 3/4 view of the robot's bodies in the first configuration, far enough to see them
    all (MuJoCo's default framing includes the floor plane and sits too far away). A floating-base
    robot walks out of a fixed view, so the look-at point then moves with its base body: frame f
    looks at ``centre_0 + (p_base(f) − p_base(0))`` — the view translates with the robot and keeps
    its orientation and distance (no rotation with the trunk, which would make the floor swing).
    ``track=False`` keeps the first frame's view throughout."""
    qpos = np.asarray(qpos, float)
    if qpos.ndim != 2 or qpos.shape[1] != mj_model.nq:
        raise ValueError(f"camera_path: qpos must have shape (frames, nq={mj_model.nq}), got {qpos.shape}")
    d = mujoco.MjData(mj_model)
    if len(qpos) == 0 or mj_model.nbody < 2:
        cam = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(mj_model, cam)
        return CameraPath(np.tile(np.asarray(cam.lookat, float), (len(qpos), 1)), float(cam.distance),
                          float(cam.azimuth), float(cam.elevation))
    base = floating_base_body(mj_model) if track else None
    base_pos = np.empty((len(qpos), 3))
    for f, q in enumerate(qpos):
        d.qpos[:] = q
        mujoco.mj_kinematics(mj_model, d)
        if f == 0:
            pts = np.asarray(d.xpos[1:])
            lo, hi = pts.min(axis=0), pts.max(axis=0)
            centre = 0.5 * (lo + hi)
            distance = max(1.2, 2.2 * float(np.linalg.norm(hi - lo)))
        if base is None:
            break
        base_pos[f] = d.xpos[base]
    if base is None:
        lookat = np.tile(centre, (len(qpos), 1))
    else:
        lookat = centre + (base_pos - base_pos[0])
    return CameraPath(lookat, distance, float(azimuth), float(elevation), base)


def render_frames(mj_model, qpos: np.ndarray, width: int = 640, height: int = 480,
                  markers: np.ndarray | None = None, track: bool = True) -> list[np.ndarray]:
    """Render one RGB frame (height, width, 3) uint8 per configuration in ``qpos`` (F, nq), in this
    process (needs a working OpenGL context), with the camera of :func:`camera_path` (it follows a
    floating base). markers: optional (F, 3) world points drawn as green spheres (the current target)."""
    width = min(width, int(mj_model.vis.global_.offwidth))
    height = min(height, int(mj_model.vis.global_.offheight))
    d = mujoco.MjData(mj_model)
    frames = []
    path = camera_path(mj_model, qpos, track=track)
    with mujoco.Renderer(mj_model, height, width) as r:
        for f, q in enumerate(qpos):
            d.qpos[:] = q
            mujoco.mj_forward(mj_model, d)
            r.update_scene(d, camera=path.camera(f))
            if markers is not None and np.all(np.isfinite(markers[f])):
                scn = r.scene
                if scn.ngeom < scn.maxgeom:
                    mujoco.mjv_initGeom(scn.geoms[scn.ngeom], mujoco.mjtGeom.mjGEOM_SPHERE,
                                        np.array([0.025, 0, 0]), np.asarray(markers[f], float),
                                        np.eye(3).ravel(), np.array([0.1, 0.9, 0.2, 0.8], np.float32))
                    scn.ngeom += 1
            frames.append(r.render().copy())
    return frames


def write_frames(frames: list[np.ndarray], fps: float, stem: Path) -> Path:
    """Encode frames to ``stem.mp4`` (imageio or ffmpeg) or else ``stem.gif`` (Pillow)."""
    stem = Path(stem)
    try:
        import imageio.v2 as imageio      # optional encoder (MP4)
        path = stem.with_suffix(".mp4")
        imageio.mimsave(path, frames, fps=fps)
        return path
    except Exception:  # imageio missing, or no ffmpeg plugin: try the next encoder
        pass
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg and frames:
        path = stem.with_suffix(".mp4")
        h, w, _ = frames[0].shape
        cmd = [ffmpeg, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
               "-r", f"{fps:g}", "-i", "-", "-pix_fmt", "yuv420p", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", str(path)]
        proc = subprocess.run(cmd, input=b"".join(np.ascontiguousarray(f).tobytes() for f in frames),
                              capture_output=True)
        if proc.returncode == 0:
            return path
    try:
        from PIL import Image             # optional encoder (GIF)
    except ImportError as e:
        raise RuntimeError("no video encoder: install imageio[ffmpeg] (MP4), ffmpeg, or Pillow (GIF)") from e
    path = stem.with_suffix(".gif")
    imgs = [Image.fromarray(f) for f in frames]
    imgs[0].save(path, save_all=True, append_images=imgs[1:], duration=int(round(1000 / fps)), loop=0)
    return path


def render_video(mj_model, qpos: np.ndarray, stem: Path, fps: float = 30.0, markers: np.ndarray | None = None,
                 width: int = 640, height: int = 480, timeout: float = 600.0, track: bool = True) -> VideoOutcome:
    """Render ``qpos`` (F, nq) to ``stem.mp4``/``stem.gif`` in a child process, trying each OpenGL
    back-end of :func:`gl_candidates`; the camera follows a floating base unless ``track=False``
    (:func:`camera_path`). Never raises for a missing OpenGL/encoder: the outcome says."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        mjb = Path(tmp) / "scene.mjb"
        mujoco.mj_saveModel(mj_model, str(mjb), None)
        frames_file = Path(tmp) / "frames.npz"
        np.savez(frames_file, qpos=np.asarray(qpos, float),
                 markers=np.full((len(qpos), 3), np.nan) if markers is None else np.asarray(markers, float))
        pkg_root = str(Path(__file__).resolve().parents[1])
        for gl in gl_candidates():
            missing = gl_unavailable(gl)
            if missing is not None:         # would fail in the child: say what is missing instead
                errors.append(missing)
                continue
            env = dict(os.environ)
            if gl is not None:
                env["MUJOCO_GL"] = gl
                if gl == "osmesa":
                    env.setdefault("PYOPENGL_PLATFORM", "osmesa")
                elif gl == "egl":
                    env.setdefault("PYOPENGL_PLATFORM", "egl")
            env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
            cmd = [sys.executable, "-m", "sim.video", "--mjb", str(mjb), "--frames", str(frames_file),
                   "--out", str(stem), "--fps", str(fps), "--width", str(width), "--height", str(height)] + ([] if track else ["--no-track"])
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                errors.append(f"{gl or 'default'}: timed out after {timeout:g} s")
                continue
            if proc.returncode == 0:
                lines = proc.stdout.strip().splitlines()
                path = Path(lines[-1]) if lines else None
                if path is not None and path.exists():
                    return VideoOutcome(path, f"video written with MUJOCO_GL={gl or 'default'}: {path}", gl)
            last = (proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode])[-1]
            errors.append(f"{gl or 'default'}: {last[:200]}")
    if len(errors) == 1 and os.environ.get("MUJOCO_GL"):      # the user's choice, and what it lacks
        return VideoOutcome(None, f"no video: {errors[0]}; the run itself is unaffected.")
    return VideoOutcome(None, "no video: no OpenGL context could be created for offscreen rendering (tried "
                        + "; ".join(errors) + "). On a headless Linux machine install EGL (libegl1) or OSMesa "
                        "(libosmesa6) and/or set MUJOCO_GL=egl or MUJOCO_GL=osmesa; the run itself is unaffected.")


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.video", description="Render saved configurations (internal helper).")
    p.add_argument("--mjb", required=True)
    p.add_argument("--frames", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--no-track", action="store_true", help="keep the first frame's view (no floating-base tracking)")
    a = p.parse_args(argv)
    m = mujoco.MjModel.from_binary_path(a.mjb)
    data = np.load(a.frames)
    markers = data["markers"]
    frames = render_frames(m, data["qpos"], a.width, a.height, None if np.all(np.isnan(markers)) else markers,
                           track=not a.no_track)
    path = write_frames(frames, a.fps, Path(a.out))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
