"""Multi-input stages: the rows of several streams tagged with their input and unioned (fan-in).

A stage with several inputs (:meth:`keygroups.Stage.stage_inputs`, e.g. a join) reads each from
an upstream: the source (one ``format("dataflow-kafka")`` DataFrame, whose rows an input takes by
``select``/``where``, e.g. one source whose rows are split by topic; or one source per input),
or another pipeline (:meth:`keygroups.Pipeline.join`). Per micro-batch:

1. **tag**: every upstream's rows become rows of the inputs reading it, with an ``input``
   column (:data:`~keygroups.stage.INPUT_COLUMN`): a data row goes to each input whose
   ``select``/``where`` holds, a punctuation or modification row to every input reading that
   upstream whose ``select`` on the sender columns (``topic``, ``partition``) holds for it (so a
   source split by topic gives each input the punctuations of its own partitions), any other row
   (error, dropped, metrics, result) to the first one only (so it is passed on once); then each
   input's columns are computed on its data rows (SQL by Spark,
   :class:`~keygroups.computed.Computed` by both runners), the key columns under the same names;
2. **union** the inputs' rows and **route** them by the one routing function
   (``pmod(xxhash64(key), n)``; the key columns must have the same type in every input, or the
   same key would land in two key groups): markers to every key group;
3. the operator keeps **one punctuation tracker per input**
   (:class:`~keygroups.punctuation.InputWatermarks`): the stage's low watermark is the minimum
   over every sender of every input, ``None`` until every input has one (an upstream operator's
   key groups are expected senders from the start), so a slow input holds the stage back and
   nothing is late because another input ran ahead; the stage also gets each input's own
   watermark. Modifications reach it once per input reading them and are applied once (by
   control offset).

Steps 1 and 2 are this module's (:func:`tag_frame` without Spark, :func:`tag_spark` on Spark;
:func:`check_key_types`, :func:`tagged_input_types`); step 3 is the operator's
(:mod:`keygroups.operator`); :mod:`keygroups.dag` runs a query of several pipelines with them.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups.computed import Computed, evaluate
from dataflow_kafka.keygroups.contract import KIND_DATA
from dataflow_kafka.keygroups.plan import expression_type, plain_column
from dataflow_kafka.keygroups.routing import MARKER_KINDS
from dataflow_kafka.keygroups.spark_steps import compute_spark, with_ms_columns
from dataflow_kafka.keygroups.stage import INPUT_COLUMN, Input, StageLogic, key_columns_of
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["input_columns", "tagged_input_types", "tag_frame", "tag_spark", "check_key_types"]


# -- the tagged input's columns ----------------------------------------------------------------------------

def input_columns(stage: StageLogic) -> list[str]:
    """The tagged input's columns: every input's, in order of first appearance."""
    return list(dict.fromkeys(c for inp in stage.stage_inputs() for c in inp.columns))


def tagged_input_types(stage: StageLogic, types: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The types of a multi-input stage's tagged input columns (``{column: DDL type}``), from
    each input's upstream types (``types[input]``, as :meth:`~keygroups.Pipeline.bound_specs`
    looks them up); a column two inputs give different types is refused."""
    out: dict[str, str] = {}
    origin: dict[str, str] = {}
    for inp in stage.stage_inputs():
        for c, expr in inp.columns.items():
            t = expression_type(expr, dict(types.get(inp.name, {})), c)
            if out.setdefault(c, t) != t:
                raise InvalidArgumentError(f"stage {stage.name!r}: column {c!r} is {out[c]} in input {origin[c]!r} and {t} in "
                                 f"input {inp.name!r}; a key must have one type in every input (one routing): "
                                 "CAST one of them")
            origin.setdefault(c, inp.name)
    return out



# -- tagging, without Spark ------------------------------------------------------------------------------

def _selected(frame: pd.DataFrame, inp: Input, stage: str) -> np.ndarray:
    """Which rows of ``frame`` (data rows) ``inp`` takes: its ``select`` and ``where``."""
    mask = np.ones(len(frame), bool)
    for c, v in (inp.select or {}).items():
        if c not in frame.columns:
            raise InvalidArgumentError(f"stage {stage!r}, input {inp.name!r}: select names column {c!r}, which its upstream "
                             f"rows do not have (columns: {sorted(map(str, frame.columns))})")
        mask &= (frame[c] == v).to_numpy(bool)
    if inp.where is not None:
        col = plain_column(inp.where)
        if col is not None and col in frame.columns:                  # a boolean column of the upstream rows
            mask &= frame[col].astype(object).where(frame[col].notna(), False).astype(bool).to_numpy()
        elif not isinstance(inp.where, Computed):
            raise InvalidArgumentError(f"stage {stage!r}, input {inp.name!r}: where={inp.where!r} is SQL, evaluated by Spark "
                             "only; give it as keygroups.Computed(fn, 'boolean') or a boolean column's name (both "
                             "runners), or use select=")
        elif len(frame):
            mask &= inp.where(frame).fillna(False).to_numpy(bool)
    return mask


