"""Interactive viewing of a run with ``mujoco.viewer.launch_passive`` (needs a display)."""

from __future__ import annotations

import os
import sys
import time


class ViewerUnavailable(RuntimeError):
    """No display (or no windowing support) for the interactive viewer."""


def check_display() -> None:
    """Raise :class:`ViewerUnavailable` with the fix when no viewer window can be opened."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise ViewerUnavailable("--viewer needs a display, but neither DISPLAY nor WAYLAND_DISPLAY is set "
                                "(headless machine?); use --video to render offscreen instead")


class PassiveViewer:
    """A step callback for :func:`sim.runner.simulate` that shows the simulation in a window,
    synced about ``fps`` times per simulated second and slowed to at most real time when ``realtime``."""

    def __init__(self, mj_model, fps: float = 60.0, realtime: bool = True):
        check_display()
        self._every_t = 1.0 / fps
        self._realtime = realtime
        self._next = 0.0
        self._handle = None
        self._wall0 = None
        self._m = mj_model

    def __call__(self, step: int, t: float, data) -> None:
        if self._handle is None:
            try:
                import mujoco.viewer     # loads GLFW: only when a window is opened
                self._handle = mujoco.viewer.launch_passive(self._m, data)
            except Exception as e:  # e.g. GLFW cannot open a window, or macOS without mjpython
                raise ViewerUnavailable(f"could not open the MuJoCo viewer: {type(e).__name__}: {e}") from e
            self._wall0 = time.perf_counter()
        if t + 1e-12 < self._next:
            return
        self._next = t + self._every_t
        if not self._handle.is_running():
            return
        if self._realtime:
            ahead = t - (time.perf_counter() - self._wall0)
            if ahead > 0:
                time.sleep(ahead)
        self._handle.sync()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
