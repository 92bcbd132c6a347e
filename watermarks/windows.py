"""Windowing: *where* in event time elements are grouped (Dataflow Model, section 2.2).

The model splits windowing into two operations (the Dataflow Model, Akidau et al., VLDB 2015, §2.2
Windowing):

* ``AssignWindows(datum) -> Set<Window>`` puts every element into zero or more windows; the
  element is conceptually copied into each of them (§2.2.1).
* ``MergeWindows(Set<Window>) -> merges`` runs at grouping time and lets data-driven windows
  such as sessions grow as data arrive (§2.2.2): two session windows that overlap become one.

Users write the shared definitions of :mod:`windowing` (``TumblingWindow``, ``SlidingWindow``,
``SessionWindow``, ``GlobalWindow``); :func:`compile_window_fn` turns them into a window function, the runtime
with exactly those two methods: ``assign_windows(timestamp_ms)`` and ``merge_windows(windows)``.
The ``TriggerDriver`` performs the *GroupAlsoByWindow* step: it merges the per-window state of
windows that merge.

Windows are half-open intervals ``[start_ms, end_ms)`` of integer milliseconds. A window is
complete when the watermark reaches ``end_ms`` (the watermark ``t`` promises "no more data with
event time below ``t``"). The global window spans ``[BEGINNING_OF_TIME_MS, END_OF_TIME_MS)``;
advancing the watermark to ``END_OF_TIME_MS`` says "the input has ended" and closes every window.

Example
-------
>>> from dataflow_kafka.windowing import SessionWindow, SlidingWindow, TumblingWindow
>>> compile_window_fn(TumblingWindow(120_000)).assign_windows(70_000)
[IntervalWindow(start_ms=0, end_ms=120000)]
>>> compile_window_fn(SlidingWindow(120_000, 60_000)).assign_windows(70_000)
[IntervalWindow(start_ms=0, end_ms=120000), IntervalWindow(start_ms=60000, end_ms=180000)]
>>> s = compile_window_fn(SessionWindow(60_000))
>>> s.merge_windows([IntervalWindow(70_000, 130_000), IntervalWindow(100_000, 160_000)])
[([IntervalWindow(start_ms=70000, end_ms=130000), IntervalWindow(start_ms=100000, end_ms=160000)], IntervalWindow(start_ms=70000, end_ms=160000))]

Custom window functions (a Dataflow-only extension) subclass :class:`WindowFn` (set
``is_merging = True`` and override ``merge_windows`` for data-driven windows); they must be
immutable values with ``__eq__`` and a readable ``__repr__``, because the driver stores a
fingerprint of its configuration in its state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
import functools
from typing import Any, NamedTuple

from dataflow_kafka.windowing import BEGINNING_OF_TIME_MS, END_OF_TIME_MS, Window
from dataflow_kafka.windowing.windows import WindowShape, window_type_names
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "BEGINNING_OF_TIME_MS",
    "END_OF_TIME_MS",
    "IntervalWindow",
    "GLOBAL_WINDOW",
    "WindowFn",
    "GlobalWindowFn",
    "FixedWindowFn",
    "SlidingWindowFn",
    "window_copies",
    "SessionWindowFn",
    "compile_window_fn",
    "extent_ms",
    "WINDOW_FNS",
]


class IntervalWindow(NamedTuple):
    """The event-time interval ``[start_ms, end_ms)``."""

    start_ms: int
    end_ms: int

    def contains(self, timestamp_ms: int) -> bool:
        return self.start_ms <= timestamp_ms < self.end_ms

    def intersects(self, other: IntervalWindow) -> bool:
        return self.start_ms < other.end_ms and other.start_ms < self.end_ms

    def span(self, other: IntervalWindow) -> IntervalWindow:
        return IntervalWindow(min(self.start_ms, other.start_ms), max(self.end_ms, other.end_ms))

    def max_timestamp_ms(self) -> int:
        """The last event time inside the window (``end_ms - 1``)."""
        return self.end_ms - 1


#: The single window of ``GlobalWindow``: all of event time.
GLOBAL_WINDOW = IntervalWindow(BEGINNING_OF_TIME_MS, END_OF_TIME_MS)

Merge = tuple[list[IntervalWindow], IntervalWindow]


class WindowFn:
    """Base of window functions: ``assign_windows`` (AssignWindows) and ``merge_windows``."""

    #: True when windows can merge (sessions); the driver then calls ``merge_windows``.
    is_merging: bool = False
    #: True when only overlapping windows ever merge: the driver then passes a new window's
    #: overlapping neighbours only to ``merge_windows`` (sessions; a custom fn may set it).
    merges_overlapping_only: bool = False

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        """The windows an element with this event time belongs to (may be empty)."""
        raise NotImplementedError

    def merge_windows(self, windows: Iterable[IntervalWindow]) -> list[Merge]:
        """Merges to apply to a key's current windows: ``[(to_merge, result), ...]``.

        Each ``to_merge`` lists two or more of the given windows, the groups are disjoint and
        ``result`` is the merged window (it may equal one of ``to_merge``). Non-merging window
        functions return ``[]``.
        """
        return []

    def _key(self) -> tuple:
        return tuple(sorted(vars(self).items()))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class GlobalWindowFn(WindowFn):
    """Runtime of ``windowing.GlobalWindow``: one window over all of event time (§2.2)."""

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        return [GLOBAL_WINDOW]


class FixedWindowFn(WindowFn):
    """Runtime of ``windowing.TumblingWindow``: ``[offset + k*size, offset + (k+1)*size)``."""

    def __init__(self, size_ms: int, offset_ms: int = 0) -> None:
        self.size_ms, self.offset_ms = size_ms, offset_ms

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        start = timestamp_ms - (timestamp_ms - self.offset_ms) % self.size_ms
        return [IntervalWindow(start, start + self.size_ms)]


class SlidingWindowFn(WindowFn):
    """Runtime of ``windowing.SlidingWindow``: windows of ``size_ms`` starting every
    ``period_ms`` (hopping windows, §2.2.1, Figure 3).

    An element belongs to ``ceil(size_ms / period_ms)`` windows (fewer when the period does not
    divide the size and the element falls in a gap). Windows are returned by ascending start.
    """

    def __init__(self, size_ms: int, period_ms: int, offset_ms: int = 0) -> None:
        self.size_ms, self.period_ms, self.offset_ms = size_ms, period_ms, offset_ms

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        last_start = timestamp_ms - (timestamp_ms - self.offset_ms) % self.period_ms
        # the starts last_start - k * period_ms above timestamp_ms - size_ms: k < (size_ms - d) / period_ms
        count = max(0, -(-(self.size_ms - (timestamp_ms - last_start)) // self.period_ms))
        return list(_sliding_windows(self.size_ms, self.period_ms, last_start, count))


def window_copies(times, size_ms: int, period_ms: int, offset_ms: int = 0):
    """AssignWindows of :class:`SlidingWindowFn` for a column of event times, vectorised:
    ``(element, start)`` arrays, one entry per window an element is copied into, in the element
    loop's order (element, then ascending start)."""
    import numpy as np

    times = np.asarray(times, np.int64)
    last_start = times - (times - offset_ms) % period_ms
    count = np.maximum(0, -(-(size_ms - (times - last_start)) // period_ms))
    elem = np.repeat(np.arange(times.size), count)
    back = np.repeat(count, count) - 1 - (np.arange(elem.size) - np.repeat(np.cumsum(count) - count, count))
    return elem, last_start[elem] - back * period_ms


@functools.lru_cache(maxsize=256)
def _sliding_windows(size_ms: int, period_ms: int, last_start: int, count: int) -> tuple[IntervalWindow, ...]:
    """The ``count`` windows of ``size_ms`` starting at ``last_start``, ``last_start - period_ms``,
    ..., by ascending start; cached: elements close in time share their windows."""
    return tuple(IntervalWindow(last_start - k * period_ms, last_start - k * period_ms + size_ms)
                 for k in reversed(range(count)))


class SessionWindowFn(WindowFn):
    """Runtime of ``windowing.SessionWindow``: activity separated by gaps of at least
    ``gap_ms`` (§2.2.2, Figure 4).

    AssignWindows puts each element into ``[t, t + gap_ms)``; MergeWindows merges windows that
    overlap (windows that merely touch, ``a.end_ms == b.start_ms``, stay apart).
    """

    is_merging = True
    merges_overlapping_only = True

    def __init__(self, gap_ms: int) -> None:
        self.gap_ms = gap_ms

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        return [IntervalWindow(timestamp_ms, timestamp_ms + self.gap_ms)]

    def merge_windows(self, windows: Iterable[IntervalWindow]) -> list[Merge]:
        return merge_overlapping(windows)


#: The window function per window shape (:class:`~windowing.windows.WindowShape`).
WINDOW_FNS: dict[WindowShape, Callable[[Any], WindowFn]] = {
    WindowShape.TUMBLING: lambda w: FixedWindowFn(w.grid[0], w.grid[2]),
    WindowShape.SLIDING: lambda w: SlidingWindowFn(*w.grid),
    WindowShape.SESSION: lambda w: SessionWindowFn(w.gap_ms),
    WindowShape.GLOBAL: lambda w: GlobalWindowFn(),
}


def compile_window_fn(window: Any) -> WindowFn:
    """The window function of a :mod:`windowing` window (a :class:`WindowFn` passes through)."""
    if isinstance(window, WindowFn):
        return window
    build = WINDOW_FNS.get(getattr(window, "shape", None)) if isinstance(window, Window) else None
    if build is None:
        raise ArgumentTypeError(f"window {window!r}: expected a windowing window ({window_type_names()}) or a "
                                "WindowFn")
    if window.measure != "time":
        raise InvalidArgumentError(f"{window!r}: the Dataflow driver supports measure='time' only (windows of records: "
                         "use the slicer)")
    return build(window)


def extent_ms(window_fn: WindowFn) -> int:
    """How far before its newest element a window can reach: size (fixed, sliding), gap
    (sessions), 0 for the global window and custom window functions."""
    return int(getattr(window_fn, "size_ms", getattr(window_fn, "gap_ms", 0)))


def merge_overlapping(windows: Iterable[IntervalWindow]) -> list[Merge]:
    """Group overlapping intervals (sweep by start); the merge step of sessions."""
    merges: list[Merge] = []
    group: list[IntervalWindow] = []
    span: IntervalWindow | None = None
    for w in sorted(set(windows)):
        if span is not None and w.start_ms < span.end_ms:
            group.append(w)
            span = span.span(w)
            continue
        if len(group) > 1:
            merges.append((group, span))  # type: ignore[arg-type]
        group, span = [w], w
    if len(group) > 1:
        merges.append((group, span))  # type: ignore[arg-type]
    return merges


def windows_of(window: Any, timestamps: Sequence[int]) -> list[IntervalWindow]:
    """Brute-force windowing of a bounded set of event times: assign, then merge to a fixpoint.

    The reference the property tests compare the incremental driver against.
    """
    window_fn = compile_window_fn(window)
    ws = {w for t in timestamps for w in window_fn.assign_windows(t)}
    while True:
        merges = window_fn.merge_windows(ws)
        if not merges:
            return sorted(ws)
        for group, result in merges:
            ws.difference_update(group)
            ws.add(result)
