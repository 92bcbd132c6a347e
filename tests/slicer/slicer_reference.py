"""Brute-force reference for the slicing engine, shared by the slicer tests (not a test module).

The reference keeps every accepted record and, at each watermark, enumerates each query's
windows from the records alone (``start <= t < end``; count windows by position in
(event time, arrival) order), with none of the engine's slices, contexts or eviction. The window
rules are Scotty's, written out record by record (``docs/semantics.md``): sessions join records
at most ``gap`` apart and are final once their end is strictly below the watermark; punctuation
windows ``[previous p, p)`` with the first one opened at the first record; slide-by-tuple windows
``[t_k, t_k + size)`` at records ``k = 0, slide, ...``; threshold frames; before the first
watermark a record more than the allowed lateness older than the newest earlier one is dropped.
``emission="scotty"`` (the default, as the engine's) adds empty tumbling and sliding windows,
drops negative starts and orders rows per query; ``emission="compact"`` (the Spark stage's) reports
windows with records only, ordered by (end, query, start). An emitted context-aware window whose
extent no longer exists is retracted first (a row with ``"retract"`` in the update slot and the
values it was emitted with); a window overlapping a retracted one not yet replaced is an update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dataflow_kafka.slicer import FixedBandWindow, PunctuationWindow, SlideByTupleWindow, ThresholdFrame
from dataflow_kafka.windowing import M4, AggregateFunction, Count, Max, Mean, Median, Min, Quantile, SessionWindow, SlidingWindow, Sum, TumblingWindow
from dataflow_kafka.slicer.compile import compile_window
from dataflow_kafka.slicer.windows import COUNT, measure_of


class Concat(AggregateFunction):
    """Non-commutative: concatenation in event-time order."""

    commutative = False

    def lift(self, v):
        return str(int(v))

    def combine(self, a, b):
        return a + b


def is_seven(values):
    return np.asarray(values) == 7


BUILTINS = [Sum(), Count(), Min(), Max(), Mean(), M4(), Median(), Quantile((0.25, 0.9))]


def ref_aggregate(fn, recs):
    """recs: list of (value, ts, seq) in (ts, seq) order."""
    v = [float(r[0]) for r in recs]
    name = type(fn).__name__
    if name == "Sum":       # a sum of integers is an integer
        return sum(r[0] for r in recs) if all(isinstance(r[0], int) for r in recs) else float(sum(v))
    if name == "Count":
        return len(v)
    if name == "Min":
        return min(v)
    if name == "Max":
        return max(v)
    if name == "Mean":
        return sum(v) / len(v)
    if name == "M4":
        return (min(v), max(v), v[0], v[-1])
    if name in ("Median", "Quantile"):
        q = np.quantile(np.array(v), fn.q)
        return tuple(q.tolist()) if np.ndim(q) else float(q)
    if name == "Concat":
        return "".join(str(int(x)) for x in v)
    raise AssertionError(name)


def _cf_windows(w, keys):
    out = set()
    if isinstance(w, FixedBandWindow):
        return {(w.start_ms, w.start_ms + w.size_ms)}
    w = compile_window(w)          # tumbling and sliding: size, slide, offset
    for t in keys:
        k_hi = (t - w.offset) // w.slide
        k_lo = -((-(t - w.offset - w.size + 1)) // w.slide)
        out.update((k * w.slide + w.offset, k * w.slide + w.offset + w.size) for k in range(k_lo, k_hi + 1))
    return out


def ref_windows(w, recs):
    """All windows of ``w`` over records sorted by (ts, seq): list of (start, end, members)."""
    if measure_of(compile_window(w)) is COUNT:
        idx = list(range(len(recs)))
        return [(s, e, recs[max(s, 0):max(e, 0)]) for s, e in _cf_windows(w, idx)]
    ts = [r[1] for r in recs]
    if isinstance(w, SessionWindow):        # Scotty: a distance of at most gap joins
        spans, cur = [], None
        for t in ts:
            if cur is not None and t - cur[1] <= w.gap_ms:
                cur[1] = t
            else:
                cur = [t, t]
                spans.append(cur)
        spans = [(a, b + w.gap_ms) for a, b in spans]
    elif isinstance(w, PunctuationWindow):  # [previous p, p), the first from the first record
        p = sorted({r[1] for r in recs if r[0] == 7})
        starts = ([ts[0]] if ts and p and ts[0] < p[0] else []) + p[:-1]
        spans = list(zip(starts, p[-len(starts):] if starts else []))
    elif isinstance(w, SlideByTupleWindow):
        spans = {(ts[k], ts[k] + w.size_ms) for k in range(0, len(ts), w.slide)}
    elif isinstance(w, ThresholdFrame):     # runs of value > threshold, closed by the next record
        spans, start = [], None
        for r in recs:
            if r[0] > w.threshold and start is None:
                start = r[1]
            elif r[0] <= w.threshold and start is not None:
                spans.append((start, r[1]))
                start = None
        spans = [(a, b) for a, b in spans if b > a]
    else:
        spans = _cf_windows(w, ts)
    return [(s, e, [r for r in recs if s <= r[1] < e]) for s, e in set(spans)]


def _is_count(window) -> bool:
    return measure_of(compile_window(window)) is COUNT


@dataclass
class RefQuery:
    window: object
    emitted: dict                   # (start, end) -> tuple of seqs last emitted
    start_at: int | None = None     # coverage start: windows starting before it are not reported
    fresh: bool = False             # added since the last watermark: emits every older window as an update
    since: int = 0                  # count windows: positions among the records with seq >= since
    cfront: int | None = None       # count windows: positions below the watermark at the last one
    shown: dict = None              # (start, end) -> values last emitted
    retracted: set = None           # retracted extents no emitted window overlapped yet


class Reference:
    """``windows``: a list (ids "0", "1", ...) or a dict {id: window}."""

    def __init__(self, windows, aggs, lateness, emission="scotty", drop_before_watermark=True):
        pairs = windows.items() if isinstance(windows, dict) else ((str(i), w) for i, w in enumerate(windows))
        self.queries = {qid: RefQuery(w, {}) for qid, w in pairs}
        self.aggs, self.allowed_lateness_ms, self.scotty = aggs, lateness, emission == "scotty"
        self.recs, self.wm, self.dropped, self.since = [], None, 0, set()
        self.newest = None      # newest accepted event time (lateness before the first watermark)
        self.early = drop_before_watermark
        self.time_since = 0     # the engine's time slices hold the records from this seq on

    def add_query(self, qid, window, start_at):
        """A query added at this point, reporting windows from ``start_at`` on. Count queries
        share one numbering of the records: the first count query numbers them from the next
        record on."""
        since, cfront = 0, None
        if _is_count(window):
            counting = [q for q in self.queries.values() if _is_count(q.window)]
            since = counting[0].since if counting else len(self.recs) + self.dropped
            cfront = counting[0].cfront if counting else None
        elif not any(not _is_count(q.window) for q in self.queries.values()):
            self.time_since = len(self.recs) + self.dropped   # slide-by-tuple numbers from here
        self.queries[qid] = RefQuery(window, {}, start_at, True, since, cfront)

    def remove_query(self, qid):
        del self.queries[qid]

    def records(self, values, ts):
        for v, t in zip(values, ts):
            bound = self.wm if self.wm is not None else self.newest if self.early else None
            if bound is not None and t < bound - self.allowed_lateness_ms:
                self.dropped += 1
                continue
            seq = len(self.recs) + self.dropped
            self.recs.append((v, int(t), seq))
            self.since.add(seq)
            self.newest = int(t) if self.newest is None else max(self.newest, int(t))

    def watermark(self, wm):
        wm = wm if self.wm is None else max(self.wm, wm)
        recs = sorted(self.recs, key=lambda r: (r[1], r[2]))
        out, retractions = [], []
        for qid, q in self.queries.items():
            prev = self.wm
            count = _is_count(q.window)
            mine = [r for r in recs if r[2] >= (q.since if count else self.time_since)]
            q.shown = {} if q.shown is None else q.shown
            q.retracted = set() if q.retracted is None else q.retracted
            if isinstance(q.window, CONTEXT_AWARE) and not q.fresh:
                now = {(s, e) for s, e, _ in ref_windows(q.window, mine)}
                for k in [k for k in q.emitted if k not in now]:
                    del q.emitted[k]
                    retractions.append((qid, k[0], k[1], "retract", q.shown.pop(k)))
                    q.retracted.add(k)
            n_now = sum(1 for r in mine if r[1] < wm)
            cfront = q.cfront
            empty = self.scotty and not count and isinstance(q.window, (TumblingWindow, SlidingWindow)) and mine
            for s, e, mem in ref_windows(q.window, mine) + (_empty_windows(q.window, mine, prev, wm) if empty else []):
                if q.start_at is not None and s < q.start_at:
                    continue
                if not mem and not (empty and s >= 0):
                    continue
                if empty and s < 0:
                    continue
                ids = tuple(r[2] for r in mem)
                trig = e + 1 if isinstance(q.window, SessionWindow) else e   # sessions: end strictly below
                if count:
                    new = e <= n_now and (cfront is None or e > cfront)
                    upd = cfront is not None and e <= cfront and (q.fresh or q.emitted.get((s, e)) != ids)
                else:
                    new = trig <= wm and (prev is None or trig > prev)
                    upd = prev is not None and trig <= prev and mem and (
                        q.fresh or prev - self.allowed_lateness_ms < trig and (
                            any(i in self.since for i in ids)
                            or (isinstance(q.window, CONTEXT_AWARE) and (s, e) not in q.emitted)))
                if new or upd:
                    q.emitted[(s, e)] = ids
                    vals = tuple(ref_aggregate(a, mem) if mem else None for a in self.aggs)
                    q.shown[(s, e)] = vals
                    out.append((qid, s, e, bool(upd), vals))
            replaced = {k for k in q.retracted for r in out if r[0] == qid and r[1] < k[1] and r[2] > k[0]}
            out = [r[:3] + (True,) + r[4:] if r[0] == qid and any(r[1] < k[1] and r[2] > k[0] for k in replaced)
                   else r for r in out]
            q.retracted -= replaced
            q.fresh, q.cfront = False, n_now
        self.wm, self.since = wm, set()
        if self.scotty:     # per query (context-free first, each in registration order), then by start
            rank = {qid: (isinstance(q.window, CONTEXT_AWARE), i) for i, (qid, q) in enumerate(self.queries.items())}
            key = lambda r: (rank[r[0]], r[1], r[2])       # noqa: E731
        else:
            key = lambda r: (r[2], r[0], r[1])             # noqa: E731
        return sorted(retractions, key=key) + sorted(out, key=key)


CONTEXT_AWARE = (SessionWindow, PunctuationWindow, SlideByTupleWindow, ThresholdFrame)


def _empty_windows(w, recs, prev, wm):
    """Scotty's empty tumbling / sliding windows: ending after the previous watermark (the first
    record before the first one) and by ``wm``, starting at or before the newest record."""
    lo = recs[0][1] if prev is None else max(prev, recs[0][1])
    newest = max(r[1] for r in recs)
    c = compile_window(w)
    out = []
    for k in range((lo - c.offset - c.size) // c.slide, (newest - c.offset) // c.slide + 1):
        s = k * c.slide + c.offset
        e = s + c.size
        if lo < e <= wm and s <= newest and not any(s <= r[1] < e for r in recs):
            out.append((s, e, []))
    return out


def close(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


def rows_of(results, qmap=None, keep_order=False):
    """Row tuples ``(query, start, end, update, values)`` of engine results (``"retract"`` in the
    update slot of a retraction), sorted by (end, query, start) unless ``keep_order``
    (retractions first either way, as the engine emits them)."""
    out = []
    for r in results:
        qi = r.query_id if qmap is None else qmap[r.query_id]
        out.append((qi, r.start, r.end, "retract" if r.retraction else r.update,
                    tuple(v.tolist() if isinstance(v, np.ndarray) else v for v in r.values)))
    return out if keep_order else sorted(out, key=row_order)


def row_order(r):
    """The compact order of row tuples: retractions first, then by (end, query, start)."""
    return (r[3] != "retract", r[2], r[0], r[1])


def same_rows(a, b) -> bool:
    """Two lists of row tuples are equal, floats within 1e-9 (a float never equals None)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if len(x) != len(y):
            return False
        for u, v in zip(x, y):
            if isinstance(u, float) or isinstance(v, float):
                if not (u is not None and v is not None and math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-9)):
                    return False
            elif u != v:
                return False
    return True
