"""Scotty's names (``de.tub.dima.scotty.core.windowType``): ``WindowMeasure`` and the
measure-first window constructors, building dataflow-kafka's windows.

Scotty writes ``new TumblingWindow(WindowMeasure.Time, 5000)``; dataflow-kafka writes
``TumblingWindow(5_000)`` (``measure=Measure.COUNT`` for count windows). These constructors take
Scotty's argument order and return the canonical windows; :class:`WindowMeasure`'s members are
:class:`~windowing.Measure`'s.

>>> import dataflow_kafka as dk
>>> TumblingWindow(WindowMeasure.Time, 5_000) == dk.TumblingWindow(5_000)
True
>>> SlidingWindow(WindowMeasure.Count, 10, 5), WindowMeasure.Time is dk.Measure.TIME
(SlidingWindow(size_ms=10, slide_ms=5, offset_ms=0, measure='count'), True)
"""

from __future__ import annotations

from dataflow_kafka import windowing
from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.slicer import windows as slicer_windows
from dataflow_kafka.windowing.windows import Measure

__all__ = ["WindowMeasure", "TumblingWindow", "SlidingWindow", "SessionWindow", "FixedBandWindow"]


class WindowMeasure:
    """Scotty's ``WindowMeasure``: ``Time`` and ``Count`` are :class:`~windowing.Measure`'s members."""

    Time = Measure.TIME
    Count = Measure.COUNT


def TumblingWindow(measure: Measure | str, size: int) -> windowing.TumblingWindow:  # noqa: N802 - Scotty's name
    """Scotty's ``TumblingWindow(measure, size)``."""
    return windowing.TumblingWindow(size, measure=Measure.parse(measure))


def SlidingWindow(measure: Measure | str, size: int, slide: int) -> windowing.SlidingWindow:  # noqa: N802
    """Scotty's ``SlidingWindow(measure, size, slide)``."""
    return windowing.SlidingWindow(size, slide, measure=Measure.parse(measure))


def SessionWindow(measure: Measure | str, gap: int) -> windowing.SessionWindow:  # noqa: N802 - Scotty's name
    """Scotty's ``SessionWindow(measure, gap)`` (time only)."""
    if Measure.parse(measure) is not Measure.TIME:
        raise InvalidArgumentError(f"SessionWindow: measure={measure!r}: sessions are time windows only")
    return windowing.SessionWindow(gap)


def FixedBandWindow(measure: Measure | str, start: int, size: int) -> slicer_windows.FixedBandWindow:  # noqa: N802
    """Scotty's ``FixedBandWindow(measure, start, size)`` (the slicer's)."""
    return slicer_windows.FixedBandWindow(start, size, measure=Measure.parse(measure))
