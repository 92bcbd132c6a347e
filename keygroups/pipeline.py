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

    from dataflow_kafka.keygroups import Pipeline
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

from dataflow_kafka.keygroups.computed import Computed, computed_inputs, evaluate
from dataflow_kafka.keygroups.contract import CONTROL_COLUMNS, CONTROL_NAMES, KIND_DATA, conform, schema_ddl
from dataflow_kafka.keygroups.fusion import plan_chain
from dataflow_kafka.keygroups.operator import OperatorSpec, run_key_group
from dataflow_kafka.keygroups.routing import KEY_GROUP_COLUMN, MARKER_KINDS, key_groups_of
from dataflow_kafka.keygroups.stage import INPUT_COLUMN, Stage
from dataflow_kafka.errors import InvalidArgumentError

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
    """A chain of stages, the first of which may take several inputs (:meth:`join`); see the
    module docstring."""

    def __init__(self, stages: Sequence[Stage] = (), *, _links: Sequence[_Link] | None = None,
                 _emit: Sequence[str] = (), _upstreams: "dict[str, Pipeline | None] | None" = None) -> None:
        links = list(_links) if _links is not None else [_Link(s, None) for s in stages]
        for link in links:
            if not isinstance(link.stage, Stage):
                raise TypeError(f"a pipeline holds Stage objects, got {link.stage!r}")
        taken = {s.name for u in _distinct(_upstreams) for s in u.all_stages()}
        links = _named(links, taken)
        cut = max((i for i, lk in enumerate(links) if lk.stage.stage_inputs()), default=None)
        if cut:               # a multi-input stage inside the chain: the stages before it feed every input
            head_names = {lk.stage.name for lk in links[:cut]}
            head = Pipeline(_links=links[:cut], _emit=[e for e in _emit if e in head_names], _upstreams=_upstreams)
            _upstreams = {i.name: head for i in links[cut].stage.stage_inputs()}
            links, _emit = links[cut:], [e for e in _emit if e not in head_names]
        elif cut == 0 and _upstreams is None:
            _upstreams = {i.name: None for i in links[0].stage.stage_inputs()}
        self._links = _configured(links)
        self._upstreams = _upstreams
        names = [lk.stage.name for lk in self._links]
        unknown = [n for n in _emit if n not in names]
        if unknown:
            raise InvalidArgumentError(f"emit: no stage named {unknown[0]!r} in this pipeline (stages: {names}; emit an "
                             "upstream stage on its own pipeline, before Pipeline.join)")
        self._emit = tuple(_emit)

    @classmethod
    def join(cls, stage: Stage, /, **upstreams: "Pipeline | Stage | None") -> "Pipeline":
        """A pipeline starting with the multi-input ``stage`` (e.g. a join), each of whose inputs
        reads the output of ``upstreams[input name]`` (a pipeline or a stage); an input not named
        reads the source (:meth:`apply` and :meth:`run_local` take ``{input name: source}`` when
        the inputs read different sources). The same upstream given to several inputs runs once
        and feeds each (fan-out); stage names that clash across upstreams get a suffix. Continue
        with :meth:`then`::

            Pipeline.join(q8, persons=parse_persons, auctions=parse_auctions).then(top_sellers)
        """
        from dataflow_kafka.keygroups.fan_in import join_upstreams

        return cls([stage], _upstreams=join_upstreams(stage, upstreams))

    def emit(self, *stage_names: str) -> "Pipeline":
        """This pipeline with the output of the named earlier stages kept in its output, as rows of
        kind ``result`` (``topic`` = the stage; their columns are added to the output schema).
        The last stage's output is the ``data`` rows anyway."""
        return Pipeline(_links=self._links, _emit=tuple(dict.fromkeys(self._emit + stage_names)),
                        _upstreams=self._upstreams)

    @property
    def stages(self) -> list[Stage]:
        """This pipeline's own chain (after its multi-input stage's upstreams, :attr:`upstreams`)."""
        return [link.stage for link in self._links]

    @property
    def upstreams(self) -> "dict[str, Pipeline | None] | None":
        """A pipeline starting with a multi-input stage: ``{input: upstream pipeline or None (the
        source)}``; else None."""
        return None if self._upstreams is None else dict(self._upstreams)

    def all_stages(self) -> list[Stage]:
        """Every stage of the query: the upstreams' (each once), then this chain's."""
        return [s for node in self.nodes() for s in node.stages]

    def nodes(self) -> "list[Pipeline]":
        """The pipelines of the query, upstreams first, each once (by identity), this one last."""
        out: list[Pipeline] = []

        def visit(p: Pipeline) -> None:
            if any(p is q for q in out):
                return
            for u in _distinct(p._upstreams):
                visit(u)
            out.append(p)

        visit(self)
        return out

    def then(self, stage: "Stage | Pipeline", fuse: bool | None = None) -> "Pipeline":
        """This pipeline followed by ``stage`` (or by every stage of a pipeline). A multi-input
        stage after it reads this pipeline's output on every input (each takes its rows by its
        ``select``/``where``)."""
        if isinstance(stage, Pipeline):
            if stage._upstreams is not None and any(u is not None for u in stage._upstreams.values()):
                raise InvalidArgumentError(f"then: {stage!r} starts with a multi-input stage whose inputs have upstreams; "
                                 "name this pipeline as one of them: Pipeline.join(stage, <input>=this, ...)")
            if stage._upstreams is not None:
                head = Pipeline.join(stage.stages[0], **{n: self for n in stage._upstreams})
                return Pipeline(_links=head._links + list(stage._links[1:]), _emit=stage._emit,
                                _upstreams=head._upstreams)
            return Pipeline(_links=[_Link(lk.stage, lk.fuse) for lk in self._links] + list(stage._links),
                            _emit=self._emit + stage._emit, _upstreams=self._upstreams)
        if fuse not in (None, True, False):
            raise InvalidArgumentError(f"fuse must be None, True or False, got {fuse!r}")
        if isinstance(stage, Stage) and stage.stage_inputs():
            return Pipeline.join(stage, **{i.name: self for i in stage.stage_inputs()})
        return Pipeline(_links=[_Link(lk.stage, lk.fuse) for lk in self._links] + [_Link(stage, fuse)],
                        _emit=self._emit, _upstreams=self._upstreams)

    __rshift__ = then

    def __repr__(self) -> str:
        chain = " >> ".join(f"{type(s).__name__}({s.name})" for s in self.stages)
        if self._upstreams is None:
            return chain
        ups = ", ".join(f"{n}={u!r}" if u is not None else f"{n}=<source>" for n, u in self._upstreams.items())
        return f"join({ups}) >> {chain}"

    # -- planning ---------------------------------------------------------------------------------
    def plan(self, fuse: bool = True, rates: Sequence[float] | None = None) -> list[tuple[Stage, ...]]:
        """The operators: groups of consecutive stages run fused (``fuse=False``: one per stage), as
        :func:`~keygroups.fusion.plan_chain` decides them (module docstring; Enorm Algorithm 1).
        With upstreams (:meth:`join`): theirs first (each pipeline once), then this chain's; a
        multi-input stage always starts an operator.

        ``rates``: the rate of each link ``stage i -> stage i+1`` of this chain (e.g. rows per
        batch measured on a trial run; numbers > 0), default 1 each: the highest-rate link fuses first.
        """
        return [op for node in self.nodes()[:-1] for op in node._own_plan(fuse)] + self._own_plan(fuse, rates)

    def _own_plan(self, fuse: bool = True, rates: Sequence[float] | None = None) -> list[tuple[Stage, ...]]:
        if not self._links:
            raise InvalidArgumentError("an empty pipeline has nothing to run")
        stages = self.stages
        rates = _link_rates(stages, rates)
        if not fuse:
            return [(s,) for s in stages]
        attributes, links = _chain_links(self._links, rates)
        return [tuple(stages[i] for i in run) for run in plan_chain(attributes, links)]

    def specs(self, fuse: bool = True, idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """One :class:`~keygroups.operator.OperatorSpec` per operator of this chain (:meth:`plan`
        without the upstreams'; :func:`keygroups.fan_in.dag_specs` gives every pipeline's)."""
        if self._upstreams is not None:
            from dataflow_kafka.keygroups.fan_in import dag_specs

            return dag_specs(self, fuse, idle_timeout_ms, None)[id(self)]
        return self._chain_specs(fuse, idle_timeout_ms)

    def _chain_specs(self, fuse: bool, idle_timeout_ms: int | None, types: dict[str, str] | None = None, *,
                     head: "Head | None" = None, claims: Any = "own") -> list[OperatorSpec]:
        """This chain's specs, bound to ``types`` (the first operator's input types; None: unbound).
        ``head``: a multi-input first operator (its inputs, expected senders, upstream result
        columns); ``claims``: the stages whose commands the first operator checks ("own": this
        chain's; None: no check, another operator of the query does it)."""
        ops = self._own_plan(fuse)
        if claims == "own":
            claims = tuple((str(s.name), frozenset(s.commands)) for op in ops for s in op)
        specs: list[OperatorSpec] = []
        results = head.results if head is not None else ()
        for j, stages in enumerate(ops):
            if types is not None:
                first = stages[0]
                if j == 0 and head is not None:
                    in_types = types
                elif first.python_router() is not None:
                    in_types = dict(_ingest_columns(first)) if j == 0 else types
                else:
                    in_types = {name: _type_of(expr, types, name) for name, expr in first.inputs().items()}
                stages = _bind(stages, in_types)
            spec = self._spec(ops, j, stages, results, idle_timeout_ms, claims if j == 0 else None,
                              head if j == 0 else None)
            specs.append(spec)
            results = spec.result_columns
            if types is not None:
                types = dict(spec.output_columns())
        return specs

    def _spec(self, ops, j: int, stages: tuple[Stage, ...], results_in: tuple, idle_timeout_ms: int | None,
              claims: tuple | None, head: "Head | None") -> OperatorSpec:
        """Operator ``j`` running ``stages`` (bound or not), after operators that carry the emitted
        columns ``results_in``."""
        nxt = ops[j + 1][0] if j + 1 < len(ops) else None
        router = nxt.python_router() if nxt is not None else None
        data_cols = list(nxt.routed_columns() if router is not None else stages[-1].output_columns())
        # the next operator's Computed inputs are computed here, on the rows this operator emits
        next_inputs = tuple(computed_inputs(nxt.inputs()).items()) if nxt is not None and router is None else ()
        for name, c in next_inputs:
            data_cols = [col for col in data_cols if col[0] != name] + [(name, c.type)]
        last = nxt is None
        emit = tuple(i for i, s in enumerate(stages) if s.name in self._emit and not (last and i == len(stages) - 1))
        results = dict(results_in)
        for i in emit:
            for c, t in stages[i].output_columns() + [("event_time_ms", "bigint")]:
                if results.setdefault(c, t) != t:
                    raise InvalidArgumentError(f"emit: column {c!r} of stage {stages[i].name!r} is {t}, another emitted "
                                     f"stage's is {results[c]}")
        taken = dict(CONTROL_COLUMNS) | dict(data_cols)
        for c, t in results.items():
            if taken.get(c, t) != t:
                raise InvalidArgumentError(f"emit: the emitted column {c!r} is {t}, but operator {stages[-1].name!r} outputs "
                                 f"{c!r} as {taken[c]}: rename one of them (a key given as a dict names it)")
        ids = stages[0].key_group_ids()
        return OperatorSpec(tuple(stages), router, tuple(data_cols), idle_timeout_ms if j == 0 else None,
                            emit, tuple(results.items()), int(ids[0]) if ids else 0, claims, next_inputs,
                            head.inputs if head is not None else (), head.expected if head is not None else ())

    def bound_specs(self, source_types: dict[str, str], fuse: bool = True,
                    idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """:meth:`specs` with every stage bound to the types of its inputs (``Stage.bind``), as
        :meth:`apply` binds them on Spark: ``source_types`` are the first operator's input rows'
        types (``{column: DDL type}``; an input given as a SQL expression is looked up by its
        name; with several sources ``{source: {column: type}}``), later operators' come from the
        previous operator's output columns."""
        if self._upstreams is not None:
            from dataflow_kafka.keygroups.fan_in import dag_specs

            return dag_specs(self, fuse, idle_timeout_ms, source_types)[id(self)]
        return self._chain_specs(fuse, idle_timeout_ms, dict(source_types))

    def output_columns(self, fuse: bool = True, input: Any = None) -> list[tuple[str, str]]:
        """Columns of the pipeline's output rows (the contract's control columns, then data).

        ``input``: the source DataFrame (Spark; the schema :meth:`apply` gives it; or ``{source:
        DataFrame}``) or the types of the first operator's input columns (``{column: DDL type}``,
        as :meth:`bound_specs`), so that key columns get their types; without it key columns of
        expressions are ``string``."""
        if input is None:
            return self.specs(fuse)[-1].output_columns()
        if isinstance(input, dict) and all(isinstance(v, (str, dict)) for v in input.values()):
            return self.bound_specs(input, fuse)[-1].output_columns()
        return [(f.name, f.dataType.simpleString()) for f in self.apply(input, fuse=fuse).schema.fields]

    # -- Spark ------------------------------------------------------------------------------------
    def apply(self, df, *, fuse: bool = True, idle_timeout_ms: int | None = None, pack_source: bool = True):
        """The streaming DataFrame of the pipeline's output rows (contract + last stage's data).

        ``df``: rows of the contract, e.g. ``spark.readStream.format("dataflow-kafka")...load()``;
        with a multi-input stage whose inputs read different sources, ``{input name: DataFrame}``
        (an upstream pipeline reads the source of the input it feeds).
        ``idle_timeout_ms``: the first operator's idle-partition policy
        (:class:`~keygroups.punctuation.PunctuationTracker`). ``pack_source``: pack the first
        operator's input rows per task and key group into Arrow blobs before the shuffle
        (:mod:`keygroups.packed`; few shuffle rows per key group instead of one per record).
        """
        if self._upstreams is not None:
            from dataflow_kafka.keygroups.fan_in import apply_dag

            return apply_dag(self, df, fuse=fuse, idle_timeout_ms=idle_timeout_ms, pack_source=pack_source)
        return self._apply_chain(df, fuse, idle_timeout_ms, pack_source)[0]

    def _apply_chain(self, df, fuse: bool, idle_timeout_ms: int | None, pack_source: bool, *,
                     head: "Head | None" = None, claims: Any = "own"):
        """Spark: this chain's operators on ``df`` (with ``head``: ``df`` is the multi-input first
        operator's tagged input, :func:`keygroups.fan_in.tag_spark`); ``(output, specs)``."""
        from pyspark.sql import functions as F

        from dataflow_kafka.keygroups.processor import StageProcessor, deferred
        from dataflow_kafka.keygroups.routing import with_key_groups

        ops = self._own_plan(fuse)
        if claims == "own":
            claims = tuple((str(s.name), frozenset(s.commands)) for op in ops for s in op)
        results: tuple = head.results if head is not None else ()
        specs: list[OperatorSpec] = []
        for j, stages in enumerate(ops):
            first = stages[0]
            n = first.num_key_groups
            packed = pack_source and j == 0
            if j == 0 and head is not None:
                routed = with_key_groups(df, first.key_columns(), n)
                inputs = [INPUT_COLUMN] + [c for c in head.columns if c != INPUT_COLUMN]
                slim, types = _slim(routed, inputs, results, packed, n)
            elif packed and first.python_router() is not None and _packable(first):
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
                slim, types = _slim(routed, inputs, results, packed, n)
            spec = self._spec(ops, j, _bind(stages, types), results, idle_timeout_ms, claims if j == 0 else None,
                              head if j == 0 else None)
            specs.append(spec)
            results = spec.result_columns
            df = slim.groupBy(KEY_GROUP_COLUMN).transformWithStateInPandas(
                deferred(StageProcessor(spec, packed)), schema_ddl(spec.output_columns()), "Append", "None")
        return df, specs

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
        Spark keeps it. With a multi-input stage whose inputs read different sources, ``batches``
        is ``{input name: frames}`` (the same number of micro-batches each, as one query's).
        """
        if self._upstreams is not None:
            from dataflow_kafka.keygroups.fan_in import run_dag_local

            return run_dag_local(self, batches, fuse=fuse, idle_timeout_ms=idle_timeout_ms, input_types=input_types)
        unbound = self._chain_specs(fuse, idle_timeout_ms)
        bound = None if input_types is None else self._chain_specs(fuse, idle_timeout_ms, dict(input_types))
        states: list[dict[int, bytes]] = [{} for _ in unbound]
        outputs = []
        for batch in batches:
            if bound is None and (batch["kind"] == KIND_DATA).any():
                bound = self._chain_specs(fuse, idle_timeout_ms, frame_types(batch))
            outputs.append(self._step_local(batch, bound or unbound, states))
        return outputs

    def _step_local(self, df: pd.DataFrame, specs: list[OperatorSpec], states: list[dict[int, bytes]],
                    head: bool = False) -> pd.DataFrame:
        """One micro-batch through this chain's operators (``head``: ``df`` is the multi-input first
        operator's tagged input, :func:`keygroups.fan_in.tag_frame`); ``states`` per operator."""
        for j, spec in enumerate(specs):
            first = spec.stages[0]
            n = first.num_key_groups
            if j == 0 and head:
                groups = _groups_of_columns(df, first.key_columns(), n)
            elif first.python_router() is not None:
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
        return df


@dataclass(frozen=True)
class Head:
    """A multi-input first operator, as :mod:`keygroups.fan_in` prepares it: its inputs' names,
    the senders known in advance per input, the columns of its tagged input, and the emitted
    columns its upstreams carry."""

    inputs: tuple[str, ...]
    expected: tuple = ()
    columns: tuple[str, ...] = ()
    results: tuple = ()


def _slim(routed, inputs: list[str], results: tuple, packed: bool, n: int):
    """The first operator's shuffle input: key group, control columns, ``inputs``, carried emitted
    columns (``results``), packed into Arrow blobs when ``packed``; and the columns' types."""
    from dataflow_kafka.keygroups.packed import pack_key_groups

    keep = [c for c in CONTROL_NAMES if c in routed.columns and c not in inputs]
    carry = [c for c, _ in results if c in routed.columns and c not in keep and c not in inputs]   # emitted stages' rows
    slim = routed.select(KEY_GROUP_COLUMN, *keep, *inputs, *carry)
    types = {f.name: f.dataType.simpleString() for f in slim.schema.fields}
    if packed:
        slim = pack_key_groups(slim, None, n)
    return slim, types


def _named(links: list[_Link], taken: set | None = None) -> list[_Link]:
    """Copies of the stages with unique names (defaults from the class name), none in ``taken``."""
    out, seen = [], set(taken or ())
    for link in links:
        s = link.stage
        name = s.name or re.sub(r"(?<!^)(?=[A-Z])", "_", type(s).__name__.removesuffix("Stage")).lower() or "stage"
        name = _unused(name, seen)
        seen.add(name)
        if name != s.name:
            s = copy.copy(s)
            object.__setattr__(s, "name", name)
        out.append(_Link(s, link.fuse))
    return out


def _unused(name: str, taken) -> str:
    base, k = name, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def _distinct(upstreams: "dict | None") -> list:
    """The distinct upstream pipelines of ``upstreams`` (by identity, in input order)."""
    out: list = []
    for u in (upstreams or {}).values():
        if u is not None and not any(u is v for v in out):
            out.append(u)
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
        raise InvalidArgumentError(f"rates: {n + 1} stages have {n} links, got {len(rates)} rates")
    for i, r in enumerate(rates):
        if isinstance(r, bool) or not isinstance(r, (int, float, np.integer, np.floating)) \
                or not np.isfinite(r) or r <= 0:
            raise InvalidArgumentError(f"rates[{i}] (link {stages[i].name!r} -> {stages[i + 1].name!r}) must be a finite "
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
                raise InvalidArgumentError(f"fuse=True: {stage.name!r} has {stage.num_key_groups} key groups, "
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
            raise InvalidArgumentError(f"fuse=True: {stage.name!r} cannot run fused after {prev.name!r}: it needs the "
                             "same number of key groups, plain-column inputs of that stage's output and its "
                             f"key columns {prev.output_key_columns()} (got inputs {exprs}, key {keys})")
        return True
    return same_n and all_plain and same_key


def _groups_of_columns(df: pd.DataFrame, keys: Sequence[str] | None, n: int) -> np.ndarray | None:
    """Key groups of the data rows of ``df`` by its key columns (Spark's hash; ints by width)."""
    if not keys:
        raise InvalidArgumentError("a stage with column inputs needs key_columns()")
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
    from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN

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

    from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN

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
