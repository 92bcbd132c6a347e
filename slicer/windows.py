"""The slicer's context-free windows: runtime edges and slicer-only types (Scotty §4.3, §4.4, §5.4.2).

Users write the shared definitions of :mod:`windowing` (``TumblingWindow``, ``SlidingWindow``,
``SessionWindow``, ``GlobalWindow``); the operator compiles them (:func:`slicer.compile.compile_window`)
into runtime windows that it asks for *window edges* (where slices must be cut) and for the
windows that ended between two watermarks. Conventions, for every window type:

* A window ``[start, end)`` contains the records with ``start <= t < end``: ``start``
  inclusive, ``end`` exclusive. ``t`` is the event time in integer milliseconds for the time
  measure, and the record's position in event-time order (ties by arrival, 0-based) for the
  count measure (``measure="count"``).
* A time window is emitted by the first watermark ``w`` with ``end <= w``; a count window
  once ``end`` records with event time below the watermark exist.

Slicer-only context-free windows: :class:`FixedBandWindow`, and user-defined subclasses of
:class:`ContextFreeWindow` (set ``measure = "count"`` for the count measure); context-aware ones
live in :mod:`slicer.context_windows`.

The engine asks a runtime window what it is through class attributes, never its concrete type
(:class:`ContextFreeWindow` and :class:`~slicer.context_windows.ContextAwareWindow` declare the
defaults): ``context_free``, ``periodic`` (``size``, ``slide``, ``offset`` of a grid that the
engine vectorises over all such queries), ``measure``, ``session_gap`` (sessions: their gap, else
0), and, for context-aware windows, what the decision tree (:mod:`slicer.decision`) and the
coverage of a query added at runtime (:mod:`slicer.coverage`) need.

Example
-------
>>> PeriodicWindow(Measure.TIME, size=1000, slide=1000).next_edge(1500)
2000
>>> PeriodicWindow(Measure.TIME, 1000, 250).windows_ending_between(0, 500)
(array([-750, -500]), array([250, 500]))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.windowing.windows import Measure, scotty_args

__all__ = ["TIME", "COUNT", "ContextFreeWindow", "PeriodicWindow", "FixedBandWindow", "measure_of"]

#: The measures (:class:`~windowing.Measure`), as the slicer's engine compares them (``is``).
TIME = Measure.TIME
COUNT = Measure.COUNT


def measure_of(window: object) -> Measure:
    """The measure of a runtime window (``measure`` attribute, ``"time"`` when absent)."""
    return Measure.parse(getattr(window, "measure", TIME))


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InvalidArgumentError(f"{name}={value!r}: expected a positive integer")
    return int(value)


class ContextFreeWindow:
    """All edges known a priori (section 4.4). Subclass for a user-defined CF window.

    Implement ``next_edge`` (the ``getNextEdge`` of section 5.4.2), ``windows_ending_between``
    (``triggerWin``) and ``earliest_open_start``; a ``measure`` attribute ``"count"`` makes
    the bounds record positions (default: time). Built-ins also expose ``progressions()`` - arithmetic progressions
    ``(period, offset)`` of their edges - so the stream slicer can fuse them (section 7.3.2) and
    generate edges without a Python loop.
    """

    #: Every edge known a priori: no context per query.
    context_free = True
    #: Windows ``[k*slide + offset, k*slide + offset + size)`` (attributes ``size``, ``slide``,
    #: ``offset``): the window manager handles all such queries of a measure in one numpy pass.
    periodic = False
    #: The gap of a session window (0: not a session).
    session_gap = 0

    def next_edge(self, ts: int) -> int:
        """The smallest window edge (start or end) strictly after ``ts``."""
        raise NotImplementedError

    def windows_ending_between(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of all windows with ``lo < end <= hi``."""
        raise NotImplementedError

    def earliest_open_start(self, horizon: int) -> int:
        """The smallest start of any window with ``end > horizon`` (for eviction)."""
        raise NotImplementedError

    def progressions(self) -> list[tuple[int, int]] | None:
        return None

    def points(self) -> list[int]:
        return []

    def edges_between(self, lo: int, hi: int) -> np.ndarray:
        """All edges ``e`` with ``lo < e <= hi`` (generic loop over ``next_edge``)."""
        out, e = [], self.next_edge(lo)
        while e <= hi:
            out.append(e)
            e = self.next_edge(e)
        return np.asarray(out, np.int64)


