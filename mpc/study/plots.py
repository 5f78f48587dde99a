"""The study's plots (matplotlib: ``pip install 'mpc-accel[plot]'``), one panel per task:

* ``rate_vs_horizon.png`` — control-loop frequency [Hz] against the horizon N, one line per backend
  (and solver / latency when the study has several), median over seeds;
* ``tracking_vs_rate.png`` — the task's tracking error against the control-loop frequency, one
  point per run: does speed buy control quality?
* ``stages.png`` — the median update time [ms] per backend and horizon, stacked by solver stage
  (derivatives, backward, forward, cost, other).

fpga-sim is drawn as simulated: dashed lines and hollow markers, "(simulated)" in the legend, and in
``stages.png`` a hatched "accelerator calls (simulated)" segment under the host's measured rest,
because its per-stage host times are the emulation's, not the accelerator's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from sim.plots import PlotsUnavailable, pyplot
from sim.report import STAGES

STAGE_COLORS = {"derivatives": "#4C72B0", "backward": "#DD8452", "forward": "#55A868", "cost": "#C44E52",
                "other": "#8C8C8C"}


def _simulated(row: dict) -> bool:
    return row.get("timing_source", "measured") != "measured"


def _tasks(rows):
    return list(dict.fromkeys(r["task"] for r in rows))


def _series_key(row: dict, multi_solver: bool, multi_latency: bool) -> str:
    k = row["backend"]
    if multi_solver:
        k += f" / {row['solver']}"
    if multi_latency:
        k += f" / {row['latency']}"
    return k + (" (simulated)" if _simulated(row) else "")


def _series_keys(rows: list[dict]):
    """The series key of a row among ``rows``: :func:`_series_key` naming the solver and the latency
    only where the rows have several."""
    multi_s = len({r["solver"] for r in rows}) > 1
    multi_l = len({r["latency"] for r in rows}) > 1
    return lambda row: _series_key(row, multi_s, multi_l)


def _median(vals) -> float:
    v = [x for x in vals if x is not None]
    return float(np.median(v)) if v else float("nan")


def _plain_ticks(ax, xticks=None, axes: str = "y") -> None:
    """Plain numbers (not 10^k) on the log ``axes`` ("x", "y" or "xy"); xticks: values to mark on x."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter   # optional (the plot extra), as pyplot()
    if xticks:
        ax.set_xticks(xticks, [str(x) for x in xticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
    for axis in [getattr(ax, f"{a}axis") for a in axes]:
        f = ScalarFormatter()
        f.set_scientific(False)
        axis.set_major_formatter(f)
        axis.set_minor_formatter(NullFormatter())


def _axes(plt, n: int, width: float = 5.0):
    fig, axes = plt.subplots(1, n, figsize=(width * n, 4.0), squeeze=False)
    return fig, axes[0]


def _panels(rows: list[dict]):
    """pyplot, a figure with a panel per task of ``rows`` and the (panel, task) pairs."""
    plt = pyplot()
    tasks = _tasks(rows)
    fig, axes = _axes(plt, len(tasks))
    return plt, fig, zip(axes, tasks)


def _label(ax, task: str, xlabel: str, ylabel: str) -> None:
    """A task's panel: axis labels, the task as title, a grid on both axes."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(task)
    ax.grid(True, which="both", alpha=0.3)


def _save(plt, fig, title: str, path: Path, fontsize=None, rect=None) -> Path:
    """Title the figure, lay it out (in ``rect``, default the whole figure), write it to path, close it."""
    fig.suptitle(title, **({} if fontsize is None else {"fontsize": fontsize}))
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_rate_vs_horizon(rows: list[dict], path: Path) -> Path:
    plt, fig, panels = _panels(rows)
    key_of = _series_keys(rows)
    for ax, task in panels:
        series: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
        sim = {}
        for r in rows:
            if r["task"] == task:
                key = key_of(r)
                series[key][r["horizon"]].append(r["control_loop_hz"])
                sim[key] = _simulated(r)
        for key, by_h in series.items():
            hs = sorted(by_h)
            ax.plot(hs, [_median(by_h[h]) for h in hs], "o--" if sim[key] else "o-", label=key,
                    mfc="none" if sim[key] else None)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_ticks(ax, sorted({r["horizon"] for r in rows if r["task"] == task}))
        _label(ax, task, "horizon N [knots]", "control-loop frequency [Hz]")
        ax.legend(fontsize=8)
    return _save(plt, fig, "control-loop frequency vs horizon (median over seeds)", path)


def plot_tracking_vs_rate(rows: list[dict], path: Path) -> Path:
    plt, fig, panels = _panels(rows)
    key_of = _series_keys(rows)
    for ax, task in panels:
        groups: dict[str, list] = defaultdict(list)
        for r in rows:
            if r["task"] == task and r["control_loop_hz"] is not None and r["tracking_error_mean"] is not None:
                groups[key_of(r)].append(r)
        unit = next((r["tracking_unit"] for r in rows if r["task"] == task and r.get("tracking_unit")), "")
        metric = next((r["tracking_metric"] for r in rows if r["task"] == task and r.get("tracking_metric")), "error")
        for i, (key, rs) in enumerate(groups.items()):
            sim = _simulated(rs[0])
            x = [r["control_loop_hz"] for r in rs]
            y = [r["tracking_error_mean"] for r in rs]
            color = f"C{i % 10}"
            ax.scatter(x, y, label=key, marker="o", facecolors="none" if sim else color, edgecolors=color)
            for r in rs:
                ax.annotate(f"N={r['horizon']}", (r["control_loop_hz"], r["tracking_error_mean"]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        hz = [r["control_loop_hz"] for rs in groups.values() for r in rs]
        if hz and min(hz) > 0 and max(hz) / min(hz) > 10:         # log only when it spans a decade
            ax.set_xscale("log")
            _plain_ticks(ax, axes="x")
        errs = [r["tracking_error_mean"] for rs in groups.values() for r in rs]
        if errs and min(errs) > 0 and max(errs) / min(errs) > 10:   # log only when it spans a decade
            ax.set_yscale("log")
        _label(ax, task, "control-loop frequency [Hz]", f"mean {metric}" + (f" [{unit}]" if unit else ""))
        if groups:
            ax.legend(fontsize=8)
    return _save(plt, fig, "tracking error vs control-loop frequency (one point per run)", path)


def plot_stages(rows: list[dict], path: Path) -> Path:
    plt = pyplot()
    tasks = _tasks(rows)
    multi_s = len({r["solver"] for r in rows}) > 1
    width = max(5.0, 0.6 * max(len({(r["backend"], r["solver"], r["horizon"]) for r in rows if r["task"] == t})
                              for t in tasks))
    fig, axes = _axes(plt, len(tasks), width)
    labelled: set = set()
    for ax, task in zip(axes, tasks):
        groups: dict[tuple, list] = defaultdict(list)
        for r in rows:
            if r["task"] == task:
                groups[(r["backend"], r["solver"], r["horizon"])].append(r)
        ticks = []
        for i, ((backend, solver, h), rs) in enumerate(groups.items()):
            sim = _simulated(rs[0])
            bottom = 0.0
            if sim:
                accel = _median(r["accel_simulated_ms"] for r in rs)
                host = max(_median(r["update_ms_median"] for r in rs) - accel, 0.0)
                for val, label, kw in ((accel, "accelerator calls (simulated)", dict(color="white", hatch="///",
                                                                                     edgecolor="#4C72B0")),
                                       (host, "host, rest of the update (measured)", dict(color="#BBBBBB"))):
                    ax.bar(i, val, bottom=bottom, label=None if label in labelled else label, **kw)
                    labelled.add(label)
                    bottom += val
                # the accelerator's share is often too thin to see: say it
                ax.annotate(f"accel {accel:.3g} ms\n(simulated)", (i, bottom), ha="center", va="bottom",
                            fontsize=7, xytext=(0, 12), textcoords="offset points")
            else:
                for st in (*STAGES, "other"):
                    val = _median(r[f"{st}_ms"] for r in rs)
                    ax.bar(i, val, bottom=bottom, color=STAGE_COLORS[st], label=None if st in labelled else st)
                    labelled.add(st)
                    bottom += val
            ax.annotate(f"{bottom:.3g} ms", (i, bottom), ha="center", va="bottom", fontsize=7)
            ticks.append(f"{backend}{'*' if sim else ''}\n{solver + ' ' if multi_s else ''}N={h}")
        ax.set_xticks(range(len(ticks)), ticks, fontsize=8)
        ax.set_ylabel("median update time [ms]")
        ax.margins(y=0.15)
        ax.set_title(task)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 7), fontsize=8)
    note = ("\n* fpga-sim: accelerator calls simulated by its hardware model, the rest of the update measured"
            if any(_simulated(r) for r in rows) else "")
    return _save(plt, fig, "update time per stage (median over updates and seeds)" + note, path, fontsize=10,
                 rect=(0, 0.08, 1, 1))


def write_plots(out: Path, rows: list[dict]) -> list[Path]:
    """All plots of the study into ``out/plots``; raises :class:`sim.plots.PlotsUnavailable` without
    matplotlib. No rows: no plots."""
    if not rows:
        return []
    d = Path(out) / "plots"
    d.mkdir(parents=True, exist_ok=True)
    return [plot_rate_vs_horizon(rows, d / "rate_vs_horizon.png"),
            plot_tracking_vs_rate(rows, d / "tracking_vs_rate.png"),
            plot_stages(rows, d / "stages.png")]


__all__ = ["write_plots", "plot_rate_vs_horizon", "plot_tracking_vs_rate", "plot_stages", "PlotsUnavailable"]
