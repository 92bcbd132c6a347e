"""Multi-input stages: streams that meet in one stage (fan-in), and one output feeding several (fan-out).

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

**Fan-out**: an upstream given to several inputs of one stage is computed once: on Spark its rows
are copied to each input by one ``explode``; in :meth:`~keygroups.Pipeline.run_local` its output
is computed once per batch. An upstream feeding two *different* multi-input stages is computed
once per batch locally; on Spark, whose plan is a tree, each consumer plans it again (the same
deterministic operator over the same offsets: equal rows, twice the cost).

Stage names are unique across the query (:meth:`~keygroups.Pipeline.join` renames a clash with a
suffix); the last pipeline's first operator reports control commands no stage of the query takes.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups.computed import Computed, evaluate
from dataflow_kafka.keygroups.contract import KIND_DATA, control_frame
from dataflow_kafka.keygroups.operator import OperatorSpec
from dataflow_kafka.keygroups.frames import run_chain_local
from dataflow_kafka.keygroups.plan import Head, Link, distinct_upstreams, expression_type, frame_types, plain_column, unused_name
from dataflow_kafka.keygroups.routing import MARKER_KINDS
from dataflow_kafka.keygroups.spark_steps import apply_chain, compute_spark, with_ms_columns
from dataflow_kafka.keygroups.stage import INPUT_COLUMN, Input, Stage, group_ids_of, key_columns_of
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["dag_specs", "apply_dag", "run_dag_local", "tag_frame", "tag_spark", "input_types", "source_names"]

#: :class:`keygroups.pipeline.Pipeline`, in annotations: this module gets the class from
#: :meth:`~keygroups.Pipeline.join` and the query's pipelines as objects, and imports no pipeline
#: (pipeline.py imports this module).
Pipeline = Any


# -- the query's shape ---------------------------------------------------------------------------------

def _head_stage(p: Pipeline) -> Stage:
    return p.stages[0]


def _groups(p: Pipeline) -> list[tuple[Pipeline | None, str | None, list[Input]]]:
    """The inputs of ``p``'s multi-input stage grouped by what they read: ``(upstream pipeline,
    None, inputs)`` or ``(None, source name, inputs)``; inputs reading the source read the source
    named like them (several may read one DataFrame: :func:`_by_source` merges those)."""
    out: list = []
    for inp in _head_stage(p).stage_inputs():
        u = p._upstreams[inp.name]
        for g in out:
            if u is not None and g[0] is u:
                g[2].append(inp)
                break
        else:
            out.append((u, None if u is not None else inp.name, [inp]))
    return out


def source_names(root: Pipeline) -> dict[int, set[str]]:
    """``{id(pipeline): source names}`` of the query's pipelines that read a source: a pipeline
    without upstreams reads the source of every input it feeds (its names must lead to one
    source); a multi-input stage's input without an upstream reads the source of its name."""
    names: dict[int, set[str]] = {}
    for p in root.nodes():
        if p._upstreams is None:
            continue
        for n, u in p._upstreams.items():
            if u is not None and u._upstreams is None:
                names.setdefault(id(u), set()).add(n)
    if root._upstreams is None:
        names.setdefault(id(root), set())
    return names


def _source(sources: Any, names: set[str], what: str) -> Any:
    """The one source of ``names`` in ``sources`` (one object for every source, or a dict)."""
    if not isinstance(sources, Mapping):
        return sources
    found = [sources[n] for n in sorted(names) if n in sources]
    if not found:
        raise InvalidArgumentError(f"{what}: no source given for input(s) {sorted(names)} (sources given: {sorted(sources)})")
    if any(f is not found[0] for f in found[1:]):
        raise InvalidArgumentError(f"{what}: an upstream read by inputs {sorted(names)} needs one source, "
                         f"got different ones for them")
    return found[0]


def _claims(root: Pipeline) -> tuple:
    return tuple((str(s.name), frozenset(s.commands)) for s in root.all_stages())


def _expected(p: Pipeline, upstream_specs: Mapping[int, list[OperatorSpec]]) -> tuple:
    """Per input reading an upstream pipeline: its last operator's key groups, the senders of its
    punctuation rows (``<operator>-<key group>``), known before they speak."""
    out = []
    for inp in _head_stage(p).stage_inputs():
        u = p._upstreams[inp.name]
        if u is None:
            continue
        spec = upstream_specs[id(u)][-1]
        first = spec.stages[0]
        ids = group_ids_of(first) or range(first.num_key_groups)
        out.append((inp.name, tuple(f"{spec.name}-{int(g)}" for g in ids)))
    return tuple(out)


