"""Window manager: queries, allowed lateness, emission (Scotty sections 5.3 step 3, 5.4.2).

On a watermark ``w`` (previous one ``p``, allowed lateness ``L``) it emits, per query:

* every window that ended since the last watermark, ``p < end <= w`` (``triggerWin``);
* updates of windows with ``p - L < end <= p``: those holding a slice that received records
  since ``p``, and, for context-aware windows, those whose extent was not emitted before
  (section 5.3: "outputs updates for these window aggregates"), and windows whose end appeared
  since ``p`` exactly at the horizon ``p - L`` (a punctuation there is on time:
  ``WindowContext.new_windows_ending_at``);
* retractions (first, ``retraction=True``) of emitted context-aware windows whose extent no
  longer exists: a late record extended or fused sessions, a late punctuation cut a window, a
  late record shifted slide-by-tuple windows (the Dataflow Model's retractions,
  Akidau et al., VLDB 2015, §2.3). A window overlapping a retracted one is emitted as an
  update (``update=True``), in either emission.

With ``scotty=True`` (the operator's default ``emission="scotty"``) empty tumbling and sliding
time windows are emitted too, none starting before 0, rows per query; with ``scotty=False``
(``emission="compact"``) windows without records are not emitted (see
:class:`~slicer.SlicingWindowOperator`'s ``emission``). Window aggregates of all queries on one measure
are computed in one vectorised store query. Afterwards slices that no window can need any
more are evicted (records with time below ``w - L`` are dropped on arrival, so windows with
``end <= w - L`` are final).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dataflow_kafka.slicer.context_windows import WindowContext
from dataflow_kafka.slicer.results import WindowResults, object_array, with_empty
from dataflow_kafka.slicer.slice_manager import CountSliceManager, SliceManager
from dataflow_kafka.slicer.windows import COUNT, TIME, measure_of, progression_points
from dataflow_kafka.windowing.windows import Measure

__all__ = ["Query", "WindowManager"]


def _dirty(store, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Which windows ``[s, e)`` hold a slice that received records since the last watermark."""
    cd = np.concatenate(([0], np.cumsum(store.dirty)))
    return cd[np.searchsorted(store.starts, e, "left")] - cd[np.searchsorted(store.starts, s, "left")] > 0

_NO_LIMIT = np.iinfo(np.int64).max
_FAR = int(np.iinfo(np.int64).max) // 2


def _remember(q: Query, res: WindowResults, rows: np.ndarray) -> None:
    """Record the context-aware query ``q``'s rows ``rows`` of ``res`` as emitted (with their
    values, to retract them later); a row overlapping a retracted window is an update (it
    replaces it), and that window is no longer waiting for a replacement."""
    if rows.size == 0:
        return
    s, e = res.start[rows].tolist(), res.end[rows].tolist()
    if q.retracted:
        done = set()
        for j, a, b in zip(rows.tolist(), s, e):
            hit = [k for k in q.retracted if a < k[1] and b > k[0]]
            if hit:
                res.update[j] = True
                done.update(hit)
        for k in done:
            del q.retracted[k]
    for j, a, b in zip(rows.tolist(), s, e):
        q.emitted[(a, b)] = res.row_values(j)


@dataclass
class Query:
    """A running window query; windows starting before ``start_at`` are not reported.

    ``spec`` is what the user gave (a :mod:`windowing` window or a slicer-only one), ``window``
    its runtime (:func:`slicer.compile.compile_window`); ``fresh``: added while running and not
    yet through a watermark (its first watermark emits every older window too, see
    :mod:`slicer.coverage`). Context-aware queries keep the windows they emitted that may still
    change (``emitted``: extent -> values, to retract them) and the retracted extents no window
    replaced yet (``retracted``)."""

    id: str
    window: Any
    start_at: int
    context: WindowContext | None = None
    emitted: dict = field(default_factory=dict)  # context-aware: (start, end) -> values emitted
    spec: Any = None
    measure: Measure = TIME
    fresh: bool = False
    retracted: dict = field(default_factory=dict)  # context-aware: (start, end) retracted, not yet replaced

    @classmethod
    def of(cls, qid, spec, runtime, start_at: int) -> "Query":
        ctx = None if runtime.context_free else runtime.create_context()
        return cls(qid, runtime, start_at, ctx, spec=spec, measure=measure_of(runtime))


