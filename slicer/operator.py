"""The facade users talk to: :class:`SlicingWindowOperator` (Scotty section 9.1, Listing 1).

It wires the :class:`~slicer.stream_slicer.StreamSlicer` (fixed separators), the slice
managers (records into slices, splits, merges), the :class:`~slicer.window_manager.WindowManager`
(queries, lateness, emission) and the :class:`~slicer.store.AggregationStore`.

Example
-------
>>> import numpy as np
>>> from dataflow_kafka.windowing import Sum, TumblingWindow
>>> op = SlicingWindowOperator([TumblingWindow(1000)], [Sum()], allowed_lateness_ms=1000)
>>> op.process_elements(np.array([1.0, 2.0, 4.0]), np.array([100, 1500, 900]))
>>> [(r.start, r.end, r.value) for r in op.process_watermark(2000)]
[(0, 1000, 5.0), (1000, 2000, 2.0)]
>>> op.process_element(8.0, 1200)          # late, within the allowed lateness: an update
>>> [(r.start, r.end, r.value, r.update) for r in op.process_watermark(2100)]
[(1000, 2000, 10.0, True)]
>>> op.process_element(1.0, 500); op.dropped_late   # later than 2100 - 1000: dropped, counted
1

Queries are added and removed while running (ids are strings; the constructor's list gave
``"0"``); an added query covers the records the slices still hold (:mod:`slicer.coverage`):

>>> from dataflow_kafka.windowing import SlidingWindow
>>> op.add_window(SlidingWindow(2000, 1000), query_id="2s"), op.coverage_start("2s")  # slices from 1000 on
('2s', 1000)
>>> [(r.query_id, r.start, r.end, r.value) for r in op.process_watermark(4000)]
[('2s', 1000, 3000, 10.0)]
>>> op.remove_window("0")
"""

from __future__ import annotations

import enum
import pickle
from typing import Any

import numpy as np

from dataflow_kafka.slicer.compile import compile_window, is_builtin, kernel_for
from dataflow_kafka.slicer.coverage import NO_LIMIT, count_coverage, time_coverage
from dataflow_kafka.slicer.decision import record_reasons
from dataflow_kafka.slicer.lateness import too_late
from dataflow_kafka.slicer.results import OpenWindows, Slices, WindowResult, WindowResults, integral_sum
from dataflow_kafka.slicer.slice_manager import CountSliceManager, SliceManager
from dataflow_kafka.slicer.window_manager import Query, WindowManager
from dataflow_kafka.slicer.windows import COUNT, TIME, measure_of
from dataflow_kafka.windowing import AggregateFunction
from dataflow_kafka.windowing.commands import WindowQueries, check_query_id, initial_queries, next_query_id
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError, NotFoundError

__all__ = ["SlicingWindowOperator", "StreamOrder"]

_MAGIC = b"SLC2"


class StreamOrder(enum.Enum):
    IN_ORDER = "in_order"
    OUT_OF_ORDER = "out_of_order"

    @classmethod
    def parse(cls, value: "StreamOrder | str") -> "StreamOrder":
        try:
            return value if isinstance(value, StreamOrder) else cls(str(value).lower())
        except ValueError:
            raise InvalidArgumentError(f"stream_order={value!r}: expected 'in_order' or 'out_of_order'") from None


