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
    "Columns", "conform", "schema_ddl",
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
    # the control kinds picked from the numpy column: a kind no row has costs no masked copy
    ctl = np.flatnonzero(~is_data)
    ck = kinds[ctl]
    empty = pdf.iloc[:0]

    def rows(mask: np.ndarray) -> pd.DataFrame:
        return pdf.take(ctl[mask]) if mask.any() else empty

    mods_rows = rows(ck == KIND_MODIFICATION)
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
    return Split(data=data, modifications=mods, punctuations=rows(ck == KIND_PUNCTUATION),
                 pass_on=rows(np.isin(ck, _PASS_ON)), processing_time_ms=_int_or_none(pt))


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


class Columns:
    """Rows as columns, a part for :func:`conform` without a pandas frame in between: ``n`` rows;
    ``columns`` maps a name to a pandas Series, numpy array or list of ``n`` values, or to one
    scalar that every row has (a stage's output rows with their control columns added, or a few
    control rows, cost no frame of their own: this runs for every key group and micro-batch)."""

    __slots__ = ("n", "columns")

    def __init__(self, n: int, columns: dict) -> None:
        self.n, self.columns = int(n), columns

    def __len__(self) -> int:
        return self.n

    @classmethod
    def of_rows(cls, rows: Sequence[dict]) -> "Columns":
        """Rows given as dicts (missing names are null), as :func:`control_frame` takes them."""
        names = dict.fromkeys(name for r in rows for name in r)
        return cls(len(rows), {name: [r.get(name) for r in rows] for name in names})

    @classmethod
    def of_frame(cls, frame: pd.DataFrame, **more) -> "Columns":
        """``frame``'s columns, with ``more`` (columns or scalars) added or replacing them."""
        columns = dict(frame.items())
        columns.update(more)
        return cls(len(frame), columns)


def _is_scalar(c: Any) -> bool:
    return not isinstance(c, (pd.Series, np.ndarray, list))


def _is_null(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _object_piece(c: Any, k: int) -> np.ndarray:
    if c is None:
        return np.full(k, None, dtype=object)
    if isinstance(c, pd.Series):
        return c.to_numpy(dtype=object)
    if isinstance(c, np.ndarray):
        return c.astype(object, copy=False)
    if isinstance(c, list):
        return np.fromiter(c, dtype=object, count=k)
    return np.full(k, c, dtype=object)


def _float_piece(c: Any, k: int) -> np.ndarray:
    if c is None:
        return np.full(k, np.nan)
    if isinstance(c, pd.Series):
        return c.to_numpy(dtype=np.float64, na_value=np.nan)
    if isinstance(c, np.ndarray):
        return c.astype(np.float64)
    if isinstance(c, list):
        return np.array([np.nan if _is_null(v) else v for v in c], dtype=np.float64)
    return np.full(k, np.nan if _is_null(c) else c, dtype=np.float64)


def _masked_piece(c: Any, k: int, dtype: str, np_type) -> tuple[np.ndarray, np.ndarray]:
    """``(values, null mask)`` of one part's column for a nullable integer or boolean column."""
    if c is None or (_is_scalar(c) and _is_null(c)):
        return np.zeros(k, np_type), np.ones(k, bool)
    if _is_scalar(c) and isinstance(c, (int, np.integer)):         # bool is an int: 0 / 1
        return np.full(k, c, np_type), np.zeros(k, bool)
    if isinstance(c, np.ndarray) and c.dtype.kind in "iub":
        return c.astype(np_type, copy=False), np.zeros(k, bool)
    if isinstance(c, list) and all(v is None or isinstance(v, (int, np.integer)) for v in c):
        return (np.fromiter((0 if v is None else v for v in c), np_type, count=k),
                np.fromiter((v is None for v in c), bool, count=k))
    if not isinstance(c, pd.Series):
        c = pd.Series(c if not _is_scalar(c) else [c] * k)
    kind = c.dtype.kind
    if kind in "iub" and not isinstance(c.dtype, pd.api.extensions.ExtensionDtype):
        return c.to_numpy().astype(np_type, copy=False), np.zeros(k, bool)
    arr = c.array if isinstance(c.dtype, pd.api.extensions.ExtensionDtype) and kind in "iub" \
        else c.astype(dtype).array                   # objects, floats with NaN: checked cast
    return arr.to_numpy(dtype=np_type, na_value=np_type(0)), np.asarray(arr.isna(), bool)


def conform(frames: Iterable[pd.DataFrame | Columns], columns: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """Concatenate ``frames`` (pandas frames or :class:`Columns`) into exactly ``columns`` (name,
    Spark DDL type): missing columns are null, others dropped, integer columns nullable, so Arrow
    gets one well-typed batch. Works on numpy arrays and masks per column (no pandas concat or
    astype: this runs for every key group and micro-batch)."""
    parts = [f for f in frames if f is not None and len(f)]
    lengths = [len(f) for f in parts]
    n = sum(lengths)
    series = [f.columns if isinstance(f, Columns) else dict(f.items()) for f in parts]
    out = {}
    for name, ddl in columns:
        dtype = _PANDAS.get(ddl.lower(), object)
        cols = [s.get(name) for s in series]
        if dtype is object:
            arrs = [_object_piece(c, k) for c, k in zip(cols, lengths)]
            a = np.concatenate(arrs) if len(arrs) > 1 else (arrs[0] if arrs else np.empty(0, dtype=object))
            mask = pd.isna(a)
            if mask.any():
                a = a.copy()
                a[mask] = None
            out[name] = a
        elif dtype in ("float64", "float32"):
            arrs = [_float_piece(c, k) for c, k in zip(cols, lengths)]
            a = np.concatenate(arrs) if arrs else np.empty(0)
            out[name] = a if dtype == "float64" else a.astype(np.float32)
        else:
            np_type = _MASKED[dtype]
            pieces = [_masked_piece(c, k, dtype, np_type) for c, k in zip(cols, lengths)]
            v = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np_type)
            m = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, bool)
            out[name] = (pd.arrays.BooleanArray(v, m) if dtype == "boolean" else pd.arrays.IntegerArray(v, m))
    return pd.DataFrame(out, index=pd.RangeIndex(n))


def schema_ddl(columns: Sequence[tuple[str, str]]) -> str:
    """``columns`` as a Spark DDL schema string (names quoted)."""
    return ", ".join(f"`{n}` {t}" for n, t in columns)
