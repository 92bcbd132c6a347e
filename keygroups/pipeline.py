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
- a stage routed in Python fuses when its router's ``fusable_after(previous)`` says its key is the
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

import re
from typing import Any, Iterable, Sequence

import pandas as pd

from dataflow_kafka.keygroups import fan_in
from dataflow_kafka.keygroups.contract import KIND_DATA
from dataflow_kafka.keygroups.frames import run_chain_local
from dataflow_kafka.keygroups.metrics import observe_stages
from dataflow_kafka.keygroups.operator import OperatorSpec
from dataflow_kafka.keygroups.plan import (
    Chain, Link, configured_links, distinct_upstreams, frame_types, named_links,
)
from dataflow_kafka.keygroups.spark_steps import apply_chain
from dataflow_kafka.keygroups.stage import Stage, check_routing, register_pipeline
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["Pipeline", "stateful_operators"]


class Pipeline:
    """A chain of stages, the first of which may take several inputs (:meth:`join`); see the
    module docstring."""

    def __init__(self, stages: Sequence[Stage] = (), *, _links: Sequence[Link] | None = None,
                 _emit: Sequence[str] = (), _upstreams: "dict[str, Pipeline | None] | None" = None) -> None:
        links = list(_links) if _links is not None else [Link(s, None) for s in stages]
        for link in links:
            if not isinstance(link.stage, Stage):
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
        self._chain = Chain(tuple(configured_links(links)), tuple(_emit))
        self._upstreams = _upstreams
        names = [lk.stage.name for lk in self._chain.links]
        unknown = [n for n in _emit if n not in names]
        if unknown:
            raise InvalidArgumentError(f"emit: no stage named {unknown[0]!r} in this pipeline (stages: {names}; emit an "
                             "upstream stage on its own pipeline, before Pipeline.join)")

    @property
    def chain(self) -> Chain:
        """This pipeline's own chain (after its multi-input stage's upstreams): links and emitted stages."""
        return self._chain

    @property
    def _links(self) -> tuple[Link, ...]:
        return self._chain.links

    @property
    def _emit(self) -> tuple[str, ...]:
        return self._chain.emit

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
        return cls([stage], _upstreams=fan_in.join_upstreams(cls, stage, upstreams))

    def emit(self, *stage_names: str) -> "Pipeline":
        """This pipeline with the output of the named earlier stages kept in its output, as rows of
        kind ``result`` (``topic`` = the stage; their columns are added to the output schema).
        The last stage's output is the ``data`` rows anyway."""
        return Pipeline(_links=self._links, _emit=tuple(dict.fromkeys(self._emit + stage_names)),
                        _upstreams=self._upstreams)

    @property
    def stages(self) -> list[Stage]:
        """This pipeline's own chain (after its multi-input stage's upstreams, :attr:`upstreams`)."""
        return self._chain.stages

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
            for u in distinct_upstreams(p._upstreams):
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
            return Pipeline(_links=[Link(lk.stage, lk.fuse) for lk in self._links] + list(stage._links),
                            _emit=self._emit + stage._emit, _upstreams=self._upstreams)
        if fuse not in (None, True, False):
            raise InvalidArgumentError(f"fuse must be None, True or False, got {fuse!r}")
        if isinstance(stage, Stage) and stage.stage_inputs():
            return Pipeline.join(stage, **{i.name: self for i in stage.stage_inputs()})
        return Pipeline(_links=[Link(lk.stage, lk.fuse) for lk in self._links] + [Link(stage, fuse)],
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
        return [op for node in self.nodes()[:-1] for op in node.chain.operators(fuse)] + \
            self._chain.operators(fuse, rates)

    def specs(self, fuse: bool = True, idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """One :class:`~keygroups.operator.OperatorSpec` per operator of this chain (:meth:`plan`
        without the upstreams'; :func:`keygroups.fan_in.dag_specs` gives every pipeline's)."""
        if self._upstreams is not None:
            return fan_in.dag_specs(self, fuse, idle_timeout_ms, None)[id(self)]
        return self._chain.specs(fuse, idle_timeout_ms)

    def bound_specs(self, source_types: dict[str, str], fuse: bool = True,
                    idle_timeout_ms: int | None = None) -> list[OperatorSpec]:
        """:meth:`specs` with every stage bound to the types of its inputs (``Stage.bind``), as
        :meth:`apply` binds them on Spark: ``source_types`` are the first operator's input rows'
        types (``{column: DDL type}``; an input given as a SQL expression is looked up by its
        name; with several sources ``{source: {column: type}}``), later operators' come from the
        previous operator's output columns."""
        if self._upstreams is not None:
            return fan_in.dag_specs(self, fuse, idle_timeout_ms, source_types)[id(self)]
        return self._chain.specs(fuse, idle_timeout_ms, dict(source_types))

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
              metrics: bool = True):
        """The streaming DataFrame of the pipeline's output rows (contract + last stage's data).

        ``df``: rows of the contract, e.g. ``spark.readStream.format("dataflow-kafka")...load()``;
        with a multi-input stage whose inputs read different sources, ``{input name: DataFrame}``
        (an upstream pipeline reads the source of the input it feeds).
        ``idle_timeout_ms``: the first operator's idle-partition policy
        (:class:`~keygroups.punctuation.PunctuationTracker`). ``pack_source``: pack the first
        operator's input rows per task and key group into Arrow blobs before the shuffle
        (:mod:`keygroups.packed`; few shuffle rows per key group instead of one per record).
        ``metrics``: fold each stage's ``metrics`` rows into the query's progress
        (``observedMetrics["dataflow-kafka:<stage>"]``, :mod:`keygroups.metrics`).
        """
        if self._upstreams is not None:
            out = fan_in.apply_dag(self, df, fuse=fuse, idle_timeout_ms=idle_timeout_ms, pack_source=pack_source)
        else:
            out = apply_chain(self._chain, df, fuse, idle_timeout_ms, pack_source)[0]
        return observe_stages(out, [str(s.name) for s in self.all_stages()]) if metrics else out

    def state_operators(self, fuse: bool = True) -> list[tuple[str, ...]]:
        """The stage names of each stateful operator in the order Spark numbers them (its
        ``operatorId``, the order of ``stateOperators`` in a progress and of the state reader's
        operators): from the sink towards the source, for a chain the plan reversed. A pipeline
        with upstreams (:meth:`join`) is refused: Spark numbers its operators in its plan tree's
        order."""
        if self._upstreams is not None:
            raise InvalidArgumentError("state_operators: only a chain's operators have a known order; a pipeline "
                                       "with upstreams (Pipeline.join) has its plan tree's")
        return [tuple(str(s.name) for s in op) for op in reversed(self._chain.operators(fuse))]

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
            return fan_in.run_dag_local(self, batches, fuse=fuse, idle_timeout_ms=idle_timeout_ms, input_types=input_types)
        unbound = self._chain.specs(fuse, idle_timeout_ms)
        bound = None if input_types is None else self._chain.specs(fuse, idle_timeout_ms, dict(input_types))
        states: list[dict[int, bytes]] = [{} for _ in unbound]
        outputs = []
        for batch in batches:
            if bound is None and (batch["kind"] == KIND_DATA).any():
                bound = self._chain.specs(fuse, idle_timeout_ms, frame_types(batch))
            outputs.append(run_chain_local(batch, bound or unbound, states))
        return outputs


register_pipeline(Pipeline)           # Stage.then composes with Pipeline (stage.py imports no pipeline)


def stateful_operators(df) -> int:
    """Number of ``transformWithStateInPandas`` operators in ``df``'s logical plan."""
    plan = df._jdf.queryExecution().analyzed().toString()
    return len(re.findall(r"TransformWithStateIn(?:Pandas|PySpark)\b", plan))
