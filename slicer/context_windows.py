"""Context-aware windows: sessions, punctuations, slide-by-tuple (Scotty sections 4.4, 5.4.2, 6).

A context-aware window keeps a :class:`WindowContext` next to the shared slices. After
each batch the context names the *flexible* slice separators it needs (section 7.1.3);
the slice manager then splits and merges slices to match (section 8). Contexts read the
slices (and, where the decision tree of section 5.1 keeps them, the records) through a
read-only view instead of copying them, as the paper does with its pointer to the
aggregate store.

Time measure only; windows are ``[start, end)``. Scotty's rules (``docs/semantics.md``):

* :class:`SessionGapWindow` (the runtime of ``windowing.SessionWindow``) ``[first, last + gap)``:
  a record joins a session when its distance to the session's last record is **at most**
  ``gap``; a session is final, and emitted, once its end is strictly below the watermark.
* :class:`PunctuationWindow`: a punctuation record at ``p`` closes ``[previous punctuation, p)``
  and opens ``[p, next)``; the first window opens at the first record (the earliest event time).
* :class:`SlideByTupleWindow` ``(size, slide)``: every ``slide``-th record ``k = 0, slide,
  2*slide, ...`` (event-time order, ties by arrival) starts a window ``[t_k, t_k + size)``.
* :class:`~slicer.frames.ThresholdFrame` (:mod:`slicer.frames`): runs of records whose value
  passes a threshold.

Punctuation, slide-by-tuple and threshold windows are slicer-only extensions.

User-defined types subclass :class:`ForwardContextFreeWindow` or
:class:`ForwardContextAwareWindow` and return a :class:`WindowContext` from
``create_context``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from dataflow_kafka.slicer.windows import TIME, _positive_int
from dataflow_kafka.errors import InvalidArgumentError

__all__ = [
    "WindowContext", "ContextAwareWindow", "ForwardContextFreeWindow",
    "ForwardContextAwareWindow", "SessionGapWindow", "PunctuationWindow", "SlideByTupleWindow",
]

_EMPTY = np.zeros(0, np.int64)


class WindowContext:
    """Per-query state of a context-aware window.

    ``view`` has ``starts``, ``tmin``, ``tmax``, ``count`` (one entry per slice) and
    ``tuples`` (the record buffer with ``ts`` and ``base``, or ``None``).
    """

    def update(self, view: Any, values: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Take a batch (before it is added to the slices); return every flexible edge."""
        raise NotImplementedError

    def windows_ending_between(self, view: Any, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def earliest_open_start(self, view: Any, horizon: int) -> int:
        raise NotImplementedError

    def new_windows_ending_at(self, view: Any, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Windows ending exactly at ``t`` whose end appeared since the last watermark
        (:meth:`watermark_passed`). The window manager asks at the lateness horizon ``w - L``: a
        record there is still on time, yet windows ending there count as emitted. None by default."""
        return _EMPTY, _EMPTY

    def watermark_passed(self) -> None:
        """Called after each watermark's emission."""

    def evict(self, before: int) -> None:
        """Forget context older than ``before`` (at most the lateness horizon: records before it
        are dropped, so windows ending at or before it are final)."""

    def evict_records(self, view: Any, before: int) -> None:
        """Called before kept records older than ``before`` are dropped (``view.tuples``)."""

    def build_after_eviction(self) -> None:
        """Called before a context is built from the held records of a running operator whose
        older records were evicted (a query added at runtime, :mod:`slicer.coverage`)."""

    def get_state(self) -> Any:
        return None

    def set_state(self, state: Any) -> None:
        pass


class ContextAwareWindow:
    """Base of context-aware windows (time measure only).

    What the engine asks instead of the concrete type (defaults here, see also
    :class:`~slicer.windows.ContextFreeWindow`): ``forward_context_free``;
    ``splits_in_gaps_only`` (slices are split only inside gaps between records: aggregates
    suffice, in order or not, as for sessions, section 6.2); ``in_order_record_reason`` (why
    records are kept on in-order streams too, else ``None``); ``context_from_held_records`` and
    :meth:`coverage_after_eviction` (what a query added at runtime covers, :mod:`slicer.coverage`).
    """

    measure = TIME
    forward_context_free: bool = False
    context_free = False
    periodic = False
    session_gap = 0
    splits_in_gaps_only = False
    in_order_record_reason: str | None = None
    #: Evicted records cannot change the windows the held records give (module :mod:`slicer.coverage`).
    context_from_held_records = False

    def create_context(self) -> WindowContext:
        raise NotImplementedError

    def coverage_after_eviction(self, records: Any, held: int, after: int, newest: int) -> int:
        """Coverage start of this query added at runtime, its context built from the held
        ``records`` (from ``held`` on; ``after``: ``held`` plus the session gap, ``newest``: one
        past the newest record seen): ``after`` when evicted records cannot change the windows,
        else ``newest`` (how far back the context reaches is unknown)."""
        return after if self.context_from_held_records else newest

    def slicing_group(self) -> tuple[str, int] | None:
        """(group, rank): of contexts in one group only the lowest rank cuts slices (7.3.1)."""
        return None


class ForwardContextFreeWindow(ContextAwareWindow):
    """Edges up to ``t`` are known once all records up to ``t`` are processed."""

    forward_context_free = True


class ForwardContextAwareWindow(ContextAwareWindow):
    """Edges before ``t`` may depend on records after ``t``; keeps records (Figure 4)."""

    forward_context_free = False


# --------------------------------------------------------------------------- sessions
@dataclass(frozen=True)
class SessionGapWindow(ContextAwareWindow):
    """Runtime of ``windowing.SessionWindow`` (section 6); the paper's exception: no records
    kept, no slice splits that need them (Algorithms 3 to 6 only split inside gaps)."""

    gap: int
    splits_in_gaps_only = True
    context_from_held_records = True

    def __post_init__(self) -> None:
        _positive_int("gap_ms", self.gap)

    @property
    def session_gap(self) -> int:  # type: ignore[override]
        return self.gap

    def create_context(self) -> WindowContext:
        return _SessionContext(int(self.gap))

    def slicing_group(self):
        return ("session", int(self.gap))


def _sessions(view: Any, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, last) record time of each session, from slice extents (one session per slice)."""
    ne = view.count > 0
    lo, hi = view.tmin[ne], view.tmax[ne]
    if lo.size == 0:
        return _EMPTY, _EMPTY
    brk = np.flatnonzero(lo[1:] - hi[:-1] > gap)
    return lo[np.concatenate(([0], brk + 1))], hi[np.append(brk, lo.size - 1)]


class _SessionContext(WindowContext):
    def __init__(self, gap: int):
        self.gap = gap

    def update(self, view, values, ts):
        # Slices never hold records of two sessions: each slice is the interval [tmin, tmax]
        # without inner gaps; a session starts where an interval begins more than ``gap`` after
        # everything before it (Scotty: a distance of exactly ``gap`` joins).
        ne = view.count > 0
        pts = np.sort(ts)
        at = np.searchsorted(pts, view.tmin[ne])
        lo = np.insert(pts, at, view.tmin[ne])
        if lo.size == 0:
            return _EMPTY
        reach = np.maximum.accumulate(np.insert(pts, at, view.tmax[ne]))
        return lo[np.concatenate(([0], np.flatnonzero(lo[1:] - reach[:-1] > self.gap) + 1))]

    def windows_ending_between(self, view, lo, hi):
        # final when the end is strictly below the watermark: a record at ``end`` still joins
        first, last = _sessions(view, self.gap)
        ends = last + self.gap
        m = (ends >= lo) & (ends < hi)
        return first[m], ends[m]

    def earliest_open_start(self, view, horizon):
        first, last = _sessions(view, self.gap)
        open_ = first[last + self.gap >= horizon]
        return int(min(open_[0], horizon)) if open_.size else int(horizon)


# --------------------------------------------------------------------------- punctuations
@dataclass(frozen=True)
class PunctuationWindow(ForwardContextFreeWindow):
    """Windows between punctuation records (Scotty's ``PunctuationWindow(punctuation)``): a
    record whose ``value`` equals ``punctuation`` (or, if given, ``predicate(values) -> bool
    array``, vectorised, picklable) at time ``p`` closes ``[previous punctuation, p)`` and opens
    ``[p, next)``; the first window opens at the first record. Slicer only.

    >>> import numpy as np
    >>> from dataflow_kafka.slicer import SlicingWindowOperator
    >>> from dataflow_kafka.windowing import Sum
    >>> op = SlicingWindowOperator([PunctuationWindow(0)], [Sum()])
    >>> op.process_elements(np.array([1, 2, 0, 3, 0, 4]), np.array([5, 10, 20, 30, 40, 50]))
    >>> [(r.start, r.end, r.value) for r in op.process_watermark(100)]
    [(5, 20, 3), (20, 40, 3)]
    """

    punctuation: Any = None
    predicate: Callable[[np.ndarray], np.ndarray] | None = None
    in_order_record_reason = "opens a window at a punctuation's time, which earlier records may share"
    context_from_held_records = True

    def __post_init__(self) -> None:
        if self.punctuation is None and self.predicate is None:
            raise InvalidArgumentError("PunctuationWindow: give punctuation=<value> or predicate=<callable>")

    def is_punctuation(self, values: np.ndarray) -> np.ndarray:
        if self.predicate is not None:
            return np.asarray(self.predicate(values), bool)
        return np.asarray(values == self.punctuation, bool)

    def create_context(self) -> WindowContext:
        return _PunctuationContext(self)


class _PunctuationContext(WindowContext):
    """Punctuation times ``edges``, those since the last watermark ``added``, and the first
    record time ``first`` (``None`` once the first window is evicted, or when the context was
    rebuilt from records after eviction)."""

    def __init__(self, window: PunctuationWindow):
        self.window = window
        self.edges = _EMPTY
        self.added = _EMPTY
        self.first: int | None = None
        self.started = False

    def update(self, view, values, ts):
        if ts.size:
            new = ts[self.window.is_punctuation(values)]
            if new.size:
                self.added = np.union1d(self.added, np.setdiff1d(new, self.edges))   # a repeated one closes nothing new
                self.edges = np.union1d(self.edges, new)
            low = int(ts.min())
            if not self.started:
                self.first, self.started = low, True
            elif self.first is not None:
                self.first = min(self.first, low)
        return self.edges if self.first is None else np.union1d(self.edges, [self.first])

    def _spans(self) -> tuple[np.ndarray, np.ndarray]:
        s, e = self.edges[:-1], self.edges[1:]
        if self.first is not None and self.edges.size and self.first < self.edges[0]:
            s, e = np.insert(s, 0, self.first), self.edges
        return s, e

    def windows_ending_between(self, view, lo, hi):
        s, e = self._spans()
        m = (e > lo) & (e <= hi)
        return s[m], e[m]

    def new_windows_ending_at(self, view, t):
        # a punctuation at the horizon closes a window there (Scotty section 5.4.2)
        if not np.isin(t, self.added):
            return _EMPTY, _EMPTY
        s, e = self._spans()
        m = e == t
        return s[m], e[m]

    def watermark_passed(self):
        self.added = _EMPTY

    def earliest_open_start(self, view, horizon):
        i = int(np.searchsorted(self.edges, horizon, "right"))  # edges[i] is the first end > horizon
        if i >= 1:
            return int(min(self.edges[i - 1], horizon))
        return int(horizon if self.first is None else min(self.first, horizon))

    def build_after_eviction(self):
        self.started = True                   # the first window opened at an evicted record

    def evict(self, before):
        i = int(np.searchsorted(self.edges, before, "right"))
        if i >= 1:
            self.first = None                 # the first window [first, edges[0]) is final
        self.edges = self.edges[max(i - 1, 0):]

    def get_state(self):
        return (self.edges, self.first, self.started, self.added)

    def set_state(self, state):
        edges, self.first, self.started, *added = state    # states written before 2026-12-01 have 3
        self.edges = np.asarray(edges, np.int64)
        self.added = np.asarray(added[0] if added else _EMPTY, np.int64)


# --------------------------------------------------------------------------- slide-by-tuple
def merged_records(view, values: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, ts) of the kept records plus a batch not yet inserted, in (event time, arrival)
    order (a batch arrives after every kept record: a stable sort keeps ties in arrival order)."""
    buf = view.tuples
    all_ts = np.concatenate((buf.ts, ts))
    order = np.argsort(all_ts, kind="stable")
    return np.concatenate((buf.values, values.astype(buf.values.dtype, copy=False)))[order], all_ts[order]


@dataclass(frozen=True)
class SlideByTupleWindow(ForwardContextAwareWindow):
    """Scotty's ``SlideByTupleWindow(size, slide)``: every ``slide``-th record ``k = 0, slide,
    2*slide, ...`` (event-time order, ties by arrival, counted from the first record the
    operator's time slices took) starts a window ``[t_k, t_k + size)`` of ``size`` ms.

    Records are kept (forward context aware in the decision tree): an out-of-order record
    shifts the position of every later one. (Windows of ``size`` *records* every ``slide``
    records are ``SlidingWindow(size, slide, measure="count")``.) Slicer only.
    """

    size_ms: int
    slide: int = 1
    context_from_held_records = True

    def __post_init__(self) -> None:
        _positive_int("SlideByTupleWindow: size_ms", self.size_ms)
        _positive_int("SlideByTupleWindow: slide", self.slide)

    def create_context(self) -> WindowContext:
        return _SlideByTupleContext(int(self.size_ms), int(self.slide))


class _SlideByTupleContext(WindowContext):
    def __init__(self, size: int, slide: int):
        self.size, self.slide = size, slide

    def _starts(self, all_ts: np.ndarray, base: int) -> np.ndarray:
        k = np.arange(base, base + all_ts.size)
        return np.unique(all_ts[k % self.slide == 0])

    def update(self, view, values, ts):
        starts = self._starts(np.sort(np.concatenate((view.tuples.ts, ts))), view.tuples.base)
        return np.union1d(starts, starts + self.size)

    def windows_ending_between(self, view, lo, hi):
        ends = self._starts(view.tuples.ts, view.tuples.base) + self.size
        ends = ends[(ends > lo) & (ends <= hi)]
        return ends - self.size, ends

    def earliest_open_start(self, view, horizon):
        return int(horizon + 1 - self.size)