class SlicingWindowOperator(WindowQueries):
    """General stream slicing for many concurrent window queries over one stream (one key).

    Parameters
    ----------
    windows : list or dict, optional
        Window queries (:mod:`windowing` windows or slicer-only ones): a list gets ids ``"0"``,
        ``"1"``, ... (the index), a dict ``{id: window}`` names them. More with :meth:`add_window`.
    aggregations : list, optional
        :mod:`windowing` aggregations computed for every window (more with :meth:`add_aggregation`
        before the first record).
    allowed_lateness_ms : int
        After watermark ``w`` records with time below ``w - allowed_lateness_ms`` are dropped
        and counted in :attr:`dropped_late`; later records update windows.
    stream_order : {"out_of_order", "in_order"}
        ``in_order`` promises non-decreasing times (a violation raises ``ValueError``) and
        lets the decision tree drop records more often.
    store : {"lazy", "eager"}
        Lazy or eager aggregate store (see :mod:`slicer.store`).
    keep_records : bool, optional
        Force keeping records (then a query added while running covers every held record);
        by default the decision tree of section 5.1 decides.
    emission : {"scotty", "compact"}
        ``"scotty"`` (default; as Scotty reports windows, docs/semantics.md): empty tumbling and
        sliding time windows are emitted too, without a value (``None``; from the first record's
        window to the one holding the newest record: a watermark at the end of time emits no
        endless tail), tumbling and sliding windows never start before 0 (Scotty's time origin; a
        negative event time raises ``ValueError``), rows ordered per query (context-free ones
        first, each in registration order), then by start. ``"compact"`` (the Spark stage's and
        the keyed table's): windows with records only, any start, ordered by (end, query, start).

    drop_before_watermark : bool
        After watermark ``w`` a record older than ``w - allowed_lateness_ms`` is dropped and
        counted (:attr:`dropped_late`); before the first watermark (``True``, Scotty's rule) one
        older than the newest earlier record by more than ``allowed_lateness_ms``
        (:mod:`slicer.lateness`); ``False``: none (the Spark stage's choice, as Spark's).

    A ``Sum`` of integer values is an integer (exact while sums stay below 2**53).
    """

    def __init__(self, windows=None, aggregations=None, *, allowed_lateness_ms: int = 1000,
                 stream_order: StreamOrder | str = "out_of_order", store: str = "lazy",
                 keep_records: bool | None = None, emission: str = "scotty", drop_before_watermark: bool = True):
        if store not in ("lazy", "eager"):
            raise InvalidArgumentError(f"store={store!r}: expected 'lazy' or 'eager'")
        if emission not in ("scotty", "compact"):
            raise InvalidArgumentError(f"emission={emission!r}: expected 'scotty' or 'compact'")
        self.emission = emission
        self.drop_before_watermark = bool(drop_before_watermark)
        self.set_allowed_lateness(allowed_lateness_ms)
        self.stream_order = StreamOrder.parse(stream_order)
        self.store_kind = store
        self.keep_records = keep_records
        self.aggregations: list[AggregateFunction] = []
        self.windows = WindowManager(self.allowed_lateness_ms, scotty=emission == "scotty")
        self.dropped_late = 0
        self._integral = True           # every record so far had an integer value (Sum stays int)
        #: Window commands (:meth:`apply`) that did nothing: unknown id to remove, id to add taken.
        self.ignored_commands = 0
        self._next_id = 0
        self._seq = 0
        self._max_ts: int | None = None
        self._time: SliceManager | None = None
        self._count: CountSliceManager | None = None
        for fn in aggregations or ():
            self.add_aggregation(fn)
        for qid, w in initial_queries(windows):
            self.add_window(w, qid)

    # ------------------------------------------------------------------ configuration
    def set_allowed_lateness(self, ms: int) -> None:
        if isinstance(ms, bool) or not isinstance(ms, (int, np.integer)) or ms < 0:
            raise InvalidArgumentError(f"allowed_lateness_ms={ms!r}: expected an integer >= 0")
        self.allowed_lateness_ms = int(ms)
        if hasattr(self, "windows"):
            self.windows.allowed_lateness_ms = self.allowed_lateness_ms

    def add_aggregation(self, fn: AggregateFunction) -> None:
        if not isinstance(fn, AggregateFunction):
            raise ArgumentTypeError(f"add_aggregation({fn!r}): expected a windowing aggregation (AggregateFunction)")
        if self._time is not None:
            raise InvalidArgumentError("add_aggregation: aggregations are fixed once records were processed")
        self.aggregations.append(fn)

    @property
    def query_ids(self) -> list[str]:
        """Ids of the running queries, in order (construction, then additions)."""
        return list(self.windows.queries)

    def window(self, query_id: str):
        """The window definition of query ``query_id``."""
        return self.windows.queries[query_id].spec

    def coverage_start(self, query_id: str) -> int | None:
        """Windows of the query starting before this are never reported (``None``: no limit);
        see :mod:`slicer.coverage`."""
        start = self.windows.queries[query_id].start_at
        return None if start == NO_LIMIT else int(start)

    def add_window(self, window, query_id: str | None = None) -> str:
        """Add a query (a :mod:`windowing` window or a slicer-only one); returns its id (the next
        unused number as a string unless ``query_id`` names it). Added while running, it covers
        the records the slices still hold, from :meth:`coverage_start` on (:mod:`slicer.coverage`)."""
        runtime = compile_window(window)
        qid, self._next_id = next_query_id(self.windows.queries, query_id, self._next_id)
        q = Query.of(qid, window, runtime, NO_LIMIT)
        if self._time is None:                   # no record yet: nothing to cover
            q.fresh = self.windows.watermark is not None
            self.windows.queries[qid] = q
            return qid
        others = list(self.windows.queries.values())
        self.windows.queries[qid] = q
        if bool(self.record_reasons()) and self._time.tuples is None:
            del self.windows.queries[qid]
            raise InvalidArgumentError(f"add_window({window!r}) while running needs records that were not "
                             "kept; construct the operator with keep_records=True")
        if q.measure is COUNT and not any(o.measure is COUNT for o in others):
            self._count = self._manager(COUNT)       # positions count from the next record
            self.windows.count_frontier = None
        self._configure()
        if q.measure is COUNT:
            q.start_at = count_coverage(self._count, q)
        else:
            q.start_at = time_coverage(self._time, q, [o for o in others if o.measure is TIME], self._max_ts)
        q.fresh = True
        return qid

    def remove_window(self, query_id: str) -> None:
        """Stop query ``query_id`` (a ``KeyError`` names an unknown id); its windows are not
        emitted any more."""
        q = self.windows.queries.pop(check_query_id(query_id), None)
        if q is None:
            raise NotFoundError(f"remove_window({query_id!r}): no such query (queries: {self.query_ids})")
        if self._time is not None:
            if not self.windows.of_measure(q.measure):     # nothing feeds these slices any more
                setattr(self, "_count" if q.measure is COUNT else "_time", self._manager(q.measure))
                if q.measure is COUNT:
                    self.windows.count_frontier = None
            self._configure()

    def record_reasons(self) -> list[str]:
        """Why time-measure slices keep records (empty: partial aggregates only)."""
        reasons = record_reasons(list(self.windows.queries.values()), self.aggregations,
                                 self.stream_order is StreamOrder.IN_ORDER)
        return reasons + (["keep_records=True"] if self.keep_records else [])

    @property
    def stores_records(self) -> bool:
        return bool(self.record_reasons()) if self.keep_records is None else self.keep_records

    def _value_dtype(self):
        return np.float64 if all(is_builtin(a) for a in self.aggregations) else object

    def _manager(self, measure, keep: bool | None = None) -> SliceManager | CountSliceManager:
        kernels = [kernel_for(a) for a in self.aggregations]
        eager = self.store_kind == "eager"
        if measure is COUNT:
            return CountSliceManager(kernels, eager, self._value_dtype())
        keep = self.stores_records if keep is None else keep
        return SliceManager(kernels, eager, keep, self._value_dtype())

    def _start(self, keep: bool | None = None) -> None:
        if not self.aggregations:
            raise InvalidArgumentError("add_aggregation() before processing records")
        self._time, self._count = self._manager(TIME, keep), self._manager(COUNT)
        self._configure()

    def _configure(self) -> None:
        qs = list(self.windows.queries.values())
        for mgr, measure in ((self._time, TIME), (self._count, COUNT)):
            mgr.slicer.set_windows(q.window for q in qs if q.context is None and q.measure is measure)
        best: dict[str, Query] = {}
        contexts = []
        for q in qs:
            if q.context is None:
                continue
            group = q.window.slicing_group()
            if group is None:
                contexts.append(q.context)
            elif group[0] not in best or group[1] < best[group[0]].window.slicing_group()[1]:
                best[group[0]] = q
        self._time.contexts = contexts + [q.context for q in best.values()]

    # ------------------------------------------------------------------ processing
    def process_element(self, value: Any, ts: int) -> None:
        """Process one record with event time ``ts`` (ms)."""
        arr = np.empty(1, self._value_dtype())
        arr[0] = value
        self._process(arr, np.array([ts], np.int64), isinstance(value, (int, np.integer)))

    def process_elements(self, values, timestamps) -> None:
        """Process a batch (numpy or Arrow arrays, any order); the hot path is vectorised."""
        raw = np.asarray(values)
        self._process(raw.astype(self._value_dtype(), copy=False), np.asarray(timestamps, np.int64),
                      raw.dtype.kind in "iub")

    def _process(self, values: np.ndarray, ts: np.ndarray, integral: bool) -> None:
        if ts.shape != values.shape or ts.ndim != 1:
            raise InvalidArgumentError(f"values {values.shape} and timestamps {ts.shape}: expected equal 1-d shapes")
        if self._time is None:
            self._start()
        if self.emission == "scotty" and ts.size and ts.min() < 0:
            raise InvalidArgumentError(f"emission='scotty': event time {int(ts.min())} < 0 (Scotty's time starts at 0; "
                             "emission='compact' accepts negative times)")
        wm = self.windows.watermark
        if wm is None and not self.drop_before_watermark:
            late = np.zeros(ts.size, bool)
        else:
            late = too_late(ts, self.allowed_lateness_ms, wm, self._max_ts)
        if late.any():
            self.dropped_late += int(late.sum())
            ts, values = ts[~late], values[~late]
        if ts.size == 0:
            return
        self._integral &= bool(integral)
        if self.stream_order is StreamOrder.IN_ORDER:
            floor = self._max_ts if self._max_ts is not None else ts[0]
            if ts[0] < floor or np.any(ts[1:] < ts[:-1]):
                raise InvalidArgumentError("stream_order='in_order' but a record arrived out of order")
        seq = np.arange(self._seq, self._seq + ts.size, dtype=np.int64)
        self._seq += ts.size
        top = int(ts.max())
        self._max_ts = top if self._max_ts is None else max(self._max_ts, top)
        if self.windows.of_measure(TIME):
            self._time.process(values, ts, seq)
        if self.windows.of_measure(COUNT):
            self._count.process(values, ts, seq)

    def process_watermark_columns(self, ts: int) -> WindowResults:
        """Like :meth:`process_watermark`, as a columnar :class:`WindowResults`."""
        names = [a.name for a in self.aggregations]
        if self._time is None:
            self.windows.watermark = int(ts) if self.windows.watermark is None else max(self.windows.watermark, int(ts))
            return WindowResults.concat(names, [])
        out = self.windows.emit(int(ts), self._time, self._count, names)
        out.values = self._integers_kept(out.values)
        return out

    def process_watermark(self, ts: int) -> list[WindowResult]:
        """Windows that ended since the last watermark plus updates of emitted windows changed
        by late records: per query, then by start (``emission="compact"``: by (end, query order,
        start)), after the retractions of emitted windows whose extent no longer exists
        (:mod:`slicer.window_manager`); see the class."""
        return self.process_watermark_columns(ts).rows()

    # ------------------------------------------------------------------ reading the state
    @property
    def watermark(self) -> int | None:
        """The last watermark processed (``None``: none yet)."""
        return self.windows.watermark

    def slices(self) -> list[Slices]:
        """The slices that hold records, per measure in use (time first); read only."""
        out = []
        for mgr, measure in ((self._time, TIME), (self._count, COUNT)):
            if mgr is None or not mgr.store.n or not self.windows.of_measure(measure):
                continue
            flexible = measure is TIME and bool(mgr.contexts)       # a context may still move the last edge
            last = None if flexible else mgr.slicer.next_edge(int(mgr.store.starts[-1]))
            out.append(mgr.slices(measure.value, last))
        return out

    def open_windows(self) -> OpenWindows:
        """The windows that hold records and that later watermarks may still emit or update
        (:class:`~slicer.results.OpenWindows`), with their current aggregates; read only."""
        names = [a.name for a in self.aggregations]
        if self._time is None:
            return OpenWindows(WindowResults.concat(names, []), np.zeros(0, np.int64), np.zeros(0, bool))
        res, count, pending = self.windows.open_windows(self._time, self._count, names)
        res.values = self._integers_kept(res.values)
        return OpenWindows(res, count, pending)

    def _integers_kept(self, values: list) -> list:
        """Aggregate columns with integer results where the records were all integers and the
        aggregation keeps them (``Vectorised.keeps_integers``: a sum)."""
        if not self._integral:
            return values
        return [integral_sum(v) if a.vectorised is not None and a.vectorised.keeps_integers else v
                for a, v in zip(self.aggregations, values)]

    # ------------------------------------------------------------------ state
    def _config(self) -> dict:
        return {"lateness": self.allowed_lateness_ms, "order": self.stream_order.value, "store": self.store_kind,
                "keep": self.keep_records, "aggs": self.aggregations, "emission": self.emission,
                "early": self.drop_before_watermark,
                "windows": self.windows.get_state()["q"]}

    def to_bytes(self, include_config: bool = True) -> bytes:
        """Serialise the state (and, by default, the configuration) to bytes.

        The queries (also those added or removed while running) are state. A Spark processor
        keeps one configured operator and stores only ``to_bytes(include_config=False)`` per
        key, restoring with ``from_bytes(data, like=op)``.
        """
        state = {"next": self._next_id, "seq": self._seq, "max": self._max_ts, "dropped": self.dropped_late,
                 "ignored": self.ignored_commands, "integral": self._integral,
                 "keeps": None if self._time is None else self._time.tuples is not None,
                 "time": None if self._time is None else self._time.get_state(),
                 "count": None if self._count is None else self._count.get_state(),
                 "wm": self.windows.get_state()}
        payload = {"config": self._config() if include_config else None, "state": state}
        return _MAGIC + pickle.dumps(payload, protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes, like: "SlicingWindowOperator | None" = None) -> "SlicingWindowOperator":
        if data[:4] != _MAGIC:
            raise InvalidArgumentError("from_bytes: not a slicer state (bad header)")
        payload = pickle.loads(data[4:])
        cfg = payload["config"] or (like._config() if like is not None else None)
        if cfg is None:
            raise InvalidArgumentError("from_bytes: state has no configuration; pass like=<configured operator>")
        op = cls(allowed_lateness_ms=cfg["lateness"], stream_order=cfg["order"], store=cfg["store"],
                 keep_records=cfg["keep"], emission=cfg.get("emission", "compact"),
                 drop_before_watermark=cfg.get("early", False))
        op.aggregations = list(cfg["aggs"])
        st = payload["state"]
        op.windows.set_state(st["wm"], compile_window)
        op._next_id, op._seq, op._max_ts, op.dropped_late = st["next"], st["seq"], st["max"], st["dropped"]
        op.ignored_commands, op._integral = st["ignored"], st.get("integral", False)
        if st["time"] is not None:
            op._start(st["keeps"])
            op._time.set_state(st["time"])
            op._count.set_state(st["count"])
        return op
