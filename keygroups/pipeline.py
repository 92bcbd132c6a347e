"""Pipelines of stages in one Spark query: ``stage_a.then(stage_b)``, fusion, and a local runner.

A :class:`Pipeline` is a chain of :class:`~keygroups.stage.Stage` objects. :meth:`Pipeline.plan`
cuts it into **operators**: consecutive stages keyed by the same key group run in one
``transformWithStateInPandas`` operator (fused), because every stateful operator costs Spark a
shuffle, a state round trip and a commit per micro-batch; a stage with another key starts a new
operator (one shuffle). :meth:`Pipeline.apply` builds the Spark plan on a streaming DataFrame of
the row contract (the source's, usually); :meth:`Pipeline.run_local` runs the same operators on
micro-batches given as pandas frames, without Spark (the same per-key-group code,
:func:`keygroups.operator.run_key_group`), for tests and for reasoning about a pipeline.

Fusion rule (``fuse=None``, the default, decides automatically):

- a stage with column inputs fuses after the previous stage when it has the same number of key
  groups, every input is a plain column of the previous stage's output, and its key columns are
  that stage's :meth:`~keygroups.stage.Stage.output_key_columns` (so every row stays in its key
  group: data-trace types §4, a keyed operator after a hash split by the same key);
- a stage routed in Python fuses when ``stage.fusable_after(previous)`` says its key is the
  previous stage's (e.g. the same key function).

``fuse=True`` forces fusion (a Python-routed stage then checks at run time that every row stays
in its key group, :class:`~keygroups.operator.FusionError` otherwise); ``fuse=False`` forbids it.

The groups are decided by the fusion planner, :func:`keygroups.fusion.plan_chain` (Enorm §4.4.1,
Algorithm 1): a stage's partition attributes are its key, shared with the previous stage when the
rule above says the key is kept; a link the rule does not fuse is ``None`` (never fused); the
link rates (:meth:`Pipeline.plan`'s ``rates``, default 1) order the fusions. With one key per
stage no two fusions of a chain conflict, so the plan equals the rule's for any rates.

Example::

    from keygroups import Pipeline
    out = (SlicerStage(...).then(WindowingStage(...))).apply(source_df)   # one query
    out.writeStream.foreachBatch(...).start()
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from keygroups.computed import Computed, computed_inputs, evaluate
from keygroups.contract import CONTROL_COLUMNS, CONTROL_NAMES, KIND_DATA, conform, schema_ddl
from keygroups.fusion import plan_chain
from keygroups.operator import OperatorSpec, run_key_group
from keygroups.routing import KEY_GROUP_COLUMN, MARKER_KINDS, key_groups_of
from keygroups.stage import Stage

__all__ = ["Pipeline", "plain_column", "stateful_operators", "frame_types"]

_IDENT = re.compile(r"^`?([A-Za-z_][A-Za-z0-9_]*)`?$")


def plain_column(expr: Any) -> str | None:
    """The column name if ``expr`` is a plain column reference (``name`` or ```name```), else None."""
    if not isinstance(expr, str):
        return None
    m = _IDENT.match(expr.strip())
    return m.group(1) if m else None


@dataclass(frozen=True)
class _Link:
    stage: Stage
    fuse: bool | None


class Pipeline:
    """A chain of stages; see the module docstring."""

    def __init__(self, stages: Sequence[Stage] = (), *, _links: Sequence[_Link] | None = None,
                 _emit: Sequence[str] = ()) -> None:
        links = list(_links) if _links is not None else [_Link(s, None) for s in stages]
        for link in links:
            if not isinstance(link.stage, Stage):
                raise TypeError(f"a pipeline holds Stage objects, got {link.stage!r}")
        self._links = _configured(_named(links))
        names = [lk.stage.name for lk in self._links]
        unknown = [n for n in _emit if n not in names]
        if unknown:
            raise ValueError(f"emit: no stage named {unknown[0]!r} in this pipeline (stages: {names})")
        self._emit = tuple(_emit)

    def emit(self, *stage_names: str) -> "Pipeline":
        """This pipeline with the output of the named earlier stages kept in its output, as rows of
        kind ``result`` (``topic`` = the stage; their columns are added to the output schema).
        The last stage's output is the ``data`` rows anyway."""
        return Pipeline(_links=self._links, _emit=tuple(dict.fromkeys(self._emit + stage_names)))

    @property
    def stages(self) -> list[Stage]:
        return [link.stage for link in self._links]

    def then(self, stage: "Stage | Pipeline", fuse: bool | None = None) -> "Pipeline":
        """This pipeline followed by ``stage`` (or by every stage of a pipeline)."""
        if isinstance(stage, Pipeline):
            return Pipeline(_links=[_Link(lk.stage, lk.fuse) for lk in self._links] + list(stage._links),
                            _emit=self._emit + stage._emit)
        if fuse not in (None, True, False):
            raise ValueError(f"fuse must be None, True or False, got {fuse!r}")
        return Pipeline(_links=[_Link(lk.stage, lk.fuse) for lk in self._links] + [_Link(stage, fuse)],
                        _emit=self._emit)

    __rshift__ = then

    def __repr__(self) -> str:
        return " >> ".join(f"{type(s).__name__}({s.name})" for s in self.stages)

    # -- planning ---------------------------------------------------------------------------------
    def plan(self, fuse: bool = True, rates: Sequence[float] | None = None) -> list[tuple[Stage, ...]]:
        """The operators: groups of consecutive stages run fused (``fuse=False``: one per stage), as
        :func:`~keygroups.fusion.plan_chain` decides them (module docstring; Enorm Algorithm 1).

        ``rates``: the rate of each link ``stage i -> stage i+1`` (e.g. rows per batch measured
        on a trial run; numbers > 0), default 1 each: the highest-rate link fuses first.
        """
        if not self._links:
            raise ValueError("an empty pipeline has nothing to run")
        stages = self.stages
        rates = _link_rates(stages, rates)
        if not fuse:
            return [(s,) for s in stages]
        attributes, links = _chain_links(self._links, rates)
        return [tuple(stages[i] for i in run) for run in plan_chain(attributes, links)]

    def specs(self, fuse: bool = True, idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """One :class:`~keygroups.operator.OperatorSpec` per operator of :meth:`plan`."""
        ops = self.plan(fuse)
        specs: list[OperatorSpec] = []
        for j, stages in enumerate(ops):
            specs.append(self._spec(ops, j, stages, specs[-1] if specs else None, idle_timeout_ms))
        return specs

    def _spec(self, ops, j: int, stages: tuple[Stage, ...], upstream: OperatorSpec | None,
              idle_timeout_ms: int | None) -> OperatorSpec:
        """Operator ``j`` running ``stages`` (bound or not), after the operator ``upstream``."""
        nxt = ops[j + 1][0] if j + 1 < len(ops) else None
        router = nxt.python_router() if nxt is not None else None
        data_cols = list(nxt.routed_columns() if router is not None else stages[-1].output_columns())
        # the next operator's Computed inputs are computed here, on the rows this operator emits
        next_inputs = tuple(computed_inputs(nxt.inputs()).items()) if nxt is not None and router is None else ()
        for name, c in next_inputs:
            data_cols = [col for col in data_cols if col[0] != name] + [(name, c.type)]
        last = nxt is None
        emit = tuple(i for i, s in enumerate(stages) if s.name in self._emit and not (last and i == len(stages) - 1))
        results = dict(upstream.result_columns) if upstream is not None else {}
        for i in emit:
            for c, t in stages[i].output_columns() + [("event_time_ms", "bigint")]:
                if results.setdefault(c, t) != t:
                    raise ValueError(f"emit: column {c!r} of stage {stages[i].name!r} is {t}, another emitted "
                                     f"stage's is {results[c]}")
        taken = dict(CONTROL_COLUMNS) | dict(data_cols)
        for c, t in results.items():
            if taken.get(c, t) != t:
                raise ValueError(f"emit: the emitted column {c!r} is {t}, but operator {stages[-1].name!r} outputs "
                                 f"{c!r} as {taken[c]}: rename one of them (a key given as a dict names it)")
        ids = stages[0].key_group_ids()
        claims = tuple((str(s.name), frozenset(s.commands)) for op in ops for s in op) if j == 0 else None
        return OperatorSpec(tuple(stages), router, tuple(data_cols), idle_timeout_ms if j == 0 else None,
                            emit, tuple(results.items()), int(ids[0]) if ids else 0, claims, next_inputs)

    def bound_specs(self, source_types: dict[str, str], fuse: bool = True,
                    idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """:meth:`specs` with every stage bound to the types of its inputs (``Stage.bind``), as
        :meth:`apply` binds them on Spark: ``source_types`` are the first operator's input rows'
        types (``{column: DDL type}``; an input given as a SQL expression is looked up by its
        name), later operators' come from the previous operator's output columns."""
        ops = self.plan(fuse)
        specs: list[OperatorSpec] = []
        types = dict(source_types)
        for j, stages in enumerate(ops):
            first = stages[0]
            if first.python_router() is not None:
                in_types = dict(_ingest_columns(first)) if j == 0 else types
            else:
                in_types = {name: _type_of(expr, types, name) for name, expr in first.inputs().items()}
            specs.append(self._spec(ops, j, _bind(stages, in_types), specs[-1] if specs else None, idle_timeout_ms))
            types = dict(specs[-1].output_columns())
        return specs

    def output_columns(self, fuse: bool = True, input: Any = None) -> list[tuple[str, str]]:
        """Columns of the pipeline's output rows (the contract's control columns, then data).

        ``input``: the source DataFrame (Spark; the schema :meth:`apply` gives it) or the types of
        the first operator's input columns (``{column: DDL type}``, as :meth:`bound_specs`), so
        that key columns get their types; without it key columns of expressions are ``string``."""
        if input is None:
            return self.specs(fuse)[-1].output_columns()
        if isinstance(input, dict):
            return self.bound_specs(input, fuse)[-1].output_columns()
        return [(f.name, f.dataType.simpleString()) for f in self.apply(input, fuse=fuse).schema.fields]

    # -- Spark ------------------------------------------------------------------------------------
    def apply(self, df, *, fuse: bool = True, idle_timeout_ms: int | None = None, pack_source: bool = True):
        """The streaming DataFrame of the pipeline's output rows (contract + last stage's data).

        ``df``: rows of the contract, e.g. ``spark.readStream.format("dataflow-kafka")...load()``.
        ``idle_timeout_ms``: the first operator's idle-partition policy
        (:class:`~keygroups.punctuation.PunctuationTracker`). ``pack_source``: pack the first
        operator's input rows per task and key group into Arrow blobs before the shuffle
        (:mod:`keygroups.packed`; few shuffle rows per key group instead of one per record).
        """
        from pyspark.sql import functions as F

        from keygroups.packed import pack_key_groups
        from keygroups.processor import StageProcessor, deferred
        from keygroups.routing import with_key_groups

        ops = self.plan(fuse)
        upstream = None
        for j, stages in enumerate(ops):
            first = stages[0]
            n = first.num_key_groups
            packed = pack_source and j == 0
            if packed and first.python_router() is not None and _packable(first):
                # ingest, marker fan-out and packing in one Python step (one Python worker round trip)
                slim, types = _ingest_packed(df, first, n, first.key_group_ids())
            else:
                if first.python_router() is not None:
                    if j == 0:
                        df = _ingest(df, first)
                    routed = with_key_groups(df, None, n, group_ids=first.key_group_ids())
                    inputs = [c for c, _ in first.routed_columns()]
                else:
                    exprs = first.inputs()
                    df = _with_ms_columns(df)
                    if j == 0 and computed_inputs(exprs):
                        df = _compute_spark(df, computed_inputs(exprs))
                    sql = {name: e for name, e in exprs.items()
                           if not isinstance(e, Computed) and plain_column(e) != name}
                    if sql and j == 0:
                        df = df.withColumns({name: F.expr(expr) for name, expr in sql.items()})
                    elif sql:       # on data rows only: result rows keep their own columns (Pipeline.emit)
                        is_data = F.col("kind") == KIND_DATA
                        df = df.withColumns({name: F.when(is_data, F.expr(expr)).otherwise(
                            F.col(name) if name in df.columns else F.lit(None)) for name, expr in sql.items()})
                    routed = with_key_groups(df, first.key_columns(), n)
                    inputs = list(exprs)
                keep = [c for c in CONTROL_NAMES if c in routed.columns and c not in inputs]
                carry = [c for c, _ in (upstream.result_columns if upstream is not None else ())
                         if c in routed.columns and c not in keep and c not in inputs]   # emitted stages' rows
                slim = routed.select(KEY_GROUP_COLUMN, *keep, *inputs, *carry)
                types = {f.name: f.dataType.simpleString() for f in slim.schema.fields}
                if packed:
                    slim = pack_key_groups(slim, None, n)
            spec = upstream = self._spec(ops, j, _bind(stages, types), upstream, idle_timeout_ms)
            df = slim.groupBy(KEY_GROUP_COLUMN).transformWithStateInPandas(
                deferred(StageProcessor(spec, packed)), schema_ddl(spec.output_columns()), "Append", "None")
        return df

    # -- without Spark ----------------------------------------------------------------------------
    def run_local(self, batches: Iterable[pd.DataFrame], *, fuse: bool = True,
                  idle_timeout_ms: int | None = None, input_types: dict[str, str] | None = None
                  ) -> list[pd.DataFrame]:
        """Run the pipeline on micro-batches without Spark; one output frame per batch.

        A batch is a frame of the row contract with epoch-ms columns (``event_time_ms``,
        ``punctuation_ms``, ``processing_time_ms``). When the first stage has column inputs, the
        frame must already hold those given as SQL expressions under their names
        (:meth:`~keygroups.stage.Stage.inputs`; SQL is Spark's to evaluate); plain columns are
        read and :class:`~keygroups.computed.Computed` inputs computed, in every operator. Stages
        are bound to their input types as on Spark (:meth:`bound_specs`): ``input_types``, or the
        dtypes of the first batch with data rows (int64 -> bigint, int32 -> int, float64 -> double,
        bool -> boolean, text -> string, bytes -> binary). Rows are routed with
        :func:`~keygroups.routing.key_groups_of` (the JVM's hash) and every key group runs
        :func:`~keygroups.operator.run_key_group`, its state kept as bytes between batches, as
        Spark keeps it.
        """
        unbound = self.specs(fuse, idle_timeout_ms)
        bound = None if input_types is None else self.bound_specs(input_types, fuse, idle_timeout_ms)
        states: list[dict[int, bytes]] = [{} for _ in unbound]
        outputs = []
        for batch in batches:
            if bound is None and (batch["kind"] == KIND_DATA).any():
                bound = self.bound_specs(frame_types(batch), fuse, idle_timeout_ms)
            df = batch
            for j, spec in enumerate(bound or unbound):
                first = spec.stages[0]
                n = first.num_key_groups
                if first.python_router() is not None:
                    if j == 0:
                        df = _ingest_frame(df, first)
                    groups = df[KEY_GROUP_COLUMN] if KEY_GROUP_COLUMN in df.columns else None
                else:
                    df = _local_inputs(df, first, j)
                    groups = _groups_of_columns(df, first.key_columns(), n)
                outs = []
                for kg, rows in _by_key_group(df, groups, n, first.key_group_ids()):
                    out, states[j][kg] = run_key_group(spec, kg, rows, states[j].get(kg))
                    if out is not None and len(out):
                        outs.append(out)
                df = conform(outs, spec.output_columns())
            outputs.append(df)
        return outputs


def _named(links: list[_Link]) -> list[_Link]:
    """Copies of the stages with unique names (defaults from the class name)."""
    out, seen = [], set()
    for i, link in enumerate(links):
        s = link.stage
        name = s.name or re.sub(r"(?<!^)(?=[A-Z])", "_", type(s).__name__.removesuffix("Stage")).lower() or "stage"
        base, k = name, 2
        while name in seen:
            name, k = f"{base}_{k}", k + 1
        seen.add(name)
        if name != s.name:
            s = copy.copy(s)
            object.__setattr__(s, "name", name)
        out.append(_Link(s, link.fuse))
    return out


def _bind(stages: Sequence[Stage], input_types: dict[str, str]) -> tuple[Stage, ...]:
    """Stages of one operator bound to their input types: the first to the routed rows' types,
    each fused one to the previous stage's output types through its plain-column inputs (and
    the declared types of its :class:`~keygroups.computed.Computed` ones)."""
    bound = [stages[0].bind(input_types)]
    for s in stages[1:]:
        produced = dict(bound[-1].output_columns()) | {"event_time_ms": "bigint"}
        types = {} if s.python_router() is not None else {
            name: _type_of(expr, produced, None) for name, expr in s.inputs().items()
            if isinstance(expr, Computed) or plain_column(expr) in produced}
        bound.append(s.bind(types))
    return tuple(bound)


def _type_of(expr: Any, types: dict[str, str], name: str | None) -> str:
    """The Spark type of an input: a Computed's declared type, a plain column's type in ``types``,
    else (a SQL expression) the type ``types`` gives its ``name``, or ``string``."""
    if isinstance(expr, Computed):
        return expr.type
    col = plain_column(expr)
    if col is not None and col in types:
        return types[col]
    return types.get(name, "string") if name is not None else "string"


_DTYPES = {"int64": "bigint", "Int64": "bigint", "int32": "int", "Int32": "int", "int16": "smallint",
           "Int16": "smallint", "int8": "tinyint", "Int8": "tinyint", "float64": "double", "Float64": "double",
           "float32": "float", "Float32": "float", "bool": "boolean", "boolean": "boolean", "string": "string"}


def frame_types(frame: pd.DataFrame) -> dict[str, str]:
    """``{column: Spark DDL type}`` of a frame's columns, from their dtypes (object columns from their
    first non-null value: text -> string, bytes -> binary, bool -> boolean, int -> bigint, float -> double)."""
    out = {}
    for name, col in frame.items():
        ddl = _DTYPES.get(str(col.dtype))
        if ddl is None:
            first = next((v for v in col.tolist() if v is not None and not (isinstance(v, float) and v != v)), None)
            ddl = ("binary" if isinstance(first, (bytes, bytearray))
                   else "boolean" if isinstance(first, (bool, np.bool_))
                   else "bigint" if isinstance(first, (int, np.integer))
                   else "double" if isinstance(first, float) else "string")
        out[str(name)] = ddl
    return out


def _local_inputs(df: pd.DataFrame, stage: Stage, j: int) -> pd.DataFrame:
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
        if name in df.columns and (j == 0 or col == name):
            continue
        if not is_data.any():
            renames[name] = None          # no data rows: nothing to compute
            continue
        if col is None or col not in df.columns:
            raise ValueError(f"run_local: input {name!r} = {expr!r} of stage {stage.name!r} is not a column of "
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


def _compute_spark(df, computed: dict[str, Computed]):
    """Spark: a ``mapInPandas`` step adding the ``computed`` inputs (first operator) on data rows."""
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    fields = [f for f in df.schema.fields if f.name not in computed]
    schema = StructType(fields + [StructField(n, _parse_datatype_string(c.type)) for n, c in computed.items()])
    names = [f.name for f in schema.fields]

    def compute(frames):
        for pdf in frames:
            yield evaluate(pdf, computed)[names]

    return df.mapInPandas(compute, schema)


def _configured(links: list[_Link]) -> list[_Link]:
    """Each stage as :meth:`~keygroups.stage.Stage.followed_by` its successor configures it."""
    stages = [lk.stage for lk in links]
    return [_Link(s.followed_by(stages[i + 1] if i + 1 < len(stages) else None), lk.fuse)
            for i, (s, lk) in enumerate(zip(stages, links))]


def _link_rates(stages: Sequence[Stage], rates: Sequence[float] | None) -> list[float]:
    """``rates`` validated: one finite number > 0 per link (default 1 each)."""
    n = len(stages) - 1
    if rates is None:
        return [1.0] * n
    rates = list(rates)
    if len(rates) != n:
        raise ValueError(f"rates: {n + 1} stages have {n} links, got {len(rates)} rates")
    for i, r in enumerate(rates):
        if isinstance(r, bool) or not isinstance(r, (int, float, np.integer, np.floating)) \
                or not np.isfinite(r) or r <= 0:
            raise ValueError(f"rates[{i}] (link {stages[i].name!r} -> {stages[i + 1].name!r}) must be a finite "
                             f"number > 0, got {r!r}")
    return [float(r) for r in rates]


def _chain_links(links: Sequence[_Link], rates: Sequence[float]) -> tuple[list[frozenset], list[float | None]]:
    """The planner's view of the chain (:func:`~keygroups.fusion.plan_chain`): per stage its
    partition attributes, ``{its key}`` (the previous stage's key when :func:`_fusable` says the
    key is kept, else a new one), and per link its rate, None where :func:`_fusable` says no."""
    attributes, out = [frozenset({"key0"})], []
    for i in range(1, len(links)):
        kept = _fusable(links[i - 1].stage, links[i].stage, links[i].fuse)
        attributes.append(attributes[-1] if kept else frozenset({f"key{i}"}))
        out.append(rates[i - 1] if kept else None)
    return attributes, out


def _fusable(prev: Stage, stage: Stage, fuse: bool | None) -> bool:
    if fuse is False:
        return False
    same_n = prev.num_key_groups == stage.num_key_groups
    if stage.python_router() is not None:
        if fuse is True:
            if not same_n:
                raise ValueError(f"fuse=True: {stage.name!r} has {stage.num_key_groups} key groups, "
                                 f"{prev.name!r} {prev.num_key_groups}")
            return True
        return same_n and bool(getattr(stage, "fusable_after", lambda p: False)(prev))
    exprs = stage.inputs()
    produced = {c for c, _ in prev.output_columns()} | {"event_time_ms"}
    plain = {name: plain_column(e) for name, e in exprs.items()}
    all_plain = all(isinstance(exprs[n], Computed) or (c is not None and c in produced) for n, c in plain.items())
    keys = stage.key_columns() or []
    same_key = bool(keys) and [plain.get(k) for k in keys] == list(prev.output_key_columns() or [])
    if fuse is True:
        if not (same_n and all_plain and same_key):
            raise ValueError(f"fuse=True: {stage.name!r} cannot run fused after {prev.name!r}: it needs the "
                             "same number of key groups, plain-column inputs of that stage's output and its "
                             f"key columns {prev.output_key_columns()} (got inputs {exprs}, key {keys})")
        return True
    return same_n and all_plain and same_key


def _groups_of_columns(df: pd.DataFrame, keys: Sequence[str] | None, n: int) -> np.ndarray | None:
    """Key groups of the data rows of ``df`` by its key columns (Spark's hash; ints by width)."""
    if not keys:
        raise ValueError("a stage with column inputs needs key_columns()")
    is_data = (df["kind"] == KIND_DATA).to_numpy()
    groups = np.zeros(len(df), np.int64)
    if is_data.any():
        data = df[is_data]
        cols, widths = [], []
        for k in keys:
            col = data[k]
            widths.append(4 if str(col.dtype) in ("Int32", "int32", "Int16", "int16", "Int8", "int8") else 8)
            cols.append([None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)
                         if not isinstance(v, (bytes, str, tuple, list)) else v for v in col.tolist()])
        groups[is_data] = key_groups_of(cols, n, widths)
    return groups


def _key_group_masks(df: pd.DataFrame, groups, n: int, ids: Sequence[int] | None = None):
    """``(key group, row mask)`` as ``with_key_groups`` routes rows: data by ``groups``, markers to
    every key group (``ids``, default ``0..n-1``), other rows to the first; groups without rows
    are left out."""
    kinds = df["kind"].to_numpy(dtype=object)
    is_data = kinds == KIND_DATA
    is_marker = np.isin(kinds, MARKER_KINDS)
    g = np.asarray(groups, dtype=np.float64) if groups is not None else np.zeros(len(df))
    ids = list(range(n)) if ids is None else [int(i) for i in ids]
    for kg in ids:
        mask = is_marker | (is_data & (g == kg)) | (~is_data & ~is_marker & (kg == ids[0]))
        if mask.any():
            yield kg, mask


def _by_key_group(df: pd.DataFrame, groups, n: int, ids: Sequence[int] | None = None):
    """``(key group, rows)`` as ``with_key_groups`` routes them (:func:`_key_group_masks`)."""
    for kg, mask in _key_group_masks(df, groups, n, ids):
        yield kg, df[mask]


def _with_ms_columns(df):
    from pyspark.sql import functions as F

    for ts in ("event_time", "punctuation", "processing_time"):
        if ts in df.columns and f"{ts}_ms" not in df.columns:
            df = df.withColumn(f"{ts}_ms", F.unix_millis(ts))
    return df


def _ingest_columns(stage: Stage) -> list[tuple[str, str]]:
    names = {c for c, _ in CONTROL_COLUMNS}
    return list(CONTROL_COLUMNS) + [(KEY_GROUP_COLUMN, "int")] + [c for c in stage.routed_columns() if c[0] not in names]


def _ingest_frame(pdf: pd.DataFrame, stage: Stage) -> pd.DataFrame:
    """Python routing of source rows (pure): data rows through ``stage``'s router, others kept."""
    router = stage.python_router()
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
    return conform(parts, _ingest_columns(stage))


def _ingest(df, stage: Stage):
    """Spark: a ``mapInPandas`` step routing the source's data rows in Python (``stage``'s router)."""
    df = _with_ms_columns(df)

    def ingest(frames):
        for pdf in frames:
            yield _ingest_frame(pdf, stage)

    return df.mapInPandas(ingest, schema_ddl(_ingest_columns(stage)))


def _ingest_packed(df, stage: Stage, n: int, ids: Sequence[int] | None = None):
    """Spark: the source's rows routed in Python by ``stage`` (:func:`_ingest_frame`), punctuation
    and modification rows copied to every key group, other rows to the first key group (as
    :func:`~keygroups.routing.with_key_groups` does), and each key group's rows of a task packed
    into Arrow IPC blobs (:mod:`keygroups.packed`), in one ``mapInPandas`` step: rows
    ``(key_group, payload)``. Also returns the packed columns' Spark types."""
    from keygroups.packed import PAYLOAD_COLUMN

    columns = [c for c in _ingest_columns(stage) if c[0] != KEY_GROUP_COLUMN]
    df = _with_ms_columns(df)

    def ingest(frames):
        for pdf in frames:
            out = _pack_frame(_ingest_frame(pdf, stage), columns, n, ids)
            if len(out):
                yield out

    packed = df.mapInPandas(ingest, f"`{KEY_GROUP_COLUMN}` int, `{PAYLOAD_COLUMN}` binary")
    return packed, {name: ddl for name, ddl in columns}


def _pack_frame(frame: pd.DataFrame, columns: Sequence[tuple[str, str]], n: int,
                ids: Sequence[int] | None = None) -> pd.DataFrame:
    """Rows of ``frame`` (with ``key_group`` on data rows) as one ``(key_group, payload)`` row per
    key group that gets any: data rows to their group, punctuation and modification rows to every
    group, other rows to the first group (``ids[0]``); the payload is an Arrow IPC stream of ``columns`` (pure)."""
    import pyarrow as pa

    from keygroups.packed import PAYLOAD_COLUMN

    out_groups, payloads = [], []
    if len(frame):
        schema = arrow_schema(columns)
        groups = frame[KEY_GROUP_COLUMN].to_numpy(dtype=np.float64, na_value=-1)
        table = pa.Table.from_pandas(frame[[c for c, _ in columns]], schema=schema, preserve_index=False)
        for kg, mask in _key_group_masks(frame, groups, n, ids):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, schema) as writer:
                writer.write_table(table.filter(pa.array(mask)))
            out_groups.append(kg)
            payloads.append(sink.getvalue().to_pybytes())
    return pd.DataFrame({KEY_GROUP_COLUMN: np.asarray(out_groups, np.int32), PAYLOAD_COLUMN: payloads})


def _packable(stage: Stage) -> bool:
    """Whether :func:`_ingest_packed` can write every column of ``stage``'s ingest as Arrow."""
    return all(ddl.lower() in _ARROW_TYPES for _, ddl in _ingest_columns(stage))


_ARROW_TYPES = ("string", "binary", "int", "bigint", "long", "double", "float", "boolean", "smallint", "tinyint")


def arrow_schema(columns: Sequence[tuple[str, str]]):
    """``(name, Spark DDL type)`` columns of the simple types in ``_ARROW_TYPES`` as a pyarrow schema."""
    import pyarrow as pa

    types = {"string": pa.string(), "binary": pa.binary(), "int": pa.int32(), "bigint": pa.int64(),
             "long": pa.int64(), "double": pa.float64(), "float": pa.float32(), "boolean": pa.bool_(),
             "smallint": pa.int16(), "tinyint": pa.int8()}
    return pa.schema([(name, types[ddl.lower()]) for name, ddl in columns])


def stateful_operators(df) -> int:
    """Number of ``transformWithStateInPandas`` operators in ``df``'s logical plan."""
    plan = df._jdf.queryExecution().analyzed().toString()
    return len(re.findall(r"TransformWithStateIn(?:Pandas|PySpark)\b", plan))
