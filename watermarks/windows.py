"""Windowing: *where* in event time elements are grouped (Dataflow Model, section 2.2).

The model splits windowing into two operations (seed ``dataflow-model.txt`` §2.2):

* ``AssignWindows(datum) -> Set<Window>`` puts every element into zero or more windows; the
  element is conceptually copied into each of them (§2.2.1).
* ``MergeWindows(Set<Window>) -> merges`` runs at grouping time and lets data-driven windows
  such as sessions grow as data arrive (§2.2.2): two session windows that overlap become one.

A window function here is a small immutable spec with exactly those two methods:
``assign_windows(timestamp_ms)`` and ``merge_windows(windows)``. The ``TriggerDriver`` performs
the *GroupAlsoByWindow* step: it merges the per-window state of windows that merge.

Windows are half-open intervals ``[start_ms, end_ms)`` of integer milliseconds. A window is
complete when the watermark reaches ``end_ms`` (the watermark ``t`` promises "no more data with
event time below ``t``"). The global window spans ``[BEGINNING_OF_TIME_MS, END_OF_TIME_MS)``;
advancing the watermark to ``END_OF_TIME_MS`` says "the input has ended" and closes every window.

Example
-------
>>> FixedWindows(120_000).assign_windows(70_000)
[IntervalWindow(start_ms=0, end_ms=120000)]
>>> SlidingWindows(120_000, 60_000).assign_windows(70_000)
[IntervalWindow(start_ms=0, end_ms=120000), IntervalWindow(start_ms=60000, end_ms=180000)]
>>> s = Sessions(60_000)
>>> s.merge_windows([IntervalWindow(70_000, 130_000), IntervalWindow(100_000, 160_000)])
[([IntervalWindow(start_ms=70000, end_ms=130000), IntervalWindow(start_ms=100000, end_ms=160000)], IntervalWindow(start_ms=70000, end_ms=160000))]

Custom window functions subclass :class:`WindowFn` (set ``is_merging = True`` and override
``merge_windows`` for data-driven windows); they must be immutable values with ``__eq__`` and a
readable ``__repr__``, because the driver stores a fingerprint of its configuration in its state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "BEGINNING_OF_TIME_MS",
    "END_OF_TIME_MS",
    "IntervalWindow",
    "GLOBAL_WINDOW",
    "WindowFn",
    "GlobalWindows",
    "FixedWindows",
    "SlidingWindows",
    "Sessions",
]

#: Earliest representable event time (about -285 000 years; fits int64 and float64 exactly).
BEGINNING_OF_TIME_MS = -(2**53)
#: End of event time: a watermark at this value means "the input is complete".
END_OF_TIME_MS = 2**53


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


#: The single window of ``GlobalWindows``: all of event time.
GLOBAL_WINDOW = IntervalWindow(BEGINNING_OF_TIME_MS, END_OF_TIME_MS)

Merge = tuple[list[IntervalWindow], IntervalWindow]


def _positive_ms(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer of milliseconds, got {value!r}")
    return value


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


class GlobalWindows(WindowFn):
    """One window over all of event time (the default of the batch model, §2.2)."""

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        return [GLOBAL_WINDOW]


class FixedWindows(WindowFn):
    """Tumbling windows ``[offset + k*size, offset + (k+1)*size)``.

    Parameters
    ----------
    size_ms : int
        Window length in milliseconds, > 0.
    offset_ms : int
        Shift of the window grid, ``0 <= offset_ms < size_ms``.
    """

    def __init__(self, size_ms: int, offset_ms: int = 0) -> None:
        self.size_ms = _positive_ms("size_ms", size_ms)
        if not isinstance(offset_ms, int) or not 0 <= offset_ms < size_ms:
            raise ValueError(f"offset_ms must be an integer in [0, size_ms={size_ms}), got {offset_ms!r}")
        self.offset_ms = offset_ms

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        start = timestamp_ms - (timestamp_ms - self.offset_ms) % self.size_ms
        return [IntervalWindow(start, start + self.size_ms)]


class SlidingWindows(WindowFn):
    """Windows of ``size_ms`` starting every ``period_ms`` (hopping windows, §2.2.1, Figure 3).

    An element belongs to ``ceil(size_ms / period_ms)`` windows (fewer when the period does not
    divide the size and the element falls in a gap). Windows are returned by ascending start.
    """

    def __init__(self, size_ms: int, period_ms: int, offset_ms: int = 0) -> None:
        self.size_ms = _positive_ms("size_ms", size_ms)
        self.period_ms = _positive_ms("period_ms", period_ms)
        if not isinstance(offset_ms, int) or not 0 <= offset_ms < period_ms:
            raise ValueError(
                f"offset_ms must be an integer in [0, period_ms={period_ms}), got {offset_ms!r}"
            )
        self.offset_ms = offset_ms

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        last_start = timestamp_ms - (timestamp_ms - self.offset_ms) % self.period_ms
        out = []
        start = last_start
        while start > timestamp_ms - self.size_ms:
            out.append(IntervalWindow(start, start + self.size_ms))
            start -= self.period_ms
        out.reverse()
        return out


class Sessions(WindowFn):
    """Session windows: activity separated by gaps of at least ``gap_ms`` (§2.2.2, Figure 4).

    AssignWindows puts each element into ``[t, t + gap_ms)``; MergeWindows merges windows that
    overlap (windows that merely touch, ``a.end_ms == b.start_ms``, stay apart).
    """

    is_merging = True
    merges_overlapping_only = True

    def __init__(self, gap_ms: int) -> None:
        self.gap_ms = _positive_ms("gap_ms", gap_ms)

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        return [IntervalWindow(timestamp_ms, timestamp_ms + self.gap_ms)]

    def merge_windows(self, windows: Iterable[IntervalWindow]) -> list[Merge]:
        return merge_overlapping(windows)


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


def windows_of(window_fn: WindowFn, timestamps: Sequence[int]) -> list[IntervalWindow]:
    """Brute-force windowing of a bounded set of event times: assign, then merge to a fixpoint.

    The reference the property tests compare the incremental driver against.
    """
    ws = {w for t in timestamps for w in window_fn.assign_windows(t)}
    while True:
        merges = window_fn.merge_windows(ws)
        if not merges:
            return sorted(ws)
        for group, result in merges:
            ws.difference_update(group)
            ws.add(result)
