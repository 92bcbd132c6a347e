"""Pipelines of stages in one Spark query: ``stage_a.then(stage_b)``, fusion, and a local runner.

A :class:`Pipeline` is a chain of stages (:class:`~keygroups.stage.StageLogic` objects; what an
engine subclasses is :class:`Stage`, the same hooks and ``then`` / ``>>`` to compose them), the
first of which may take several inputs, each read from an upstream pipeline or the source
(:meth:`Pipeline.join`: a :class:`~keygroups.dag.QueryNode` of a query's DAG). :meth:`Pipeline.plan`
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
  that stage's :meth:`~keygroups.stage.StageLogic.output_key_columns` (so every row stays in its key
  group: data-trace types §4, a keyed operator after a hash split by the same key);
- a stage routed in Python fuses when its router's ``fusable_after(previous)`` says its key is the
  previous stage's (e.g. the same key function).

``fuse=True`` forces fusion (a Python-routed stage then checks at run time that every row stays
in its key group, :class:`~errors.FusionError` otherwise); ``fuse=False`` forbids it.

``fuse="partial"`` runs a stage with column keys in the previous stage's key groups although its
key is another: within each key group it groups by its own key, so its results are **partials
per key group**, and a later stage keyed the same way, not fused after it, merges them (a
combiner before the shuffle: Spark's partial aggregation, Beam's combiner lifting; enorm §4.3's
compute / consolidate). The results equal the pipeline's without the partial stage when the later
stage's aggregation merges partials (its input is the partial stage's output, e.g.
``bench.nexmark.aggregations.ArgMax`` of its own lists; a count would have to sum counts), for
any number of key groups, and with ``plan(fuse=False)``, where the partial stage runs alone on
its own key. It saves the shuffle of every row the partial stage reduces: NEXMark Q5 sends one
row per window and key group to its last stage instead of one per auction and window.

The groups are decided by the fusion planner, :func:`keygroups.fusion.plan_chain` (Enorm §4.4.1,
Algorithm 1), from the chain's view in :mod:`keygroups.plan`: a stage's partition attributes are its key, shared with the previous stage when the
rule above says the key is kept; a link the rule does not fuse is ``None`` (never fused); the
link rates (:meth:`Pipeline.plan`'s ``rates``, default 1) order the fusions. With one key per
stage no two fusions of a chain conflict, so the plan equals the rule's for any rates.

A pipeline is a facade: planning is :mod:`keygroups.plan`'s, a chain runs on Spark through
:mod:`keygroups.spark_steps` and locally through :mod:`keygroups.frames`, a query of several
pipelines through :mod:`keygroups.dag`.

Example::

    from dataflow_kafka.keygroups import Pipeline
    out = (SlicerStage(...).then(WindowingStage(...))).apply(source_df)   # one query
    out.writeStream.foreachBatch(...).start()
"""

from __future__ import annotations

import copy
import re
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from dataflow_kafka.keygroups.contract import KIND_DATA
from dataflow_kafka.keygroups.dag import QueryNode, apply_dag, dag_specs, distinct_upstreams, run_dag_local
from dataflow_kafka.keygroups.frames import run_chain_local
from dataflow_kafka.keygroups.metrics import observe_stages
from dataflow_kafka.keygroups.operator import OperatorSpec
from dataflow_kafka.keygroups.plan import PARTIAL, Chain, Link, configured_links, frame_types, named_links, unused_name
from dataflow_kafka.keygroups.spark_steps import apply_chain
from dataflow_kafka.keygroups.stage import StageLogic, check_routing
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["Pipeline", "Stage", "stateful_operators"]


