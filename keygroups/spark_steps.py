"""A chain's Spark plan: the steps before each operator's shuffle, and the operators (pyspark imported on use).

:func:`apply_chain` builds the plan of a chain's operators on a streaming DataFrame of the row
contract. Before each operator's shuffle: the epoch-ms columns the stage layer reads
(:func:`with_ms_columns`); the first operator's inputs, as SQL expressions or ``Computed`` values
(:func:`compute_spark`: in the JVM where they have a SQL form, else one ``mapInPandas`` step); or
Python routing of the source's rows (one ``mapInPandas`` step, packing included where it can);
then the key group by the one routing function (:func:`keygroups.routing.with_key_groups`) and a
slim shuffle input, packed into Arrow blobs per task and key group for the first operator
(:mod:`keygroups.packed`). Each operator is a ``transformWithStateInPandas`` of a
:class:`~keygroups.processor.StageProcessor` grouped by key group. The local runner
(:mod:`keygroups.frames`) runs the same routing and packing code in pandas.
"""

from __future__ import annotations

from typing import Any, Sequence

from dataflow_kafka.keygroups.computed import Computed, computed_inputs, evaluate, json_fields_by_column
from dataflow_kafka.keygroups.contract import CONTROL_NAMES, KIND_DATA, schema_ddl
from dataflow_kafka.keygroups.frames import ingest_frame, pack_frame, packable
from dataflow_kafka.keygroups.operator import OperatorSpec
from dataflow_kafka.keygroups.plan import Chain, Head, bind_stages, ingest_columns, plain_column
from dataflow_kafka.keygroups.routing import KEY_GROUP_COLUMN
from dataflow_kafka.keygroups.stage import INPUT_COLUMN, StageLogic, group_ids_of, key_columns_of, router_of

__all__ = ["apply_chain", "with_ms_columns", "compute_spark"]


def apply_chain(chain: Chain, df, fuse: bool, idle_timeout_ms: int | None, pack_source: bool, *,
                head: Head | None = None, claims: Any = "own", source_packing: Any = None
                ) -> tuple[Any, list[OperatorSpec]]:
    """Spark: ``chain``'s operators on ``df`` (with ``head``: ``df`` is the multi-input first
    operator's tagged input, :func:`keygroups.fan_in.tag_spark`); ``(output, specs)``, the specs
    bound to the types Spark gives each operator's input. ``claims`` as :meth:`Chain.specs`.
    ``source_packing``: ``df`` holds the source's rows already routed and packed for the first
    operator (:class:`keygroups.source_packing.SourcePacking`), whose payload columns give its types."""
    from pyspark.sql import functions as F

    from dataflow_kafka.keygroups.processor import StageProcessor, deferred
    from dataflow_kafka.keygroups.routing import with_key_groups

    ops = chain.operators(fuse)
    if claims == "own":
        claims = tuple((str(s.name), frozenset(s.commands)) for op in ops for s in op)
    results: tuple = head.results if head is not None else ()
    specs: list[OperatorSpec] = []
    for j, stages in enumerate(ops):
        first = stages[0]
        n = first.num_key_groups
        packed = pack_source and j == 0
        if j == 0 and source_packing is not None:
            slim, types, packed = df, dict(source_packing.columns), True
        elif j == 0 and head is not None:
            routed = with_key_groups(df, key_columns_of(first), n)
            inputs = [INPUT_COLUMN] + [c for c in head.columns if c != INPUT_COLUMN]
            slim, types = _slim(routed, inputs, results, packed, n)
        elif packed and router_of(first) is not None and packable(first):
            # ingest, marker fan-out and packing in one Python step (one Python worker round trip)
            slim, types = _ingest_packed(df, first, n, group_ids_of(first))
        else:
            if router_of(first) is not None:
                if j == 0:
                    df = _ingest(df, first)
                routed = with_key_groups(df, None, n, group_ids=group_ids_of(first))
                inputs = [c for c, _ in router_of(first).columns]
            else:
                exprs = first.inputs()
                df = with_ms_columns(df)
                if j == 0 and computed_inputs(exprs):
                    df = compute_spark(df, computed_inputs(exprs))
                sql = {name: e for name, e in exprs.items()
                       if not isinstance(e, Computed) and plain_column(e) != name}
                if sql and j == 0:
                    df = df.withColumns({name: F.expr(expr) for name, expr in sql.items()})
                elif sql:       # on data rows only: result rows keep their own columns (Pipeline.emit)
                    is_data = F.col("kind") == KIND_DATA
                    df = df.withColumns({name: F.when(is_data, F.expr(expr)).otherwise(
                        F.col(name) if name in df.columns else F.lit(None)) for name, expr in sql.items()})
                routed = with_key_groups(df, key_columns_of(first), n)
                inputs = list(exprs)
            slim, types = _slim(routed, inputs, results, packed, n)
        spec = chain.operator_spec(ops, j, bind_stages(stages, types), results, idle_timeout_ms,
                                   claims if j == 0 else None, head if j == 0 else None)
        specs.append(spec)
        results = spec.result_columns
        df = slim.groupBy(KEY_GROUP_COLUMN).transformWithStateInPandas(
            deferred(StageProcessor(spec, packed)), schema_ddl(spec.output_columns()), "Append", "None")
    return df, specs


