"""A micro-batch through a chain's operators as pandas frames: the local runner's steps (pure, no Spark).

:func:`run_chain_local` runs one micro-batch through the operators of a chain: per operator it
computes the first stage's column inputs (plain columns copied, :class:`~keygroups.computed.Computed`
ones evaluated; SQL is Spark's), routes the rows to key groups as Spark's ``with_key_groups`` does
(:func:`groups_of_columns`, :func:`by_key_group`: data rows by the one routing function, markers to
every key group, other rows to the first; Enorm §4-5, data-trace types §4) or in Python
(:func:`ingest_frame`), and calls :func:`keygroups.operator.run_key_group` per key group, its
state kept as bytes between batches as Spark keeps it. The Spark plan runs the same Python
routing and packing (:func:`pack_frame`, :func:`packable`) inside its ``mapInPandas`` steps
(:mod:`keygroups.spark_steps`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups.computed import Computed, evaluate
from dataflow_kafka.keygroups.contract import KIND_DATA, conform
from dataflow_kafka.keygroups.operator import OperatorSpec, StateLog, run_key_group
from dataflow_kafka.keygroups.plan import ingest_columns, plain_column
from dataflow_kafka.keygroups.routing import KEY_GROUP_COLUMN, MARKER_KINDS, key_groups_of
from dataflow_kafka.keygroups.stage import StageLogic, group_ids_of, key_columns_of, router_of
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["run_chain_local", "groups_of_columns", "by_key_group", "ingest_frame", "pack_frame", "packable",
           "packable_types", "key_group_blobs", "arrow_schema"]


def run_chain_local(df: pd.DataFrame, specs: Sequence[OperatorSpec], states: list[dict[int, bytes]],
                    head: bool = False, logs: list[dict[int, StateLog]] | None = None) -> pd.DataFrame:
    """One micro-batch (a frame of the row contract) through a chain's operators ``specs``;
    ``states``: per operator ``{key group: state bytes}``, updated. ``head``: ``df`` is a
    multi-input first operator's tagged input (:func:`keygroups.fan_in.tag_frame`). ``logs``:
    per operator ``{key group: StateLog}`` (created where missing) to keep the stages'
    append-only parts in, as the Spark processor does (None: all in the bytes)."""
    for j, spec in enumerate(specs):
        first = spec.stages[0]
        n = first.num_key_groups
        if j == 0 and head:
            groups = groups_of_columns(df, key_columns_of(first), n)
        elif router_of(first) is not None:
            if j == 0:
                df = ingest_frame(df, first)
            groups = df[KEY_GROUP_COLUMN] if KEY_GROUP_COLUMN in df.columns else None
        else:
            df = _local_inputs(df, first, j)
            groups = groups_of_columns(df, key_columns_of(first), n)
        outs = []
        for kg, rows in by_key_group(df, groups, n, group_ids_of(first)):
            log = None if logs is None else logs[j].setdefault(kg, StateLog())
            out, states[j][kg] = run_key_group(spec, kg, rows, states[j].get(kg), log)
            if out is not None and len(out):
                outs.append(out)
        df = conform(outs, spec.output_columns())
    return df


def _local_inputs(df: pd.DataFrame, stage: StageLogic, j: int) -> pd.DataFrame:
    """``df`` with ``stage``'s column inputs (:meth:`Pipeline.run_local`): plain columns copied, on
    the data rows only after the first operator (other rows keep their own columns, as on Spark),
    :class:`~keygroups.computed.Computed` ones computed; the first operator's SQL inputs must be
    columns of the batch."""
    renames: dict[str, Any] = {}
    computed: dict[str, Computed] = {}
    is_data = (df["kind"] == KIND_DATA).to_numpy(bool)
    for name, expr in stage.inputs().items():
        if isinstance(expr, Computed):
            if not (j > 0 and name in df.columns):        # after the first operator: computed upstream
                computed[name] = expr
            continue
        col = plain_column(expr)
        if name in df.columns and (col == name or (j == 0 and (col is None or col not in df.columns))):
            continue                      # the column itself, or the first operator's SQL input given computed
        if not is_data.any():
            renames[name] = None          # no data rows: nothing to compute
            continue
        if col is None or col not in df.columns:
            raise InvalidArgumentError(f"run_local: input {name!r} = {expr!r} of stage {stage.name!r} is not a column of "
                             "its input rows (a SQL expression is evaluated by Spark only: give the input as "
                             "keygroups.Computed(fn, type), which both runners evaluate, or add the column)")
        if j == 0:
            renames[name] = df[col]
        else:
            base = df[name] if name in df.columns else pd.Series([None] * len(df), index=df.index, dtype=object)
            renames[name] = df[col].where(is_data, base) if base.dtype == df[col].dtype else \
                pd.Series(np.where(is_data, df[col].astype(object), base.astype(object)), index=df.index)
    if renames:
        df = df.assign(**renames)
    return evaluate(df, computed)


def groups_of_columns(df: pd.DataFrame, keys: Sequence[str] | None, n: int) -> np.ndarray | None:
    """Key groups of the data rows of ``df`` by its key columns (Spark's hash; ints by width)."""
    if not keys:
        raise InvalidArgumentError("a stage with column inputs needs key columns (its routing())")
    is_data = (df["kind"] == KIND_DATA).to_numpy()
    groups = np.zeros(len(df), np.int64)
    if is_data.any():
        data = df[is_data]
        cols, widths = [], []
        for k in keys:
            col = data[k]
            widths.append(4 if str(col.dtype) in ("Int32", "int32", "Int16", "int16", "Int8", "int8") else 8)
            if getattr(col.dtype, "kind", "O") in "iub":
                cols.append(col)           # integer / boolean: hashed in numpy, missing values as null
                continue
            cols.append([None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)
                         if not isinstance(v, (bytes, str, tuple, list)) else v for v in col.tolist()])
        groups[is_data] = key_groups_of(cols, n, widths)
    return groups