class WindowManager:
    def __init__(self, allowed_lateness_ms: int, scotty: bool = True):
        self.allowed_lateness_ms = allowed_lateness_ms
        #: Scotty's emission (``SlicingWindowOperator(emission="scotty")``): empty tumbling and
        #: sliding windows too, none starting before 0, rows by (query, start).
        self.scotty = scotty
        self.queries: dict[int, Query] = {}
        self.watermark: int | None = None
        self.count_frontier: int | None = None

    def of_measure(self, measure) -> list[Query]:
        return [q for q in self.queries.values() if q.measure is measure]

    # ------------------------------------------------------------------ emission
    def emit(self, wm: int, time_mgr: SliceManager, count_mgr: CountSliceManager,
             names: list[str]) -> WindowResults:
        prev = self.watermark
        wm = wm if prev is None else max(wm, prev)
        parts = []
        rank = {qid: i for i, qid in enumerate(self.queries)}
        retractions = None
        if time_mgr.store.n:
            retractions = self._retractions(self.of_measure(TIME), time_mgr, names, rank)
            parts += self._emit_split(self.of_measure(TIME), time_mgr, prev, wm, None, names, rank)
        if count_mgr.store.n:
            n_now = count_mgr.position_of_time(wm)
            parts += self._emit_split(self.of_measure(COUNT), count_mgr, self.count_frontier,
                                      n_now, count_mgr.first_change, names, rank)
            self.count_frontier, count_mgr.first_change = n_now, None
        for q in self.queries.values():
            q.fresh = False
            if q.context is not None:
                q.context.watermark_passed()
        self.watermark = wm
        time_mgr.store.clear_dirty()
        self._evict(wm - self.allowed_lateness_ms, time_mgr, count_mgr)
        out = WindowResults.concat(names, [p for p in parts if p is not None], by_query=self.scotty)
        if retractions is None:
            return out
        return WindowResults.concat(names, [retractions, out], sort=False)

    def _retractions(self, queries: list[Query], mgr, names: list[str], rank: dict) -> WindowResults | None:
        """Retraction rows of emitted context-aware windows whose extent no longer exists (see the
        module docstring): each carries the values it was emitted with."""
        rows = []
        for q in queries:
            if q.context is None or q.fresh or not q.emitted:
                continue
            lo = min(e for _, e in q.emitted) - 1
            s, e = q.context.windows_ending_between(mgr, lo, _FAR)
            now = set(zip(np.asarray(s, np.int64).tolist(), np.asarray(e, np.int64).tolist()))
            for k in [k for k in q.emitted if k not in now]:
                rows.append((q, k, q.emitted.pop(k)))
                q.retracted[k] = None
        if not rows:
            return None
        n = len(rows)
        part = WindowResults(
            names, object_array([q.id for q, _, _ in rows]), object_array([q.measure.value for q, _, _ in rows]),
            np.array([k[0] for _, k, _ in rows], np.int64), np.array([k[1] for _, k, _ in rows], np.int64),
            np.ones(n, bool), [[v[i] for _, _, v in rows] for i in range(len(names))],
            np.array([rank[q.id] + (len(rank) if self.scotty else 0) for q, _, _ in rows], np.int64),
            np.ones(n, bool))
        return WindowResults.concat(names, [part], by_query=self.scotty)

    def _emit_split(self, queries, mgr, prev, now, first_change, names, rank) -> list:
        """A query added since the last watermark emits every window that ended and holds
        records: as an update if it ended at or before the previous watermark."""
        old = [q for q in queries if not q.fresh]
        new = [q for q in queries if q.fresh]
        return [self._emit_measure(old, mgr, prev, now, first_change, names, rank),
                self._emit_measure(new, mgr, prev, now, first_change, names, rank, fresh=True)]

    def _emit_measure(self, queries, mgr, prev, now, first_change, names, rank,
                      fresh: bool = False) -> WindowResults | None:
        if not queries:
            return None
        st = mgr.store
        span = (int(st.starts[0]), mgr.frontier + 1)
        fam = [i for i, q in enumerate(queries) if q.window.periodic]
        rest = [i for i, q in enumerate(queries) if not q.window.periodic]
        blocks = ([self._sliding_block([queries[i] for i in fam], mgr, prev, now, first_change, span, fresh)]
                  if fam else [])
        blocks += [self._query_block(queries[i], mgr, prev, now, first_change, span, fresh) for i in rest]
        pos = np.concatenate([np.asarray(fam + rest, np.int64)[b[0]] if j == 0 and fam else
                              np.full(b[1].size, rest[j - bool(fam)], np.int64)
                              for j, b in enumerate(blocks)])
        s, e, upd = (np.concatenate([b[k] for b in blocks]) for k in (1, 2, 3))
        start_at = np.array([q.start_at for q in queries], np.int64)
        lo = np.searchsorted(st.starts, s, "left")
        hi = np.searchsorted(st.starts, e, "left")
        has = st.counts(lo, hi) > 0
        keep = has
        if self.scotty:          # empty tumbling and sliding time windows too; none before 0
            periodic = np.isin(pos, fam) & np.array([q.measure is TIME for q in queries])[pos]
            keep = (has | (periodic & ~upd)) & ~(periodic & (s < 0))
        ok = (s >= start_at[pos]) & keep
        pos, s, e, upd, lo, hi, has = pos[ok], s[ok], e[ok], upd[ok], lo[ok], hi[ok], has[ok]
        qid = np.array([q.id for q in queries], object)[pos]
        measure = np.array([q.measure.value for q in queries], object)[pos]
        order = np.array([rank[q.id] for q in queries], np.int64)[pos]
        if self.scotty:          # context-free queries first, each in registration order
            order = order + len(rank) * np.array([q.context is not None for q in queries], np.int64)[pos]
            res = WindowResults(names, qid, measure, s, e, upd, with_empty(st.query(lo[has], hi[has]), has), order)
        else:
            res = WindowResults(names, qid, measure, s, e, upd, st.query(lo, hi), order)
        for i in rest:
            if queries[i].context is not None:
                _remember(queries[i], res, np.flatnonzero(pos == i))
        return res

    def _sliding_block(self, qs, mgr, prev, now, first_change, span, fresh=False):
        """Tumbling and sliding queries, all at once: (query index, starts, ends, update)."""
        size = np.array([q.window.size for q in qs], np.int64)
        slide = np.array([q.window.slide for q in qs], np.int64)
        phase = np.array([(q.window.offset + q.window.size) % q.window.slide for q in qs], np.int64)
        cap = span[1] - 1 + size                        # windows starting at or before the newest record

        def ends_in(lo, hi):
            grp, ends = progression_points(slide, phase, lo, np.minimum(hi, cap))
            return grp, ends - size[grp], ends

        g, s, e = ends_in(span[0] if prev is None else max(prev, span[0]), now)
        upd = np.zeros(s.size, bool)
        if prev is not None:
            if fresh:                                   # every older window: the query is new
                ug, us, ue = ends_in(span[0], prev)
            elif qs[0].measure is COUNT:
                ug, us, ue = ends_in(max(first_change, span[0]), prev) if first_change is not None else (g[:0], s[:0], e[:0])
            else:
                ug, us, ue = ends_in(max(prev - self.allowed_lateness_ms, span[0]), prev)
                keep = _dirty(mgr.store, us, ue)
                ug, us, ue = ug[keep], us[keep], ue[keep]
            g, s, e = np.concatenate((g, ug)), np.concatenate((s, us)), np.concatenate((e, ue))
            upd = np.concatenate((upd, np.ones(us.size, bool)))
        return g, s, e, upd

    def _query_block(self, q, mgr, prev, now, first_change, span, fresh=False):
        """Any other query: (None, starts, ends, update)."""
        s, e = self._windows(q, mgr, span[0] if prev is None else max(prev, span[0]), now, span[1])
        upd = np.zeros(s.size, bool)
        if prev is not None:
            if fresh:
                us, ue = self._windows(q, mgr, span[0], prev, span[1])
            else:
                us, ue = self._changed(q, mgr, prev, span[0], span[1], first_change)
            s, e = np.concatenate((s, us)), np.concatenate((e, ue))
            upd = np.concatenate((upd, np.ones(us.size, bool)))
        return None, s, e, upd

    def _changed(self, q: Query, mgr, prev: int, base: int, limit: int, first_change):
        """Already emitted windows to emit again (see the module docstring)."""
        if q.measure is COUNT:  # positions from first_change on have shifted
            if first_change is None:
                return np.zeros(0, np.int64), np.zeros(0, np.int64)
            return self._windows(q, mgr, max(first_change, base), prev, limit)
        horizon = prev - self.allowed_lateness_ms
        s, e = self._windows(q, mgr, max(horizon, base), prev, limit)
        keep = _dirty(mgr.store, s, e)
        if q.context is None:
            return s[keep], e[keep]
        keep |= np.array([k not in q.emitted for k in zip(s.tolist(), e.tolist())], bool)
        hs, he = q.context.new_windows_ending_at(mgr, horizon)     # a record at the horizon is on time
        return (np.concatenate((s[keep], np.asarray(hs, np.int64))),
                np.concatenate((e[keep], np.asarray(he, np.int64))))

    @staticmethod
    def _windows(q: Query, mgr, lo: int, hi: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        if q.context is not None:
            s, e = q.context.windows_ending_between(mgr, lo, hi)
        else:
            reach = getattr(q.window, "size", None)
            hi = min(hi, limit + reach) if reach is not None else hi
            s, e = q.window.windows_ending_between(lo, hi) if hi > lo else (np.zeros(0), np.zeros(0))
        return np.asarray(s, np.int64), np.asarray(e, np.int64)

    # ------------------------------------------------------------------ reading the state
    def open_windows(self, time_mgr: SliceManager, count_mgr: CountSliceManager, names: list[str]
                     ) -> tuple[WindowResults, np.ndarray, np.ndarray]:
        """Windows that hold records and can still be emitted or updated, whatever the emission:
        per query, those its next watermarks may emit or update (time: ending after ``w - L``,
        each window type by its own rule, as emission; count: ending after the position of
        ``w - L``), from its coverage start on. ``(results ordered by (end, query, start), record
        count, pending)``; ``pending``: not yet emitted (see :class:`~slicer.results.OpenWindows`).
        Reads the state only."""
        rank = {qid: i for i, qid in enumerate(self.queries)}
        wm, parts, counts, pending = self.watermark, [], [], []
        for mgr, measure in ((time_mgr, TIME), (count_mgr, COUNT)):
            queries = self.of_measure(measure)
            if mgr is None or not mgr.store.n or not queries:
                continue
            st = mgr.store
            span = (int(st.starts[0]), mgr.frontier + 1)
            if measure is TIME:
                horizon, emitted_to = (None, None) if wm is None else (wm - self.allowed_lateness_ms, wm)
            else:
                horizon = None if wm is None else mgr.position_of_time(wm - self.allowed_lateness_ms)
                emitted_to = self.count_frontier
            lo = span[0] - 1 if horizon is None else max(horizon, span[0] - 1)
            for q in queries:
                s, e = self._windows(q, mgr, lo, _FAR, span[1])
                lo_i, hi_i = np.searchsorted(st.starts, s, "left"), np.searchsorted(st.starts, e, "left")
                n = st.counts(lo_i, hi_i)
                keep = (n > 0) & (s >= q.start_at)
                s, e, n, lo_i, hi_i = s[keep], e[keep], n[keep], lo_i[keep], hi_i[keep]
                if emitted_to is None or q.fresh:
                    todo = np.ones(s.size, bool)
                else:
                    ps, pe = self._windows(q, mgr, max(emitted_to, span[0] - 1), _FAR, span[1])
                    later = set(zip(ps.tolist(), pe.tolist()))
                    todo = np.array([w in later for w in zip(s.tolist(), e.tolist())], bool)
                k = s.size
                parts.append(WindowResults(names, object_array([q.id] * k), object_array([q.measure.value] * k), s, e,
                                           np.zeros(k, bool), st.query(lo_i, hi_i), np.full(k, rank[q.id], np.int64)))
                counts.append(n)
                pending.append(todo)
        if not parts:
            return WindowResults.concat(names, []), np.zeros(0, np.int64), np.zeros(0, bool)
        out = WindowResults.concat(names, parts, sort=False)
        order = np.lexsort((out.start, out.rank, out.end))
        return out.take(order), np.concatenate(counts)[order], np.concatenate(pending)[order]

    # ------------------------------------------------------------------ eviction
    def _evict(self, horizon: int, time_mgr: SliceManager, count_mgr: CountSliceManager) -> None:
        if time_mgr.store.n:
            for q in self.of_measure(TIME):     # windows starting before this are final
                if q.emitted or q.retracted:
                    open_ = self._open_start(q, time_mgr, horizon)
                    q.emitted = {k: v for k, v in q.emitted.items() if k[0] >= open_}
                    q.retracted = {k: None for k in q.retracted if k[1] > open_}   # later windows overlap it
            time_mgr.evict_before(self._cutoff(self.of_measure(TIME), time_mgr, horizon))
        if count_mgr.store.n:
            final = count_mgr.position_of_time(horizon)
            count_mgr.evict_before(self._cutoff(self.of_measure(COUNT), count_mgr, final))

    def _cutoff(self, queries: list[Query], mgr, horizon: int) -> int:
        """Smallest start of any window that can still be emitted or updated."""
        fam = [q.window for q in queries if q.window.periodic]
        cut = [horizon] + [self._open_start(q, mgr, horizon) for q in queries if not q.window.periodic]
        if fam:
            size = np.array([w.size for w in fam], np.int64)
            slide = np.array([w.slide for w in fam], np.int64)
            lo = horizon - size
            cut.append(int((lo + 1 + (np.array([w.offset for w in fam]) - lo - 1) % slide).min()))
        return min(cut)

    @staticmethod
    def _open_start(q: Query, mgr: Any, horizon: int) -> int:
        if q.context is not None:
            return q.context.earliest_open_start(mgr, horizon)
        return int(q.window.earliest_open_start(horizon))

    def get_state(self) -> dict:
        """Watermarks and every query: definition, coverage start, emitted windows, context."""
        return {"wm": self.watermark, "cf": self.count_frontier,
                "q": [(i, q.spec, q.start_at, q.fresh, q.emitted, None if q.context is None else q.context.get_state(),
                       q.retracted)
                      for i, q in self.queries.items()]}

    def set_state(self, state: dict, compile_window) -> None:
        self.watermark, self.count_frontier = state["wm"], state["cf"]
        self.queries = {}
        for i, spec, start_at, fresh, emitted, ctx, *rest in state["q"]:
            q = self.queries[i] = Query.of(i, spec, compile_window(spec), start_at)
            q.fresh, q.emitted = fresh, {k: (v if v is not None else ()) for k, v in emitted.items()}
            q.retracted = dict(rest[0]) if rest else {}
            if q.context is not None:
                q.context.set_state(ctx)
