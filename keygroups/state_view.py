"""The state of a stopped query, for people: per stage and key, the open windows, slices, held
records and watermarks.

Each stage operator keeps one Spark value state per key group (``operator``: the key group's
tracker, its stages' states and output watermarks, :mod:`keygroups.operator`) and a map state
(``log``: the stages' append-only parts, such as a Dataflow stage's element history, as
segments). Spark's state data source reads them (``spark.read.format("statestore")
.option("operatorId", k).option("stateVarName", "operator").load(checkpoint)``: one row per key
group, the state as bytes; ``"log"``: one row per segment); :func:`read_state` does that for
every operator of the checkpoint, decodes each key group's state with the pipeline's stages and
asks each stage to describe its part (:meth:`keygroups.Stage.describe_state`).

Which Spark operator is which: Spark numbers stateful operators from the sink towards the source;
each key group's tracker names the senders of its punctuations (Kafka partitions ``topic-p`` for
an operator reading the source, ``<stage>-<key group>`` for one after another operator), which
identifies the operator before it, so the mapping is read from the state itself and checked.

What Spark's own reader gives: ``format("statestore")`` reads our operators (``transformWithStateInPandas``
state, ``stateVarName="operator"``) as rows ``key`` (``key_group``), ``value`` (``blob``: the
key group's state as bytes, a pickle of the stages' own codecs) and ``partition_id``; the
``state-metadata`` source names the operators and their state variables. Spark cannot look
inside the bytes: the windows, slices and held records come from the stages (this module).

:func:`local_state` describes the states :meth:`keygroups.Pipeline.run_local` leaves (its
``states=``), the same way: what a test compares a checkpoint with.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.keygroups.operator import OperatorSpec, StateLog, load_operator_state
from dataflow_kafka.keygroups.punctuation import InputWatermarks

__all__ = ["StateView", "read_state", "local_state", "describe_operator", "state_item", "concat_rows", "ITEM_COLUMNS",
           "ROW_COLUMNS"]

STATE_NAME = "operator"            # the value state every StageProcessor keeps (keygroups.processor)
LOG_NAME = "log"                   # ... and its map state of segments
ITEM_COLUMNS = ["operator", "stage", "key_group", "key", "item", "query_id", "start_ms", "end_ms", "count",
                "detail"]
ROW_COLUMNS = ITEM_COLUMNS[3:-1]   # what a stage's description gives besides its detail fields
_RESERVED = frozenset(ITEM_COLUMNS[:3] + ["detail"])
_TEXT_LIMIT = 200                  # characters of one value in ``detail`` (payloads, states)
WATERMARK_COLUMNS = ["operator", "stage", "key_group", "watermark_in_ms", "watermark_out_ms", "senders"]


@dataclass
class StateView:
    """A checkpoint's state, as two tables (pandas): ``items`` (one row per window, slice, held
    record group, ... of a stage and key: ``operator``, ``stage``, ``key_group``, ``key``,
    ``item``, ``query_id``, ``start_ms``, ``end_ms``, ``count``, ``detail``: the other fields as
    text) and ``watermarks`` (per stage and key group: its input and output low watermarks;
    ``senders``: the newest punctuation of each sender, on the operator's first stage).
    ``batch_id``: the batch whose committed state this is. ``rows`` are ``items`` without the
    text, ``fields`` the detail fields, typed, one column each (same index): the text is made when
    ``items`` or :meth:`of` is read, for the rows read; :meth:`table` gives the typed fields."""

    rows: pd.DataFrame
    watermarks: pd.DataFrame
    batch_id: int | None
    fields: pd.DataFrame

    @functools.cached_property
    def items(self) -> pd.DataFrame:
        return self.rows.assign(detail=_detail(self.fields))

    def _rows(self, stage: str, item: str | None) -> pd.Series:
        keep = self.rows["stage"] == stage
        if item is not None:
            keep &= self.rows["item"] == item
        return keep

    def of(self, stage: str, item: str | None = None) -> pd.DataFrame:
        """The items of one stage (of one kind: ``item="window"``, ...)."""
        keep = self._rows(stage, item)
        return self.rows[keep].assign(detail=_detail(self.fields[keep])).reset_index(drop=True)

    def table(self, stage: str, item: str) -> pd.DataFrame:
        """The items of one stage and kind with each of their detail fields as a column of its value."""
        keep = self._rows(stage, item)
        extra = self.fields[keep].dropna(axis=1, how="all")
        return pd.concat([self.rows[keep], extra], axis=1).reset_index(drop=True)


def state_item(item: str, *, key: Any = None, query_id: str | None = None, start_ms: int | None = None,
               end_ms: int | None = None, count: int | None = None, **detail: Any) -> dict:
    """One row of :meth:`keygroups.Stage.describe_state`: what ``item`` it is (``window``,
    ``slice``, ``held``, ``query``, ...), of which ``key`` and ``query_id``, its ``[start_ms,
    end_ms)`` and ``count``; the other fields (None ones left out) are its detail: typed in
    :attr:`StateView.fields`, as ``name=value; ...`` text in the ``detail`` column (a value's text
    cut at 200 characters). A stage with many rows may give a DataFrame of these columns instead."""
    return {"item": item, "key": key, "query_id": query_id, "start_ms": _int(start_ms), "end_ms": _int(end_ms),
            "count": _int(count), **{k: v for k, v in detail.items() if v is not None}}


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    text = v if isinstance(v, str) else repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= _TEXT_LIMIT else text[:_TEXT_LIMIT - 3] + "..."


def _texts(values: np.ndarray) -> np.ndarray:
    """The text of each value (vectorised for numbers and strings), as a numpy string array."""
    kind = values.dtype.kind
    if kind in "iubU":
        return values.astype(str)
    if kind == "f":                        # shortest round-trip text; whole numbers without ".0"
        out = values.astype(str)
        whole = np.isfinite(values) & (values == np.round(values)) & (np.abs(values) < 2.0 ** 53)
        if whole.any():
            out = out.astype(object)
            out[whole] = values[whole].astype(np.int64).astype(str)
            out = out.astype(str)
        return out
    if kind == "O" and pd.api.types.infer_dtype(values, skipna=False) == "string":
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        if (lengths <= _TEXT_LIMIT).all():
            return values.astype(str)
    return np.array([_text(v) for v in values], dtype=object).astype(str)


def _detail(fields: pd.DataFrame) -> pd.Series:
    """``name=value; ...`` of each row's fields that are not null, in column order. Rows are
    grouped by which fields they have (few patterns), each group joined with numpy's string ops."""
    n, names = len(fields), list(fields.columns)
    if n == 0 or not names:
        return pd.Series([None] * n, index=fields.index, dtype=object)
    present = np.column_stack([~pd.isna(fields[c].to_numpy()) for c in names])
    code = np.zeros(n, np.int64) if len(names) <= 62 else None
    if code is not None:
        for j in range(len(names)):
            code |= present[:, j].astype(np.int64) << j
        patterns, which = np.unique(code, return_inverse=True)
        patterns = (patterns[:, None] >> np.arange(len(names))) & 1 == 1
    else:
        patterns, which = np.unique(present, axis=0, return_inverse=True)
    order = np.argsort(which.ravel(), kind="stable")
    bounds = np.searchsorted(which.ravel()[order], np.arange(len(patterns) + 1))
    out = np.full(n, None, dtype=object)
    for p, pattern in enumerate(patterns):
        rows = order[bounds[p]:bounds[p + 1]]
        text = None
        for c, has in zip(names, pattern):
            if has:
                piece = np.char.add(c + "=", _texts(fields[c].to_numpy()[rows]))
                text = piece if text is None else np.char.add(np.char.add(text, "; "), piece)
        if text is not None:
            out[rows] = text.tolist()
    return pd.Series(out, index=fields.index, dtype=object)


def concat_rows(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Description frames one below the other (columns in order of first appearance; a column a
    frame leaves empty does not decide the column's type)."""
    def filled(f: pd.DataFrame) -> pd.DataFrame:
        empty = [c for c in f.columns if f[c].first_valid_index() is None]
        return f.drop(columns=empty) if empty else f

    return pd.concat([filled(f) for f in frames], ignore_index=True, sort=False)


def _described(stage: Any, state: Any) -> pd.DataFrame:
    """A stage's description as a frame of :data:`ROW_COLUMNS` and its detail fields."""
    rows = stage.describe_state(state)
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame.from_records(list(rows))
    bad = [c for c in frame.columns if c in _RESERVED or not isinstance(c, str) or not c.isidentifier()]
    if bad:
        raise InvalidArgumentError(f"stage {stage.name!r}: describe_state gave fields {bad}, which name the view's "
                                   f"own columns {sorted(_RESERVED)} or are not identifiers "
                                   "(keygroups.state_view.state_item)")
    for c in ROW_COLUMNS:
        if c not in frame.columns:
            frame[c] = None
    return frame


def _senders(state) -> dict[str, Any]:
    tracker = state.tracker
    if isinstance(tracker, InputWatermarks):
        return {f"{name}/{s}": v for name, t in tracker.trackers.items() for s, v in t.source_punctuations().items()}
    return tracker.source_punctuations()


def describe_operator(spec: OperatorSpec, key_group: int, blob: bytes, log: StateLog | None = None
                      ) -> tuple[list[pd.DataFrame], list[dict]]:
    """One key group's committed state of operator ``spec`` (its value and, if it was written
    with one, its log): its stages' descriptions (frames of :data:`ROW_COLUMNS` and detail
    fields, with ``operator``, ``stage`` and ``key_group``) and its watermark rows
    (:class:`StateView`'s columns)."""
    st = load_operator_state(spec, blob, log)
    op = " > ".join(str(s.name) for s in spec.stages)
    items: list[pd.DataFrame] = []
    marks: list[dict] = []
    wm_in = st.tracker.low_watermark_ms
    for i, (stage, state) in enumerate(zip(spec.stages, st.states)):
        frame = _described(stage, state)
        if len(frame):
            items.append(frame.assign(operator=op, stage=str(stage.name), key_group=key_group))
        marks.append({"operator": op, "stage": str(stage.name), "key_group": key_group, "watermark_in_ms": wm_in,
                      "watermark_out_ms": st.out_watermarks[i], "senders": _senders(st) if i == 0 else None})
        wm_in = st.out_watermarks[i]
    return items, marks


def _upstreams_of(senders: dict[str, Any], names: set[str]) -> set[str | None]:
    """The operators whose key groups sent these punctuations (None: the source's partitions)."""
    out: set[str | None] = set()
    for s in senders:
        stage = s.split("/", 1)[-1].rsplit("-", 1)[0]
        out.add(stage if stage in names else None)
    return out


def _expected_upstreams(pipeline: Any, fuse: bool) -> list[tuple[OperatorSpec, set]]:
    """Every operator of the query with the operators (by name) that may send it punctuations:
    the previous one of its chain, the last ones of its upstream pipelines, or the source (None)."""
    out: list[tuple[OperatorSpec, set]] = []
    last: dict[int, str] = {}
    for node in pipeline.nodes():
        specs = node.specs(fuse)
        ups = node.upstreams
        first = {None} if ups is None else {last[id(u)] if u is not None else None for u in ups.values()}
        for j, spec in enumerate(specs):
            out.append((spec, first if j == 0 else {specs[j - 1].name}))
        last[id(node)] = specs[-1].name
    return out


def _match(expected: list[tuple[OperatorSpec, set]], decoded: dict[int, list[tuple[int, bytes, StateLog | None]]]
           ) -> dict[int, OperatorSpec]:
    """Spark operator id -> the spec it runs, read from each operator's senders (module docstring)."""
    names = {spec.name for spec, _ in expected}
    out: dict[int, OperatorSpec] = {}
    for op_id, rows in decoded.items():
        fits, senders = [], {}
        for spec, ups in expected:
            try:
                st = load_operator_state(spec, rows[0][1], rows[0][2])   # the stage count and codecs must fit
            except Exception:  # noqa: BLE001 - another operator's state: not this spec
                continue
            senders = _senders(st)
            if _upstreams_of(senders, names) <= ups:
                fits.append(spec)
        if len(fits) != 1:
            raise InvalidArgumentError(
                f"read_state: Spark operator {op_id} of the checkpoint matches {len(fits)} operators of this pipeline "
                f"(its punctuations come from {sorted(senders)[:4]}; the pipeline's operators: {sorted(names)}): "
                "is it the pipeline the checkpoint was written by?")
        out[op_id] = fits[0]
    return out


def _view(operators: list[tuple[OperatorSpec, list[tuple[int, bytes, StateLog | None]]]], batch_id: int | None
          ) -> StateView:
    """The view of every operator's key-group states (value, log), in the order given."""
    frames: list[pd.DataFrame] = []
    marks: list[dict] = []
    for spec, groups in operators:
        for kg, blob, log in groups:
            its, ms = describe_operator(spec, kg, blob, log)
            frames += its
            marks += ms
    every = concat_rows(frames) if frames else pd.DataFrame(columns=ITEM_COLUMNS[:-1])
    fields = every[[c for c in every.columns if c not in ITEM_COLUMNS]]
    rows = every.reindex(columns=ITEM_COLUMNS[:-1])
    for c in ("key", "item", "query_id"):                  # missing: None, not NaN
        rows[c] = rows[c].astype(object).where(rows[c].notna(), None)
    ints = {"key_group": "int64", "start_ms": "Int64", "end_ms": "Int64", "count": "Int64"}
    return StateView(rows.astype(ints), pd.DataFrame(marks, columns=WATERMARK_COLUMNS).astype(
        {"key_group": "int64", "watermark_in_ms": "Int64", "watermark_out_ms": "Int64"}), batch_id, fields)


def local_state(pipeline: Any, states: dict[str, dict[int, bytes]], fuse: bool = True) -> StateView:
    """The :class:`StateView` of the states :meth:`keygroups.Pipeline.run_local` left in
    ``states`` (its ``states=`` argument: ``{operator name: {key group: bytes}}``); ``fuse`` as
    the run's. Operators are in the order of the plan (the source's first)."""
    specs = [spec for spec, _ in _expected_upstreams(pipeline, fuse)]
    unknown = set(states) - {s.name for s in specs}
    if unknown:
        raise InvalidArgumentError(f"local_state: operators {sorted(unknown)} are not this pipeline's "
                                   f"({[s.name for s in specs]}; run with the same fuse=?)")
    return _view([(spec, [(kg, b, None) for kg, b in sorted(states.get(spec.name, {}).items())]) for spec in specs],
                 None)


def read_state(checkpoint: str, pipeline: Any, spark: Any = None, batch_id: int | None = None,
               fuse: bool = True) -> StateView:
    """The committed state of the query that ``pipeline`` (the :class:`keygroups.Pipeline` applied
    to the query, with its upstreams) wrote to ``checkpoint``, after ``batch_id`` (default: the last committed
    batch), read with Spark's state data source in ``spark`` (a classic session; default: the
    active one). See :class:`StateView`."""
    from pyspark.sql import SparkSession

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise InvalidArgumentError("read_state: no active SparkSession; pass spark=")
    meta = spark.read.format("state-metadata").load(checkpoint).collect()
    ours = [r for r in meta if STATE_NAME in _state_names(r)]
    if not ours:
        raise InvalidArgumentError(f"read_state: {checkpoint!r} holds no stage operator state (operators: "
                                   f"{[r['operatorName'] for r in meta]})")
    decoded: dict[int, list[tuple[int, bytes, StateLog | None]]] = {}

    def reader(r, name):
        out = spark.read.format("statestore").option("operatorId", r["operatorId"]).option("stateVarName", name)
        return out if batch_id is None else out.option("batchId", batch_id)

    for r in ours:
        rows = reader(r, STATE_NAME).load(checkpoint).select("key.key_group", "value.blob").collect()
        logs: dict[int, StateLog] = {}
        if LOG_NAME in _state_names(r):         # written since the log came (2026-11-30)
            segments = reader(r, LOG_NAME).load(checkpoint).select(
                "key.key_group", "user_map_key.stage", "user_map_key.segment", "user_map_value.data").collect()
            for kg, i, j, data in segments:
                logs.setdefault(int(kg), StateLog()).segments[(int(i), int(j))] = bytes(data)
        decoded[r["operatorId"]] = sorted(((int(k), bytes(b), logs.get(int(k), StateLog())) for k, b in rows
                                           if b is not None), key=lambda x: x[0])
    decoded = {k: v for k, v in decoded.items() if v}
    mapping = _match(_expected_upstreams(pipeline, fuse), decoded)
    last = batch_id if batch_id is not None else max((r["maxBatchId"] for r in ours), default=None)
    return _view([(mapping[op_id], decoded[op_id]) for op_id in sorted(decoded, reverse=True)], last)  # source first


def _state_names(meta_row: Any) -> set[str]:
    """The state variables an operator of the ``state-metadata`` source declares."""
    try:
        props = json.loads(meta_row["operatorProperties"] or "{}")
    except ValueError:
        return set()
    if not isinstance(props, dict):
        return set()
    return {v.get("stateName") for v in props.get("stateVariables", []) if isinstance(v, dict)}