def _results(p: Pipeline, upstream_specs: Mapping[int, list[OperatorSpec]]) -> tuple:
    """The emitted columns every upstream of ``p`` carries (their union; a clash of types is refused)."""
    out: dict[str, str] = {}
    for u in distinct_upstreams(p._upstreams):
        for c, t in upstream_specs[id(u)][-1].result_columns:
            if out.setdefault(c, t) != t:
                raise InvalidArgumentError(f"emit: column {c!r} is emitted as {t} by one upstream of {_head_stage(p).name!r} "
                                 f"and as {out[c]} by another: rename one of them")
    return tuple(out.items())


def _columns(stage: Stage) -> list[str]:
    """The tagged input's columns: every input's, in order of first appearance."""
    return list(dict.fromkeys(c for inp in stage.stage_inputs() for c in inp.columns))


def input_types(stage: Stage, types: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
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


def dag_specs(root: Pipeline, fuse: bool, idle_timeout_ms: int | None,
              source_types: Mapping[str, Any] | None) -> dict[int, list[OperatorSpec]]:
    """``{id(pipeline): its operators' specs}`` for every pipeline of the query; bound to
    ``source_types`` (``{column: type}`` of every source, or ``{source: {column: type}}``), or
    unbound (None)."""
    specs: dict[int, list[OperatorSpec]] = {}
    names = source_names(root)
    per_source = source_types is not None and all(isinstance(v, Mapping) for v in source_types.values())

    def types_of(source_names_: set[str]) -> dict | None:
        if source_types is None:
            return None
        return dict(_source(source_types, source_names_, "input_types")) if per_source else dict(source_types)

    for p in root.nodes():
        claims = _claims(root) if p is root else None
        if p._upstreams is None:
            specs[id(p)] = p.chain.specs(fuse, idle_timeout_ms, types_of(names.get(id(p), set())), claims=claims)
            continue
        head = Head(tuple(i.name for i in _head_stage(p).stage_inputs()), _expected(p, specs),
                    (INPUT_COLUMN, *_columns(_head_stage(p))), _results(p, specs))
        types = None
        if source_types is not None:
            types = input_types(_head_stage(p), {
                n: (dict(specs[id(u)][-1].output_columns()) if u is not None else types_of({n}))
                for n, u in p._upstreams.items()})
        specs[id(p)] = p.chain.specs(fuse, idle_timeout_ms, types, head=head, claims=claims)
    return specs


# -- building the query ---------------------------------------------------------------------------------

def join_upstreams(pipeline: type, stage: Stage, upstreams: Mapping[str, Any]) -> dict[str, Pipeline | None]:
    """:meth:`keygroups.Pipeline.join`'s upstreams of ``stage``'s inputs, checked, as pipelines of
    class ``pipeline`` (a stage as a one-stage pipeline), their stages renamed where names clash
    across them."""
    inputs = stage.stage_inputs() if isinstance(stage, Stage) else None
    if not inputs:
        raise InvalidArgumentError(f"Pipeline.join: {stage!r} is not a multi-input stage (its stage_inputs() is empty); "
                         "chain a one-input stage with then()")
    names = [i.name for i in inputs]
    unknown = sorted(set(upstreams) - set(names))
    if unknown:
        raise InvalidArgumentError(f"Pipeline.join: {unknown} are not inputs of stage {stage.name!r} (its inputs: {names})")
    taken: set = set()
    memo: dict = {}
    out: dict[str, Any] = {}
    for n in names:
        u = upstreams.get(n)
        if u is not None and not isinstance(u, (pipeline, Stage)):
            raise ArgumentTypeError(f"Pipeline.join: input {n!r} = {u!r}: expected a Pipeline, a Stage or None (the source)")
        if isinstance(u, Stage):
            u = memo.setdefault(("stage", id(u)), pipeline([u]))
        out[n] = None if u is None else _renamed(u, taken, memo)
    return out


def _renamed(p: Pipeline, taken: set, memo: dict) -> Pipeline:
    """``p`` with stages renamed where ``taken`` holds their names (copies; names added to
    ``taken``); an upstream met twice (fan-out) is renamed once (``memo``)."""
    if id(p) in memo:
        return memo[id(p)]
    ups = None if p._upstreams is None else {
        n: (_renamed(u, taken, memo) if u is not None else None)
        for n, u in p._upstreams.items()}
    links, emit = [], list(p.chain.emit)
    for lk in p.chain.links:
        name = unused_name(lk.stage.name, taken)
        taken.add(name)
        s = lk.stage
        if name != s.name:
            emit = [name if e == s.name else e for e in emit]
            s = copy.copy(s)
            object.__setattr__(s, "name", name)
        links.append(Link(s, lk.fuse))
    same = all(a.stage is b.stage for a, b in zip(links, p.chain.links)) and ups == p._upstreams
    out = p if same else type(p)(_links=links, _emit=emit, _upstreams=ups)
    memo[id(p)] = out
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


def _check_key_types(tagged: list, stage: Stage) -> None:
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


# -- running a query --------------------------------------------------------------------------------------

def apply_dag(root: Pipeline, sources: Any, *, fuse: bool = True, idle_timeout_ms: int | None = None,
              pack_source: bool = True):
    """Spark: the query of ``root`` and its upstreams (:meth:`keygroups.Pipeline.apply`)."""
    outs: dict[int, Any] = {}
    specs: dict[int, list[OperatorSpec]] = {}
    names = source_names(root)
    for p in root.nodes():
        claims = _claims(root) if p is root else None
        if p._upstreams is None:
            src = _source(sources, names.get(id(p), set()), "apply")
            outs[id(p)], specs[id(p)] = apply_chain(p.chain, src, fuse, idle_timeout_ms, pack_source, claims=claims)
            continue
        stage = _head_stage(p)
        groups = _by_source(_groups(p), sources)
        upstream_dfs = [(outs[id(u)] if u is not None else source, inputs) for u, source, inputs in groups]
        _check_key_types([(df, inputs) for df, inputs in upstream_dfs], stage)
        tagged = [tag_spark(df, inputs, stage.name) for df, inputs in upstream_dfs]
        union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)
        head = Head(tuple(i.name for i in stage.stage_inputs()), _expected(p, specs),
                    (INPUT_COLUMN, *_columns(stage)), _results(p, specs))
        outs[id(p)], specs[id(p)] = apply_chain(p.chain, union, fuse, idle_timeout_ms, pack_source, head=head,
                                                  claims=claims)
    return outs[id(root)]


