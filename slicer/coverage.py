"""What a window query added to a running operator covers (Scotty's ``addWindowFunction``).

A query added while the operator runs reports the windows a fresh operator would compute from
the records the slices still hold (plus every later record), from its **coverage start** ``C``
on: windows starting before ``C`` are never reported. The slices hold every accepted record
with event time at or after ``H``: the first slice start once slices were evicted (section
5.3), unbounded before, so ``C >= H``. At its first watermark the new query emits every window
of it that ended and holds records: those that ended after the previous watermark as new
windows, older ones as updates (``update=True``: the window ended at or before the previous
watermark, as when a late record changes a window); after that it behaves as any other query.

``C`` per kind of query (the edge where partial aggregates stop being exact, else ``H``):

* **Records kept** (``keep_records=True``, or the decision tree of section 5.1 keeps them): the
  slices are cut at the new query's edges and the cut pieces recomputed from the records; a new
  context-aware window builds its context from the records. Before any eviction the records are
  the whole accepted stream: ``C`` is unbounded for every kind. After eviction ``C = H`` (the
  held records), except: sessions ``H + gap_ms`` (below); a threshold frame one past the first
  held record (a run there may have begun at an evicted one); a user-defined context type one
  past the newest record seen (how far back its context reaches is unknown). A punctuation
  window built after eviction opens windows at held punctuations only (the window that held
  records begin in started at an evicted punctuation or record).
* **Context-free window, partial aggregates only**: the held slices are cut at every edge of the
  new query that falls between records (``tmin``/``tmax`` of a slice say so; the aggregate moves
  whole to one piece, exact). An edge inside a slice's record span ``(tmin, tmax]`` cannot be
  cut: ``C`` is the first edge of the new query after the last such edge. Adding ``TumblingWindow
  (2000)`` next to ``TumblingWindow(1000)`` cuts nothing: ``C = H``.
* **Session windows**: a session is known to start at its first held record only if that record
  is at least ``gap_ms`` after ``H`` (an evicted record, at most ``H - 1``, joins a session within
  ``gap_ms`` of it): ``C = H + gap_ms``. Without records, a slice can also hide a gap of more than
  ``gap_ms`` if its record span ``tmax - tmin`` exceeds ``gap_ms`` (unless a session with a gap at most as large has cut the
  slices from the start): ``C`` is then also after the last record of the last such slice. A session that a late
  record later extends to before ``C`` is no longer reported.
* **Other context-aware windows without records** (punctuation windows, user-defined forward
  context-free windows on in-order streams): the context cannot be rebuilt from partial
  aggregates; ``C`` is one past the newest record seen.
* **Count windows**: while other count queries run, the count slices keep every record since
  ``H`` (a position): they are re-cut, ``C = H``. The first count query added to an operator
  without one starts counting at the next record (its position 0).
* **Nothing held** (no record reached the time slices, or the last time query was removed):
  ``C`` is one past the newest record seen (``gap_ms + 1`` past it for sessions), unbounded if
  there was none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dataflow_kafka.slicer._tuples import TupleBuffer
from dataflow_kafka.slicer.stream_slicer import StreamSlicer
from dataflow_kafka.slicer.window_manager import Query

__all__ = ["time_coverage", "count_coverage", "NO_LIMIT"]

NO_LIMIT = int(np.iinfo(np.int64).min)


class _NoSlices:
    """A view with no slices and no records before ``base``: the held records are the batch."""

    def __init__(self, base: int, dtype: Any) -> None:
        self.starts = self.tmin = self.tmax = self.count = np.zeros(0, np.int64)
        self.tuples = TupleBuffer(dtype)
        self.tuples.base = base


def _cut(mgr, window) -> np.ndarray:
    """The new query's edges over the held slices; cut there (where exact). Returns the edges
    that could not be cut."""
    probe = StreamSlicer()
    probe.set_windows([window])
    edges = probe.edges_between(int(mgr.store.starts[0]), int(mgr.frontier))
    return mgr.store.split_at(edges, mgr.tuples)


def time_coverage(mgr, q: Query, others: list[Query], max_ts: int | None) -> int:
    """Coverage start of the time query ``q`` added to the slice manager ``mgr`` (see the module
    docstring); cuts the slices and initialises ``q``'s context as needed."""
    st = mgr.store
    gap = q.window.session_gap
    if st.n == 0:
        return NO_LIMIT if max_ts is None else max_ts + gap + 1
    held = mgr.held_from
    after = held if held == NO_LIMIT else held + gap       # sessions: an evicted record may belong
    if q.context is None:
        bad = _cut(mgr, q.window)
        return held if bad.size == 0 else max(held, int(q.window.next_edge(int(bad.max()))))
    newest = NO_LIMIT if max_ts is None else max_ts + 1
    if mgr.tuples is not None:
        buf = mgr.tuples
        if held != NO_LIMIT:
            q.context.build_after_eviction()
        edges = q.context.update(_NoSlices(buf.base, buf.values.dtype), buf.values, buf.ts)
        mgr.refresh_contexts(edges if q.context in mgr.contexts else None)
        if held == NO_LIMIT:
            return after                         # every record is held
        return q.window.coverage_after_eviction(buf, held, after, newest)
    if gap:
        finer = any(0 < o.window.session_gap <= gap and o.start_at == NO_LIMIT
                    for o in others)             # a session that has cut every held slice at its gaps
        mgr.refresh_contexts()
        st = mgr.store
        blurred = (st.count > 0) & (st.tmax - st.tmin > gap)
        if finer or not blurred.any():
            return after
        return max(after, int(st.tmax[blurred].max()) + 1)
    return newest


def count_coverage(mgr, q: Query) -> int:
    """Coverage start (a record position) of the count query ``q``; ``mgr`` holds the records
    since its first slice (the caller resets it when no count query ran)."""
    if mgr.store.n == 0:
        return mgr.tuples.base
    probe = StreamSlicer()
    probe.set_windows([q.window])
    mgr.recut(probe.edges_between(int(mgr.store.starts[0]), int(mgr.frontier)))
    return int(mgr.store.starts[0])