_SENDER = ("topic", "partition")


def _sender_select(inp: Input) -> dict:
    """The part of ``inp.select`` that also picks its markers: conditions on the sender columns."""
    return {c: v for c, v in (inp.select or {}).items() if c in _SENDER}


def tag_frame(frame: pd.DataFrame, inputs: Sequence[Input], first: bool, stage: str) -> pd.DataFrame:
    """An upstream's rows as rows of ``inputs`` (module docstring, step 1), without Spark.

    ``first``: the upstream is the source (its SQL inputs must be columns of the frame under
    their names, as for any first operator); else an operator's output (plain columns are copied
    on the data rows, SQL refused)."""
    kinds = frame["kind"].to_numpy(dtype=object)
    is_data = kinds == KIND_DATA
    is_marker = np.isin(kinds, MARKER_KINDS)
    parts = []
    for n, inp in enumerate(inputs):
        take = is_data.copy()
        if is_data.any():
            take[is_data] = _selected(frame[is_data], inp, stage)
        markers = is_marker.copy()
        for c, v in _sender_select(inp).items():
            markers &= (frame[c] == v).to_numpy(bool)
        rows = frame[take | markers | (~is_data & ~is_marker & (n == 0))]
        parts.append(_local_columns(rows.assign(**{INPUT_COLUMN: inp.name}), inp, first, stage))
    columns = list(dict.fromkeys(c for p in parts for c in p.columns))
    parts = [p.assign(**{c: pd.Series([None] * len(p), index=p.index, dtype=object)
                         for c in columns if c not in p.columns}) for p in parts]
    return pd.concat(parts, ignore_index=True) if parts else frame.iloc[:0]


def _local_columns(rows: pd.DataFrame, inp: Input, first: bool, stage: str) -> pd.DataFrame:
    """``rows`` (one input's) with the input's columns, on its data rows."""
    is_data = (rows["kind"] == KIND_DATA).to_numpy(bool)
    computed = {c: e for c, e in inp.columns.items() if isinstance(e, Computed)}
    cols: dict[str, pd.Series] = {}
    for c, expr in inp.columns.items():
        if c in computed:
            continue
        col = plain_column(expr)
        if col is not None and col in rows.columns:
            src = rows[col]                 # the input's own column, as Spark reads it
        elif first and c in rows.columns:
            src = rows[c]                   # a SQL expression, given computed under its name
        elif not is_data.any():
            src = pd.Series([None] * len(rows), index=rows.index, dtype=object)
        else:
            raise InvalidArgumentError(f"run_local: column {c!r} = {expr!r} of input {inp.name!r} of stage {stage!r} is not a "
                             "column of its upstream rows (a SQL expression is evaluated by Spark only: give it as "
                             "keygroups.Computed(fn, type), which both runners evaluate, or add the column)")
        cols[c] = src.where(is_data, None) if src.dtype == object else (
            src if is_data.all() else pd.Series(np.where(is_data, src.astype(object), None), index=rows.index))
    return evaluate(rows.assign(**cols), computed)


# -- tagging, on Spark ----------------------------------------------------------------------------------

