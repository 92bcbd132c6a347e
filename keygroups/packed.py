"""Key groups packed into Arrow blobs: a few shuffle rows per key group instead of one per record.

pyspark 4.3's ``transformWithStateInPandas`` worker regroups the rows of a key group one at a
time (``itertuples``, then DataFrames built from tuples): per micro-batch that costs more than a
vectorised operator's own work, and grows with the number of columns. :func:`pack_key_groups`
removes it: after :func:`keygroups.with_key_groups` (data rows hashed to a key group, punctuation
and modification rows copied to every group, error rows to group 0), a ``mapInArrow`` step packs,
per task, the rows of each key group into one row ``(key_group int, payload binary)`` whose
payload is an Arrow IPC stream holding the other columns. The stage processor
(:class:`keygroups.processor.StageProcessor` with ``packed=True``) unpacks the payloads of a call
with pyarrow (:func:`unpack_key_group`) into one pandas frame, so a stage sees the same rows as
with unpacked input. :meth:`keygroups.Pipeline.apply` packs the source's rows by default
(``pack_source=True``)::

    packed = pack_key_groups(source_df, "key", 8)              # key_group, payload

Row order: the blobs of a key group arrive in an order Spark does not fix, so the unpacked rows
are sorted by ``(topic, partition, offset, kind)`` (the columns of those present): a replayed
micro-batch gives the processor the same rows in the same order. Integer columns arrive as
pandas nullable ``Int*`` dtypes, strings as ``object``, doubles as ``float64``.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import pandas as pd

__all__ = ["pack_key_groups", "unpack_key_group", "nullable_pandas", "PAYLOAD_COLUMN", "ORDER_COLUMNS",
           "ROWS_PER_BLOB"]

PAYLOAD_COLUMN = "payload"
ORDER_COLUMNS = ("topic", "partition", "offset", "kind")
ROWS_PER_BLOB = 200_000       # a key group's rows in one task beyond this start another blob


def pack_key_groups(df, keys: str | Sequence[str] | None, num_key_groups: int, columns: Sequence | None = None,
                    rows_per_blob: int = ROWS_PER_BLOB, column: str | None = None):
    """``df`` as rows ``(key_group int, payload binary)``: per task, one row per key group (more if
    it has over ``rows_per_blob`` rows) whose payload is an Arrow IPC stream of its rows.

    ``keys``, ``num_key_groups``: as :func:`keygroups.with_key_groups`, which assigns the groups
    (and adds the epoch-ms columns). ``keys=None``: ``df`` already has the key group column.
    ``columns``: what to pack (names or Columns; default every column but the key group).
    Unpack with :func:`unpack_key_group` (the stage processor does, with ``packed=True``).
    """
    from dataflow_kafka.keygroups.routing import KEY_GROUP_COLUMN, with_key_groups

    column = column or KEY_GROUP_COLUMN
    grouped = df if keys is None else with_key_groups(df, keys, num_key_groups, column)
    if columns is None:
        columns = [c for c in grouped.columns if c != column]
    slim = grouped.select(column, *columns)
    schema = f"`{column}` int, `{PAYLOAD_COLUMN}` binary"
    return slim.mapInArrow(_packer(column, int(rows_per_blob)), schema)


def _packer(column: str, rows_per_blob: int):
    def pack(batches: Iterable) -> Iterator:
        return pack_batches(batches, column, rows_per_blob)
    return pack


def pack_batches(batches: Iterable, column: str, rows_per_blob: int = ROWS_PER_BLOB) -> Iterator:
    """The ``mapInArrow`` function of :func:`pack_key_groups` (pure pyarrow, testable).

    Yields one record batch per blob, after the last input batch, or as soon as a group has
    ``rows_per_blob`` rows or more (a group's rows of one input batch stay in one blob); a blob
    keeps its rows in input order. Nulls sort last in :func:`unpack_key_group`.
    """
    import numpy as np
    import pyarrow as pa

    pending: dict[int, list] = {}
    counts: dict[int, int] = {}

    def blob(group: int):
        parts = pending.pop(group)
        counts.pop(group)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, parts[0].schema) as writer:
            for p in parts:
                writer.write_batch(p)
        return pa.RecordBatch.from_arrays(
            [pa.array([group], pa.int32()), pa.array([sink.getvalue().to_pybytes()], pa.binary())],
            [column, PAYLOAD_COLUMN])

    for batch in batches:
        if batch.num_rows == 0:
            continue
        groups = batch.column(column).to_numpy(zero_copy_only=False)
        rest = batch.drop_columns([column])
        order = np.argsort(groups, kind="stable")
        sorted_groups = groups[order]
        cuts = np.flatnonzero(np.diff(sorted_groups)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(order)]])
        taken = rest.take(pa.array(order))
        for lo, hi in zip(starts, ends):
            g = int(sorted_groups[lo])
            pending.setdefault(g, []).append(taken.slice(lo, hi - lo))
            counts[g] = counts.get(g, 0) + int(hi - lo)
            if counts[g] >= rows_per_blob:
                yield blob(g)
    for g in sorted(pending):
        yield blob(g)


def unpack_key_group(payloads: Iterable, order_by: Sequence[str] = ORDER_COLUMNS) -> pd.DataFrame:
    """The rows of the Arrow IPC ``payloads`` of one key group as one pandas frame, sorted by the
    ``order_by`` columns present (stable; see module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables = [pa.ipc.open_stream(pa.py_buffer(p)).read_all() for p in payloads if p is not None]
    if not tables:
        return pd.DataFrame()
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    keys = [(c, "ascending") for c in order_by if c in table.column_names]
    if keys and table.num_rows > 1:
        table = table.take(pc.sort_indices(table, sort_keys=keys))
    return nullable_pandas(table)


def nullable_pandas(arrow) -> pd.DataFrame | pd.Series:
    """An Arrow table (or column) as pandas with nullable integer and boolean dtypes (``Int64``, ...),
    as :func:`unpack_key_group` gives the processor its rows."""
    return arrow.to_pandas(types_mapper=_nullable_ints.get)


def _nullable_ints_map() -> dict:
    import pyarrow as pa

    return {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
            pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}


_nullable_ints = _nullable_ints_map()
