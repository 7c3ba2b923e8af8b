"""The `explain` timeline as Chrome trace events (opens in Perfetto and chrome://tracing).

One complete event (ph "X") per task, times in microseconds. Each stream is a
thread of its own, so events on one track never overlap: io and h2d get
separate tracks because the next batch's read overlaps this batch's copy.
"""
from __future__ import annotations

import json
import os

from sweep.atomic import write_text

# stream name -> (thread id, task kinds on it); the order is the display order.
STREAMS = {
    "input read (io)": (1, ("io",)),
    "host-to-device copy (h2d)": (2, ("h2d",)),
    "compute (forward, backward, update)": (3, ("forward", "backward", "update")),
    "communication (all-reduce, reduce-scatter)": (4, ("comm",)),
    "communication (all-gather)": (5, ("gather",)),  # ZeRO's parameter gathers: a channel of their own
}
THREAD_OF_KIND = {kind: tid for tid, kinds in STREAMS.values() for kind in kinds}
PID = 1
MICROSECONDS = 1e6


def used_streams(doc: dict) -> dict[str, int]:
    """Stream name -> thread id of the streams that carry some task (no
    all-gather stream without ZeRO, no communication on one GPU)."""
    kinds = {t["kind"] for t in doc["tasks"]}
    return {stream: tid for stream, (tid, own) in STREAMS.items() if kinds & set(own)}


def trace_events(doc: dict) -> dict:
    """The Chrome trace document ({"traceEvents": [...], ...}) of an explain document."""
    critical = set(doc["critical_path"])
    c = doc["configuration"]
    process = f"{doc['model']}: {c['workers']} GPU(s), {c['strategy']} / {c['algorithm']}"
    events: list[dict] = [{"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": process}}]
    for stream, tid in used_streams(doc).items():
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": stream}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid, "args": {"sort_index": tid}})
    for task in doc["tasks"]:
        events.append({
            "name": task["name"],
            "cat": task["kind"] + (",critical" if task["id"] in critical else ""),
            "ph": "X",
            "ts": task["start"] * MICROSECONDS,
            "dur": task["duration"] * MICROSECONDS,
            "pid": PID,
            "tid": THREAD_OF_KIND[task["kind"]],
            "args": {
                "id": task["id"],
                "iteration": task["iteration"],
                "layer": task["layer"],
                "layer_name": task.get("layer_name"),
                "bytes": task["bytes"],
                "critical": task["id"] in critical,
            },
        })
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "model": doc["model"],
            "iteration_time_s": doc["iteration_time"],
            "iterations": doc["iterations"],
            **{k: v for k, v in c.items()},
        },
    }


def write_trace(doc: dict, path: str | os.PathLike) -> None:
    write_text(path, json.dumps(trace_events(doc)))
