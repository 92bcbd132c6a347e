"""Semantics as data: transcripts of inputs and time advances, replayed through a driver.

A transcript is a list of steps::

    ("processing", t_ms)                  advance processing time
    ("add", [(value, event_time_ms), ...])  elements arrive (optionally ("add", elements, key))
    ("retract", [(value, event_time_ms)])   earlier inputs are taken back (uncombine)
    ("watermark", t_ms)                   advance the watermark

:func:`run_transcript` replays it and returns ``(processing_time_ms, pane)`` for every pane in
the order they fired. The same transcripts are meant to run through every executor (this pure
driver, and the Spark operator), so expected panes are written once.

>>> from dataflow_kafka.watermarks import TriggerDriver, AfterCount, Repeatedly
>>> from dataflow_kafka.windowing import Sum, TumblingWindow
>>> d = TriggerDriver(TumblingWindow(10), Repeatedly(AfterCount(2)), "discarding", combiner=Sum())
>>> steps = [("add", [(1, 3), (2, 4)]), ("add", [(5, 6)]), ("watermark", 10)]
>>> [p.brief() for _, p in run_transcript(d, steps)]  # one "add" is one bundle (TriggerDriver.add)
[(0, 10, 3, 'EARLY', 0, 'F'), (0, 10, 5, 'ON_TIME', 1, 'L')]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["run_transcript", "clock"]


def run_transcript(driver: Any, steps: Iterable[Sequence[Any]]) -> list[tuple[int, Any]]:
    """Replay ``steps`` through ``driver``; returns ``(processing_time_ms, pane)`` pairs."""
    out = []
    for step in steps:
        kind, arg = step[0], step[1]
        if kind == "processing":
            panes = driver.advance_processing_time(arg)
        elif kind == "watermark":
            panes = driver.advance_watermark(arg)
        elif kind == "add":
            panes = driver.add(arg, key=step[2] if len(step) > 2 else None)
        elif kind == "retract":
            panes = driver.add_retractions(arg, key=step[2] if len(step) > 2 else None)
        else:
            raise InvalidArgumentError(f"transcript step kind must be processing, add, retract or watermark, got {kind!r}")
        out.extend((driver.processing_time_ms, p) for p in panes)
    return out


def clock(ms: int, origin: str = "12:00:00") -> str:
    """``ms`` after ``origin`` as a wall-clock ``HH:MM:SS`` (for printing the paper's examples)."""
    h, m, s = (int(x) for x in origin.split(":"))
    total = h * 3600 + m * 60 + s + ms // 1000
    return f"{total // 3600 % 24:02d}:{total // 60 % 60:02d}:{total % 60:02d}"
