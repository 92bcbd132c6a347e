"""Threshold frames: Scotty's ``ThresholdFrame`` (data-driven frames, Scotty §9.2 window types).

A frame opens at the first record whose value passes the threshold and closes at the first
record after it that does not: the frame is ``[t_open, t_close)`` in event time, records in
event-time order (ties by arrival). A run still open at the newest record has no end yet and
is not emitted; a run opened and closed at the same time (a tie) has no extent and is skipped.
Records are kept (forward context aware in the decision tree): an out-of-order record can
open, close, split or fuse frames anywhere within the allowed lateness.

Example
-------
>>> import numpy as np
>>> from dataflow_kafka.slicer import SlicingWindowOperator
>>> from dataflow_kafka.windowing import Sum
>>> op = SlicingWindowOperator([ThresholdFrame(5)], [Sum()])
>>> op.process_elements(np.array([1, 6, 8, 2, 9, 3, 7]), np.array([0, 10, 20, 30, 40, 50, 60]))
>>> [(r.start, r.end, r.value) for r in op.process_watermark(100)]   # [60, ...) is still open
[(10, 30, 14), (40, 50, 9)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from dataflow_kafka.slicer.context_windows import ForwardContextAwareWindow, WindowContext, merged_records
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["ThresholdFrame", "frames"]


@dataclass(frozen=True)
class ThresholdFrame(ForwardContextAwareWindow):
    """Frames of consecutive records with ``value > threshold`` (Scotty's ``ThresholdFrame
    (threshold)``), or with ``predicate(values) -> bool array`` (vectorised, picklable) if
    given. Slicer only."""

    threshold: Any = None
    predicate: Callable[[np.ndarray], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.threshold is None and self.predicate is None:
            raise InvalidArgumentError("ThresholdFrame: give threshold=<value> or predicate=<callable>")

    def coverage_after_eviction(self, records, held, after, newest):
        """A run at the first held record may have begun at an evicted one."""
        if len(records) == 0 or not bool(self.passes(records.values[:1])[0]):
            return held                      # the first held record is in no frame: none began before
        return max(held, int(records.ts[0]) + 1)

    def passes(self, values: np.ndarray) -> np.ndarray:
        if self.predicate is not None:
            return np.asarray(self.predicate(values), bool)
        return np.asarray(values > self.threshold, bool)

    def create_context(self) -> WindowContext:
        return _FrameContext(self)


def frames(inside: np.ndarray, ts: np.ndarray, carry: bool = False) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Frames of records in event-time order: ``inside`` (bool) and ``ts`` per record; ``carry``:
    the record before the first one was inside (a run that started earlier is not a frame here).
    Returns (starts, ends) of closed frames with an extent and the start of the open run (or
    ``None``)."""
    x = np.asarray(inside, bool)
    prev = np.concatenate(([carry], x[:-1])) if x.size else x
    opens = np.flatnonzero(x & ~prev)          # first record of a run
    closes = np.flatnonzero(~x & prev)         # first record after a run
    if carry and closes.size and (opens.size == 0 or closes[0] < opens[0]):
        closes = closes[1:]                    # the run that started before the first record
    open_run = int(ts[opens[-1]]) if opens.size > closes.size else None
    s, e = ts[opens[:closes.size]], ts[closes]
    keep = e > s
    return s[keep], e[keep], open_run


class _FrameContext(WindowContext):
    def __init__(self, window: ThresholdFrame):
        self.window = window
        self.carry = False      # the newest evicted record passed (its run is final)

    def _frames(self, values, ts):
        return frames(self.window.passes(values), ts, self.carry)

    def update(self, view, values, ts):
        s, e, o = self._frames(*merged_records(view, values, ts))
        return np.unique(np.concatenate((s, e, [] if o is None else [o]))).astype(np.int64)

    def windows_ending_between(self, view, lo, hi):
        s, e, _ = self._frames(view.tuples.values, view.tuples.ts)
        m = (e > lo) & (e <= hi)
        return s[m], e[m]

    def earliest_open_start(self, view, horizon):
        s, e, o = self._frames(view.tuples.values, view.tuples.ts)
        starts = np.append(s[e > horizon], [horizon] if o is None else [o, horizon])
        return int(starts.min())

    def evict_records(self, view, before):
        # remember whether the newest evicted record passed: a run through the cut is final,
        # its tail is not a new frame
        k = int(np.searchsorted(view.tuples.ts, before, "left"))
        if k:
            self.carry = bool(self.window.passes(view.tuples.values[k - 1:k])[0])

    def get_state(self):
        return self.carry

    def set_state(self, state):
        self.carry = bool(state)