def with_ms_columns(df):
    """``df`` with ``event_time_ms``, ``punctuation_ms`` and ``processing_time_ms`` (epoch
    milliseconds, what the stage layer reads) from the source's timestamp columns, where missing."""
    from pyspark.sql import functions as F

    for ts in ("event_time", "punctuation", "processing_time"):
        if ts in df.columns and f"{ts}_ms" not in df.columns:
            df = df.withColumn(f"{ts}_ms", F.unix_millis(ts))
    return df


def _timestamps_as_micros(df):
    """``(df with its timestamp columns as bigint microseconds, their names, the session time zone)``.

    A ``mapInPandas`` step turns timestamps into pandas nanoseconds, which end in 2262: the
    end-of-input punctuation (``endOfInput=punctuate``, 9999-12-31) would overflow. Steps that
    read source rows in pandas take the microseconds instead and see datetimes through
    :func:`_datetimes`; :func:`_timestamps_back` restores the Spark timestamps afterwards.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    names = [f.name for f in df.schema.fields if isinstance(f.dataType, TimestampType)]
    if names:
        df = df.withColumns({n: F.unix_micros(n) for n in names})
    return df, names, df.sparkSession.conf.get("spark.sql.session.timeZone")


_NS_RANGE_US = (-(2**63 - 1) // 1000, (2**63 - 1) // 1000)      # what pandas' nanoseconds hold


def _datetimes(pdf, names: Sequence[str], time_zone: str):
    """``pdf`` with the microsecond columns ``names`` as datetimes, naive in the session's
    ``time_zone`` as Spark hands timestamps to pandas; out of pandas' range (or null): NaT."""
    import numpy as np
    import pandas as pd

    if not names:
        return pdf
    cols = {}
    for n in names:
        us = pd.Series(pdf[n], index=pdf.index).astype("Int64")
        ok = (us.notna() & (us >= _NS_RANGE_US[0]) & (us <= _NS_RANGE_US[1])).to_numpy(bool)
        ns = us.where(ok, 0).to_numpy("int64", na_value=0) * 1000
        utc = pd.Series(np.where(ok, ns, np.iinfo(np.int64).min).view("datetime64[ns]"), index=pdf.index)
        cols[n] = utc.dt.tz_localize("UTC").dt.tz_convert(time_zone).dt.tz_localize(None)
    return pdf.assign(**cols)


def _timestamps_back(df, names: Sequence[str]):
    from pyspark.sql import functions as F

    return df.withColumns({n: F.timestamp_micros(n) for n in names}) if names else df


def compute_spark(df, computed: dict[str, Computed]):
    """Spark: the ``computed`` inputs (first operator) added on data rows (null on the others):
    those with a :attr:`~keygroups.computed.Computed.sql` form as JVM expressions, the rest in one
    ``mapInPandas`` step."""
    from pyspark.sql import functions as F

    in_jvm = {n: c for n, c in computed.items() if c.sql is not None}
    if in_jvm:
        is_data = F.col("kind") == KIND_DATA if "kind" in df.columns else F.lit(True)
        exprs = {n: F.expr(c.sql) for n, c in in_jvm.items()}
        parses, shared = _shared_json_parses(df, in_jvm)
        if parses:                            # one parse per column, a projection of its own
            df = df.withColumns(parses)
        exprs.update(shared)
        df = df.withColumns({n: F.when(is_data, e.cast(in_jvm[n].type)) for n, e in exprs.items()})
        df = df.drop(*parses)
    rest = {n: c for n, c in computed.items() if c.sql is None}
    return _compute_python(df, rest) if rest else df


