"""The Dataflow Model in the stage layer: windows, triggers and accumulation as a :class:`keygroups.Stage`.

:class:`WindowingStage` runs a :class:`~watermarks.MultiQueryDriver` (one or more window queries
sharing a trigger, accumulation mode, aggregation and allowed lateness) per key group. Per
micro-batch and key group (Dataflow Model §2.3-2.4)::

    apply window commands (add_window / remove_window) of the batch's modifications
    advance_processing_time(batch processing time)     # recorded in the source offset
    add(elements of key k, key=k) for every key k       # in (topic, partition, offset) order; one
                                                        # bundle: one trigger evaluation per window
    advance_watermark(input low watermark)              # min over senders' punctuations

Output rows (one per pane; columns shared with the slicer, :mod:`windowing.rows`): the key
column(s), ``query_id``, ``window_start_ms``, ``window_end_ms``, ``pane_index``, ``timing``
(``EARLY``, ``ON_TIME``, ``LATE``), ``is_first``, ``is_last``, ``is_retraction`` (this row takes
back an earlier pane: every refinement in ACCUMULATING_AND_RETRACTING, and in every mode the last
pane of a session a merge replaced), and a column per aggregation (``sum``, ``max``, ...; JSON
text for non-numeric results). The current result per window is the latest row per window with
retracted windows deleted (``accumulating`` modes; :func:`windowing.final.current_windows`). A pane's ``event_time_ms`` is its output
timestamp (:class:`~watermarks.TimestampCombiner`; by default the window's last instant),
raised to the stage's previous output watermark when a combiner would put it behind (Beam holds
late panes' timestamps the same way), so the output watermark stays a promise.

Output low watermark (Beam's output watermark hold; ``output_watermark="complete"``, the
default): the input watermark minus the allowed lateness. A window still open to updates has
``end + allowed_lateness > watermark``, so every pane it can still emit is at or after that
bound. ``"input"``: the input watermark; late panes then reach the next stage as late data
(:func:`windowing.rows.output_watermark`).

Records the stage could not use are reported as ``dropped`` rows per key: ``late`` (window past
the allowed lateness, or a session that would merge into one already garbage collected:
:mod:`watermarks.driver`), ``closed`` (window's trigger finished), ``null`` (null value). A
malformed window command is one ``error`` row (``StageOutput.command_errors``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups import Dropped, Stage, StageInput, StageOutput
from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, PaneTiming, TimestampCombiner
from dataflow_kafka.watermarks.before_shuffle import RowSelection, row_selection
from dataflow_kafka.watermarks.columnar import PaneColumns, object_array
from dataflow_kafka.watermarks.multi import MultiQueryDriver
from dataflow_kafka.watermarks.triggers import DefaultTrigger, Trigger
from dataflow_kafka.windowing import BEGINNING_OF_TIME_MS, AggregateFunction, ToList, Window
from dataflow_kafka.windowing.aggregations import Combined
from dataflow_kafka.windowing.commands import WINDOW_OPS, AddWindow
from dataflow_kafka.windowing.final import current_windows
from dataflow_kafka.windowing.rows import (
    RESULT_COLUMNS, aggregation_columns, aggregation_list, distinct_keys, json_value, key_specs, output_watermark, window_command,
)
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["WindowingStage", "PANE_COLUMNS"]

#: Pane columns between the result columns and the aggregation column.
PANE_COLUMNS = [("pane_index", "bigint"), ("timing", "string"), ("is_first", "boolean"), ("is_last", "boolean"),
                ("is_retraction", "boolean")]
_VALUE = "dataflow_value"
_INTEGRAL = ("tinyint", "smallint", "int", "bigint", "boolean")
_TIMING_NAMES = np.array([t.name for t in PaneTiming], object)


@dataclass
class WindowingStage(Stage):
    """Dataflow windowing of ``value`` per ``key``; see the module docstring.

    ``key``: column name(s) or SQL expression(s) (a dict ``{name: expression}`` names them);
    ``value``: SQL expression of the element value, or ``{name: expression}``: the value is the
    tuple of those columns' values in that order (null, so dropped and counted, when any is null;
    e.g. a number to compare beside the record it came from, which a combiner parses only when it
    needs it: ``bench.nexmark.aggregations.ArgMax``); ``windows``: one :mod:`windowing` window, a
    list (ids ``"0"``, ``"1"``, ...) or a dict ``{id: window}``; ``trigger``, ``accumulation_mode``,
    ``allowed_lateness_ms``, ``timestamp_combiner``, ``on_time_behavior``, ``history_ms``: as
    :class:`~watermarks.MultiQueryDriver`; ``aggregations``: a list of :mod:`windowing`
    aggregations, all computed for every window, one column each (default ``[ToList()]``;
    ``aggregation=`` one aggregation, deprecated); ``select``: ``{column: value}``, only input rows with these values
    (e.g. ``{"query_id": "1s"}`` after a slicer with several queries); ``output_watermark``:
    ``"complete"`` or ``"input"`` (:func:`windowing.rows.output_watermark`);
    ``select_before_shuffle``: when the stage starts the first operator and the source's tasks pack
    its rows, they send per key and window only the rows that decide its aggregations (each
    :meth:`~windowing.AggregateFunction.selection` a highest or lowest value), the same panes
    from fewer rows (:mod:`watermarks.before_shuffle`; refused, naming why, where that does not
    hold; a window command adding a window is then refused too).
    """

    commands = WINDOW_OPS

    key: Any = "key"
    value: Any = "value"
    windows: Any = None
    trigger: Trigger = field(default_factory=DefaultTrigger)
    accumulation_mode: Any = AccumulationMode.DISCARDING
    allowed_lateness_ms: int = 0
    timestamp_combiner: Any = TimestampCombiner.END_OF_WINDOW
    aggregations: Any = None
    on_time_behavior: Any = OnTimeBehavior.FIRE_ALWAYS
    history_ms: int | None = None
    num_key_groups: int = 4
    select: dict | None = None
    output_watermark: str = "complete"
    select_before_shuffle: bool = False
    name: str | None = None
    key_types: dict = field(default_factory=dict)
    integral_values: bool | None = None           # set by bind: None, not bound (read_state's specs)
    #: Deprecated: one aggregation; ``aggregations=[...]`` replaces it.
    aggregation: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.windows is None:
            raise InvalidArgumentError("WindowingStage needs windows= (a window, a list or a dict {id: window})")
        if isinstance(self.value, dict) and not self.value:
            raise InvalidArgumentError("WindowingStage: value={} names no column (a dict {name: expression} makes "
                                       "the value a tuple of those columns)")
        if self.aggregation is not None:
            if self.aggregations is not None:
                raise InvalidArgumentError("WindowingStage: give aggregations= only (aggregation= is its old name)")
            warnings.warn("WindowingStage(aggregation=...) is deprecated: write aggregations=[...], as SlicerStage "
                          "takes them", DeprecationWarning, stacklevel=3)
            self.aggregations, self.aggregation = [self.aggregation], None
        self.aggregations = aggregation_list("WindowingStage", self.aggregations, ToList())
        self._keys = key_specs(self.key, reserved=self._reserved())
        output_watermark(self.output_watermark, None, 0)              # validates it
        probe = self.new_state()                  # validates the configuration here, not in Spark
        self.accumulation_mode = probe._shared[1]
        self.timestamp_combiner, self.on_time_behavior = probe._shared[3], probe._shared[5]
        if self.select_before_shuffle:
            row_selection(self)                   # validates it here, not in the source's tasks

    def _queries(self):
        return {"0": self.windows} if isinstance(self.windows, Window) else self.windows

    def _reserved(self) -> list[str]:
        return [c for c, _ in RESULT_COLUMNS + PANE_COLUMNS + aggregation_columns(self.aggregations)]

    # -- input ------------------------------------------------------------------------------------
    def inputs(self) -> dict[str, str]:
        cols = {n: e for n, e in self._keys}
        cols.update(self._value_inputs())
        for c in (self.select or {}):
            cols.setdefault(c, c)
        return cols

    def routing(self) -> list[str]:
        return [n for n, _ in self._keys]

    def before_shuffle(self) -> RowSelection | None:
        """The rows the source's tasks send (``select_before_shuffle``), or None: all."""
        return row_selection(self) if self.select_before_shuffle else None

    def _value_inputs(self) -> dict[str, Any]:
        """The value's input columns: one, or one per field of a tuple value (``value`` a dict)."""
        if isinstance(self.value, dict):
            return {f"{_VALUE}_{i}": e for i, e in enumerate(self.value.values())}
        return {_VALUE: self.value}

    def bind(self, input_types: dict[str, str]) -> "WindowingStage":
        import copy

        s = copy.copy(self)
        s.key_types = {n: input_types[n] for n, _ in self._keys if n in input_types}
        s.integral_values = input_types.get(_VALUE, "").lower() in _INTEGRAL
        return s

    # -- output -----------------------------------------------------------------------------------
    def output_columns(self) -> list[tuple[str, str]]:
        keys = [(n, self.key_types.get(n, "string")) for n, _ in self._keys]
        return keys + RESULT_COLUMNS + PANE_COLUMNS + aggregation_columns(self.aggregations)

    def output_key_columns(self) -> list[str]:
        return [n for n, _ in self._keys]

    def current_results(self, frames, kind: str = "data") -> pd.DataFrame:
        """One row per window: its latest row, retracted windows deleted (:func:`windowing.final.current_windows`)."""
        return current_windows(frames, self, kind=kind)

    # -- state ------------------------------------------------------------------------------------
    def new_state(self) -> MultiQueryDriver:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")        # lossy-trigger warnings: shown once, at construction
            return MultiQueryDriver(self._queries(), self.trigger, self.accumulation_mode, self.allowed_lateness_ms,
                                    self.timestamp_combiner, self._combiner(), self.on_time_behavior,
                                    self.history_ms, integral_values=self.integral_values)

    def _combiner(self) -> AggregateFunction:
        """What the driver runs: the aggregation, or several :class:`~windowing.aggregations.Combined`."""
        return self.aggregations[0] if len(self.aggregations) == 1 else Combined(self.aggregations)

    def dump_state(self, state: MultiQueryDriver) -> bytes:
        return state.to_bytes()

    def load_state(self, blob: bytes) -> MultiQueryDriver:
        return self.load_state_logged(blob, None)

    def dump_state_logged(self, state: MultiQueryDriver) -> tuple[bytes, dict[int, bytes], list[int]]:
        """The element history as a log (:meth:`MultiQueryDriver.to_bytes_logged`): each element written once."""
        return state.to_bytes_logged()

    def load_state_logged(self, blob: bytes, segments: Mapping[int, bytes] | None) -> MultiQueryDriver:
        """The driver, its element history's segments read only when its elements are needed."""
        d = self.new_state()
        d.load_bytes(blob, segments)
        return d

    def attach_log(self, state: MultiQueryDriver, segments: Mapping[int, bytes]) -> None:
        state.attach_segments(segments)

    def describe_state(self, driver: MultiQueryDriver) -> list[dict]:
        """The driver's clock (``time``: watermark, processing time), the queries (``start_ms``:
        coverage start of a query added while running), per key the elements kept for queries
        added later (``held``), and per query and key every live window (``window``: not yet
        garbage collected, i.e. ``end + allowed_lateness_ms`` beyond the watermark): ``count``
        the key's held elements in it (None where it starts before them), ``panes`` fired,
        ``new_data`` (elements not yet in a pane), ``closed``, ``next`` (what its trigger waits
        for), ``hold_ms`` (the next pane's timestamp), ``expires_ms``, ``value`` (the combiner's
        output now: what the next pane carries); ``pane``: a pane computed, not yet emitted."""
        rows = [state_item("time", start_ms=_time(driver.watermark_ms), processing_time_ms=_time(driver.processing_time_ms))]
        for qid in driver.query_ids:
            rows.append(state_item("query", query_id=qid, start_ms=driver.coverage_start(qid),
                                   window=driver.window(qid), reported_from_ms=driver.reported_from(qid)))
        floor = driver.history_from_ms
        held = {}
        for key, elems in driver.history().items():
            ts = np.sort(np.fromiter((t for _, t in elems), np.int64, len(elems)))
            held[key] = ts
            rows.append(state_item("held", key=key, start_ms=ts[0], end_ms=ts[-1] + 1, count=ts.size,
                                   kept_from_ms=floor))
        for qid in driver.query_ids:
            d = driver.driver(qid)
            for w in d.window_states():
                ts = held.get(w.key, np.zeros(0, np.int64))
                s, e = w.window.start_ms, w.window.end_ms
                n = None if floor is not None and s < floor else int(np.searchsorted(ts, e) - np.searchsorted(ts, s))
                rows.append(state_item("window", key=w.key, query_id=qid, start_ms=s, end_ms=e, count=n,
                                       panes=w.panes, new_data=w.new_data, closed=w.closed or None, next=w.waiting,
                                       hold_ms=w.hold_ms, expires_ms=w.expires_ms,
                                       value=None if w.closed else d.combiner.extract_output(w.accumulator)))
        for p in driver.pending_panes():
            rows.append(state_item("pane", key=p.key, query_id=p.query_id, start_ms=p.start_ms, end_ms=p.end_ms,
                                   pane_index=p.index, timing=p.timing.name, value=p.value))
        return rows

    # -- one batch --------------------------------------------------------------------------------
    def process(self, driver: MultiQueryDriver, batch: StageInput) -> StageOutput:
        errors = []
        for m in batch.modifications:
            cmd, err = window_command(m.text, self.name)
            if err:
                errors.append(err)
            elif cmd is not None and self.select_before_shuffle and isinstance(cmd, AddWindow):
                errors.append(f"control record @{m.control_offset}: stage {self.name!r} selects its rows before the "
                              f"shuffle (select_before_shuffle=True), so it keeps no element history a new window "
                              f"could be computed from; add_window {cmd.query_id!r} ignored")
            elif cmd is not None:
                driver.apply(cmd)
        parts = []
        if batch.processing_time_ms is not None:
            parts.append(PaneColumns.of_panes(driver.advance_processing_time(batch.processing_time_ms)))
        dropped: list[Dropped] = []
        data = batch.data
        if data is not None and len(data):
            if self.select:
                mask = np.ones(len(data), bool)
                for c, v in self.select.items():
                    mask &= (data[c] == v).to_numpy()
                data = data[mask]
            keys, rows, values, times, nulls = self._elements(data)
            added, late, closed = driver.add_batch(keys, rows, values, times)
            parts.append(added)
            for i in np.flatnonzero(late + closed + nulls).tolist():    # per key, in order of first appearance
                for reason, n in (("late", late[i]), ("closed", closed[i]), ("null", nulls[i])):
                    if n:
                        dropped.append(Dropped(keys[i], reason, int(n)))
        if batch.watermark_ms is not None:
            parts.append(driver.advance_watermark_columns(batch.watermark_ms))
        hold = output_watermark(self.output_watermark, batch.watermark_ms, self.allowed_lateness_ms)
        floor = None if self.output_watermark != "complete" else output_watermark(
            self.output_watermark, batch.previous_watermark_ms, self.allowed_lateness_ms)
        return StageOutput(self._frame([p for p in parts if len(p)], floor), hold, dropped, command_errors=errors)

    def _elements(self, data: pd.DataFrame):
        """``(keys, rows, values, times, nulls)``: the batch's keys in order of first appearance,
        each row's key (an index into them) with its value and event time (rows with a null value
        left out), and the null values per key."""
        keys, rows = distinct_keys(data, [n for n, _ in self._keys])
        cols = [data[c] for c in self._value_inputs()]
        null = np.logical_or.reduce([c.isna().to_numpy() for c in cols])
        nulls = np.bincount(rows[null], minlength=len(keys))
        ok = ~null
        if len(cols) > 1 or isinstance(self.value, dict):
            values = list(zip(*(c[ok].astype(object).tolist() for c in cols)))
        elif self.integral_values:
            values = cols[0][ok].to_numpy(np.int64).tolist()
        else:
            values = cols[0][ok].astype(object).tolist()
        times = data["event_time_ms"].to_numpy(np.int64)[ok]
        return keys, rows[ok], values, times, nulls

    def _frame(self, parts: list[PaneColumns], floor: int | None) -> pd.DataFrame:
        names = [n for n, _ in self._keys]
        aggs = aggregation_columns(self.aggregations)
        widths = [len(a.spark_columns(a.name)) for a in self.aggregations]
        p = PaneColumns.concat([], []) if not parts else parts[0] if len(parts) == 1 else PaneColumns.join(parts)
        cols: dict[str, Any] = {}
        key_col = object_array(p.keys)[p.key] if len(p) else np.zeros(0, object)
        if len(names) == 1:
            cols[names[0]] = key_col
        else:
            for j, n in enumerate(names):
                cols[n] = object_array([k[j] for k in key_col.tolist()])
        cols["query_id"] = p.query if p.query is not None else np.full(len(p), None, object)
        cols["window_start_ms"], cols["window_end_ms"] = p.start, p.end
        cols["pane_index"] = p.index
        cols["timing"] = _TIMING_NAMES[p.timing]
        cols["is_first"], cols["is_last"] = p.first, p.last
        cols["is_retraction"] = p.retraction if p.retraction is not None else np.zeros(len(p), bool)
        cols["event_time_ms"] = p.timestamp if floor is None else np.maximum(p.timestamp, floor)
        values = [_result_columns(v, widths) for v in p.value]
        for j, (c, t) in enumerate(aggs):
            vs = [v[j] for v in values]
            cols[c] = ([_number(v) for v in vs] if t in ("double", "bigint") else
                       [None if v is None else list(np.atleast_1d(v).astype(float)) for v in vs] if t.startswith("array")
                       else [json_value(v) for v in vs])
        return pd.DataFrame(cols)


def _result_columns(value: Any, widths: list[int]) -> list:
    """A pane's value as one value per result column: each aggregation's result (several
    aggregations: :class:`~windowing.aggregations.Combined`'s tuple), a multi-column one split."""
    results = [value] if len(widths) == 1 else list(value)
    return [v for r, n in zip(results, widths) for v in ([r] if n == 1 else _components(r, n))]


def _components(value: Any, n: int) -> list:
    """A multi-column aggregate (M4: min, max, first, last) as ``n`` values."""
    if value is None:
        return [None] * n
    if isinstance(value, dict):
        return list(value.values())[:n]
    return list(value)[:n]


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    return float(v)


def _time(ms: int) -> int | None:
    """A driver's clock reading; ``None`` before the first (the beginning of time)."""
    return None if ms <= BEGINNING_OF_TIME_MS else ms