@dataclass(frozen=True)
class PeriodicWindow(ContextFreeWindow):
    """Runtime of tumbling and sliding windows: ``[k*slide + offset, k*slide + offset + size)``
    for every integer ``k``."""

    measure: Measure
    size: int
    slide: int
    offset: int = 0
    periodic = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "measure", Measure.parse(self.measure))
        _positive_int("size", self.size)
        _positive_int("slide", self.slide)
        if not isinstance(self.offset, (int, np.integer)):
            raise InvalidArgumentError(f"offset={self.offset!r}: expected an integer")

    def progressions(self):
        return [(self.slide, self.offset % self.slide), (self.slide, (self.offset + self.size) % self.slide)]

    def next_edge(self, ts):
        return int(min(_next_in(p, o, ts) for p, o in self.progressions()))

    def windows_ending_between(self, lo, hi):
        first = _next_in(self.slide, (self.offset + self.size) % self.slide, lo)
        ends = np.arange(first, hi + 1, self.slide, dtype=np.int64)
        return ends - self.size, ends

    def earliest_open_start(self, horizon):
        return int(_next_in(self.slide, self.offset % self.slide, horizon - self.size))


@dataclass(frozen=True, init=False)
class FixedBandWindow(ContextFreeWindow):
    """One window ``[start_ms, start_ms + size_ms)`` (a fixed band, e.g. a business day).

    Slicer only. With ``measure=Measure.COUNT`` (or ``"count"``) the bounds are record positions.
    Scotty's measure-first shape is :func:`dataflow_kafka.compat.scotty.FixedBandWindow`.

    >>> FixedBandWindow(10, 5, measure=Measure.COUNT)
    FixedBandWindow(start_ms=10, size_ms=5, measure='count')
    """

    start_ms: int
    size_ms: int
    measure: Measure

    def __init__(self, *args: Any, measure: "Measure | str" = "time", **kwargs: Any) -> None:
        args, measure = scotty_args("FixedBandWindow", args, measure)     # deprecated: (measure, start, size)
        self._init(*args, measure=measure, **kwargs)

    def _init(self, start_ms: int, size_ms: int, *, measure: "Measure | str" = "time") -> None:
        if isinstance(start_ms, bool) or not isinstance(start_ms, (int, np.integer)):
            raise InvalidArgumentError(f"FixedBandWindow: start_ms={start_ms!r}: expected an integer")
        object.__setattr__(self, "start_ms", int(start_ms))
        object.__setattr__(self, "size_ms", _positive_int("FixedBandWindow: size_ms", size_ms))
        object.__setattr__(self, "measure", Measure.parse(measure))

    def __repr__(self) -> str:
        extra = ", measure='count'" if self.measure is COUNT else ""
        return f"FixedBandWindow(start_ms={self.start_ms}, size_ms={self.size_ms}{extra})"

    def points(self):
        return [self.start_ms, self.start_ms + self.size_ms]

    def next_edge(self, ts):
        later = [p for p in self.points() if p > ts]
        return min(later) if later else np.iinfo(np.int64).max

    def windows_ending_between(self, lo, hi):
        end = self.start_ms + self.size_ms
        hit = lo < end <= hi
        return (np.array([self.start_ms] if hit else [], np.int64), np.array([end] if hit else [], np.int64))

    def earliest_open_start(self, horizon):
        return self.start_ms if self.start_ms + self.size_ms > horizon else np.iinfo(np.int64).max


def progression_points(periods: np.ndarray, offsets: np.ndarray, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """All ``e = offsets[i] (mod periods[i])`` with ``lo < e <= hi`` (``lo``/``hi`` scalars or
    per-progression arrays), as (progression index, e) - vectorised over progressions."""
    first = lo + 1 + (offsets - lo - 1) % periods
    n = np.maximum((hi - first) // periods + 1, 0)
    total = int(n.sum())
    grp = np.repeat(np.arange(n.size), n)
    k = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
    return grp, (np.broadcast_to(first, n.shape)[grp] + k * periods[grp]).astype(np.int64)


def _next_in(period: int, offset: int, ts) -> int:
    """Smallest ``e > ts`` with ``e = offset (mod period)``."""
    return ts + 1 + ((offset - ts - 1) % period)
