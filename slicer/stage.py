"""General stream slicing in the stage layer: many window queries per key as a :class:`keygroups.Stage`.

:class:`SlicerStage` runs the slicing engine per key group (Scotty §4-9): when every window is a
tumbling or sliding time window and every aggregation is vectorised over reduced or picked
components (:mod:`windowing.components`: Sum, Count, Mean, Min, Max, M4, ...), all keys of the
group share one :class:`~slicer.keyed.KeyedSlicingOperator` (one table of (key, slice) partial
aggregates: a fixed number of numpy calls per batch, whatever the number of keys; Scotty §4.4,
§5.1); when the one window is a session window and every aggregation is vectorised over reduced
components (Sum, Count, Mean, Min, Max, ...), all keys share one
:class:`~slicer.keyed_sessions.KeyedSessionOperator` (one table of (key, session) aggregates,
Scotty §6.2; it takes no window added while running); otherwise each key has its own
:class:`~slicer.SlicingWindowOperator`.

Per micro-batch and key group: apply the batch's window commands (``add_window`` /
``remove_window``; a query added while running covers what the slices still hold, see
:mod:`slicer.coverage`), feed the records (factorised by key, vectorised), then advance to the
input low watermark (a key seen for the first time starts at the group's previous watermark, so
its records are late by the same rule as everyone else's).

Output rows (columns shared with the Dataflow stage, :mod:`windowing.rows`): the key column(s),
``query_id``, ``window_start_ms``, ``window_end_ms`` (``[start, end)``; record positions for
count windows), ``update`` (a window emitted before, emitted again because records within the
allowed lateness changed it, or a window replacing retracted ones), ``measure`` (``time`` or
``count``), ``is_retraction`` (this row takes back a window emitted earlier whose extent no
longer exists, with the values it was emitted with: a late record extended or fused sessions,
cut a punctuation window, ...; the Dataflow stage's convention, the Dataflow Model
§2.3), one column per aggregation (``sum``, ``count``, ``mean``, ``m4_min`` ...). The current
result per window is the latest row per (key, ``query_id``, start, end) with retracted windows
deleted: :func:`windowing.final.current_windows` folds it. A row's
``event_time_ms`` is the window's last instant, ``window_end_ms - 1`` (count windows: the output
watermark), held at the previous output watermark when it is behind it: a query added while
running reports windows that ended before it was added (Beam holds late panes the same way).
Window rules are Scotty's (``docs/semantics.md``), with two choices of the stage: windows without
records are not emitted (the engine's ``emission="compact"``, set explicitly: the engine's default
``"scotty"`` would add a row per empty window and key, and reject negative event times), and no
record is late before the first watermark (``drop_before_watermark=False``, as Spark).

Output low watermark (``output_watermark="complete"``, the default): input watermark minus the
allowed lateness. A record is accepted when its time is at or after that bound, and only windows
containing it change, so every later row ends after the bound. ``"input"``: the input watermark;
updates then reach the next stage as late data (:func:`windowing.rows.output_watermark`).
Records later than the allowed lateness are reported as ``dropped`` rows
(reason ``late``), records whose value or event time is null as ``null``.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups import Dropped, Stage, StageInput, StageOutput
from dataflow_kafka.slicer.describe import describe_engines, describe_keyed, describe_sessions
from dataflow_kafka.slicer.keyed import KeyedSlicingOperator
from dataflow_kafka.slicer.keyed_sessions import KeyedSessionOperator
from dataflow_kafka.slicer.operator import SlicingWindowOperator
from dataflow_kafka.slicer.results import object_array
from dataflow_kafka.windowing.commands import WINDOW_OPS
from dataflow_kafka.windowing.final import current_windows
from dataflow_kafka.windowing.rows import (
    RESULT_COLUMNS, aggregation_columns, aggregation_list, distinct_keys, key_specs, output_watermark, window_command,
)
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["SlicerStage", "SLICER_COLUMNS"]

#: Slicer columns between the result columns and the aggregation columns.
SLICER_COLUMNS = [("update", "boolean"), ("measure", "string"), ("is_retraction", "boolean")]
_VALUE = "slicer_value"
#: The tables that run every key of a key group at once, by the tag of their state (tried in order);
#: a configuration neither supports runs one engine per key (state tag ``E``).
_TABLES = {b"K": KeyedSlicingOperator, b"S": KeyedSessionOperator}
#: How each table's state reads as rows (:mod:`slicer.describe`), by the same tag.
_DESCRIBE = {b"K": describe_keyed, b"S": describe_sessions}


@dataclass
class SlicerStage(Stage):
    """Window aggregates per key, many queries sharing slices; see the module docstring.

    ``key``: column name(s) or SQL expression(s) (a dict ``{name: expression}`` names them);
    ``value``: SQL expression of the aggregated value (cast to double; unparseable is null);
    ``windows``: a list (ids ``"0"``, ``"1"``, ...) or a dict ``{id: window}`` of :mod:`windowing`
    windows (or slicer-only ones); ``aggregations``: :mod:`windowing` aggregations, all computed
    for every window; ``allowed_lateness_ms``; ``stream_order``, ``store``: as
    :class:`~slicer.SlicingWindowOperator`; ``output_watermark``: ``"complete"`` or ``"input"``
    (:func:`windowing.rows.output_watermark`).
    """

    commands = WINDOW_OPS

    key: Any = "key"
    value: str = "try_cast(CAST(value AS STRING) AS DOUBLE)"
    windows: Any = None
    aggregations: Any = None
    allowed_lateness_ms: int = 1000
    num_key_groups: int = 4
    stream_order: str = "out_of_order"
    store: str = "lazy"
    output_watermark: str = "complete"
    name: str | None = None
    key_types: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.windows:
            raise InvalidArgumentError("SlicerStage: at least one window (windows= a list or a dict {id: window})")
        self.aggregations = aggregation_list("SlicerStage", self.aggregations)
        self.windows = dict(self.windows) if isinstance(self.windows, dict) else list(self.windows)
        self._template_bytes = self._template().to_bytes()      # validates the configuration
        template = self._template()
        #: the state tag of the table running all keys at once, or ``b"E"`` (one engine per key)
        self.state_kind = next((tag for tag, table in _TABLES.items() if table.supports(template)), b"E")
        self.keyed = self.state_kind != b"E"
        reserved = [c for c, _ in RESULT_COLUMNS + SLICER_COLUMNS + aggregation_columns(self.aggregations)]
        self._keys = key_specs(self.key, reserved=reserved)
        output_watermark(self.output_watermark, None, 0)              # validates it

    def _template(self) -> SlicingWindowOperator:
        return SlicingWindowOperator(self.windows, self.aggregations, allowed_lateness_ms=self.allowed_lateness_ms,
                                     stream_order=self.stream_order, store=self.store,
                                     emission="compact",            # windows with records only (module docstring)
                                     drop_before_watermark=False)   # as Spark: nothing late before a watermark

    # -- input ------------------------------------------------------------------------------------
    def inputs(self) -> dict[str, str]:
        return {**{n: e for n, e in self._keys}, _VALUE: self.value}

    def routing(self) -> list[str]:
        return [n for n, _ in self._keys]

    def bind(self, input_types: dict[str, str]) -> "SlicerStage":
        s = copy.copy(self)
        s.key_types = {n: input_types[n] for n, _ in self._keys if n in input_types}
        return s

    # -- output -----------------------------------------------------------------------------------
    def output_columns(self) -> list[tuple[str, str]]:
        keys = [(n, self.key_types.get(n, "string")) for n, _ in self._keys]
        return keys + RESULT_COLUMNS + SLICER_COLUMNS + aggregation_columns(self.aggregations)

    def output_key_columns(self) -> list[str]:
        return [n for n, _ in self._keys]

    def current_results(self, frames, kind: str = "data") -> pd.DataFrame:
        """One row per window: its latest row, retracted windows deleted (:func:`windowing.final.current_windows`)."""
        return current_windows(frames, self, kind=kind)

    # -- state ------------------------------------------------------------------------------------
    def new_state(self) -> Any:
        template = SlicingWindowOperator.from_bytes(self._template_bytes)
        return _TABLES[self.state_kind](template) if self.keyed else {"template": template, "engines": {}}

    def dump_state(self, state: Any) -> bytes:
        if self.keyed:
            return self.state_kind + state.to_bytes()
        engines = {k: (v if isinstance(v, bytes) else v.to_bytes(include_config=False))
                   for k, v in state["engines"].items()}
        return b"E" + pickle.dumps((state["template"].to_bytes(), engines), protocol=5)

    def load_state(self, blob: bytes) -> Any:
        kind, payload = blob[:1], blob[1:]
        if kind != self.state_kind:
            names = {b"K": "keyed", b"S": "keyed session", b"E": "per-key"}
            raise InvalidArgumentError(f"stage {self.name!r}: the checkpoint holds the {names.get(kind, repr(kind))} "
                                       f"slicing state, this configuration needs the other one, the "
                                       f"{names[self.state_kind]} state (windows or aggregations changed?)")
        if self.keyed:
            return _TABLES[kind].from_bytes(payload, SlicingWindowOperator.from_bytes(self._template_bytes))
        template, engines = pickle.loads(payload)
        return {"template": SlicingWindowOperator.from_bytes(template), "engines": engines}

    def describe_state(self, state: Any) -> pd.DataFrame:
        """The queries, and per key its slices and open windows (:mod:`slicer.describe`)."""
        if self.keyed:
            return _DESCRIBE[self.state_kind](state)
        return describe_engines(state["template"], {k: self._engine(state, k, None) for k in list(state["engines"])})

    @staticmethod
    def _engine(state: dict, key: Any, watermark: int | None) -> SlicingWindowOperator:
        """Key ``key``'s engine, restored lazily; a new key starts at the group's watermark."""
        op = state["engines"].get(key)
        if isinstance(op, SlicingWindowOperator):
            return op
        if op is None:
            op = SlicingWindowOperator.from_bytes(state["template"].to_bytes())
            if watermark is not None:
                op.process_watermark_columns(watermark)
        else:
            op = SlicingWindowOperator.from_bytes(op, like=state["template"])
        state["engines"][key] = op
        return op

    # -- one batch --------------------------------------------------------------------------------
    def _columns(self, data: pd.DataFrame):
        """``(keys, codes, values, ts, bad)``: the batch's distinct keys (first-seen order), each
        row's index into them, values, event times, and rows with a null value or time."""
        keys, codes = distinct_keys(data, [n for n, _ in self._keys])
        values = pd.to_numeric(data[_VALUE], errors="coerce").to_numpy(np.float64, na_value=np.nan)
        ts_col = data["event_time_ms"]
        bad = np.isnan(values) | ts_col.isna().to_numpy()
        ts = ts_col.to_numpy(np.int64, na_value=0) if bad.any() else ts_col.to_numpy(np.int64)
        return keys, codes, values, ts, bad

    def _commands(self, state: Any, batch: StageInput) -> tuple[list[str], bool]:
        """Apply the batch's window commands; ``(error messages, whether any was applied)``: a
        command that is malformed or that the configuration cannot take (a session for the keyed
        table) fails alike in every key group: reported once (``StageOutput.command_errors``)."""
        errors, applied = [], False
        for m in batch.modifications:
            cmd, err = window_command(m.text, self.name)
            if err:
                errors.append(err)
                continue
            if cmd is None:
                continue
            applied = True
            try:
                if self.keyed:
                    state.apply(cmd)
                else:   # engines first: one restored from bytes takes its queries from the template
                    for key in list(state["engines"]):
                        self._engine(state, key, None).apply(cmd)
                    state["template"].apply(cmd)
            except (ValueError, TypeError) as e:
                errors.append(f"stage {self.name!r}: cannot apply {m.text[:200]}: {e}")
        return errors, applied

    def process(self, state: Any, batch: StageInput) -> StageOutput:
        errors, changed = self._commands(state, batch)
        prev_wm, wm = batch.previous_watermark_ms, batch.watermark_ms
        data = batch.data
        has_data = data is not None and len(data) > 0
        parts: list[tuple[Any, Any]] = []
        drops: list[Dropped] = []
        if self.keyed:
            op: KeyedSlicingOperator | KeyedSessionOperator = state
            if op.watermark is None and prev_wm is not None:
                op.watermark = prev_wm                # new keys start at the group's watermark
            if has_data:
                keys, codes, values, ts, bad = self._columns(data)
                key_codes = op.codes_of(keys)
                nulls = np.bincount(codes[bad], minlength=len(keys))
                ok = ~bad
                late = op.process_elements(key_codes[codes[ok]], values[ok], ts[ok])[key_codes]
                drops = _drops(keys, late, nulls)
            if wm is not None:
                row_keys, res = op.process_watermark(wm)
                if len(res):
                    parts.append((row_keys, res))
        else:
            touched: dict = {}
            if has_data:
                keys, codes, values, ts, bad = self._columns(data)
                order = np.argsort(codes, kind="stable")
                bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
                values, ts, bad = values[order], ts[order], bad[order]
                late, nulls = np.zeros(len(keys), np.int64), np.zeros(len(keys), np.int64)
                for i, key in enumerate(keys):
                    lo, hi = bounds[i], bounds[i + 1]
                    engine = self._engine(state, key, prev_wm)
                    ok = ~bad[lo:hi]
                    nulls[i] = hi - lo - int(ok.sum())
                    before = engine.dropped_late
                    if ok.any():
                        engine.process_elements(values[lo:hi][ok], ts[lo:hi][ok])
                    late[i] = engine.dropped_late - before
                    touched[key] = True
                drops = _drops(keys, late, nulls)
            if wm is not None:
                advanced = prev_wm is None or wm > prev_wm or changed   # a new query may emit at once
                for key in (list(state["engines"]) if advanced else list(touched)):
                    res = self._engine(state, key, prev_wm).process_watermark_columns(wm)
                    if len(res):
                        parts.append((key, res))
        hold = output_watermark(self.output_watermark, wm, self.allowed_lateness_ms)
        floor = output_watermark(self.output_watermark, prev_wm, self.allowed_lateness_ms)
        if self.output_watermark != "complete":
            floor = None                            # updates travel as late data
        return StageOutput(self._frame(parts, hold, floor), hold, drops, command_errors=errors)

    def _frame(self, parts: list, hold: int | None, floor: int | None) -> pd.DataFrame:
        """Window rows of ``parts`` (``(key or per-row key array, WindowResults)``), column-wise."""
        names = [n for n, _ in self._keys]
        aggs = aggregation_columns(self.aggregations)
        if not parts:
            return pd.DataFrame({c: [] for c in names + [c for c, _ in RESULT_COLUMNS + SLICER_COLUMNS + aggs]
                                 + ["event_time_ms"]})
        row_keys = [k if isinstance(k, np.ndarray) else np.repeat(object_array([k]), len(r)) for k, r in parts]
        key_col = np.concatenate(row_keys)
        res = [r for _, r in parts]
        cols: dict[str, Any] = {}
        if len(names) == 1:
            cols[names[0]] = key_col
        else:
            for j, name in enumerate(names):
                cols[name] = object_array([k[j] for k in key_col.tolist()])
        cols["query_id"] = np.concatenate([r.query_id.astype(object) for r in res])
        start = np.concatenate([np.asarray(r.start, np.int64) for r in res])
        end = np.concatenate([np.asarray(r.end, np.int64) for r in res])
        measure = np.concatenate([r.measure.astype(object) for r in res])
        cols["window_start_ms"], cols["window_end_ms"] = start, end
        cols["update"] = np.concatenate([np.asarray(r.update, bool) for r in res])
        cols["measure"] = measure
        cols["is_retraction"] = np.concatenate([np.asarray(r.retraction, bool) for r in res])
        c = 0
        for i, fn in enumerate(self.aggregations):
            vals = [r.values[i] for r in res]
            width = len(fn.spark_columns(fn.name))
            if width > 1:                       # one column per part (M4: min, max, first, last)
                arr = np.concatenate(vals)
                for j in range(width):
                    cols[aggs[c][0]] = arr[:, j].astype(np.float64)
                    c += 1
                continue
            name, typ = aggs[c]
            c += 1
            if typ == "bigint" and not any(x is None for v in vals if not isinstance(v, np.ndarray) for x in v):
                cols[name] = np.concatenate([np.asarray(v, np.int64) for v in vals])
            elif typ == "double" and all(isinstance(v, np.ndarray) for v in vals):
                cols[name] = np.concatenate(vals).astype(np.float64)
            else:
                flat = [x for v in vals for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
                if typ == "double":
                    cols[name] = np.array([np.nan if x is None else float(x) for x in flat])
                elif typ.startswith("array"):
                    cols[name] = pd.Series([None if x is None else [float(y) for y in np.atleast_1d(x)] for x in flat],
                                           dtype=object)
                else:
                    cols[name] = pd.Series(flat, dtype=object)
        count_measure = measure != "time"
        event = end - 1
        if count_measure.any():
            event = np.where(count_measure, hold if hold is not None else 0, event)
        cols["event_time_ms"] = event if floor is None else np.maximum(event, floor)
        return pd.DataFrame(cols)


def _drops(keys: list, late: np.ndarray, nulls: np.ndarray) -> list[Dropped]:
    out = []
    for i in np.flatnonzero(late + nulls).tolist():
        if late[i]:
            out.append(Dropped(keys[i], "late", int(late[i])))
        if nulls[i]:
            out.append(Dropped(keys[i], "null", int(nulls[i])))
    return out
