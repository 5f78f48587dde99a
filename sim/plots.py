"""PNG plots of a closed-loop run (matplotlib, the ``plot`` extra; optional).

Three figures: end-effector (tracking) error over time, actuator forces with their limits, and the
update latency split by solver stage."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .runner import SimResult

STAGE_COLORS = {"derivatives": "tab:blue", "backward": "tab:orange", "forward": "tab:green", "cost": "tab:red",
                "other": "tab:gray"}


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotsUnavailable("plots need matplotlib, which is not installed: pip install 'mpc-accel[plot]' "
                               "(or pip install matplotlib)") from e
    return plt


def plot_tracking(result: SimResult, metrics: dict[str, np.ndarray], path: Path, threshold: float | None = None,
                  target_times: list[float] | None = None, metric: str = "ee_error") -> Path:
    """Tracking error ``metrics[metric]`` (T,) [m] over time, with the success threshold and the
    target switch times."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5), constrained_layout=True)
    err = np.asarray(metrics[metric])
    floor = 1e-3  # cm: log axis; errors below 10 µm are drawn at the floor
    ax.plot(result.t[:len(err)], np.maximum(err * 100.0, floor), lw=1.2, label=f"{metric}")
    if threshold is not None:
        ax.axhline(threshold * 100.0, color="k", ls="--", lw=0.8, label=f"threshold {threshold * 100:g} cm")
    t_end = result.t[-1] if len(result.t) else 1.0
    for ts in target_times or []:
        if ts <= t_end:
            ax.axvline(ts, color="tab:gray", lw=0.6, alpha=0.6)
    ax.set_xlim(0.0, max(t_end, 1e-3))
    ax.set_xlabel("time [s]")
    ax.set_ylabel("distance to target [cm]")
    ax.set_yscale("log")
    ax.set_title(f"tracking error ({result.mode})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_torques(result: SimResult, path: Path) -> Path:
    """Applied actuator forces (and commands before clipping, dotted) with the limits, one panel per actuator."""
    plt = _pyplot()
    m = result.model
    nu = m.nu
    cols = 2 if nu > 3 else 1
    rows = int(np.ceil(nu / cols)) if nu else 1
    fig, axes = plt.subplots(rows, cols, figsize=(9, 1.6 * rows + 0.8), sharex=True, squeeze=False,
                             constrained_layout=True)
    for j in range(rows * cols):
        ax = axes[j // cols][j % cols]
        if j >= nu:
            ax.axis("off")
            continue
        ax.plot(result.t, result.u_cmd[:, j], color="tab:orange", lw=0.8, ls=":", label="command")
        ax.plot(result.t, result.u[:, j], color="tab:blue", lw=1.0, label="applied")
        for lim in (m.u_lower[j], m.u_upper[j]):
            if np.isfinite(lim):
                ax.axhline(lim, color="tab:red", lw=0.8, ls="--")
        ax.set_ylabel(f"{m.actuator_names[j] or j}\n[N m]", fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(loc="upper right", fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("time [s]")
    fig.suptitle("actuator forces (dashed: limits)")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_latency(result: SimResult, path: Path) -> Path:
    """Per-update wall time split by solver stage (stacked), in ms, against the update's sim time."""
    plt = _pyplot()
    ups = result.updates
    fig, ax = plt.subplots(figsize=(8, 3.5), constrained_layout=True)
    if ups:
        t = np.array([u.t_measured for u in ups])
        lat = np.array([u.latency for u in ups]) * 1e3
        bottom = np.zeros(len(ups))
        for stage in ("derivatives", "backward", "forward", "cost"):
            y = np.array([float(u.info.get("timings", {}).get(stage, 0.0)) for u in ups]) * 1e3
            ax.fill_between(t, bottom, bottom + y, step="post", color=STAGE_COLORS[stage], alpha=0.8, lw=0,
                            label=stage)
            bottom = bottom + y
        ax.fill_between(t, bottom, np.maximum(lat, bottom), step="post", color=STAGE_COLORS["other"], alpha=0.5,
                        lw=0, label="other (set-up, warm start)")
        ax.plot(t, lat, color="k", lw=0.6, drawstyle="steps-post", label="update latency")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("update wall time [ms]")
    ax.set_title(f"update latency by stage ({len(ups)} updates)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, ncol=3)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