def _shared_json_parses(df, computed: dict[str, Computed]) -> tuple[dict, dict]:
    """The :func:`~keygroups.computed.json_field` inputs that read several fields of one column,
    from one ``from_json`` of that column (one parse per row instead of one per field): ``({temporary
    column: the parse}, {input: its field of the parse})``. The same values as one ``from_json``
    per field while Spark keeps a record's other fields when one does not convert
    (``spark.sql.json.enablePartialResults``, the default); otherwise nothing is shared."""
    from pyspark.sql import functions as F

    if df.sparkSession.conf.get("spark.sql.json.enablePartialResults", "true").lower() != "true":
        return {}, {}
    parses, shared = {}, {}
    for column, fields in json_fields_by_column(computed).items():
        if len(fields) < 2:
            continue                  # one field: its own parse
        schema = ", ".join(f"`{f}` {t.upper()}" for f, t in dict(fields.values()).items())
        tmp = f"__json_{column}"
        parses[tmp] = F.from_json(F.col(column).cast("string"), schema)
        shared.update({n: F.col(tmp).getField(f) for n, (f, _) in fields.items()})
    return parses, shared


def _compute_python(df, computed: dict[str, Computed]):
    """Spark: a ``mapInPandas`` step adding the ``computed`` inputs on data rows."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    df, stamps, tz = _timestamps_as_micros(df)
    fields = [f for f in df.schema.fields if f.name not in computed]
    schema = StructType(fields + [StructField(n, _parse_datatype_string(c.type)) for n, c in computed.items()])
    names = [f.name for f in schema.fields]
    stamps = [n for n in stamps if n not in computed]

    def compute(frames):
        for pdf in frames:
            out = evaluate(_datetimes(pdf, stamps, tz), computed)
            yield out.assign(**{n: pdf[n] for n in stamps})[names]

    return _timestamps_back(df.mapInPandas(compute, schema), stamps)


def _ingest(df, stage: StageLogic):
    """Spark: a ``mapInPandas`` step routing the source's data rows in Python (``stage``'s router)."""
    df, stamps, tz = _timestamps_as_micros(with_ms_columns(df))

    def ingest(frames):
        for pdf in frames:
            yield ingest_frame(_datetimes(pdf, stamps, tz), stage)

    return df.mapInPandas(ingest, schema_ddl(ingest_columns(stage)))


def _ingest_packed(df, stage: StageLogic, n: int, ids: Sequence[int] | None = None):
    """Spark: the source's rows routed in Python by ``stage`` (:func:`ingest_frame`), punctuation
    and modification rows copied to every key group, other rows to the first key group (as
    :func:`~keygroups.routing.with_key_groups` does), and each key group's rows of a task packed
    into Arrow IPC blobs (:mod:`keygroups.packed`), in one ``mapInPandas`` step: rows
    ``(key_group, payload)``. Also returns the packed columns' Spark types."""
    from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN

    columns = [c for c in ingest_columns(stage) if c[0] != KEY_GROUP_COLUMN]
    df, stamps, tz = _timestamps_as_micros(with_ms_columns(df))

    def ingest(frames):
        for pdf in frames:
            out = pack_frame(ingest_frame(_datetimes(pdf, stamps, tz), stage), columns, n, ids)
            if len(out):
                yield out

    packed = df.mapInPandas(ingest, f"`{KEY_GROUP_COLUMN}` int, `{PAYLOAD_COLUMN}` binary")
    return packed, {name: ddl for name, ddl in columns}


def _slim(routed, inputs: list[str], results: tuple, packed: bool, n: int):
    """An operator's shuffle input: key group, control columns, ``inputs``, carried emitted
    columns (``results``), packed into Arrow blobs when ``packed``; and the columns' types."""
    from dataflow_kafka.keygroups.packed import pack_key_groups

    keep = [c for c in CONTROL_NAMES if c in routed.columns and c not in inputs]
    carry = [c for c, _ in results if c in routed.columns and c not in keep and c not in inputs]   # emitted stages' rows
    slim = routed.select(KEY_GROUP_COLUMN, *keep, *inputs, *carry)
    types = {f.name: f.dataType.simpleString() for f in slim.schema.fields}
    if packed:
        slim = pack_key_groups(slim, None, n)
    return slim, types
