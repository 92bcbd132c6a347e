"""All keys of a key group at once for session windows: one table of (key, session) aggregates.

:class:`~slicer.stage.SlicerStage` runs one :class:`~slicer.SlicingWindowOperator` per key for
sessions, which costs a fixed amount of Python per key and micro-batch (NEXMark Q11: one engine
per bidder, 79% of the Python workers' CPU). Sessions keep partial aggregates only, in order or
not (Scotty §6.2: slices are split only inside gaps between records, so a session is one slice
and needs no records), which makes them a table too: :class:`KeyedSessionOperator` holds one row
per (key, session) with its first and last record time and the components of its aggregates,
and does each batch in a fixed number of numpy calls, whatever the number of keys.

Semantics are those of one ``SlicingWindowOperator`` per key with one ``SessionWindow(gap)``
query, driven as the stage drives them (``emission="compact"``, ``drop_before_watermark=False``;
tested against it with hypothesis, ``tests/slicer/test_slicer_keyed_sessions.py``), Scotty's
rules (``docs/semantics.md``):

* a key's sessions are the runs of its accepted records in which consecutive event times are
  **at most** ``gap`` apart; a session is ``[first, last + gap)``;
* after watermark ``w`` a record with time below ``w - allowed_lateness_ms`` is dropped and
  counted per key (none before the first watermark); all keys share the group's watermark;
* on watermark ``w`` after ``p``: first the **retractions** (the sessions emitted before whose
  extent no longer exists, because a late record extended or fused them, with the values they
  were emitted with), then the sessions with ``p <= end < w`` (final: a record at ``end`` would
  still join), then, as updates, the sessions with ``p - allowed_lateness_ms <= end < p`` that
  got records since ``p`` or were not emitted with this extent; a session overlapping a
  retracted one is an update (it replaces it). Rows per key in that order, each part by (end,
  start); keys by code;
* a session ending before ``w - allowed_lateness_ms`` is final: no accepted record can reach it
  (it would be later than ``gap`` after its last record), so it is dropped from the table, and
  a key left without sessions is forgotten (it behaves exactly as a new key).

Aggregations: those with a :class:`~windowing.aggregations.Vectorised` form over reduced
components (:mod:`windowing.components`: Sum, Count, Min, Max, Mean, or any registered
:class:`~windowing.components.Reduced` one): a session row keeps one column per component, read
from the registry as :class:`~slicer.keyed.KeyedSlicingOperator`'s table does (a picked or
holistic component needs one engine per key). Floating-point sums may differ from the per-key
engine's in the last bits (records combine in another order). The session query can be removed while
running; a window added while running needs one engine per key (the stage reports the command
as an error). State: :meth:`KeyedSessionOperator.to_bytes`, a versioned header and one pickle
of numpy arrays.
"""

from __future__ import annotations

import pickle
from typing import Hashable

import numpy as np

from dataflow_kafka.slicer.key_codes import KeyCodes
from dataflow_kafka.slicer.results import OpenWindows, Slices, WindowResults, object_array
from dataflow_kafka.slicer.windows import TIME
from dataflow_kafka.windowing.components import Reduced, table_components
from dataflow_kafka.windowing.commands import WindowQueries, check_query_id
from dataflow_kafka.errors import CapacityError, InvalidArgumentError, NotFoundError

__all__ = ["KeyedSessionOperator"]

_MAGIC = b"SLS2"
_MAGIC_V1 = b"SLS1"         # fixed component columns cnt, sum, min, max: still read
_NO_LIMIT = int(np.iinfo(np.int64).min)
#: Columns of the session table (key code, first and last record time, got records since the last
#: watermark) and of the emitted sessions (key code, start, end), besides one per component.
_SESSIONS = ("kc", "first", "last", "dirty")
_EMITTED = ("kc", "start", "end")
_RETRACTED = ("kc", "start", "end")


