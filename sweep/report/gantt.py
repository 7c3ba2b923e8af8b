"""Gantt chart of one steady-state iteration from an `explain` document.

The window is the last unrolled iteration, from the previous update's finish
to this one's: exactly `iteration_time` long, the interval the steady-state
time is measured over. Tasks are drawn on their streams (input read,
host-to-device copy, compute, communication); tasks on the critical path are
drawn opaque with a red band under them, the others faded.
"""
from __future__ import annotations

import math
import os

from sweep.report.chrome_trace import STREAMS, used_streams
from sweep.report.files import pyplot, save_figure

KIND_COLORS = {
    "io": "#7f7f7f",
    "h2d": "#8c564b",
    "forward": "#1f77b4",
    "backward": "#ff7f0e",
    "update": "#2ca02c",
    "comm": "#9467bd",
    "gather": "#17becf",
}
CRITICAL_COLOR = "#d62728"
MS = 1e3


def steady_window(doc: dict) -> tuple[float, float, int]:
    """(start, end, iteration) of the last unrolled iteration's steady-state
    window: from the previous iteration's last update to its own (a
    layer-wise update has one per layer, so the last to finish)."""
    done: dict[int, float] = {}
    for t in doc["tasks"]:
        if t["kind"] == "update":
            done[t["iteration"]] = max(done.get(t["iteration"], -math.inf), t["finish"])
    last = max(done)
    return done[last - 1], done[last], last


def plot_gantt(doc: dict, path: str | os.PathLike) -> None:
    """Write the chart to `path` (PNG, SVG or PDF by suffix)."""
    plt = pyplot()
    start, end, iteration = steady_window(doc)
    critical = set(doc["critical_path"])
    rows = list(used_streams(doc))  # top to bottom
    row_of_kind = {kind: i for i, stream in enumerate(rows) for kind in STREAMS[stream][1]}

    shown = [t for t in doc["tasks"] if (t["finish"] > start and t["start"] < end)
             or (t["duration"] == 0 and start <= t["start"] <= end and t["iteration"] == iteration)]
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for kind, color in KIND_COLORS.items():
        for is_critical in (False, True):
            bars = [((t["start"] - start) * MS, t["duration"] * MS) for t in shown
                    if t["kind"] == kind and (t["id"] in critical) == is_critical]
            if not bars:
                continue
            y = row_of_kind[kind]
            ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=color, alpha=1.0 if is_critical else 0.35,
                           edgecolor="white", linewidth=0.2)
            if is_critical:
                ax.broken_barh(bars, (y + 0.36, 0.1), facecolors=CRITICAL_COLOR, linewidth=0)
    if "comm" in row_of_kind:
        _label_large_buckets(ax, shown, start, end, row_of_kind["comm"])
    _note_prefetched_input(ax, doc, start, iteration, row_of_kind)

    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    span = (end - start) * MS
    ax.set_xlim(-0.01 * span, 1.01 * span)
    ax.set_xlabel(f"time since iteration {iteration - 1}'s update finished [ms]")
    ax.set_ylabel("stream")
    ax.grid(axis="x", alpha=0.3)
    c, b = doc["configuration"], doc["breakdown"]
    ax.set_title(f"{doc['model']}: {c['workers']} GPU(s) x batch {c['batch_size']}, {c['strategy']} / "
                 f"{c['algorithm']}\none steady-state iteration {doc['iteration_time'] * MS:.2f} ms, "
                 f"efficiency {100 * b['scaling_efficiency']:.1f} %, bound by {b['bottleneck']}", fontsize=10)
    kinds = [k for k in KIND_COLORS if k in row_of_kind]
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k]) for k in kinds]
    handles.append(plt.Rectangle((0, 0), 1, 1, color=CRITICAL_COLOR))
    ax.legend(handles, [*kinds, "critical path"], ncol=8, fontsize=8,
              loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    save_figure(fig, path)


def _label_large_buckets(ax, shown, start, end, row):
    """Size labels on communication buckets wide enough to hold them."""
    for t in shown:
        if t["kind"] == "comm" and t["duration"] > 0.06 * (end - start):
            middle = (t["start"] + t["duration"] / 2 - start) * MS
            ax.text(middle, row, f"{t['bytes'] / 2**20:.1f} MiB", ha="center", va="center", fontsize=7)


def _note_prefetched_input(ax, doc, start, iteration, row_of_kind):
    """With prefetch the iteration's input was read before the window: say when."""
    for t in doc["tasks"]:
        if t["iteration"] == iteration and t["kind"] in ("io", "h2d") and t["finish"] <= start:
            ax.text(0, row_of_kind[t["kind"]], f"  {t['kind']} of this batch done earlier "
                    f"({(t['start'] - start) * MS:.1f} ms, prefetched)", va="center", fontsize=7)
