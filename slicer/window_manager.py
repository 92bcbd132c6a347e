"""Window manager: queries, allowed lateness, emission (Scotty sections 5.3 step 3, 5.4.2).

On a watermark ``w`` (previous one ``p``, allowed lateness ``L``) it emits, per query:

* every window that ended since the last watermark, ``p < end <= w`` (``triggerWin``);
* updates of windows with ``p - L < end <= p``: those holding a slice that received records
  since ``p``, and, for context-aware windows, those whose extent was not emitted before
  (section 5.3: "outputs updates for these window aggregates").

Windows without records are not emitted. Window aggregates of all queries on one measure
are computed in one vectorised store query. Afterwards slices that no window can need any
more are evicted (records with time below ``w - L`` are dropped on arrival, so windows with
``end <= w - L`` are final).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slicer.context_windows import ContextAwareWindow, WindowContext
from slicer.results import WindowResults
from slicer.slice_manager import CountSliceManager, SliceManager
from slicer.windows import ContextFreeWindow, Count, Time, Window

__all__ = ["Query", "WindowManager"]

_NO_LIMIT = np.iinfo(np.int64).max


@dataclass
class Query:
    """A running window query; windows starting before ``start_at`` are not reported."""

    id: int
    window: Window
    start_at: int
    context: WindowContext | None = None
    emitted: dict = field(default_factory=dict)  # context-aware: (start, end) already emitted


class WindowManager:
    def __init__(self, max_lateness: int):
        self.max_lateness = max_lateness
        self.queries: dict[int, Query] = {}
        self.watermark: int | None = None
        self.count_frontier: int | None = None

    def of_measure(self, measure) -> list[Query]:
        return [q for q in self.queries.values() if q.window.measure is measure]

    # ------------------------------------------------------------------ emission
    def emit(self, wm: int, time_mgr: SliceManager, count_mgr: CountSliceManager,
             names: list[str]) -> WindowResults:
        prev = self.watermark
        wm = wm if prev is None else max(wm, prev)
        parts = []
        if time_mgr.store.n:
            parts.append(self._emit_measure(self.of_measure(Time), time_mgr, prev, wm, None, names))
        if count_mgr.store.n:
            n_now = count_mgr.position_of_time(wm)
            parts.append(self._emit_measure(self.of_measure(Count), count_mgr, self.count_frontier,
                                            n_now, count_mgr.first_change, names))
            self.count_frontier, count_mgr.first_change = n_now, None
        self.watermark = wm
        time_mgr.store.clear_dirty()
        self._evict(wm - self.max_lateness, time_mgr, count_mgr)
        return WindowResults.concat(names, [p for p in parts if p is not None])

    def _emit_measure(self, queries, mgr, prev, now, first_change, names) -> WindowResults | None:
        st = mgr.store
        base = int(st.starts[0])
        limit = mgr.frontier + 1
        rows = []
        for q in queries:
            new_lo = base if prev is None else max(prev, base)
            s, e = self._windows(q, mgr, new_lo, now, limit)
            upd = np.zeros(s.size, bool)
            if prev is not None:
                us, ue = self._changed(q, mgr, prev, base, limit, first_change)
                s, e = np.concatenate((s, us)), np.concatenate((e, ue))
                upd = np.concatenate((upd, np.ones(us.size, bool)))
            m = s >= q.start_at
            s, e, upd = s[m], e[m], upd[m]
            lo = np.searchsorted(st.starts, s, "left")
            hi = np.searchsorted(st.starts, e, "left")
            ok = st.counts(lo, hi) > 0
            if q.context is not None:
                q.emitted.update(dict.fromkeys(zip(s[ok].tolist(), e[ok].tolist())))
            rows.append((np.full(int(ok.sum()), q.id), s[ok], e[ok], upd[ok], lo[ok], hi[ok], q.window.measure.value))
        if not rows:
            return None
        qid, s, e, upd, lo, hi = (np.concatenate([r[i] for r in rows]) for i in range(6))
        measure = np.concatenate([np.full(r[0].size, r[6], object) for r in rows])
        return WindowResults(names, qid.astype(np.int64), measure, s, e, upd, st.query(lo, hi))

    def _changed(self, q: Query, mgr, prev: int, base: int, limit: int, first_change):
        """Already emitted windows to emit again (see the module docstring)."""
        if q.window.measure is Count:  # positions from first_change on have shifted
            if first_change is None:
                return np.zeros(0, np.int64), np.zeros(0, np.int64)
            return self._windows(q, mgr, max(first_change, base), prev, limit)
        st = mgr.store
        s, e = self._windows(q, mgr, max(prev - self.max_lateness, base), prev, limit)
        cd = np.concatenate(([0], np.cumsum(st.dirty)))
        keep = cd[np.searchsorted(st.starts, e, "left")] - cd[np.searchsorted(st.starts, s, "left")] > 0
        if q.context is not None:
            keep |= np.array([k not in q.emitted for k in zip(s.tolist(), e.tolist())], bool)
        return s[keep], e[keep]

    @staticmethod
    def _windows(q: Query, mgr, lo: int, hi: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        if q.context is not None:
            s, e = q.context.windows_ending_between(mgr, lo, hi)
        else:
            reach = getattr(q.window, "size", None)
            hi = min(hi, limit + reach) if reach is not None else hi
            s, e = q.window.windows_ending_between(lo, hi) if hi > lo else (np.zeros(0), np.zeros(0))
        return np.asarray(s, np.int64), np.asarray(e, np.int64)

    # ------------------------------------------------------------------ eviction
    def _evict(self, horizon: int, time_mgr: SliceManager, count_mgr: CountSliceManager) -> None:
        if time_mgr.store.n:
            cut = min([horizon] + [self._open_start(q, time_mgr, horizon) for q in self.of_measure(Time)])
            time_mgr.evict_before(cut)
            for q in self.of_measure(Time):
                q.emitted = {k: None for k in q.emitted if k[1] > horizon}
        if count_mgr.store.n:
            final = count_mgr.position_of_time(horizon)
            cut = min([final] + [self._open_start(q, count_mgr, final) for q in self.of_measure(Count)])
            count_mgr.evict_before(cut)

    @staticmethod
    def _open_start(q: Query, mgr: Any, horizon: int) -> int:
        if q.context is not None:
            return q.context.earliest_open_start(mgr, horizon)
        return int(q.window.earliest_open_start(horizon))

    def get_state(self) -> dict:
        return {"wm": self.watermark, "cf": self.count_frontier,
                "q": {i: (q.start_at, q.emitted, None if q.context is None else q.context.get_state())
                      for i, q in self.queries.items()}}

    def set_state(self, state: dict) -> None:
        self.watermark, self.count_frontier = state["wm"], state["cf"]
        for i, (start_at, emitted, ctx) in state["q"].items():
            q = self.queries[i]
            q.start_at, q.emitted = start_at, dict(emitted)
            if q.context is not None:
                q.context.set_state(ctx)