class KeyedSessionOperator(KeyCodes, WindowQueries):
    """One session-window query with aggregations over reduced components (Sum, Count, Min, Max,
    Mean, ...) for many keys at once.

    ``template``: a configured :class:`~slicer.SlicingWindowOperator` that :meth:`supports`
    accepts (one ``SessionWindow`` query). Keys are any hashable values; a key's code is its
    position in :attr:`keys` (first-seen order), as in :class:`~slicer.keyed.KeyedSlicingOperator`.
    """

    #: Windows with records only (sessions always hold records), whatever the template's.
    emission = "compact"

    def __init__(self, template) -> None:
        if not self.supports(template):
            raise InvalidArgumentError("KeyedSessionOperator: needs one SessionWindow query, aggregations vectorised "
                                       "over reduced components (Sum, Count, Min, Max, Mean, ...), "
                                       "stream_order='out_of_order' and no forced record keeping")
        (q,) = template.windows.queries.values()
        self.allowed_lateness_ms = int(template.allowed_lateness_ms)
        self.aggregations = list(template.aggregations)
        #: The components a session row keeps (``count`` always), as registered.
        self.components = table_components(self.aggregations, (Reduced,))
        self.query_ids: list[str] = [q.id]
        self.specs: list = [q.spec]
        self.gap = int(q.window.session_gap)
        #: Window commands (:meth:`apply`) that did nothing: unknown id to remove, id to add taken.
        self.ignored_commands = 0
        self._reset_codes()
        self.watermark: int | None = None
        self._sessions = _empty(_SESSIONS, self.components)
        self._emitted = _empty(_EMITTED, self.components)
        self._retracted = _empty(_RETRACTED)

    @staticmethod
    def supports(template) -> bool:
        """Whether ``template`` (a :class:`~slicer.SlicingWindowOperator`) runs here unchanged."""
        qs = list(template.windows.queries.values())
        if len(qs) != 1 or not template.aggregations:
            return False
        (q,) = qs
        group = q.window.slicing_group() if q.context is not None else None
        return (group is not None and group[0] == "session" and q.measure is TIME and q.start_at == _NO_LIMIT
                and not q.fresh and table_components(template.aggregations, (Reduced,)) is not None
                and template.stream_order.value == "out_of_order" and not template.keep_records)

    # ------------------------------------------------------------------ queries at runtime
    def add_window(self, window, query_id: str | None = None) -> str:
        raise InvalidArgumentError(
            f"KeyedSessionOperator.add_window({window!r}): the keyed session table runs the session query it was "
            "built with; a stage that adds windows while running needs one engine per key (give it a second "
            "window or an aggregation the table does not run)")

    def remove_window(self, query_id: str) -> None:
        """Stop query ``query_id`` (a ``KeyError`` names an unknown id): its sessions are dropped and
        later records are not kept."""
        if query_id not in self.query_ids:
            raise NotFoundError(f"remove_window({query_id!r}): no such query (queries: {self.query_ids})")
        self.query_ids, self.specs = [], []
        self._sessions, self._emitted = _empty(_SESSIONS, self.components), _empty(_EMITTED, self.components)
        self._retracted = _empty(_RETRACTED)
        self._forget_idle_keys()

    def coverage_start(self, query_id: str, key: Hashable = None) -> int | None:
        """Windows of the query starting before this are never reported: ``None`` (no limit; the
        table's query ran from the start)."""
        check_query_id(query_id)
        if query_id not in self.query_ids:
            raise NotFoundError(f"coverage_start({query_id!r}): no such query (queries: {self.query_ids})")
        return None

    def _forget_idle_keys(self) -> None:
        tables = (self._sessions, self._emitted, self._retracted)
        remap = self._forget_unused(*(t["kc"] for t in tables))
        if remap is not None:
            for table in tables:
                table["kc"] = remap[table["kc"]]

    # ------------------------------------------------------------------ records
    def process_elements(self, codes: np.ndarray, values: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Add records (key codes from :meth:`codes_of`, values, event times; any order).
        Returns the number of records dropped as too late, per key code (length ``len(keys)``)."""
        dropped, codes, values, ts = self._drop_late(codes, values, ts)
        if ts.size == 0 or not self.query_ids:      # without a query records are not kept
            return dropped
        new = {"kc": codes, "first": ts, "last": ts, "dirty": np.ones(ts.size, bool),
               **{name: c.lifted(values) for name, c in self.components.items()}}
        rows = {n: np.concatenate([old, new[n]]) for n, old in self._sessions.items()}
        order = np.lexsort((rows["last"], rows["first"], rows["kc"]))
        rows = {n: a[order] for n, a in rows.items()}
        kc, first = rows["kc"], rows["first"]
        # a row starts a session when it is the key's first or begins more than ``gap`` after the
        # newest time of everything before it (Scotty: a distance of exactly ``gap`` joins)
        reach = _per_key_running_max(kc, rows["last"])
        new = np.ones(kc.size, bool)
        new[1:] = (kc[1:] != kc[:-1]) | (first[1:] - reach[:-1] > self.gap)
        at = np.flatnonzero(new)
        self._sessions = {"kc": kc[at], "first": first[at], "last": np.maximum.reduceat(rows["last"], at),
                          "dirty": np.logical_or.reduceat(rows["dirty"], at),
                          **{name: c.ufunc.reduceat(rows[name], at) for name, c in self.components.items()}}
        return dropped

    # ------------------------------------------------------------------ watermarks
    def process_watermark(self, wm: int) -> tuple[np.ndarray, WindowResults]:
        """Advance every key to watermark ``wm``: ``(keys, results)``, one row per retraction or
        session (see the module docstring for which and in what order), the key of each row in an
        object array. Afterwards final sessions are dropped and keys left without any forgotten
        (the other keys' codes may change)."""
        names = [a.name for a in self.aggregations]
        prev = self.watermark
        wm = int(wm) if prev is None else max(int(wm), prev)
        s = self._sessions
        end = s["last"] + self.gap
        # retractions: emitted extents that are no session any more
        em = self._emitted
        gone = ~_rows_in((em["kc"], em["start"], em["end"]), (s["kc"], s["first"], end))
        retract = {n: a[gone] for n, a in em.items()}
        self._emitted = em = {n: a[~gone] for n, a in em.items()}
        if gone.any():
            self._retracted = {n: np.concatenate([self._retracted[n], retract[n]]) for n in _RETRACTED}
        # sessions to emit: ended in [prev, wm); updates: ended in [prev - lateness, prev) and changed
        if prev is None:
            pick, upd = end < wm, np.zeros(end.size, bool)
        else:
            upd = (end >= prev - self.allowed_lateness_ms) & (end < prev)
            upd &= s["dirty"] | ~_rows_in((s["kc"], s["first"], end), (em["kc"], em["start"], em["end"]))
            pick = ((end >= prev) & (end < wm)) | upd
        rows = {n: s[n][pick] for n in ("kc", "first", *self.components)}
        rows["end"], upd = end[pick], upd[pick]
        upd |= self._replaces_retracted(rows["kc"], rows["first"], rows["end"])
        # remember what was emitted (an update replaces the entry of its extent)
        emitted_now = {"kc": rows["kc"], "start": rows["first"], "end": rows["end"],
                       **{n: rows[n] for n in self.components}}
        stale = _rows_in((em["kc"], em["start"], em["end"]), (rows["kc"], rows["first"], rows["end"]))
        self._emitted = {n: np.concatenate([em[n][~stale], emitted_now[n]]) for n in emitted_now}
        codes, results = self._results(names, retract, emitted_now, upd)
        keys = object_array(self.keys)[codes]
        self.watermark = wm
        self._sessions["dirty"][:] = False
        self._evict(wm - self.allowed_lateness_ms)
        self._forget_idle_keys()
        return keys, results

    def _replaces_retracted(self, kc: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Rows (sorted by key, then start; disjoint per key) that overlap a retracted extent of
        their key are updates; those extents are replaced (no longer waiting)."""
        rt = self._retracted
        out = np.zeros(kc.size, bool)
        if kc.size == 0 or rt["kc"].size == 0:
            return out
        lo_t, span = _time_frame(start, end, rt["start"], rt["end"])
        ends = _keyed_time(kc, end, lo_t, span)           # sorted: per key disjoint, by start
        starts = _keyed_time(kc, start, lo_t, span)
        lo = np.searchsorted(ends, _keyed_time(rt["kc"], rt["start"], lo_t, span), "right")    # first end > start
        hi = np.searchsorted(starts, _keyed_time(rt["kc"], rt["end"], lo_t, span), "left")     # first start >= end
        hit = hi > lo
        if hit.any():
            mark = np.zeros(kc.size + 1, np.int64)
            np.add.at(mark, lo[hit], 1)
            np.add.at(mark, hi[hit], -1)
            out = np.cumsum(mark[:-1]) > 0
            self._retracted = {n: a[~hit] for n, a in rt.items()}
        return out

    def _results(self, names, retract: dict, rows: dict, upd: np.ndarray) -> tuple[np.ndarray, WindowResults]:
        n_r, n = retract["kc"].size, rows["kc"].size
        if n_r + n == 0:
            return np.zeros(0, np.int64), WindowResults.concat(names, [])
        both = {c: np.concatenate([retract[c], rows[c]]) for c in (*_EMITTED, *self.components)}
        is_r = np.concatenate([np.ones(n_r, bool), np.zeros(n, bool)])
        order = np.lexsort((both["start"], both["end"], ~is_r, both["kc"]))
        both = {c: a[order] for c, a in both.items()}
        values = self._values(both)
        total = n_r + n
        res = WindowResults(names, np.full(total, self.query_ids[0], object), np.full(total, TIME.value, object),
                            both["start"], both["end"], np.concatenate([np.ones(n_r, bool), upd])[order], values,
                            np.zeros(total, np.int64), is_r[order])
        return both["kc"], res

    def _values(self, rows: dict) -> list:
        """Each aggregation's results for the rows' component columns."""
        parts = {name: rows[name] for name in self.components}
        return [a.from_components(parts) for a in self.aggregations]

    def _evict(self, horizon: int) -> None:
        """Drop final sessions (ending before ``horizon``) and what was emitted or retracted before
        each key's first open session (as ``WindowManager._evict`` with the session context's
        ``earliest_open_start``)."""
        s = self._sessions
        end = s["last"] + self.gap
        open_ = end >= horizon
        first_open = np.full(len(self.keys), horizon, np.int64)
        np.minimum.at(first_open, s["kc"][open_], s["first"][open_])
        self._sessions = {n: a[open_] for n, a in s.items()}
        em, rt = self._emitted, self._retracted
        keep = em["start"] >= first_open[em["kc"]]
        self._emitted = {n: a[keep] for n, a in em.items()}
        keep = rt["end"] > first_open[rt["kc"]]
        self._retracted = {n: a[keep] for n, a in rt.items()}

    # ------------------------------------------------------------------ reading the state
    def slices(self) -> Slices:
        """The table's partials: one per (key, session), which is all the table keeps (a session
        is one slice, Scotty §6.2: slices are split only in the gaps between records). ``start``
        and ``oldest``: its first record time, ``newest`` its last, ``end`` the start of the key's
        next session (``None`` for the key's last: open to later records), the bounds the per-key
        engine gives the same slice; ``keys`` the key of each. Read only."""
        s = self._sessions
        kc, first = s["kc"], s["first"]
        last_of_key = np.ones(kc.size, bool)
        last_of_key[:-1] = kc[1:] != kc[:-1]
        nxt = np.append(first[1:], 0)
        end = [None if closed else int(e) for e, closed in zip(nxt.tolist(), last_of_key.tolist())]
        return Slices(TIME.value, first.copy(), end, s["count"].copy(), first.copy(), s["last"].copy(),
                      object_array(self.keys)[kc])

    def open_windows(self) -> OpenWindows:
        """Every (key, session) of the table: each can still be emitted or updated (a session
        ending before ``watermark - allowed_lateness_ms`` is dropped at the watermark), with its
        record count and aggregates; ``pending``: its end is at or after the watermark (not
        emitted yet; sessions are emitted once the watermark passes their end). Rows by key code,
        then start (sessions of a key are disjoint). Read only."""
        names = [a.name for a in self.aggregations]
        s = self._sessions
        n = s["kc"].size
        if n == 0 or not self.query_ids:
            return OpenWindows(WindowResults.concat(names, []), np.zeros(0, np.int64), np.zeros(0, bool),
                               np.zeros(0, object))
        end = s["last"] + self.gap
        res = WindowResults(names, np.full(n, self.query_ids[0], object), np.full(n, TIME.value, object),
                            s["first"].copy(), end, np.zeros(n, bool), self._values(s), np.zeros(n, np.int64))
        pending = np.ones(n, bool) if self.watermark is None else end >= self.watermark
        return OpenWindows(res, s["count"].copy(), pending, object_array(self.keys)[s["kc"]])

    # ------------------------------------------------------------------ state
    def to_bytes(self) -> bytes:
        """The state (keys, watermark, query, sessions, emitted and retracted extents); the gap,
        aggregations and lateness come from the template."""
        return _MAGIC + pickle.dumps({"keys": self.keys, "wm": self.watermark, "ids": self.query_ids,
                                      "specs": self.specs, "ignored": self.ignored_commands,
                                      "sessions": self._sessions, "emitted": self._emitted,
                                      "retracted": self._retracted}, protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes, template) -> "KeyedSessionOperator":
        if data[:4] not in (_MAGIC, _MAGIC_V1):
            raise InvalidArgumentError("KeyedSessionOperator.from_bytes: not a keyed session state (bad header)")
        st = pickle.loads(data[4:])
        op = cls(template)
        if data[:4] == _MAGIC_V1:
            for table, structure in (("sessions", _SESSIONS), ("emitted", _EMITTED)):
                st[table] = _components_of_v1(st[table], structure, op.components)
        op._reset_codes(st["keys"])
        op.watermark, op.ignored_commands = st["wm"], st["ignored"]
        op.query_ids, op.specs = list(st["ids"]), list(st["specs"])
        op._sessions, op._emitted, op._retracted = st["sessions"], st["emitted"], st["retracted"]
        return op


def _empty(structure: tuple[str, ...], components: dict | None = None) -> dict[str, np.ndarray]:
    out = {c: np.zeros(0, bool if c == "dirty" else np.int64) for c in structure}
    out.update({name: np.zeros(0, c.dtype) for name, c in (components or {}).items()})
    return out


def _components_of_v1(table: dict, structure: tuple[str, ...], components: dict) -> dict:
    """A session or emitted table of a state written before the component registry (header
    ``SLS1``: columns ``cnt``, ``sum``, ``min``, ``max`` whatever the aggregations) with the
    columns of ``components``."""
    table = {**table, "count": table["cnt"]}
    return {n: table[n] for n in (*structure, *components)}


def _time_frame(*times: np.ndarray) -> tuple[int, int]:
    """``(lowest time, span)`` of the given times: ``key * span + (t - lowest)`` orders by (key, t)."""
    lo = min(int(t.min()) for t in times if t.size)
    hi = max(int(t.max()) for t in times if t.size)
    return lo, hi - lo + 1


def _keyed_time(kc: np.ndarray, t: np.ndarray, lo: int, span: int) -> np.ndarray:
    if kc.size and (int(kc.max()) + 1) * span >= (1 << 62):
        raise CapacityError("KeyedSessionOperator: too many keys for the time span of this batch")
    return kc * span + (t - lo)


def _per_key_running_max(kc: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Running maximum of ``t`` restarting at every key (rows sorted by key)."""
    if t.size == 0:
        return t
    lo, span = _time_frame(t)
    return np.maximum.accumulate(_keyed_time(kc, t, lo, span)) - kc * span + lo


def _rows_in(a: tuple, b: tuple) -> np.ndarray:
    """Which rows of the columns ``a`` (key code, start, end) are rows of ``b`` (rows unique in each)."""
    n = a[0].size
    if n == 0 or b[0].size == 0:
        return np.zeros(n, bool)
    cols = [np.concatenate((x, y)) for x, y in zip(a, b)]
    tag = np.concatenate((np.zeros(n, np.int8), np.ones(b[0].size, np.int8)))
    order = np.lexsort((tag, *reversed(cols)))
    same = np.ones(order.size - 1, bool)
    for c in cols:
        sc = c[order]
        same &= sc[1:] == sc[:-1]
    hit = same & (tag[order][:-1] == 0)
    out = np.zeros(order.size, bool)
    out[order[:-1][hit]] = True
    return out[:n]