class Pipeline(QueryNode):
    """A chain of stages, the first of which may take several inputs (:meth:`join`); see the
    module docstring."""

    def __init__(self, stages: Sequence[StageLogic] = (), *, _links: Sequence[Link] | None = None,
                 _emit: Sequence[str] = (), _upstreams: Mapping[str, Pipeline | None] | None = None) -> None:
        links = list(_links) if _links is not None else [Link(s, None) for s in stages]
        for link in links:
            if not isinstance(link.stage, StageLogic):
                raise ArgumentTypeError(f"a pipeline holds Stage objects, got {link.stage!r}")
            check_routing(link.stage)
        taken = {s.name for u in distinct_upstreams(_upstreams) for s in u.all_stages()}
        links = named_links(links, taken)
        cut = max((i for i, lk in enumerate(links) if lk.stage.stage_inputs()), default=None)
        if cut:               # a multi-input stage inside the chain: the stages before it feed every input
            head_names = {lk.stage.name for lk in links[:cut]}
            head = Pipeline(_links=links[:cut], _emit=[e for e in _emit if e in head_names], _upstreams=_upstreams)
            _upstreams = {i.name: head for i in links[cut].stage.stage_inputs()}
            links, _emit = links[cut:], [e for e in _emit if e not in head_names]
        elif cut == 0 and _upstreams is None:
            _upstreams = {i.name: None for i in links[0].stage.stage_inputs()}
        chain = Chain(tuple(configured_links(links)), tuple(_emit))
        names = [s.name for s in chain.stages]
        unknown = [n for n in _emit if n not in names]
        if unknown:
            raise InvalidArgumentError(f"emit: no stage named {unknown[0]!r} in this pipeline (stages: {names}; emit an "
                                       "upstream stage on its own pipeline, before Pipeline.join)")
        super().__init__(chain, _upstreams)

    @classmethod
    def join(cls, stage: StageLogic, /, **upstreams: Pipeline | StageLogic | None) -> Pipeline:
        """A pipeline starting with the multi-input ``stage`` (e.g. a join), each of whose inputs
        reads the output of ``upstreams[input name]`` (a pipeline or a stage); an input not named
        reads the source (:meth:`apply` and :meth:`run_local` take ``{input name: source}`` when
        the inputs read different sources). The same upstream given to several inputs runs once
        and feeds each (fan-out); stage names that clash across upstreams get a suffix. Continue
        with :meth:`then`::

            Pipeline.join(q8, persons=parse_persons, auctions=parse_auctions).then(top_sellers)
        """
        return cls([stage], _upstreams=_join_upstreams(stage, upstreams))

    def emit(self, *stage_names: str) -> Pipeline:
        """This pipeline with the output of the named earlier stages kept in its output, as rows of
        kind ``result`` (``topic`` = the stage; their columns are added to the output schema).
        The last stage's output is the ``data`` rows anyway."""
        return Pipeline(_links=self.chain.links, _emit=tuple(dict.fromkeys(self.chain.emit + stage_names)),
                        _upstreams=self.upstreams)

    def then(self, stage: StageLogic | Pipeline, fuse: bool | str | None = None) -> Pipeline:
        """This pipeline followed by ``stage`` (or by every stage of a pipeline). A multi-input
        stage after it reads this pipeline's output on every input (each takes its rows by its
        ``select``/``where``). ``fuse``: None (the fusion rule decides), True, False or
        ``"partial"`` (module docstring)."""
        links, emit = [Link(lk.stage, lk.fuse) for lk in self.chain.links], self.chain.emit
        if isinstance(stage, Pipeline):
            ups = stage.upstreams
            if ups is not None and any(u is not None for u in ups.values()):
                raise InvalidArgumentError(f"then: {stage!r} starts with a multi-input stage whose inputs have upstreams; "
                                           "name this pipeline as one of them: Pipeline.join(stage, <input>=this, ...)")
            if ups is not None:
                head = Pipeline.join(stage.stages[0], **{n: self for n in ups})
                return Pipeline(_links=head.chain.links + stage.chain.links[1:], _emit=stage.chain.emit,
                                _upstreams=head.upstreams)
            return Pipeline(_links=links + list(stage.chain.links), _emit=emit + stage.chain.emit,
                            _upstreams=self.upstreams)
        if fuse not in (None, True, False, PARTIAL):
            raise InvalidArgumentError(f"fuse must be None, True, False or {PARTIAL!r}, got {fuse!r}")
        if isinstance(stage, StageLogic) and stage.stage_inputs():
            return Pipeline.join(stage, **{i.name: self for i in stage.stage_inputs()})
        return Pipeline(_links=links + [Link(stage, fuse)], _emit=emit, _upstreams=self.upstreams)

    __rshift__ = then

    def __repr__(self) -> str:
        chain = " >> ".join(f"{type(s).__name__}({s.name})" for s in self.stages)
        ups = self.upstreams
        if ups is None:
            return chain
        return "join(" + ", ".join(f"{n}={u!r}" if u is not None else f"{n}=<source>" for n, u in ups.items()) + \
            f") >> {chain}"

    # -- planning ---------------------------------------------------------------------------------
    def plan(self, fuse: bool = True, rates: Sequence[float] | None = None) -> list[tuple[StageLogic, ...]]:
        """The operators: groups of consecutive stages run fused (``fuse=False``: one per stage), as
        :func:`~keygroups.fusion.plan_chain` decides them (module docstring; Enorm Algorithm 1).
        With upstreams (:meth:`join`): theirs first (each pipeline once), then this chain's; a
        multi-input stage always starts an operator.

        ``rates``: the rate of each link ``stage i -> stage i+1`` of this chain (e.g. rows per
        batch measured on a trial run; numbers > 0), default 1 each: the highest-rate link fuses first.
        """
        return [op for node in self.nodes()[:-1] for op in node.chain.operators(fuse)] + \
            self.chain.operators(fuse, rates)

    def specs(self, fuse: bool = True, idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """One :class:`~keygroups.operator.OperatorSpec` per operator of this chain (:meth:`plan`
        without the upstreams'; :func:`keygroups.dag.dag_specs` gives every pipeline's)."""
        if self.upstreams is not None:
            return dag_specs(self, fuse, idle_timeout_ms, None)[id(self)]
        return self.chain.specs(fuse, idle_timeout_ms)

    def bound_specs(self, source_types: dict[str, str], fuse: bool = True,
                    idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """:meth:`specs` with every stage bound to the types of its inputs (``Stage.bind``), as
        :meth:`apply` binds them on Spark: ``source_types`` are the first operator's input rows'
        types (``{column: DDL type}``; an input given as a SQL expression is looked up by its
        name; with several sources ``{source: {column: type}}``), later operators' come from the
        previous operator's output columns."""
        if self.upstreams is not None:
            return dag_specs(self, fuse, idle_timeout_ms, source_types)[id(self)]
        return self.chain.specs(fuse, idle_timeout_ms, dict(source_types))

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
    def apply(self, df, *, fuse: bool = True, idle_timeout_ms: int | None = None, pack_source: bool = True,
              metrics: bool | str = True):
        """The streaming DataFrame of the pipeline's output rows (contract + last stage's data).

        ``df``: rows of the contract, e.g. ``spark.readStream.format("dataflow-kafka")...load()``;
        with a multi-input stage whose inputs read different sources, ``{input name: DataFrame}``
        (an upstream pipeline reads the source of the input it feeds). Or the source's reader before
        ``load()`` (``spark.readStream.format("dataflow-kafka")...``): then, where it can
        (:meth:`~keygroups.source_packing.SourcePacking.of`, and ``pack_source``), the source's own tasks
        compute the first operator's inputs, route and pack its rows (option ``keyGroupPacking``):
        the same output with no JVM step per record before the shuffle; Spark's ``numInputRows``
        then counts the packed rows (the source's offsets in the progress count the records).
        ``idle_timeout_ms``: the first operator's idle-partition policy
        (:class:`~keygroups.punctuation.PunctuationTracker`). ``pack_source``: pack the first
        operator's input rows per task and key group into Arrow blobs before the shuffle
        (:mod:`keygroups.packed`; few shuffle rows per key group instead of one per record).
        ``metrics``: fold each stage's ``metrics`` rows into the query's progress
        (``observedMetrics["dataflow-kafka:<stage>"]``, :mod:`keygroups.metrics`); a string
        qualifies the names (``dataflow-kafka:<metrics>:<stage>``), which two pipelines with the
        same stage names in one query need (Spark refuses two observations of one name).
        """
        packing = None
        if _is_reader(df):
            df, packing = self._load(df, fuse, pack_source)
        if self.upstreams is not None:
            out = apply_dag(self, df, fuse=fuse, idle_timeout_ms=idle_timeout_ms, pack_source=pack_source)
        else:
            out = apply_chain(self.chain, df, fuse, idle_timeout_ms, pack_source, source_packing=packing)[0]
        if not metrics:
            return out
        return observe_stages(out, [str(s.name) for s in self.all_stages()], None if metrics is True else str(metrics))

    def _load(self, reader, fuse: bool, pack_source: bool):
        """``(the source's DataFrame, its SourcePacking or None)`` of a reader given to :meth:`apply`."""
        from dataflow_kafka.datasource.options import KEY_GROUP_PACKING
        from dataflow_kafka.keygroups.source_packing import SourcePacking

        packing = None
        if self.upstreams is None and pack_source:
            packing = SourcePacking.of(self.chain.operators(fuse)[0][0])
        if packing is None:
            return reader.load(), None
        df = reader.option(KEY_GROUP_PACKING, packing.option()).load()
        reader.option(KEY_GROUP_PACKING, "")        # the reader is the caller's: a later load() reads the rows again
        if tuple(df.columns) != tuple(n for n, _ in packing.fields):
            raise InvalidArgumentError(f"Pipeline.apply(reader): the reader gave columns {df.columns}, not the packed "
                                       f"rows of option {KEY_GROUP_PACKING!r}: give a reader of "
                                       "format('dataflow-kafka'), or its load()")
        return df, packing

    def state_operators(self, fuse: bool = True) -> list[tuple[str, ...]]:
        """The stage names of each stateful operator in the order Spark numbers them (its
        ``operatorId``, the order of ``stateOperators`` in a progress and of the state reader's
        operators): from the sink towards the source, for a chain the plan reversed. A pipeline
        with upstreams (:meth:`join`) is refused: Spark numbers its operators in its plan tree's
        order."""
        if self.upstreams is not None:
            raise InvalidArgumentError("state_operators: only a chain's operators have a known order; a pipeline "
                                       "with upstreams (Pipeline.join) has its plan tree's")
        return [tuple(str(s.name) for s in op) for op in reversed(self.chain.operators(fuse))]

    # -- without Spark ----------------------------------------------------------------------------
    def run_local(self, batches: Iterable[pd.DataFrame], *, fuse: bool = True,
                  idle_timeout_ms: int | None = None, input_types: dict[str, str] | None = None,
                  states: dict | None = None) -> list[pd.DataFrame]:
        """Run the pipeline on micro-batches without Spark; one output frame per batch.

        A batch is a frame of the row contract with epoch-ms columns (``event_time_ms``,
        ``punctuation_ms``, ``processing_time_ms``). When the first stage has column inputs, the
        frame must already hold those given as SQL expressions under their names
        (:meth:`~keygroups.stage.StageLogic.inputs`; SQL is Spark's to evaluate); plain columns are
        read and :class:`~keygroups.computed.Computed` inputs computed, in every operator. Stages
        are bound to their input types as on Spark (:meth:`bound_specs`): ``input_types``, or the
        dtypes of the first batch with data rows (int64 -> bigint, int32 -> int, float64 -> double,
        bool -> boolean, text -> string, bytes -> binary). Rows are routed with
        :func:`~keygroups.routing.key_groups_of` (the JVM's hash) and every key group runs
        :func:`~keygroups.operator.run_key_group`, its state kept as bytes between batches, as
        Spark keeps it. With a multi-input stage whose inputs read different sources, ``batches``
        is ``{input name: frames}`` (the same number of micro-batches each, as one query's).
        ``states``: a dict that receives each operator's key-group states after the last batch,
        ``{operator name: {key group: bytes}}`` (:func:`keygroups.state_view.local_state` shows them).
        """
        if self.upstreams is not None:
            return run_dag_local(self, batches, fuse=fuse, idle_timeout_ms=idle_timeout_ms,
                                 input_types=input_types, states=states)
        unbound = self.chain.specs(fuse, idle_timeout_ms)
        bound = None if input_types is None else self.chain.specs(fuse, idle_timeout_ms, dict(input_types))
        kept: list[dict[int, bytes]] = [{} for _ in unbound]
        outputs = []
        for batch in batches:
            if bound is None and (batch["kind"] == KIND_DATA).any():
                bound = self.chain.specs(fuse, idle_timeout_ms, frame_types(batch))
            outputs.append(run_chain_local(batch, bound or unbound, kept))
        if states is not None:
            states.update({spec.name: dict(k) for spec, k in zip(unbound, kept)})
        return outputs


class Stage(StageLogic):
    """The base class of every stage: the hooks of :class:`~keygroups.stage.StageLogic` (four
    abstract: :meth:`~StageLogic.routing`, :meth:`~StageLogic.output_columns`,
    :meth:`~StageLogic.new_state`, :meth:`~StageLogic.process`), composable into pipelines:
    ``stage_a.then(stage_b)`` or ``stage_a >> stage_b`` is ``Pipeline([stage_a, stage_b])``.
    Example: :class:`keygroups.examples.RunningCount`."""

    def then(self, other: StageLogic | Pipeline, fuse: bool | str | None = None) -> Pipeline:
        """A :class:`Pipeline` of this stage followed by ``other`` (a stage, or every stage of a pipeline)."""
        return Pipeline([self]).then(other, fuse=fuse)

    def __rshift__(self, other: StageLogic | Pipeline) -> Pipeline:
        return self.then(other)


def _join_upstreams(stage: StageLogic, upstreams: Mapping[str, Any]) -> dict[str, Pipeline | None]:
    """:meth:`Pipeline.join`'s upstreams of ``stage``'s inputs, checked, as pipelines (a stage as a
    one-stage pipeline), their stages renamed where names clash across them."""
    inputs = stage.stage_inputs() if isinstance(stage, StageLogic) else None
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
        if u is not None and not isinstance(u, (Pipeline, StageLogic)):
            raise ArgumentTypeError(f"Pipeline.join: input {n!r} = {u!r}: expected a Pipeline, a Stage or None (the source)")
        if isinstance(u, StageLogic):
            u = memo.setdefault(("stage", id(u)), Pipeline([u]))
        out[n] = None if u is None else _renamed(u, taken, memo)
    return out


def _renamed(p: Pipeline, taken: set, memo: dict) -> Pipeline:
    """``p`` with stages renamed where ``taken`` holds their names (copies; names added to
    ``taken``); an upstream met twice (fan-out) is renamed once (``memo``)."""
    if id(p) in memo:
        return memo[id(p)]
    ups = None if p.upstreams is None else {
        n: (_renamed(u, taken, memo) if u is not None else None)
        for n, u in p.upstreams.items()}
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
    same = all(a.stage is b.stage for a, b in zip(links, p.chain.links)) and ups == p.upstreams
    out = p if same else Pipeline(_links=links, _emit=emit, _upstreams=ups)
    memo[id(p)] = out
    return out


def stateful_operators(df) -> int:
    """Number of ``transformWithStateInPandas`` operators in ``df``'s logical plan."""
    plan = df._jdf.queryExecution().analyzed().toString()
    return len(re.findall(r"TransformWithStateIn(?:Pandas|PySpark)\b", plan))


def _is_reader(df) -> bool:
    """Whether ``df`` is a ``DataStreamReader`` (or ``DataFrameReader``) not loaded yet."""
    return callable(getattr(df, "load", None)) and callable(getattr(df, "option", None)) and not hasattr(df, "columns")
