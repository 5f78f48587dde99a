"""PNG plots of a closed-loop run (matplotlib, the ``plot`` extra; optional).

Three figures: the task's metrics over time (one panel each, with the thresholds and events the
task declares through ``metric_info``/``events``), actuator forces with their limits, and the
update latency split by solver stage. Nothing here knows a particular task."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .runner import SimResult

STAGE_COLORS = {"derivatives": "tab:blue", "backward": "tab:orange", "forward": "tab:green", "cost": "tab:red",
                "other": "tab:gray"}


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed."""


def pyplot():
    """matplotlib's ``pyplot`` on the file-only Agg back-end; :class:`PlotsUnavailable` without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotsUnavailable("plots need matplotlib, which is not installed: pip install 'mpc-accel[plot]' "
                               "(or pip install matplotlib)") from e
    return plt


def _events(ax, events, t_end: float, label: bool) -> None:
    for ev in events or ():
        if 0.0 <= ev.t <= t_end:
            ax.axvline(ev.t, color="tab:gray", lw=0.6, alpha=0.6)
            if label and ev.label:
                ax.annotate(ev.label, (ev.t, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                            textcoords="offset points", fontsize=7, color="tab:gray", va="top")


def plot_metrics(result: SimResult, metrics: dict[str, np.ndarray], path: Path, info: dict | None = None,
                 events=()) -> Path:
    """Each metric trace ``metrics[name]`` (T,) over time, one panel per metric; ``info``:
    name -> :class:`tasks.MetricInfo` (unit, threshold line, log scale, ``plot=False`` to skip);
    ``events``: :class:`tasks.Event` list drawn as labelled vertical lines."""
    plt = pyplot()
    info = info or {}
    names = [k for k in metrics if getattr(info.get(k), "plot", True)]
    t_end = float(result.t[-1]) if len(result.t) else 1.0
    fig, axes = plt.subplots(max(len(names), 1), 1, figsize=(8, 1.2 + 2.3 * max(len(names), 1)), sharex=True,
                             squeeze=False, constrained_layout=True)
    for ax, name in zip(axes[:, 0], names):
        mi = info.get(name)
        y = np.asarray(metrics[name], float)
        unit = getattr(mi, "unit", "")
        log = bool(getattr(mi, "log", False))
        if log:
            pos = y[np.isfinite(y) & (y > 0)]
            floor = max(float(pos.min()), 1e-12) if pos.size else 1e-12
            y = np.maximum(y, floor)   # zeros drawn at the smallest positive value
        ax.plot(result.t[:len(y)], y, lw=1.2, label=name)
        thr = getattr(mi, "threshold", None)
        if thr is not None:
            ax.axhline(thr, color="k", ls="--", lw=0.8, label=f"threshold {thr:g}{' ' + unit if unit else ''}")
        _events(ax, events, t_end, label=ax is axes[0, 0])
        if log:
            ax.set_yscale("log")
        lab = getattr(mi, "label", "") or name
        ax.set_ylabel(f"{lab}" + (f" [{unit}]" if unit else ""), fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=7)
    if not names:
        axes[0, 0].text(0.5, 0.5, "the task reports no metrics", ha="center", va="center",
                        transform=axes[0, 0].transAxes)
    axes[0, 0].set_xlim(0.0, max(t_end, 1e-3))
    axes[-1, 0].set_xlabel("time [s]")
    axes[0, 0].set_title(f"task metrics ({result.mode})")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_torques(result: SimResult, path: Path, events=()) -> Path:
    """Applied actuator forces (and the controller's commands, dotted) with the limits, one panel
    per actuator; ``events`` (:class:`tasks.Event`) drawn as vertical lines."""
    plt = pyplot()
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
        _events(ax, events, float(result.t[-1]) if len(result.t) else 1.0, label=False)
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
    plt = pyplot()
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
