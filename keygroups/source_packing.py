"""The first operator's routing and packing in the source's tasks (option ``keyGroupPacking``).

:func:`keygroups.packed.pack_key_groups` packs the first operator's rows after Spark has them:
the source's rows cross into the JVM (a row per record), the JVM parses and hashes each key
(``from_json``, ``xxhash64``), copies the markers to every key group, and a ``mapInArrow`` step
moves the rows back to Python to pack them. When the source's reader is given to
:meth:`keygroups.Pipeline.apply`, :class:`SourcePacking` does the same in the source's own task,
on the Arrow batches it reads (inputs by :func:`~keygroups.computed.evaluate`, key groups by
:func:`~keygroups.frames.groups_of_columns`, blobs by :func:`~keygroups.frames.key_group_blobs`):
a few ``(key_group, payload)`` rows per task reach the JVM, and the stage processor unpacks the
same rows it would unpack on the JVM path (``tests/keygroups/test_source_packing.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import pandas as pd

from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN, ROWS_PER_BLOB, nullable_pandas

__all__ = ["SourcePacking"]

_MS_COLUMNS = {"event_time_ms": "event_time", "punctuation_ms": "punctuation", "processing_time_ms": "processing_time"}


@dataclass(frozen=True)
class SourcePacking:
    """The first operator's routing and packing run inside the source's tasks (option
    ``keyGroupPacking`` of ``format("dataflow-kafka")``, which :meth:`keygroups.Pipeline.apply`
    sets when given the source's reader): the task's rows become the ``(key_group, payload)`` rows
    :func:`~keygroups.packed.pack_key_groups` makes, with the same payload columns and values, so
    no JVM step parses, hashes or copies each record, and no ``mapInArrow`` step moves the rows
    back to Python.

    ``columns``: the payload's ``(name, Spark DDL type)`` (the control columns, then the stage's
    inputs, as ``keygroups.spark_steps`` slims them); ``renamed``: ``(input, source column)`` of
    plain inputs under another name; ``computed``: the :class:`~keygroups.computed.Computed`
    inputs (on data rows; :func:`~keygroups.computed.evaluate` over the source columns they
    name); ``keys``: the key columns; routing as :func:`~keygroups.routing.with_key_groups` (one
    routing function, markers to every group, other rows to group 0); ``before_shuffle``: the
    stage's step choosing the rows to send (:meth:`~keygroups.stage.StageLogic.before_shuffle`),
    or None. Build with :meth:`of`.
    """

    columns: tuple
    renamed: tuple
    computed: tuple
    keys: tuple
    num_key_groups: int
    rows_per_blob: int = ROWS_PER_BLOB
    before_shuffle: Any = None

    #: the source's rows with this packing: ``(name, Spark DDL type)``
    fields = (("key_group", "int"), (PAYLOAD_COLUMN, "binary"))

    @classmethod
    def of(cls, stage) -> "SourcePacking | None":
        """The packing of a first operator whose first stage is ``stage``, or None where the source
        cannot run it: a stage routed in Python (its own packing step), an input given as SQL (Spark's
        to evaluate), a ``Computed`` input that does not name the source columns it reads or reads a
        timestamp, a column type the payload cannot hold (timestamps), a key that is not an input."""
        from dataflow_kafka.keygroups.computed import Computed
        from dataflow_kafka.keygroups.contract import CONTROL_COLUMNS
        from dataflow_kafka.keygroups.frames import packable_types
        from dataflow_kafka.keygroups.plan import plain_column
        from dataflow_kafka.keygroups.stage import key_columns_of, router_of

        if router_of(stage) is not None:
            return None
        source = _source_types()
        readable = {c for c, t in source.items() if t != "timestamp" and c not in _MS_COLUMNS}   # as read()'s rows
        inputs, renamed, computed = {}, [], []
        for name, expr in stage.inputs().items():
            if isinstance(expr, Computed):
                if not expr.columns or not set(expr.columns) <= readable:
                    return None
                computed.append((name, expr))
                inputs[name] = expr.type
                continue
            col = plain_column(expr)
            if col not in source:
                return None
            if col != name:
                renamed.append((name, col))
            inputs[name] = source[col]
        keys = key_columns_of(stage)
        if not keys or any(k not in inputs for k in keys):
            return None
        columns = [(c, t) for c, t in CONTROL_COLUMNS if c in source and c not in inputs] + list(inputs.items())
        if not packable_types(columns):
            return None
        return cls(tuple(columns), tuple(renamed), tuple(computed), tuple(keys), int(stage.num_key_groups),
                   before_shuffle=stage.before_shuffle())

    def json_fields(self, column: str) -> dict:
        """The JSON fields of source column ``column`` that the :func:`~keygroups.computed.json_field`
        inputs read, with their Arrow types: the source parses them with its event times (one
        ``pyarrow.json`` pass per chunk) and hands them over as extra columns (``pack``)."""
        from dataflow_kafka.keygroups.computed import arrow_type_of, json_fields_by_column

        inputs = json_fields_by_column(dict(self.computed)).get(column, {})
        return {field: arrow_type_of(t) for field, t in inputs.values()}

    def option(self) -> str:
        """This packing as the value of the source's ``keyGroupPacking`` option."""
        import base64

        from pyspark import cloudpickle

        return base64.b64encode(cloudpickle.dumps(self)).decode("ascii")

    def pack(self, batches: Iterable, newest_of_source_ms: int | None = None) -> Iterator:
        """A task's source record batches as ``(key_group, payload)`` record batches: the rows of
        each key group in one blob per ``rows_per_blob`` rows read (the last part at the end).
        ``newest_of_source_ms``: the newest data event time the source read before the
        micro-batch (``OffsetRange.newest_of_source_ms``), for :attr:`before_shuffle`."""
        pending, rows = [], 0
        for b in batches:
            if b.num_rows:
                pending.append(b)
                rows += b.num_rows
            if rows >= self.rows_per_blob:
                yield from self._pack(*_with_parsed(pending), newest_of_source_ms)
                pending, rows = [], 0
        if pending:
            yield from self._pack(*_with_parsed(pending), newest_of_source_ms)

    def _pack(self, table, parsed: dict | None = None, newest_of_source_ms: int | None = None) -> Iterator:
        import pyarrow as pa

        from dataflow_kafka.keygroups.computed import evaluate
        from dataflow_kafka.keygroups.frames import arrow_schema, groups_of_columns, key_group_blobs

        schema = arrow_schema(self.columns)
        wanted = {n for n, _ in self.columns}
        kinds = table.column("kind").to_numpy()
        values: dict = {name: _epoch_ms(table.column(ts)) for name, ts in _MS_COLUMNS.items()
                        if ts in table.column_names and (name in wanted or name in dict(self.renamed).values())}
        values.update(_json_inputs(table, kinds, self.computed, parsed))
        rest = {name: e for name, e in self.computed if name not in values}
        if rest:
            needed = sorted({c for e in rest.values() for c in e.columns} - {"kind"})
            frame = evaluate(table.select(["kind", *needed]).to_pandas(), rest)
            for name in rest:
                values[name] = pa.array(frame[name], type=schema.field(name).type, from_pandas=True)
        for name, col in self.renamed:
            values[name] = values[col] if col in values else table.column(col)
        payload = pa.table([values[n] if n in values else table.column(n) for n, _ in self.columns], schema=schema)
        if self.before_shuffle is not None:
            send = self.before_shuffle(payload, kinds, newest_of_source_ms)
            if send is not None and not send.all():
                payload, kinds = payload.filter(pa.array(send)), kinds[send]
        keyed = pd.DataFrame({"kind": kinds, **{k: nullable_pandas(payload.column(k))
                                                for k in self.keys}})
        groups = groups_of_columns(keyed, list(self.keys), self.num_key_groups)
        for g, blob in key_group_blobs(payload, kinds, groups, self.num_key_groups):
            yield pa.RecordBatch.from_arrays([pa.array([g], pa.int32()), pa.array([blob], pa.binary())],
                                             [name for name, _ in self.fields])


