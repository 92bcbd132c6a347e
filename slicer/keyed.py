"""All keys of a key group at once: one table of (key, slice) partial aggregates.

:class:`~slicer.stage.SlicerStage` can keep one :class:`~slicer.SlicingWindowOperator` per
key, which costs a fixed amount of Python per key and micro-batch whatever the key's record
count: with thousands of keys per key group that, not the records, is the bill (figures:
docs/slicer.md, ``bench.slicer_keys``). For the workload where
it is possible, :class:`KeyedSlicingOperator` does the same work for every key of the group in a
fixed number of numpy calls:

* every window is a time ``TumblingWindow`` or ``SlidingWindow``: context free, so every
  slice edge is known a priori (Scotty section 4.4) and is the same for all keys: a slice is the
  span between consecutive edges of the queries' start and end progressions;
* every aggregation is vectorised over reduced or picked components (:mod:`windowing.components`:
  ``Sum``, ``Count``, ``Min``, ``Max``, ``Mean``, ``M4``, or any with such a ``vectorised`` form):
  distributive or algebraic, so slices keep partial aggregates only, no records, in order or not
  (section 5.1, Figure 6), and an out-of-order record just updates its slice (section 5.2: no
  split, no merge); the table keeps one column per component, read from the registry as the
  per-key kernel does (a picked one, M4's first and last: the record with the smallest or largest
  (event time, arrival), with its time and arrival number);
* ``stream_order="out_of_order"`` and records not forced to be kept.

The table holds one row per (key, slice) with records, sorted by (key, slice start). Window
aggregates are combined from the slices they cover (section 5.3 step 3) for all keys and windows
in one pass. :meth:`KeyedSlicingOperator.supports` says whether an operator's configuration
qualifies; :class:`~slicer.stage.SlicerStage` uses this class then, else one operator per key.

Semantics are exactly those of one :class:`~slicer.SlicingWindowOperator` per key driven as the
stage drives them (tested against it with hypothesis, ``tests/slicer/test_slicer_keyed.py``):
all keys share the group's watermark (a key seen for the first time starts at it); records with
``ts < watermark - allowed_lateness_ms`` are dropped and counted per key, none before the first
watermark (the stage's engines run with ``drop_before_watermark=False``, whatever the template
says); the emission is always ``"compact"`` (the stage's, whatever the template says: the
engine's default ``"scotty"`` would add a row per empty window and key): on watermark ``w``
after ``p`` a key emits its windows with ``p < end <= w`` that hold records, and, as updates,
its windows with ``p - allowed_lateness_ms < end <= p`` that got records since ``p``, ordered
by (key code, end, query, start); windows are ``[start, end)``, any start.
Floating-point sums may differ from the per-key operator's in the last bits (slices combine in
another order).

Queries added while running (:meth:`KeyedSlicingOperator.add_window`, ``apply(command)``; time
tumbling and sliding windows only) cover what the table still holds, from a **coverage start**
``C_k`` per key on (windows of key ``k`` starting before it are never reported), decided so that
which windows appear does not depend on which keys share a key group. ``C_k`` is the
latest of:

* ``U``, the same in every key group: the highest eviction cut so far (the first start, over the
  queries, of a window that can still change: it depends on the watermarks and the queries
  only, which every key group sees alike). Every accepted record from ``U`` on is in the table,
  except those the next bound names;
* the key's own bound: past its records the table could not keep (an evicted slice that a query
  added later had left coarser than the current edges; records that came while no query ran);
* the first start of the new query after its last edge ``e`` with ``slice start < e <= newest
  record`` in one of the key's held slices (the table keeps each slice's newest record time, not
  its records; adding ``TumblingWindow(2000)`` next to ``TumblingWindow(1000)``: no such edge).

:meth:`KeyedSlicingOperator.coverage_start` gives ``C_k`` (``key=``), or ``U`` at the add (a key
first seen later). The new query's first watermark emits all its ended windows with records,
those that ended by the previous watermark as updates. See :mod:`slicer.coverage` for the
per-key operator's rule, which also uses the oldest record time of a slice and has no ``U`` (so
it can cover more).
"""

from __future__ import annotations

