"""The inter-stage row contract: what every stage operator consumes and produces.

Every row between stages (and out of the last one) has the **control columns** below plus the
data columns of the stage that produced it. The source's rows (``format("dataflow-kafka")``) are
the first instance: :func:`keygroups.with_key_groups` gives them the epoch-ms columns, and a
stage's own rows fill the same columns.

==================  ======  ==========================================================================
column              type    meaning
==================  ======  ==========================================================================
kind                string  ``data``, ``punctuation``, ``modification``, ``error``, ``dropped``,
                            ``metrics``, ``result`` (an earlier stage's output kept in the
                            pipeline's output: :meth:`keygroups.Pipeline.emit`)
topic               string  the sender: a Kafka topic, or the stage that emitted the row
partition           int     the sender's instance: a Kafka partition, or the stage's key group
offset              bigint  position in the sender's stream: Kafka offset; for a stage, its data
                            row count (data) or batch count (punctuation)
event_time_ms       bigint  data rows: event time (a window result: ``window_end_ms - 1``)
punctuation_ms      bigint  punctuation rows: "no more data rows from this sender below this event
                            time" (null: no guarantee yet)
modification        string  modification rows: the command (JSON object text)
control_offset      bigint  modification rows: the command's offset in the control topic (its
                            identity and order)
processing_time_ms  bigint  the micro-batch's processing time (recorded in the source offset)
error               string  error rows: why a record was skipped (names topic-partition@offset)
dropped_key         string  dropped rows: the key whose records a stage did not use this batch
dropped_reason      string  dropped rows: ``late``, ``null`` or ``closed``
dropped_count       bigint  dropped rows: how many records
metrics             string  metrics rows: a stage's counters for this key group and batch (JSON)
==================  ======  ==========================================================================

Per sender and micro-batch: modification rows, data rows (in ``offset`` order), then one
punctuation row. Modifications reach every key group of every stage before the batch's
punctuation (Enorm §6.2); ``error``, ``dropped`` and ``metrics`` rows travel to key group 0 of
each later operator, which passes them on, so they reach the output of the query.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "KIND_DATA", "KIND_PUNCTUATION", "KIND_MODIFICATION", "KIND_ERROR", "KIND_DROPPED", "KIND_METRICS", "KIND_RESULT",
    "CONTROL_COLUMNS", "CONTROL_NAMES", "Modification", "Split", "split_rows", "control_frame",
    "conform", "schema_ddl",
]

KIND_DATA = "data"
KIND_PUNCTUATION = "punctuation"
KIND_MODIFICATION = "modification"
KIND_ERROR = "error"
KIND_DROPPED = "dropped"
KIND_METRICS = "metrics"
KIND_RESULT = "result"

CONTROL_COLUMNS: list[tuple[str, str]] = [
    ("kind", "string"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
    ("event_time_ms", "bigint"), ("punctuation_ms", "bigint"), ("modification", "string"),
    ("control_offset", "bigint"), ("processing_time_ms", "bigint"), ("error", "string"),
    ("dropped_key", "string"), ("dropped_reason", "string"), ("dropped_count", "bigint"),
    ("metrics", "string"),
]
CONTROL_NAMES = [c for c, _ in CONTROL_COLUMNS]
_PASS_ON = (KIND_ERROR, KIND_DROPPED, KIND_METRICS, KIND_RESULT)


@dataclass(frozen=True)
class Modification:
    """A modification punctuation: a command from the control topic, identified by its offset."""

    control_offset: int | None
    text: str

    @property
    def command(self) -> Any:
        """The parsed JSON command (a dict for every command the source lets through)."""
        return json.loads(self.text)


@dataclass
class Split:
    """One micro-batch's rows of one key group, by kind."""

    data: pd.DataFrame                       # data rows, sorted by (topic, partition, offset)
    modifications: list[Modification]        # deduplicated, in control-topic order
    punctuations: pd.DataFrame               # punctuation rows
    pass_on: pd.DataFrame                    # error / dropped / metrics rows
    processing_time_ms: int | None = None
    extra: dict = field(default_factory=dict)