def _framed(frame: pd.DataFrame) -> pd.DataFrame:
    """A micro-batch frame; one without rows or columns (a source that did not move) as an empty
    frame of the row contract."""
    return frame if "kind" in frame.columns else control_frame([])


def _by_source(groups: list, sources: Any) -> list[tuple[Pipeline | None, Any, list[Input]]]:
    """``groups`` with the inputs that read the same source DataFrame merged (one tagging, one
    scan of the source): ``(upstream, source or None, inputs)``."""
    out: list = []
    for u, name, inputs in groups:
        if u is not None:
            out.append((u, None, inputs))
            continue
        src = _source(sources, {name}, "apply/run_local")
        for g in out:
            if g[0] is None and g[1] is src:
                g[2].extend(inputs)
                break
        else:
            out.append((None, src, list(inputs)))
    return out


def run_dag_local(root: Pipeline, batches: Any, *, fuse: bool = True, idle_timeout_ms: int | None = None,
                  input_types: Mapping[str, Any] | None = None) -> list[pd.DataFrame]:
    """Without Spark: the query of ``root`` and its upstreams on micro-batches
    (:meth:`keygroups.Pipeline.run_local`): ``batches`` is a list of frames (one source) or
    ``{source: frames}``, the same number of micro-batches each. Stages are bound as on Spark:
    to ``input_types``, or to the dtypes of each source's first frame with data rows, once every
    source had one."""
    per = {n: list(f) for n, f in batches.items()} if isinstance(batches, Mapping) else None
    single = None if per is not None else list(batches)
    counts = {n: len(f) for n, f in per.items()} if per is not None else {"": len(single)}
    if len(set(counts.values())) > 1:
        raise InvalidArgumentError(f"run_local: every source needs the same number of micro-batches, got {counts}")
    n_batches = next(iter(counts.values()), 0)
    nodes, names = root.nodes(), source_names(root)
    unbound = dag_specs(root, fuse, idle_timeout_ms, None)
    bound = None if input_types is None else dag_specs(root, fuse, idle_timeout_ms, input_types)
    seen_types: dict[str, dict] = {}
    states = {id(p): [{} for _ in unbound[id(p)]] for p in nodes}
    outputs = []
    for i in range(n_batches):
        now = {n: _framed(f[i]) for n, f in per.items()} if per is not None else _framed(single[i])
        if bound is None:
            for n, f in (now.items() if per is not None else [("", now)]):
                if n not in seen_types and (f["kind"] == KIND_DATA).any():
                    seen_types[n] = frame_types(f)
            if len(seen_types) == len(counts):
                bound = dag_specs(root, fuse, idle_timeout_ms, seen_types if per is not None else seen_types[""])
        specs = bound or unbound
        out: dict[int, pd.DataFrame] = {}
        for p in nodes:
            if p._upstreams is None:
                frame = _source(now, names.get(id(p), set()), "run_local")
                out[id(p)] = run_chain_local(frame, specs[id(p)], states[id(p)])
                continue
            stage = _head_stage(p)
            parts = [tag_frame(out[id(u)] if u is not None else src, inputs, u is None, stage.name)
                     for u, src, inputs in _by_source(_groups(p), now)]
            tagged = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
            out[id(p)] = run_chain_local(tagged, specs[id(p)], states[id(p)], head=True)
        outputs.append(out[id(root)])
    return outputs