import pickle
from typing import Hashable

import numpy as np

from dataflow_kafka.slicer.compile import compile_window
from dataflow_kafka.slicer.key_codes import KeyCodes
from dataflow_kafka.slicer.results import OpenWindows, Slices, WindowResults, object_array
from dataflow_kafka.slicer.windows import TIME, progression_points
from dataflow_kafka.windowing.components import Picked, Reduced, table_components
from dataflow_kafka.windowing.commands import WindowQueries, check_query_id, next_query_id
from dataflow_kafka.errors import CapacityError, InvalidArgumentError, NotFoundError

__all__ = ["KeyedSlicingOperator"]

_MAGIC = b"SLK3"
_MAGIC_V2 = b"SLK2"         # fixed columns cnt, sum, min, max (+ fv ft fs lv lt ls): still read
_NO_LIMIT = int(np.iinfo(np.int64).min)
#: The table's own columns per (key, slice), besides one per component.
_STRUCTURE = ("kc", "cell", "tmax", "dirty")
_PAIRS_PER_CHUNK = 1 << 20


class KeyedSlicingOperator(KeyCodes, WindowQueries):
    """Tumbling and sliding time windows with aggregations vectorised over reduced or picked
    components (Sum, Count, Min, Max, Mean, M4, ...) for many keys at once.

    ``template``: a configured :class:`~slicer.SlicingWindowOperator` (windows, aggregations,
    lateness) that :meth:`supports` accepts. Keys are any hashable values; a key's code is its
    position in :attr:`keys` (first-seen order). Queries (string ids, the template's first) are
    state: :meth:`add_window`, :meth:`remove_window` and :meth:`apply` change them while running.
    """

    #: Windows with records only, whatever the template's ``emission`` (see the module docstring).
    emission = "compact"

    def __init__(self, template) -> None:
        if not self.supports(template):
            raise InvalidArgumentError("KeyedSlicingOperator: needs time TumblingWindow/SlidingWindow queries, "
                                       "aggregations vectorised over reduced or picked components (Sum, Count, Min, "
                                       "Max, Mean, M4, ...), stream_order='out_of_order' and no forced record keeping")
        self.allowed_lateness_ms = int(template.allowed_lateness_ms)
        self.aggregations = list(template.aggregations)
        qs = list(template.windows.queries.values())
        self.query_ids: list[str] = [q.id for q in qs]
        self.specs: list = [q.spec for q in qs]
        self.size = np.array([q.window.size for q in qs], np.int64)
        self.slide = np.array([q.window.slide for q in qs], np.int64)
        self.offset = np.array([q.window.offset for q in qs], np.int64)
        self.start_at = np.full(len(qs), _NO_LIMIT, np.int64)   # coverage start per query: U at the add
        self.key_start: list[dict] = [{} for _ in qs]            # per query: key -> C_k beyond start_at
        self.fresh = np.zeros(len(qs), bool)                     # added since the last watermark
        #: Window commands (:meth:`apply`) that did nothing: unknown id to remove, id to add taken.
        self.ignored_commands = 0
        self._next_id = template._next_id
        self._held_from = _NO_LIMIT          # U (module docstring)
        self._held_key: dict = {}            # key -> its own bound beyond U
        self._rebuild()
        self._reset_codes()
        self.watermark: int | None = None
        #: The components the table keeps (``count`` always: whether a slice holds records).
        self.components = table_components(self.aggregations, (Reduced, Picked))
        self._seq = 0                            # arrival number of the next accepted record
        self._empty_table()

    def _rebuild(self) -> None:
        self._end_phase = (self.offset + self.size) % self.slide     # window ends = this (mod slide)
        # slice edges: the distinct (period, phase) progressions of all window starts and ends
        prog = sorted({(int(sl), int(o % sl)) for sl, o in zip(self.slide, self.offset)}
                      | {(int(sl), int(ph)) for sl, ph in zip(self.slide, self._end_phase)})
        self._periods = np.array([p for p, _ in prog], np.int64)
        self._phases = np.array([o for _, o in prog], np.int64)

    @staticmethod
    def supports(template) -> bool:
        """Whether ``template`` (a :class:`~slicer.SlicingWindowOperator`) runs here unchanged."""
        qs = list(template.windows.queries.values())
        return (bool(qs) and bool(template.aggregations)
                and all(q.window.periodic and q.measure is TIME and q.context is None
                        and q.start_at == _NO_LIMIT and not q.fresh for q in qs)
                and table_components(template.aggregations, (Reduced, Picked)) is not None
                and template.stream_order.value == "out_of_order" and not template.keep_records)

    # ------------------------------------------------------------------ queries at runtime
    def coverage_start(self, query_id: str, key: Hashable = None) -> int | None:
        """Windows of the query (of ``key``, if given) starting before this are never reported
        (``None``: no limit); see the module docstring."""
        i = self.query_ids.index(check_query_id(query_id))
        own = self.key_start[i].get(key, _NO_LIMIT) if key is not None else _NO_LIMIT
        start = max(int(self.start_at[i]), own)
        return None if start == _NO_LIMIT else start

    def add_window(self, window, query_id: str | None = None) -> str:
        """Add a time tumbling or sliding window query (see the module docstring); returns its id."""
        runtime = compile_window(window)
        if not (runtime.periodic and runtime.measure is TIME):
            raise InvalidArgumentError(f"KeyedSlicingOperator.add_window({window!r}): only time TumblingWindow / SlidingWindow "
                             "queries (use one SlicingWindowOperator per key for others)")
        qid, self._next_id = next_query_id(self.query_ids, query_id, self._next_id)
        self.key_start.append(self._coverage(runtime))
        self.query_ids.append(qid)
        self.specs.append(window)
        for name, v in (("size", runtime.size), ("slide", runtime.slide), ("offset", runtime.offset),
                        ("start_at", self._held_from), ("fresh", True)):
            setattr(self, name, np.append(getattr(self, name), v))
        self._rebuild()
        return qid

    def remove_window(self, query_id: str) -> None:
        """Stop query ``query_id`` (a ``KeyError`` names an unknown id)."""
        if query_id not in self.query_ids:
            raise NotFoundError(f"remove_window({query_id!r}): no such query (queries: {self.query_ids})")
        i = self.query_ids.index(query_id)
        del self.query_ids[i], self.specs[i], self.key_start[i]
        for name in ("size", "slide", "offset", "start_at", "fresh"):
            setattr(self, name, np.delete(getattr(self, name), i))
        self._rebuild()
        if not self.query_ids:                   # nothing needs the table any more
            self._hold_past(self.kc, self.tmax)
            self._empty_table()

    def _hold_past(self, codes: np.ndarray, ts: np.ndarray) -> None:
        """Records of these key codes up to these times are not in the table: each key's own
        coverage bound moves past them (module docstring)."""
        if codes.size == 0:
            return
        top = np.full(len(self.keys), _NO_LIMIT, np.int64)
        np.maximum.at(top, codes, ts)
        seen = np.zeros(len(self.keys), bool)
        seen[codes] = True
        for c in np.flatnonzero(seen & (top >= self._held_from)).tolist():
            key = self.keys[c]
            self._held_key[key] = max(self._held_key.get(key, _NO_LIMIT), int(top[c]) + 1)

    def _coverage(self, w: PeriodicWindow) -> dict:
        """Per key, its coverage start for the new query ``w`` where it is past ``U``: the key's
        own bound, and the first window start of ``w`` after its last edge that falls inside one
        of the key's held slices' records (``(cell, tmax]``)."""
        out = {k: c for k, c in self._held_key.items() if c > self._held_from}
        if self.kc.size == 0 or not self.query_ids:
            return out
        ph = np.array([w.offset % w.slide, (w.offset + w.size) % w.slide], np.int64)
        inner = (self.tmax[None, :] - (self.tmax[None, :] - ph[:, None]) % w.slide).max(axis=0)
        cut = inner > self.cell                   # the latest new edge at or before tmax
        if not cut.any():
            return out
        m = np.full(len(self.keys), _NO_LIMIT, np.int64)
        np.maximum.at(m, self.kc[cut], inner[cut])
        for c in np.flatnonzero(m != _NO_LIMIT).tolist():
            first = int(m[c]) + 1 + (w.offset - int(m[c]) - 1) % w.slide
            if first > self._held_from:
                out[self.keys[c]] = max(out.get(self.keys[c], _NO_LIMIT), first)
        return out

    # ------------------------------------------------------------------ table
    def _empty_table(self) -> None:
        self.kc = np.zeros(0, np.int64)          # key code
        self.cell = np.zeros(0, np.int64)        # slice start (ms)
        self.tmax = np.zeros(0, np.int64)        # newest record time (a query added later cuts before it)
        self.dirty = np.zeros(0, bool)           # received records since the last watermark
        #: Per component: one array (reduced), or value, event time and arrival of the pick (picked).
        self.parts: dict = {name: np.zeros(0, c.dtype) if isinstance(c, Reduced)
                            else (np.zeros(0, np.float64), np.zeros(0, np.int64), np.zeros(0, np.int64))
                            for name, c in self.components.items()}

    @property
    def cnt(self) -> np.ndarray:
        """Records per (key, slice) row: the ``count`` component."""
        return self.parts["count"]

    def slice_start(self, ts: np.ndarray) -> np.ndarray:
        """Start of the slice holding each time: the latest edge at or before it."""
        ts = np.asarray(ts, np.int64)
        out = np.empty_like(ts)
        step = max(1, _PAIRS_PER_CHUNK // len(self._periods))   # bounds the (edge, record) matrix
        for lo in range(0, ts.size, step):
            t = ts[None, lo:lo + step]
            out[lo:lo + step] = (t - (t - self._phases[:, None]) % self._periods[:, None]).max(axis=0)
        return out

    # ------------------------------------------------------------------ records
    def process_elements(self, codes: np.ndarray, values: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Add records (key codes from :meth:`codes_of`, values, event times; any order).
        Returns the number of records dropped as too late, per key code (length ``len(keys)``)."""
        dropped, codes, values, ts = self._drop_late(codes, values, ts)
        if ts.size == 0:
            return dropped
        if not self.query_ids:                   # not kept: a query added later starts past them
            self._hold_past(codes, ts)
            return dropped
        seq = np.arange(self._seq, self._seq + ts.size, dtype=np.int64)   # arrival order (M4 ties)
        self._seq += int(ts.size)
        cells = self.slice_start(ts)
        kc = kc_unsorted = np.concatenate([self.kc, codes])
        cell = cell_unsorted = np.concatenate([self.cell, cells])
        order = np.lexsort((cell, kc))
        kc, cell = kc[order], cell[order]
        new = np.ones(kc.size, bool)
        new[1:] = (kc[1:] != kc[:-1]) | (cell[1:] != cell[:-1])
        starts = np.flatnonzero(new)
        tmx = np.concatenate([self.tmax, ts])[order]
        dirty = np.concatenate([self.dirty, np.ones(ts.size, bool)])[order]
        self.kc, self.cell = kc[starts], cell[starts]
        self.tmax = np.maximum.reduceat(tmx, starts)
        self.dirty = np.logical_or.reduceat(dirty, starts)
        ends = np.append(starts[1:], kc.size) - 1
        for name, c in self.components.items():
            old = self.parts[name]
            if isinstance(c, Reduced):
                self.parts[name] = c.ufunc.reduceat(np.concatenate([old, c.lifted(values)])[order], starts)
                continue
            # the picked record of each slice by (event time, arrival): the group structure is the
            # same in any order sorted by (key, cell) first, so the group starts and ends carry over
            v, t, q = (np.concatenate([o, new]) for o, new in zip(old, (values, ts, seq)))
            o = np.lexsort((q, t, cell_unsorted, kc_unsorted))[ends if c.latest else starts]
            self.parts[name] = (v[o], t[o], q[o])
        return dropped

    # ------------------------------------------------------------------ watermarks
    def process_watermark(self, wm: int) -> tuple[np.ndarray, WindowResults]:
        """Advance every key to watermark ``wm``: ``(keys, results)``, one row per window, the
        key of each row in an object array (rows ordered by key code, then end, query order,
        start); ``update`` as in the per-key operator; a query added since the last watermark
        emits every window that ended and holds records (updates: those that ended by the
        previous watermark). Afterwards keys left without slices are
        forgotten (they behave exactly as new keys) and the other keys' codes may change."""
        names = [a.name for a in self.aggregations]
        prev = self.watermark
        wm = int(wm) if prev is None else max(int(wm), prev)
        if self.kc.size == 0:
            self.watermark = wm
            self.fresh[:] = False
            self._evict(wm - self.allowed_lateness_ms)       # U moves in every key group alike
            self._forget_idle_keys()
            return np.zeros(0, object), WindowResults.concat(names, [])
        lo_data, hi_data = int(self.cell.min()), int(self.cell.max())
        # windows (query index, start, end) ending in (prev, wm]: emitted if they hold records
        lo = lo_data if prev is None else max(prev, lo_data)
        q, e = progression_points(self.slide, self._end_phase, lo,
                                  np.minimum(wm, hi_data + self.size))
        upd = np.zeros(e.size, bool)
        if prev is not None:     # windows ending in (prev - lateness, prev]: updates if they got records;
            # a query added since the last watermark: every older window with records
            ulo = np.where(self.fresh, lo_data, max(prev - self.allowed_lateness_ms, lo_data))
            uq, ue = progression_points(self.slide, self._end_phase, ulo, np.minimum(prev, hi_data + self.size))
            q, e = np.concatenate([q, uq]), np.concatenate([e, ue])
            upd = np.concatenate([upd, np.ones(ue.size, bool)])
        s = e - self.size[q]
        if (self.start_at != _NO_LIMIT).any():
            covered = s >= self.start_at[q]
            q, s, e, upd = q[covered], s[covered], e[covered], upd[covered]
        own = self._own_starts()
        changed = upd & ~self.fresh[q]           # updates that need records since the last watermark
        self.fresh[:] = False
        codes, results, _ = self._windows(q, s, e, upd, names, changed, own)
        keys = object_array(self.keys)[codes]
        self.watermark = wm
        self.dirty[:] = False
        self._evict(wm - self.allowed_lateness_ms)
        self._forget_idle_keys()
        return keys, results

    def _forget_idle_keys(self) -> None:
        remap = self._forget_unused(self.kc)
        if remap is not None:
            self.kc = remap[self.kc]

    def _own_starts(self) -> np.ndarray | None:
        """``[query, key code]`` -> the key's coverage start where it is past the query's (None: none is)."""
        if not any(self.key_start):
            return None
        out = np.full((len(self.query_ids), len(self.keys)), _NO_LIMIT, np.int64)
        for i, starts in enumerate(self.key_start):
            for key, c in starts.items():
                code = self._codes.get(key)
                if code is not None:
                    out[i, code] = c
        return out

    def _windows(self, q, s, e, upd, names, changed, own=None) -> tuple[np.ndarray, WindowResults, np.ndarray]:
        """Aggregates of every (key, window) pair that holds records (``changed``: that got
        records since the last watermark), and, with ``own`` (:meth:`_own_starts`), that start at
        or after the key's own coverage start: ``(key codes, results, record counts)``."""
        keys = np.flatnonzero(np.bincount(self.kc, minlength=len(self.keys)))
        n_w = e.size
        if n_w == 0 or keys.size == 0:
            return np.zeros(0, np.int64), WindowResults.concat(names, []), np.zeros(0, np.int64)
        # position of (key, time) in the table, sorted by (key, cell): one searchsorted per bound
        base = int(min(self.cell.min(), s.min()))
        shift = max(1, int(max(self.cell.max(), e.max()) - base + 1).bit_length())
        if keys.max() >= (1 << (62 - shift)):
            raise CapacityError("KeyedSlicingOperator: too many keys for the time span of this batch")
        comp = (self.kc << shift) | (self.cell - base)
        cum = np.concatenate(([0], np.cumsum(self.cnt)))
        cdirty = np.concatenate(([0], np.cumsum(self.dirty)))
        found = []
        step = max(1, _PAIRS_PER_CHUNK // n_w)      # bounds the (key, window) temporaries
        for first in range(0, keys.size, step):
            chunk = keys[first:first + step]
            kk = np.repeat(chunk, n_w)
            w = np.tile(np.arange(n_w), chunk.size)
            lo = np.searchsorted(comp, (kk << shift) | (s[w] - base), "left")
            hi = np.searchsorted(comp, (kk << shift) | (e[w] - base), "left")
            ok = np.where(changed[w], cdirty[hi] > cdirty[lo], cum[hi] > cum[lo])
            if own is not None:
                ok &= s[w] >= own[q[w], kk]
            found.append((kk[ok], w[ok], lo[ok], hi[ok]))
        kk, w, lo, hi = (np.concatenate([f[i] for f in found]) for i in range(4))
        order = np.lexsort((s[w], q[w], e[w], kk))
        kk, w, lo, hi = kk[order], w[order], lo[order], hi[order]
        count = cum[hi] - cum[lo]
        parts = _Parts({name: (lambda c=c, name=name: self._range_parts(name, c, lo, hi))
                        for name, c in self.components.items()})
        values = [a.from_components(parts) for a in self.aggregations]
        res = WindowResults(names, object_array(self.query_ids)[q[w]], np.full(kk.size, TIME.value, object),
                            s[w], e[w], upd[w].copy(), values, q[w])
        return kk, res, count

    # ------------------------------------------------------------------ reading the state
    def slices(self) -> Slices:
        """The table's slices (each holds records), ``keys`` the key of each; a slice ends at the
        next edge of the queries' grid. Read only."""
        cell = self.cell
        nxt = (cell[None, :] + 1 + (self._phases[:, None] - cell[None, :] - 1) % self._periods[:, None]).min(axis=0) \
            if cell.size else np.zeros(0, np.int64)
        return Slices(TIME.value, cell.copy(), nxt.tolist(), self.cnt.copy(), None, self.tmax.copy(),
                      object_array(self.keys)[self.kc])

    def open_windows(self) -> OpenWindows:
        """Every (key, window) that holds records and that later watermarks may still emit or
        update: ending after ``watermark - allowed_lateness_ms``, from the coverage starts on
        (:class:`~slicer.results.OpenWindows`; rows by key code, end, query, start). Read only."""
        names = [a.name for a in self.aggregations]
        empty = OpenWindows(WindowResults.concat(names, []), np.zeros(0, np.int64), np.zeros(0, bool),
                            np.zeros(0, object))
        if self.kc.size == 0 or not self.query_ids:
            return empty
        lo_data, hi_data = int(self.cell.min()), int(self.cell.max())
        wm = self.watermark
        lo = lo_data if wm is None else max(wm - self.allowed_lateness_ms, lo_data)
        q, e = progression_points(self.slide, self._end_phase, lo, hi_data + self.size)
        s = e - self.size[q]
        covered = s >= self.start_at[q]
        q, s, e = q[covered], s[covered], e[covered]
        none = np.zeros(e.size, bool)
        codes, res, count = self._windows(q, s, e, none, names, none, self._own_starts())
        pending = self.fresh[res.rank] | (True if wm is None else res.end > wm)
        return OpenWindows(res, count, np.broadcast_to(pending, (len(res),)).copy(), object_array(self.keys)[codes])

    def _range_parts(self, name: str, c: Reduced | Picked, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Component ``name`` of each slice range ``[lo, hi)`` of the table: a reduced one reduced;
        a picked one, the value of the slice whose picked record has the smallest (first) or largest
        (last) (event time, arrival) rank, as the per-key kernel picks."""
        if isinstance(c, Reduced):
            return _range_reduce(c.ufunc, self.parts[name], lo, hi)
        v, t, q = self.parts[name]
        by_rank = np.lexsort((q, t))
        rank = np.empty_like(by_rank)
        rank[by_rank] = np.arange(by_rank.size)
        best = _range_reduce(np.maximum if c.latest else np.minimum, rank, lo, hi)
        return v[by_rank[best]]

    def _evict(self, horizon: int) -> None:
        """Drop slices no window that can still be emitted or updated needs: every window of
        query ``i`` ending after ``horizon`` starts at or after its first start past
        ``horizon - size_i`` (as ``WindowManager._cutoff``)."""
        if not self.query_ids:
            return
        low = horizon - self.size
        cut = int((low + 1 + (self.offset - low - 1) % self.slide).min())
        self._held_from = max(self._held_from, cut)      # U: the same in every key group
        keep = self.cell >= cut
        if not keep.all():     # a slice cut by a query added later may hold records past ``cut``
            self._hold_past(self.kc[~keep], self.tmax[~keep])
            for name in _STRUCTURE:
                setattr(self, name, getattr(self, name)[keep])
            self.parts = {name: tuple(a[keep] for a in v) if isinstance(v, tuple) else v[keep]
                          for name, v in self.parts.items()}
        u = self._held_from                              # per-key bounds U has overtaken: not needed
        self._held_key = {k: c for k, c in self._held_key.items() if c > u}
        self.key_start = [{k: c for k, c in ks.items() if c > u} for ks in self.key_start]

    # ------------------------------------------------------------------ state
    def to_bytes(self) -> bytes:
        """The state (keys, watermark, queries, table); aggregations and lateness come from the
        template."""
        table = {n: getattr(self, n) for n in _STRUCTURE}
        queries = {"ids": self.query_ids, "specs": self.specs, "start_at": self.start_at, "fresh": self.fresh,
                   "next": self._next_id, "held": self._held_from, "held_key": self._held_key,
                   "key_start": self.key_start, "ignored": self.ignored_commands}
        return _MAGIC + pickle.dumps({"keys": self.keys, "wm": self.watermark, "seq": self._seq, "table": table,
                                      "parts": self.parts, "queries": queries}, protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes, template) -> "KeyedSlicingOperator":
        if data[:4] not in (_MAGIC, _MAGIC_V2):
            raise InvalidArgumentError("KeyedSlicingOperator.from_bytes: not a keyed slicer state (bad header)")
        st = pickle.loads(data[4:])
        if data[:4] == _MAGIC_V2:
            st["parts"] = _parts_of_v2(st["table"])
        op = cls(template)
        op._reset_codes(st["keys"])
        op.watermark, op._seq = st["wm"], st["seq"]
        qs = st["queries"]
        op.query_ids, op.specs = list(qs["ids"]), list(qs["specs"])
        runtimes = [compile_window(w) for w in op.specs]
        op.size = np.array([w.size for w in runtimes], np.int64)
        op.slide = np.array([w.slide for w in runtimes], np.int64)
        op.offset = np.array([w.offset for w in runtimes], np.int64)
        op.start_at, op.fresh = qs["start_at"].copy(), qs["fresh"].copy()
        op._next_id, op._held_from, op.ignored_commands = qs["next"], qs["held"], qs["ignored"]
        op._held_key = dict(qs.get("held_key", {}))
        op.key_start = [dict(d) for d in qs.get("key_start", [{} for _ in op.query_ids])]
        op._rebuild()
        for name in _STRUCTURE:
            setattr(op, name, st["table"][name])
        op.parts = {name: st["parts"][name] for name in op.components}
        return op


def _range_reduce(ufunc, arr: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``ufunc.reduce(arr[lo[i]:hi[i]])`` for non-empty ranges, in one ``reduceat`` call."""
    if lo.size == 0:
        return np.zeros(0, arr.dtype)
    padded = np.append(arr, arr[:1])              # hi may equal len(arr)
    idx = np.empty(2 * lo.size, np.int64)
    idx[0::2], idx[1::2] = lo, hi
    return ufunc.reduceat(padded, idx)[0::2]


def _parts_of_v2(table: dict) -> dict:
    """The components of a state written before the component registry (header ``SLK2``)."""
    parts = {"count": table["cnt"], "sum": table["sum"], "min": table["min"], "max": table["max"]}
    for name, c in (("first", "f"), ("last", "l")):
        if c + "v" in table:
            parts[name] = (table[c + "v"], table[c + "t"], table[c + "s"])
    return parts


class _Parts(dict):
    """Component arrays computed on first use (``{name: () -> array}``)."""

    def __init__(self, make: dict) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, name: str) -> np.ndarray:
        value = self[name] = self._make[name]()
        return value
