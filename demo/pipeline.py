"""The demo's pipeline (``python -m demo``), importable by jobs and tests: per user sessions
(optimistic, FlameStream) -> per page windows (slicer, Scotty) -> per page panes (Dataflow Model).

``early_panes_ms``: the panes stage's early trigger in processing time (the demo's 2 s); ``None``
leaves it out, so that every output row is a function of the records and the offset log's batch
split alone (the fault tests compare such a run with a local run of the same micro-batches).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

GAP_MS = 300
COMMANDS = [{"op": "add_window", "stage": "page_windows", "id": "20s",
             "window": {"type": "sliding", "size_ms": 20_000, "slide_ms": 4_000}},
            {"op": "add_window", "stage": "panes", "id": "30s",
             "window": {"type": "sliding", "size_ms": 30_000, "slide_ms": 5_000}}]


# -- the pipeline's functions (module level: pickled to the executors) ----------------------------

def user_of(click: dict) -> str:
    return click["user"]


def sessionise(state: tuple | None, click: dict) -> tuple[tuple, list]:
    """Per user, in event-time order: ``(session start, last click time, clicks)``; each click
    comes out with its session's start and its depth in the session."""
    ts = click["ts"]
    if state is None or ts - state[1] > GAP_MS:
        state = (ts, ts, 1)
    else:
        state = (state[0], ts, state[2] + 1)
    return state, [(click["user"], click["page"], state[0], state[2])]


def session_columns(out: tuple) -> dict:
    user, page, start, depth = out
    return {"user": user, "page": page, "session_start_ms": start, "depth": depth}


def pipeline(early_panes_ms: int | None = 2_000):
    """sessions -> page_windows -> panes, emitting the page_windows results beside the panes."""
    from dataflow_kafka.keygroups import Pipeline
    from dataflow_kafka.optimistic import StatefulMap
    from dataflow_kafka.optimistic.stage import OptimisticStage
    from dataflow_kafka.slicer.stage import SlicerStage
    from dataflow_kafka.watermarks import AfterCount, AfterProcessingTime, AfterWatermark
    from dataflow_kafka.watermarks.stage import WindowingStage
    from dataflow_kafka.windowing import Count, Mean, SlidingWindow, Sum, TumblingWindow

    sessions = OptimisticStage(stage=StatefulMap(sessionise, key=user_of, initial=None), num_key_groups=2,
                               output=session_columns, output_key=("user",), name="sessions",
                               output_schema=(("user", "string"), ("page", "string"),
                                              ("session_start_ms", "bigint"), ("depth", "bigint")))
    windows = SlicerStage(key="page", value="depth", aggregations=[Count(), Mean()], allowed_lateness_ms=2_000,
                          windows={"5s": TumblingWindow(5_000), "10s": SlidingWindow(10_000, 2_000),
                                   "30s": SlidingWindow(30_000, 5_000)},
                          num_key_groups=2, name="page_windows")
    panes = WindowingStage(key="page", value="count", select={"query_id": "5s"}, windows=TumblingWindow(15_000),
                           trigger=AfterWatermark(early=None if early_panes_ms is None else
                                                  AfterProcessingTime(early_panes_ms), late=AfterCount(1)),
                           accumulation_mode="accumulating", allowed_lateness_ms=5_000, aggregations=[Sum()],
                           num_key_groups=2, name="panes")
    return Pipeline([sessions, windows, panes]).emit("page_windows")


def package_zip(folder: Path) -> Path:
    """``demo`` as a zip in ``folder``, for ``spark.submit.pyFiles`` (``--py-files``): executors on
    a cluster import the pipeline's functions from it (the library itself is installed there)."""
    out = folder / "demo.zip"
    with zipfile.ZipFile(out, "w") as z:
        for f in sorted(Path(__file__).parent.glob("*.py")):
            z.write(f, f"demo/{f.name}")
    return out