def _key_group_masks(df: pd.DataFrame, groups, n: int, ids: Sequence[int] | None = None):
    """``(key group, row mask)`` as ``with_key_groups`` routes the rows of ``df`` (a frame, or its
    ``kind`` column as an array): data by ``groups``, markers to every key group (``ids``, default
    ``0..n-1``), other rows to the first; groups without rows are left out."""
    kinds = df["kind"].to_numpy(dtype=object) if isinstance(df, pd.DataFrame) else df
    is_data = kinds == KIND_DATA
    is_marker = np.isin(kinds, MARKER_KINDS)
    g = np.asarray(groups, dtype=np.float64) if groups is not None else np.zeros(len(df))
    ids = list(range(n)) if ids is None else [int(i) for i in ids]
    for kg in ids:
        mask = is_marker | (is_data & (g == kg)) | (~is_data & ~is_marker & (kg == ids[0]))
        if mask.any():
            yield kg, mask


def by_key_group(df: pd.DataFrame, groups, n: int, ids: Sequence[int] | None = None):
    """``(key group, rows)`` as ``with_key_groups`` routes them (:func:`_key_group_masks`)."""
    for kg, mask in _key_group_masks(df, groups, n, ids):
        yield kg, df[mask]


def ingest_frame(pdf: pd.DataFrame, stage: StageLogic) -> pd.DataFrame:
    """Python routing of source rows (pure): data rows through ``stage``'s router, others kept."""
    router = router_of(stage)
    is_data = (pdf["kind"] == KIND_DATA).to_numpy()
    data = pdf[is_data]
    parts = [pdf[~is_data]]
    if len(data):
        rows, groups = router(data)
        if rows is not None and len(rows):
            pt = data["processing_time_ms"].max() if "processing_time_ms" in data.columns else None
            extra = {KEY_GROUP_COLUMN: np.asarray(groups, np.int64), "kind": KIND_DATA}
            if "processing_time_ms" not in rows.columns:
                extra["processing_time_ms"] = pt
            parts.append(rows.assign(**extra))
    return conform(parts, ingest_columns(stage))


def pack_frame(frame: pd.DataFrame, columns: Sequence[tuple[str, str]], n: int,
               ids: Sequence[int] | None = None) -> pd.DataFrame:
    """Rows of ``frame`` (with ``key_group`` on data rows) as one ``(key_group, payload)`` row per
    key group that gets any: data rows to their group, punctuation and modification rows to every
    group, other rows to the first group (``ids[0]``); the payload is an Arrow IPC stream of ``columns`` (pure)."""
    import pyarrow as pa

    from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN

    out_groups, payloads = [], []
    if len(frame):
        groups = frame[KEY_GROUP_COLUMN].to_numpy(dtype=np.float64, na_value=-1)
        table = pa.Table.from_pandas(frame[[c for c, _ in columns]], schema=arrow_schema(columns), preserve_index=False)
        for kg, blob in key_group_blobs(table, frame["kind"].to_numpy(dtype=object), groups, n, ids):
            out_groups.append(kg)
            payloads.append(blob)
    return pd.DataFrame({KEY_GROUP_COLUMN: np.asarray(out_groups, np.int32), PAYLOAD_COLUMN: payloads})


def key_group_blobs(table, kinds: np.ndarray, groups, n: int, ids: Sequence[int] | None = None):
    """``(key group, Arrow IPC stream of its rows of table)`` for each key group that gets a row,
    routed as :func:`_key_group_masks` routes (``kinds``: each row's ``kind``)."""
    import pyarrow as pa

    for kg, mask in _key_group_masks(kinds, groups, n, ids):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.filter(pa.array(mask)))
        yield kg, sink.getvalue().to_pybytes()


def packable(stage: StageLogic) -> bool:
    """Whether every column of ``stage``'s Python-routed rows (:func:`~keygroups.plan.ingest_columns`)
    has an Arrow type :func:`pack_frame` can write."""
    return packable_types(ingest_columns(stage))


def packable_types(columns: Sequence[tuple[str, str]]) -> bool:
    """Whether every ``(name, Spark DDL type)`` has an Arrow type :func:`arrow_schema` writes."""
    return all(ddl.lower() in _ARROW_TYPES for _, ddl in columns)


_ARROW_TYPES = ("string", "binary", "int", "bigint", "long", "double", "float", "boolean", "smallint", "tinyint")


def arrow_schema(columns: Sequence[tuple[str, str]]):
    """``(name, Spark DDL type)`` columns of simple types (string, binary, integers, floats,
    boolean) as a pyarrow schema."""
    import pyarrow as pa

    types = {"string": pa.string(), "binary": pa.binary(), "int": pa.int32(), "bigint": pa.int64(),
             "long": pa.int64(), "double": pa.float64(), "float": pa.float32(), "boolean": pa.bool_(),
             "smallint": pa.int16(), "tinyint": pa.int8()}
    return pa.schema([(name, types[ddl.lower()]) for name, ddl in columns])