def _json_inputs(table, kinds, computed: tuple, parsed: dict | None = None) -> dict:
    """The :func:`~keygroups.computed.json_field` inputs among ``computed`` whose column the Arrow
    parse takes (:func:`~keygroups.computed.json_fields_of_arrow`, one pass per column over the
    data rows; for ``value``, the fields the source parsed with its event times, ``parsed``: their
    values on the data rows, when it holds every one), as full columns, null on the other rows; an
    input left out is evaluated in pandas (the values then go row by row, as
    :func:`~keygroups.computed.evaluate` parses them)."""
    import numpy as np
    import pyarrow as pa

    from dataflow_kafka.keygroups.computed import json_fields_by_column, json_fields_of_arrow

    data = kinds == "data"
    where = pa.array(np.where(data, np.cumsum(data) - 1, 0), pa.int64(), mask=~data)   # row -> its data row
    out = {}
    for column, inputs in json_fields_by_column(dict(computed)).items():
        fields = dict(inputs.values())
        if column == "value" and parsed is not None and set(fields) <= set(parsed):
            of_data = parsed
        else:
            try:
                of_data = json_fields_of_arrow(table.column(column).filter(pa.array(data)), fields)
            except (TypeError, ValueError, pa.ArrowInvalid):
                continue
        out.update({name: of_data[field].take(where) for name, (field, _) in inputs.items()})
    return out


def _with_parsed(batches: list) -> tuple:
    """The source's record batches as one table of the source's columns, and the JSON fields the
    source parsed with its event times (``kafka_read.PARSED_PREFIX`` columns) on the table's data
    rows, in order, one array per field; None when a batch with data rows lacks them (a chunk the
    source parsed otherwise). Batches without data rows (markers, errors) add nothing there."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from dataflow_kafka.datasource.kafka_read import PARSED_PREFIX

    own, parts, whole = [], {}, True
    for b in batches:
        data = pc.equal(b.column("kind"), "data")
        extra = [n for n in b.schema.names if n.startswith(PARSED_PREFIX)]
        if extra:
            for n in extra:
                parts.setdefault(n[len(PARSED_PREFIX):], []).append(b.column(n).filter(data))
            b = b.select([n for n in b.schema.names if n not in extra])
        elif pc.any(data).as_py():
            whole = False
        own.append(b)
    return pa.Table.from_batches(own), ({f: pa.concat_arrays(a) for f, a in parts.items()} if parts and whole
                                        else None)


def _source_types() -> dict[str, str]:
    """The Spark types of the source's columns a payload can take, and the epoch-ms columns."""
    from dataflow_kafka.datasource.schema import source_schema

    types = {f.name: f.dataType.simpleString() for f in source_schema(False).fields}
    return types | {name: "bigint" for name in _MS_COLUMNS}


def _epoch_ms(column):
    """Epoch milliseconds of an Arrow timestamp column, as Spark's ``unix_millis`` (floor)."""
    import numpy as np
    import pyarrow as pa

    micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    values = micros.fill_null(0).to_numpy() // 1000
    return pa.array(values, pa.int64(), mask=micros.is_null().to_numpy())