def _int_or_none(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def split_rows(pdf: pd.DataFrame) -> Split:
    """Split rows of the contract by kind (pure). Data rows come out in (topic, partition, offset)
    order; rows already in that order are not sorted again. Modification copies (one per sender)
    are deduplicated by ``control_offset`` (by text when a row has none) and ordered by it."""
    kinds = pdf["kind"].to_numpy(dtype=object)
    is_data = kinds == KIND_DATA
    data = pdf[is_data]
    if not _in_offset_order(data):
        data = data.sort_values(["topic", "partition", "offset"], kind="stable")
    control = pdf[~is_data]
    ck = control["kind"]
    mods_rows = control[ck == KIND_MODIFICATION]
    seen: dict = {}
    offsets = (mods_rows["control_offset"] if "control_offset" in mods_rows.columns
               else pd.Series([None] * len(mods_rows), index=mods_rows.index))
    texts = mods_rows["modification"] if "modification" in mods_rows.columns else [None] * len(mods_rows)
    for text, off in zip(texts, offsets):
        off = _int_or_none(off)
        ident = ("o", off) if off is not None else ("t", text)
        if ident not in seen:
            seen[ident] = Modification(off, text)
    mods = sorted(seen.values(), key=lambda m: (m.control_offset is None, m.control_offset or 0))
    pt = pdf["processing_time_ms"].max() if len(pdf) and "processing_time_ms" in pdf.columns else None
    return Split(data=data, modifications=mods, punctuations=control[ck == KIND_PUNCTUATION],
                 pass_on=control[ck.isin(_PASS_ON)], processing_time_ms=_int_or_none(pt))


def _in_offset_order(data: pd.DataFrame) -> bool:
    """Whether ``data`` is sorted by (topic, partition, offset), without nulls in those columns."""
    if len(data) < 2:
        return True
    cols = [data[c] for c in ("topic", "partition", "offset")]
    if any(c.hasnans for c in cols):
        return False
    topic = cols[0].to_numpy(dtype=object)
    part = cols[1].to_numpy(dtype=np.int64)
    off = cols[2].to_numpy(dtype=np.int64)
    same_topic = topic[1:] == topic[:-1]
    if not (same_topic.all() or bool((topic[1:] >= topic[:-1]).all())):
        return False
    dp, do = np.diff(part), np.diff(off)
    ok = ~same_topic | (dp > 0) | ((dp == 0) & (do >= 0))
    return bool(ok.all())


def control_frame(rows: Sequence[dict]) -> pd.DataFrame:
    """Control rows (dicts of control columns; missing ones are null) as a frame."""
    return pd.DataFrame({c: [r.get(c) for r in rows] for c in CONTROL_NAMES})


_PANDAS = {"string": object, "binary": object, "int": "Int32", "bigint": "Int64", "long": "Int64",
           "double": "float64", "float": "float32", "boolean": "boolean", "smallint": "Int16",
           "tinyint": "Int8"}


_MASKED = {"Int8": np.int8, "Int16": np.int16, "Int32": np.int32, "Int64": np.int64, "boolean": np.bool_}


def conform(frames: Iterable[pd.DataFrame], columns: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """Concatenate ``frames`` into exactly ``columns`` (name, Spark DDL type): missing columns are
    null, others dropped, integer columns nullable, so Arrow gets one well-typed batch. Works on
    numpy arrays and masks per column (no pandas concat or astype: this runs for every key group
    and micro-batch)."""
    parts = [f for f in frames if f is not None and len(f)]
    lengths = [len(f) for f in parts]
    n = sum(lengths)
    series = [dict(f.items()) for f in parts]           # one pass over each part's columns
    out = {}
    for name, ddl in columns:
        dtype = _PANDAS.get(ddl.lower(), object)
        cols = [s.get(name) for s in series]
        if dtype is object:
            arrs = [c.to_numpy(dtype=object) if c is not None else np.full(k, None, dtype=object)
                    for c, k in zip(cols, lengths)]
            a = np.concatenate(arrs) if len(arrs) > 1 else (arrs[0] if arrs else np.empty(0, dtype=object))
            mask = pd.isna(a)
            if mask.any():
                a = a.copy()
                a[mask] = None
            out[name] = a
        elif dtype in ("float64", "float32"):
            arrs = [c.to_numpy(dtype=np.float64, na_value=np.nan) if c is not None else np.full(k, np.nan)
                    for c, k in zip(cols, lengths)]
            a = np.concatenate(arrs) if arrs else np.empty(0)
            out[name] = a if dtype == "float64" else a.astype(np.float32)
        else:
            np_type = _MASKED[dtype]
            values, masks = [], []
            for c, k in zip(cols, lengths):
                if c is None:
                    values.append(np.zeros(k, np_type))
                    masks.append(np.ones(k, bool))
                    continue
                kind = c.dtype.kind
                if kind in "iub" and not isinstance(c.dtype, pd.api.extensions.ExtensionDtype):
                    values.append(c.to_numpy().astype(np_type, copy=False))
                    masks.append(np.zeros(k, bool))
                    continue
                arr = c.array if isinstance(c.dtype, pd.api.extensions.ExtensionDtype) and kind in "iub" \
                    else c.astype(dtype).array                   # objects, floats with NaN: checked cast
                masks.append(np.asarray(arr.isna(), bool))
                values.append(arr.to_numpy(dtype=np_type, na_value=np_type(0)))
            v = np.concatenate(values) if values else np.zeros(0, np_type)
            m = np.concatenate(masks) if masks else np.zeros(0, bool)
            out[name] = (pd.arrays.BooleanArray(v, m) if dtype == "boolean" else pd.arrays.IntegerArray(v, m))
    return pd.DataFrame(out, index=pd.RangeIndex(n))


def schema_ddl(columns: Sequence[tuple[str, str]]) -> str:
    """``columns`` as a Spark DDL schema string (names quoted)."""
    return ", ".join(f"`{n}` {t}" for n, t in columns)
