"""Several window queries over one keyed stream, added and removed while running.

:class:`MultiQueryDriver` runs the Dataflow Model (Akidau et al., VLDB 2015, §2.2 Windowing to §2.4
Examples) for several window queries that share one trigger, accumulation mode, combiner, allowed
lateness and output-timestamp rule: one :class:`~watermarks.TriggerDriver` per query, all advanced
together, in one state blob. Panes carry their query's id (``Pane.query_id``). Queries have string
ids (a list at construction gets ``"0"``, ``"1"``, ...; a dict names them) and change at runtime
with :meth:`~MultiQueryDriver.add_window`, :meth:`~MultiQueryDriver.remove_window` or a parsed
control command (``apply``, :func:`windowing.parse_command`).

What the state keeps for a query added later
--------------------------------------------
The drivers keep one accumulator per live window, not the elements, so a new query cannot be
computed from them. The driver therefore keeps an **element history** per key: every input
``(value, event_time_ms)`` until the watermark passes ``event_time_ms + history_ms``.
``history_ms`` defaults to the allowed lateness plus the longest window of the configured
queries (its size; the gap for sessions; 0 for the global window and custom window functions):
the span of event time the running queries may still change.

A query added while running gets a fresh driver, brought to the current watermark and
processing time, and is fed the history (per key, in arrival order): its **coverage start**
``C`` is the history's lower bound (``watermark - history_ms``, never lower than any earlier
such bound; unbounded before the first watermark). The query sees the elements with event time
at or after ``C`` and the windows starting at or after ``C``: it is what a fresh driver would
compute from the elements the history still held, plus every later element. For sessions (a
merging window function) a session is reported only if it starts ``gap_ms`` or more after ``C``
(a forgotten element could belong to an earlier one); panes of a session that merges to before
that are dropped. The panes the replay fires (for windows already past the watermark, or by
element-count triggers) come out with the next call to ``add``, ``add_retractions`` or an
``advance_*``; drops during the replay are not counted.

Vectorised queries
------------------
A query whose window, trigger, accumulation and aggregation :class:`~watermarks.ColumnarDriver`
runs (fixed or sliding windows, the default trigger or ``AfterWatermark`` with ``AfterCount``
early / late firings, discarding or accumulating, Count; Sum, Min, Max, Mean when
``integral_values=True``) gets that driver, the others the per-element
:class:`~watermarks.TriggerDriver`: the same panes either way. :meth:`MultiQueryDriver.add_batch`
and :meth:`MultiQueryDriver.advance_watermark_columns` take and give columns (one bundle per key,
as one :meth:`add` per key), so a vectorised query costs a fixed number of numpy calls per batch.

Memory: the history holds every element of the last ``history_ms`` of event time (plus those
ahead of the watermark), for each key: held as columns (:class:`~watermarks.history.ElementHistory`,
encoded in a fixed number of calls, not value by value), an element costs about 7 bytes in the
state blob for a small integer value (``history_ms=0`` keeps only elements not yet behind the
watermark: a new query then covers windows from the watermark on). :meth:`MultiQueryDriver.to_bytes_logged`
writes the state without the history's elements, and those as segments of a log, each element
once (:mod:`watermarks.history`): what a state store with a map per key group holds cheaper than
the history rewritten every batch.

Example
-------
>>> from dataflow_kafka.windowing import SlidingWindow, Sum, TumblingWindow
>>> from dataflow_kafka.watermarks import DefaultTrigger
>>> d = MultiQueryDriver({"1m": TumblingWindow(60_000)}, DefaultTrigger(), "accumulating",
...                      allowed_lateness_ms=60_000, combiner=Sum())
>>> d.add([(5, 10_000), (7, 70_000)], key="k")
[]
>>> [(p.query_id, p.start_ms, p.value) for p in d.advance_watermark(60_000)]
[('1m', 0, 5)]
>>> d.history_ms, d.add_window(SlidingWindow(120_000, 60_000), "2m"), d.coverage_start("2m")
(120000, '2m', -60000)
>>> [(p.query_id, p.start_ms, p.value) for p in d.advance_watermark(200_000)]  # the replay's pane first
[('2m', -60000, 5), ('1m', 60000, 7), ('2m', 0, 12), ('2m', 60000, 7)]
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from dataflow_kafka.watermarks import _codec
from dataflow_kafka.watermarks.columnar import ColumnarDriver, PaneColumns
from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from dataflow_kafka.watermarks.driver import TriggerDriver
from dataflow_kafka.watermarks.history import ElementHistory
from dataflow_kafka.watermarks.triggers import Trigger
from dataflow_kafka.watermarks.windows import (
    BEGINNING_OF_TIME_MS, GlobalWindowFn, IntervalWindow, WindowFn, compile_window_fn, extent_ms,
)
from dataflow_kafka.windowing import AggregateFunction, Window, window_from_json
from dataflow_kafka.windowing.commands import WindowQueries, check_query_id, initial_queries, next_query_id
from dataflow_kafka.errors import InvalidArgumentError, NotFoundError

__all__ = ["MultiQueryDriver", "CoveredWindowFn"]

# 2: a query's driver state may be the vectorised driver's (ColumnarDriver); 3: the history as columns;
# 4: the history tagged: ("whole", columns) or ("log", header of its segments)
_FORMAT = 4
_READS = (1, 2, 3, 4)


class CoveredWindowFn(WindowFn):
    """``window_fn`` restricted to the windows that start at or after ``from_ms`` (the window
    function of a query added while running)."""

    def __init__(self, window_fn: WindowFn, from_ms: int) -> None:
        self.window_fn, self.from_ms = window_fn, from_ms

    @property
    def is_merging(self) -> bool:  # type: ignore[override]
        return self.window_fn.is_merging

    @property
    def merges_overlapping_only(self) -> bool:  # type: ignore[override]
        return self.window_fn.merges_overlapping_only

    def assign_windows(self, timestamp_ms: int) -> list[IntervalWindow]:
        return [w for w in self.window_fn.assign_windows(timestamp_ms) if w.start_ms >= self.from_ms]

    def merge_windows(self, windows):
        return self.window_fn.merge_windows(windows)


@dataclasses.dataclass
class _Query:
    window: Any                  # what the user gave: a windowing Window or a WindowFn
    coverage: int                # C (BEGINNING_OF_TIME_MS: no limit)
    report_from: int             # panes of windows starting before this are dropped
    driver: TriggerDriver | ColumnarDriver


class MultiQueryDriver(WindowQueries):
    """Window queries that share trigger, accumulation mode, combiner and lateness; see the
    module docstring.

    Parameters
    ----------
    windows : list or dict
        :mod:`windowing` windows (or custom ``WindowFn``): a list gets ids ``"0"``, ``"1"``, ...
        (the index), a dict ``{id: window}`` names them.
    trigger, accumulation_mode, allowed_lateness_ms, timestamp_combiner, combiner, on_time_behavior :
        As :class:`~watermarks.TriggerDriver`, for every query.
    history_ms : int, optional
        How much event time of elements to keep for queries added later (default: the allowed
        lateness plus the longest configured window).
    integral_values : bool or None
        The values are integers: queries with Sum, Min, Max or Mean can run vectorised (module
        docstring). ``None``: not known (a stage not bound to its input types, as
        :func:`keygroups.state_view.read_state` builds them): new queries run per element, and a
        state written by the vectorised driver loads into it.
    """

    def __init__(
        self,
        windows: Mapping[str, Any] | Iterable[Any],
        trigger: Trigger,
        accumulation_mode: AccumulationMode | str = AccumulationMode.DISCARDING,
        allowed_lateness_ms: int = 0,
        timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW,
        combiner: AggregateFunction | None = None,
        on_time_behavior: OnTimeBehavior | str = OnTimeBehavior.FIRE_ALWAYS,
        history_ms: int | None = None,
        integral_values: bool | None = False,
    ) -> None:
        self.integral_values = None if integral_values is None else bool(integral_values)
        # validates the shared configuration and warns once about lossy triggers
        probe = TriggerDriver(GlobalWindowFn(), trigger, accumulation_mode, allowed_lateness_ms,
                              timestamp_combiner, combiner, on_time_behavior)
        if history_ms is not None and (isinstance(history_ms, bool) or not isinstance(history_ms, int)
                                       or history_ms < 0):
            raise InvalidArgumentError(f"history_ms={history_ms!r}: expected an integer >= 0 (milliseconds) or None")
        self._shared = (trigger, probe.accumulation_mode, allowed_lateness_ms, probe.timestamp_combiner,
                        probe.combiner, probe.on_time_behavior)
        self.allowed_lateness_ms = allowed_lateness_ms
        self._history_setting = history_ms
        self._queries: dict[str, _Query] = {}
        self._history = ElementHistory()
        self._floor = BEGINNING_OF_TIME_MS
        self._wm = self._now = BEGINNING_OF_TIME_MS
        self._pending: list[Pane] = []
        self._next_id = 0
        #: Element copies dropped as past the allowed lateness / for a closed window (all queries).
        self.dropped_late = 0
        self.dropped_closed = 0
        #: Window commands (:meth:`apply`) that did nothing: unknown id to remove, id to add taken.
        self.ignored_commands = 0
        for qid, w in initial_queries(windows):
            fn = compile_window_fn(w)
            check_query_id(qid)
            self._queries[qid] = _Query(w, BEGINNING_OF_TIME_MS, BEGINNING_OF_TIME_MS, self._driver(fn))

    # -- queries ------------------------------------------------------------------------------

    def _driver(self, window_fn: WindowFn, integral_values: bool | None = None) -> TriggerDriver | ColumnarDriver:
        """The vectorised driver where it runs this query (module docstring), else the per-element one;
        ``integral_values``: instead of this driver's setting."""
        trigger, mode, _, tc, combiner, _ = self._shared
        integral = bool(self.integral_values if integral_values is None else integral_values)
        inner, from_ms = (window_fn.window_fn, window_fn.from_ms) if isinstance(window_fn, CoveredWindowFn) \
            else (window_fn, BEGINNING_OF_TIME_MS)
        with warnings.catch_warnings():  # the constructor warned once already
            warnings.simplefilter("ignore")
            if ColumnarDriver.supports(inner, trigger, mode, tc, combiner, integral):
                return ColumnarDriver(inner, *self._shared, from_ms=from_ms, integral_values=integral)
            return TriggerDriver(window_fn, *self._shared)

    @property
    def query_ids(self) -> list[str]:
        """Ids of the running queries, in order (construction, then additions)."""
        return list(self._queries)

    @property
    def history_ms(self) -> int:
        """Event time of elements kept for queries added later (see the module docstring)."""
        if self._history_setting is not None:
            return self._history_setting
        fns = [q.driver.window_fn for q in self._queries.values()]
        return self.allowed_lateness_ms + max((extent_ms(_inner(f)) for f in fns), default=0)

    def coverage_start(self, query_id: str) -> int | None:
        """Windows of the query starting before this are not computed (``None``: no limit)."""
        c = self._queries[query_id].coverage
        return None if c == BEGINNING_OF_TIME_MS else c

    def window(self, query_id: str) -> Any:
        return self._queries[query_id].window

    def add_window(self, window: Window | WindowFn, query_id: str | None = None) -> str:
        """Add a query; returns its id. It covers the history from :meth:`coverage_start` on."""
        fn = compile_window_fn(window)
        qid, self._next_id = next_query_id(self._queries, query_id, self._next_id)
        self._raise_floor()
        c = self._floor
        if c == BEGINNING_OF_TIME_MS:
            q = _Query(window, c, c, self._driver(fn))
        else:
            reach = extent_ms(fn) if fn.is_merging else 0
            q = _Query(window, c, c + reach, self._driver(CoveredWindowFn(fn, c)))
        d = q.driver
        d.advance_processing_time(self._now)
        d.advance_watermark(self._wm)
        d._warned_late = True                           # the replay's drops are not new: no warning
        panes = []
        for key, elems in self._history.per_key().items():
            panes += d.add(elems, key=key)
        d.dropped_late = d.dropped_closed = 0           # the replay drops nothing new
        self._queries[qid] = q
        self._pending += self._label(qid, q, panes)
        return qid

    def remove_window(self, query_id: str) -> None:
        """Stop query ``query_id`` (a ``KeyError`` names an unknown id): its state is dropped and
        it emits nothing more."""
        if self._queries.pop(check_query_id(query_id), None) is None:
            raise NotFoundError(f"remove_window({query_id!r}): no such query (queries: {self.query_ids})")

    # -- elements and time --------------------------------------------------------------------

    @property
    def watermark_ms(self) -> int:
        return self._wm

    @property
    def processing_time_ms(self) -> int:
        return self._now

    def add(self, elements: Iterable[tuple[Any, int]], key: Any = None) -> list[Pane]:
        """Add ``(value, event_time_ms)`` pairs for ``key`` to every query, as one bundle per query
        (:meth:`TriggerDriver.add`); returns the panes."""
        elements = list(elements)
        self._history.append_key(key, elements)        # the history drops those below its floor
        return self._each(lambda d: d.add(elements, key=key))

    def add_batch(self, keys: list, rows: np.ndarray, values: list, times: np.ndarray
                  ) -> tuple[PaneColumns, np.ndarray, np.ndarray]:
        """One :meth:`add` per key of ``keys``, in that order, as columns: each element's key as an
        index into ``keys`` (``rows``), its value and event time (elements in arrival order).
        Returns the panes (as the :meth:`add` calls would give them, in that order; keys indexing
        ``keys``) and, per key of ``keys``, the element copies dropped as late and for a closed
        window over every query."""
        rows = np.asarray(rows, np.int64)
        times = np.asarray(times, np.int64)
        n = len(keys)
        position = {k: i for i, k in enumerate(keys)}
        parts, late, closed = [], np.zeros(n, np.int64), np.zeros(n, np.int64)
        for qi, (qid, q) in enumerate(self._queries.items()):
            d = q.driver
            d._warned_late = self.dropped_late > 0      # one LateDataDropped warning for all queries
            if isinstance(d, ColumnarDriver):
                cols, q_late, q_closed = d.add_batch(keys, rows, values, times)
                late += q_late
                closed += q_closed
            else:
                panes, q_late, q_closed = d.add_keyed(keys, rows, values, times, bool(self.integral_values))
                late += q_late
                closed += q_closed
                cols = PaneColumns.of_panes(panes, keys, position)
            self.dropped_late += d.dropped_late
            self.dropped_closed += d.dropped_closed
            d.dropped_late = d.dropped_closed = 0
            cols = self._label_columns(qid, q, cols)
            parts.append((qi, cols))
        self._history.append(keys, rows, values, times)      # the history drops those below its floor
        bundle = PaneColumns.concat(keys, [c for _, c in parts])
        qi = np.concatenate([np.full(len(c), q, np.int64) for q, c in parts]) if parts else np.zeros(0, np.int64)
        bundle = bundle.take(np.lexsort((np.arange(len(bundle)), qi, bundle.key)))     # by key, then query
        if not self._pending or rows.size == 0:     # the pending panes come out with the first add
            return bundle, late, closed
        pending, self._pending = self._pending, []
        return PaneColumns.join([PaneColumns.of_panes(pending), bundle]), late, closed

    def advance_watermark_columns(self, watermark_ms: int) -> PaneColumns:
        """:meth:`advance_watermark` as :class:`~watermarks.PaneColumns` (the same panes, in order)."""
        if watermark_ms <= self._wm:
            return PaneColumns.of_panes(self._each(lambda d: []))
        self._wm = watermark_ms
        parts = [PaneColumns.of_panes(self._pending)] if self._pending else []
        self._pending = []
        for qid, q in self._queries.items():
            d = q.driver
            d._warned_late = self.dropped_late > 0
            cols = (d.advance_watermark_columns(watermark_ms) if isinstance(d, ColumnarDriver)
                    else PaneColumns.of_panes(d.advance_watermark(watermark_ms)))
            self.dropped_late += d.dropped_late
            self.dropped_closed += d.dropped_closed
            d.dropped_late = d.dropped_closed = 0
            parts.append(self._label_columns(qid, q, cols))
        self._raise_floor()
        return PaneColumns.join(parts)

    @staticmethod
    def _label_columns(qid: str, q: _Query, cols: PaneColumns) -> PaneColumns:
        if len(cols) and q.report_from != BEGINNING_OF_TIME_MS:
            cols = cols.take(np.flatnonzero(cols.start >= q.report_from))
        cols.query = np.full(len(cols), qid, object)
        return cols

    def add_retractions(self, elements: Iterable[tuple[Any, int]], key: Any = None) -> list[Pane]:
        """Take back earlier inputs in every query (and in the history)."""
        elements = list(elements)
        self._history.retract(key, elements)
        return self._each(lambda d: d.add_retractions(elements, key=key))

    def advance_watermark(self, watermark_ms: int) -> list[Pane]:
        if watermark_ms <= self._wm:
            return self._each(lambda d: [])
        self._wm = watermark_ms
        out = self._each(lambda d: d.advance_watermark(watermark_ms))
        self._raise_floor()
        return out

    def advance_processing_time(self, now_ms: int) -> list[Pane]:
        self._now = max(self._now, now_ms)
        return self._each(lambda d: d.advance_processing_time(now_ms))

    def keys(self) -> list:
        """Keys with live window state in any query."""
        return list(dict.fromkeys(k for q in self._queries.values() for k in q.driver.keys()))

    def windows(self, key: Any = None, query_id: str | None = None) -> list[IntervalWindow]:
        """Live windows of ``key`` in query ``query_id`` (default: the first query)."""
        qid = query_id if query_id is not None else next(iter(self._queries))
        return self._queries[qid].driver.windows(key)

    # -- reading the state ---------------------------------------------------------------------

    def driver(self, query_id: str) -> TriggerDriver | ColumnarDriver:
        """Query ``query_id``'s driver, per element or vectorised (both show their windows alike:
        ``window_states()``); read it only."""
        return self._queries[query_id].driver

    def reported_from(self, query_id: str) -> int | None:
        """Panes of the query's windows starting before this are not emitted (``None``: no limit)."""
        r = self._queries[query_id].report_from
        return None if r == BEGINNING_OF_TIME_MS else r

    @property
    def history_from_ms(self) -> int | None:
        """The history holds the elements from this event time on (``None``: all so far)."""
        return None if self._floor == BEGINNING_OF_TIME_MS else self._floor

    def history(self) -> dict[Any, list[tuple[Any, int]]]:
        """The elements kept for queries added later, per key (``(value, event_time_ms)``, in
        arrival order); a copy."""
        return self._history.per_key()

    def pending_panes(self) -> list[Pane]:
        """Panes computed but not yet returned (a query added since the last call)."""
        return list(self._pending)

    def _each(self, step) -> list[Pane]:
        out, self._pending = self._pending, []
        for qid, q in self._queries.items():
            q.driver._warned_late = self.dropped_late > 0   # one LateDataDropped warning for all queries
            out += self._label(qid, q, step(q.driver))
            self.dropped_late += q.driver.dropped_late
            self.dropped_closed += q.driver.dropped_closed
            q.driver.dropped_late = q.driver.dropped_closed = 0
        return out

    @staticmethod
    def _label(qid: str, q: _Query, panes: list[Pane]) -> list[Pane]:
        return [dataclasses.replace(p, query_id=qid) for p in panes if p.window.start_ms >= q.report_from]

    def _raise_floor(self) -> None:
        """The history keeps the elements from ``watermark - history_ms`` on (never lowered)."""
        if self._wm == BEGINNING_OF_TIME_MS:
            return
        floor = max(self._floor, self._wm - self.history_ms)
        if floor > self._floor:
            self._floor = floor
            self._history.trim(floor)

    # -- state as bytes -----------------------------------------------------------------------

    def _fingerprint(self) -> int:
        trigger, mode, lateness, tc, combiner, on_time = self._shared
        config = (trigger, mode, lateness, tc, on_time, type(combiner).__qualname__, self._history_setting)
        return zlib.crc32(repr(config).encode())

    def to_bytes(self) -> bytes:
        """All state (queries, every query's driver state, history, pending panes)."""
        return self._encode(("whole", self._history.encode()))

    def to_bytes_logged(self) -> tuple[bytes, dict[int, bytes], list[int]]:
        """:meth:`to_bytes` with the element history as a log (:meth:`ElementHistory.log_delta`):
        ``(the state without the history's elements, new segments {id: bytes}, ids of segments
        to delete)``. The first call writes the whole history as one segment; :meth:`load_bytes`
        reads the state back given every segment not deleted."""
        new, dropped = self._history.log_delta()
        data = self._encode(("log", self._history.log_header()))
        return data, {i: _codec.encode(seg) for i, seg in new.items()}, dropped

    def _encode(self, history: tuple) -> bytes:
        queries = [(qid, ("json", q.window.to_json()) if isinstance(q.window, Window) else ("fn", q.window),
                    q.coverage, q.report_from, q.driver.to_bytes()) for qid, q in self._queries.items()]
        pending = [(p.query_id, p.key, p.start_ms, p.end_ms, p.value, p.timestamp_ms, p.timing.value, p.index,
                    p.is_first, p.is_last, p.is_retraction) for p in self._pending]
        return _codec.encode((_FORMAT, self._fingerprint(), self._wm, self._now, self._floor, self._next_id,
                              self.ignored_commands, self.dropped_late, self.dropped_closed, queries, history,
                              pending))

    def load_bytes(self, data: bytes, segments: Mapping[int, bytes] | None = None) -> None:
        """Replace this driver's state (its queries too) with state written by ``to_bytes`` (or
        :meth:`to_bytes_logged`, with its live ``segments``: read only when the element history's
        elements are needed, :meth:`ElementHistory.from_log` ``deferred``) of a driver with the same
        shared configuration."""
        (fmt, fingerprint, self._wm, self._now, self._floor, self._next_id, self.ignored_commands,
         self.dropped_late, self.dropped_closed, queries, history, pending) = _codec.decode(data)
        if fmt not in _READS or fingerprint != self._fingerprint():
            raise InvalidArgumentError("multi-query driver state was written by a driver with a different format or "
                             "configuration (trigger, mode, lateness, combiner, history_ms)")
        self._queries = {}
        for qid, (kind, form), coverage, report_from, blob in queries:
            window = window_from_json(form) if kind == "json" else form
            fn = compile_window_fn(window)
            if coverage != BEGINNING_OF_TIME_MS:
                fn = CoveredWindowFn(fn, coverage)
            q = self._queries[qid] = _Query(window, coverage, report_from, self._driver(fn))
            if isinstance(q.driver, TriggerDriver) and blob[:4] == b"DFC1" and self.integral_values is None:
                q.driver = self._driver(fn, integral_values=True)      # the value type is not known here
            if isinstance(q.driver, TriggerDriver) and blob[:4] == b"DFC1":
                raise InvalidArgumentError(f"query {qid!r}: its state was written by the vectorised driver, this "
                                           "configuration runs the per-element one (aggregation or value type changed?)")
            q.driver.load_bytes(blob)
        if fmt < 3:
            self._history = ElementHistory.of_items(history)
        elif fmt == 3 or history[0] == "whole":
            self._history = ElementHistory.decode(history if fmt == 3 else history[1])
        else:
            if segments is None:
                raise InvalidArgumentError("multi-query driver state: its element history was written as a log "
                                           "(to_bytes_logged); pass its segments")
            self._history = ElementHistory.from_log(history[1], _decoded(segments), deferred=True)
        if fmt < 4 and self._floor != BEGINNING_OF_TIME_MS:
            self._history.trim(self._floor)            # the floor the history keeps since format 4
        self._pending = [Pane(k, IntervalWindow(s, e), v, ts, PaneTiming(tv), i, f, la, r, qid)
                         for qid, k, s, e, v, ts, tv, i, f, la, r in pending]

    def attach_segments(self, segments: Mapping[int, bytes]) -> None:
        """Where the element history, if its elements were not read yet, reads its segments from
        now on (a later micro-batch's log, for a driver kept live between batches)."""
        self._history.attach(_decoded(segments))

    @classmethod
    def from_bytes(cls, data: bytes, *args: Any, **kwargs: Any) -> MultiQueryDriver:
        """A driver built from the same arguments as the writer, with the written state."""
        driver = cls(*args, **kwargs)
        driver.load_bytes(data)
        return driver


def _decoded(segments: Mapping[int, bytes]):
    """A function giving ``segments`` decoded (the log is read when it is called)."""
    return lambda: {i: _codec.decode(b) for i, b in segments.items()}


def _inner(fn: WindowFn) -> WindowFn:
    return fn.window_fn if isinstance(fn, CoveredWindowFn) else fn