def tag_spark(df, inputs: Sequence[Input], stage: str):
    """Spark: an upstream's rows as rows of ``inputs`` (module docstring, step 1): one ``explode``
    of the input names, SQL columns by Spark (on each input's data rows), ``Computed`` ``where``
    and columns in ``mapInPandas`` steps (only when an input has them)."""
    from pyspark.sql import functions as F

    # the stage layer reads the epoch-ms columns; pandas steps could not hold the source's timestamps
    # (endOfInput's 9999-12-31 punctuation overflows nanoseconds)
    df = with_ms_columns(df)
    df = df.drop(*[c for c in ("event_time", "punctuation", "processing_time") if c in df.columns])
    kind = F.col("kind")
    is_data = kind == KIND_DATA
    wheres = {f"__where_{k}": inp.where for k, inp in enumerate(inputs) if isinstance(inp.where, Computed)}
    if wheres:
        df = compute_spark(df, wheres)
    conds = []
    for k, inp in enumerate(inputs):
        cond = F.lit(True)
        for c, v in (inp.select or {}).items():
            if c not in df.columns:
                raise InvalidArgumentError(f"stage {stage!r}, input {inp.name!r}: select names column {c!r}, which its upstream "
                                 f"rows do not have (columns: {sorted(df.columns)})")
            cond = cond & (F.col(c) == F.lit(v))
        if isinstance(inp.where, Computed):
            cond = cond & F.coalesce(F.col(f"__where_{k}"), F.lit(False))
        elif inp.where is not None:
            cond = cond & F.coalesce(F.expr(str(inp.where)), F.lit(False))
        conds.append(cond)
    def tagged(conditions):
        return F.filter(F.array(*[F.when(c, F.lit(i.name)) for c, i in zip(conditions, inputs)]),
                        lambda x: x.isNotNull())

    senders = [functools.reduce(lambda a, b: a & b, [F.col(c) == F.lit(v) for c, v in _sender_select(i).items()],
                                F.lit(True)) for i in inputs]
    tags = (F.when(is_data, tagged(conds)).when(kind.isin(*MARKER_KINDS), tagged(senders))
            .otherwise(F.array(F.lit(inputs[0].name))))
    df = df.withColumn(INPUT_COLUMN, F.explode(tags)).drop(*wheres)
    sql: dict[str, Any] = {}
    for inp in inputs:
        mine = (F.col(INPUT_COLUMN) == F.lit(inp.name)) & is_data
        for c, expr in inp.columns.items():
            if isinstance(expr, Computed):
                continue
            value = F.col(plain_column(expr)) if plain_column(expr) in df.columns else F.expr(str(expr))
            sql[c] = F.when(mine, value) if c not in sql else sql[c].when(mine, value)
    if sql:
        df = df.withColumns({c: e.otherwise(F.col(c) if c in df.columns else F.lit(None)) for c, e in sql.items()})
    computed = [(inp.name, {c: e for c, e in inp.columns.items() if isinstance(e, Computed)}) for inp in inputs]
    if any(cs for _, cs in computed):
        df = _compute_per_input(df, computed)
    return df


def _compute_per_input(df, computed: list[tuple[str, dict[str, Computed]]]):
    """Spark: a ``mapInPandas`` step computing each input's :class:`Computed` columns on its data rows."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    types: dict[str, str] = {}
    for name, cs in computed:
        for c, e in cs.items():
            if types.setdefault(c, e.type) != e.type:
                raise InvalidArgumentError(f"computed column {c!r} is {types[c]} in one input and {e.type} in input {name!r}")
    fields = [f for f in df.schema.fields if f.name not in types]
    schema = StructType(fields + [StructField(c, _parse_datatype_string(t)) for c, t in types.items()])
    names = [f.name for f in schema.fields]

    def compute(frames):
        for pdf in frames:
            out = pdf.assign(**{c: pd.Series([None] * len(pdf), index=pdf.index, dtype=object)
                                for c in types if c not in pdf.columns})
            for name, cs in computed:
                mine = (out[INPUT_COLUMN] == name).to_numpy(bool)
                if cs and mine.any():
                    done = evaluate(out[mine], cs)
                    for c in cs:
                        out[c] = out[c].astype(object)
                        out.loc[mine, c] = done[c].astype(object).to_numpy()
            yield out[names]

    return df.mapInPandas(compute, schema)


def check_key_types(tagged: list, stage: StageLogic) -> None:
    """Spark: each key column must have one type in every input (one routing); checked on the
    tagged DataFrames' plans (``tagged``: ``(DataFrame, inputs)``), before the union coerces them."""
    from pyspark.sql import functions as F

    seen: dict[str, tuple[str, str]] = {}
    for df, inputs in tagged:
        for inp in inputs:
            for k in key_columns_of(stage) or []:
                expr = inp.columns[k]
                if isinstance(expr, Computed):
                    t = expr.type
                else:
                    col = plain_column(expr)
                    t = df.select((F.col(col) if col in df.columns else F.expr(str(expr))).alias(k)).schema[0] \
                        .dataType.simpleString()
                other, was = seen.setdefault(k, (inp.name, t))
                if was != t:
                    raise InvalidArgumentError(f"stage {stage.name!r}: key column {k!r} is {was} in input {other!r} and {t} in "
                                     f"input {inp.name!r}: the same key would go to different key groups; CAST one")
