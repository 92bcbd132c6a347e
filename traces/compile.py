"""A typed DAG as stages of the stage layer: :func:`compile_dag` (no Spark needed to plan or to run
it locally; :meth:`CompiledDag.apply` builds the Spark query).

Compilation, for any DAG (fan-out, fan-in, several sources and sinks):

- the **prefix**: stateless vertices fed only by one source (directly or through other prefix
  vertices) run in the router of the stage reading that source (the ingest ``mapInPandas``
  step: any split is a valid split for them, Theorem 4.3);
- the other vertices are cut into stages by the fusion planner
  (:func:`keygroups.fusion.plan_fusion`, Enorm §4.4.1 Algorithm 1; :func:`fusion_input` shows
  what it is asked). A keyed vertex's partition attribute is its key: the key of the vertices
  before it when every input carries that same key (each input's key was set by one keyed
  vertex, and everything since keeps it: ``OpKeyedOrdered``, or a template with
  ``preserves_key = True``), else a new one; a stateless vertex may run wherever its inputs run
  (the union of their attributes). Edge rates are ``rates`` (default 1). So a keyed vertex runs
  in the stage of its inputs, without a shuffle, exactly when the key is provably kept (checked
  at run time per item); the planner keeps the stages a DAG, and they run in topological order
  as one :class:`keygroups.Pipeline` (an item for a later stage passes through the ones between);
- every stage is HASH by the key of each item into ``num_key_groups`` key groups;
- one source: the first stage reads it (blocks, late records). Several sources: each has a
  **head** stage of its own (its own punctuations make its blocks and late records, as its own
  :class:`~traces.types.Blocker` in ``run_local``), and the heads' outputs, unioned, feed the
  stages (MRG: a stage's low watermark is the minimum over every sender of every input; first
  markers aligned as :class:`traces.glue.Merge` does).

An ``OpStateless`` whose ``on_marker`` emits cannot run on Spark (it would run in several
instances): refused. The sources of one query need the same ``period_ms``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import conform
from dataflow_kafka.keygroups.fusion import plan_fusion
from dataflow_kafka.traces.dag import Dag, Plan, TraceTypeError
from dataflow_kafka.traces.stage import CompiledVertex, TraceStage, Topology, default_decode
from dataflow_kafka.traces.templates import OpKeyedOrdered, OpStateless, make_emit
from dataflow_kafka.traces.types import Marker

__all__ = ["compile_dag", "fusion_input", "CompiledDag"]


class CompiledDag:
    """A DAG compiled to the stage layer: per source a head pipeline (several sources only) and
    the pipeline of the stages. Has :class:`keygroups.Pipeline`'s ``plan``, ``apply`` and
    ``run_local``; with several sources ``apply`` and ``run_local`` take ``{source: input}``."""

    def __init__(self, heads: dict[str, Pipeline], pipeline: Pipeline, sources: list[str]) -> None:
        self.heads, self.pipeline, self.sources = heads, pipeline, sources

    def plan(self, fuse: bool = True) -> list[tuple]:
        """The operators: the heads' (one per source, several sources only), then the stages'."""
        return [op for s in self.heads for op in self.heads[s].plan(fuse)] + self.pipeline.plan(fuse)

    def _per_source(self, inputs: Any, what: str) -> dict:
        if not self.heads:
            if isinstance(inputs, Mapping):
                if set(inputs) != set(self.sources):
                    raise TraceTypeError(f"{what}: sources {sorted(inputs)} given, the DAG has {self.sources}")
                return {self.sources[0]: inputs[self.sources[0]]}
            return {self.sources[0]: inputs}
        if not isinstance(inputs, Mapping) or set(inputs) != set(self.sources):
            got = sorted(inputs) if isinstance(inputs, Mapping) else type(inputs).__name__
            raise TraceTypeError(f"{what}: the DAG has sources {self.sources}; pass {{source: input}} for each "
                                 f"(got {got})")
        return dict(inputs)

    def apply(self, df, **options):
        """The streaming DataFrame of the DAG's output rows: ``df`` is the source's
        ``format("dataflow-kafka")`` rows, or ``{source: rows}`` (one DataFrame per source)."""
        dfs = self._per_source(df, "apply")
        if not self.heads:
            return self.pipeline.apply(dfs[self.sources[0]], **options)
        outs = [self.heads[s].apply(dfs[s], **options) for s in self.sources]
        return self.pipeline.apply(functools.reduce(lambda a, b: a.unionByName(b), outs), **options)

    def run_local(self, batches, **options) -> list:
        """:meth:`keygroups.Pipeline.run_local` of the compiled DAG: ``batches`` are frames of the
        source's rows, or ``{source: frames}`` (the same number of micro-batches each)."""
        per = self._per_source(batches, "run_local")
        if not self.heads:
            return self.pipeline.run_local(per[self.sources[0]], **options)
        outs = {s: self.heads[s].run_local(list(per[s]), **options) for s in self.sources}
        counts = {s: len(o) for s, o in outs.items()}
        if len(set(counts.values())) != 1:
            raise TraceTypeError(f"run_local: every source needs the same number of micro-batches, got {counts}")
        columns = next(iter(self.heads.values())).output_columns()
        merged = [conform([outs[s][i] for s in self.sources], columns) for i in range(next(iter(counts.values())))]
        return self.pipeline.run_local(merged, **options)


def _prefix_owner(dag: Dag, plan: Plan) -> dict[str, str]:
    """Prefix vertices -> the source they run after (stateless, fed only by that source)."""
    owner: dict[str, str] = {}
    for n in plan.order:
        v = dag.vertices[n]
        if v.kind != "op" or not isinstance(v.op, OpStateless):
            continue
        feeds = {u if dag.vertices[u].kind == "source" else owner.get(u) for u in v.upstreams}
        if len(feeds) == 1 and None not in feeds:
            owner[n] = feeds.pop()
    return owner


def _keeps_key(op: Any) -> bool:
    return bool(getattr(op, "preserves_key", isinstance(op, OpKeyedOrdered)))


def _edge_rates(dag: Dag, rates: Mapping[tuple[str, str], float] | None) -> dict[tuple[str, str], float]:
    """``rates`` validated: keys are edges ``(upstream, vertex)`` of ``dag``, values finite numbers > 0."""
    out = {}
    for edge, r in (rates or {}).items():
        if not (isinstance(edge, tuple) and len(edge) == 2 and edge[1] in dag.vertices
                and edge[0] in dag.vertices[edge[1]].upstreams):
            raise TraceTypeError(f"rates: {edge!r} is not an edge (upstream, vertex) of the DAG")
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
            raise TraceTypeError(f"rates: edge {edge[0]!r}->{edge[1]!r} must have a finite rate > 0, got {r!r}")
        out[edge] = float(r)
    return out


def fusion_input(dag: Dag, rates: Mapping[tuple[str, str], float] | None = None):
    """What :func:`compile_dag` asks the fusion planner (module docstring): the prefix vertices
    (they run in routers), ``{vertex: partition attributes}`` of the others in topological order,
    and ``{(upstream, vertex): rate}`` of the edges between those."""
    plan = dag.check()
    rates = _edge_rates(dag, rates)
    owner = _prefix_owner(dag, plan)
    attributes: dict[str, frozenset[str]] = {}
    label: dict[str, str | None] = {}              # the key an op's output carries (None: not a kept key)
    count = 0
    for n in plan.order:
        v = dag.vertices[n]
        if v.kind != "op" or n in owner:
            continue
        keys = {label.get(u) for u in v.upstreams}
        kept = keys.pop() if len(keys) == 1 else None
        if isinstance(v.op, OpStateless):
            attributes[n] = frozenset().union(*(attributes[u] for u in v.upstreams if u in attributes))
            label[n] = kept if _keeps_key(v.op) else None
            continue
        if kept is None:
            count += 1
            kept = f"key{count}"
        attributes[n] = frozenset({kept})
        label[n] = kept if _keeps_key(v.op) else None
    edges = {(u, n): rates.get((u, n), 1.0) for n in attributes for u in dag.vertices[n].upstreams if u in attributes}
    return [n for n in plan.order if n in owner], attributes, edges


def _stages_in_order(attributes: dict, edges: dict) -> list[tuple[str, ...]]:
    """The planner's components, in a topological order (ties: the first vertex's order)."""
    comps = [c.operators for c in plan_fusion(attributes, edges)]
    index = {n: i for i, ops in enumerate(comps) for n in ops}
    succ: dict[int, set[int]] = {i: set() for i in range(len(comps))}
    indeg = [0] * len(comps)
    for u, v in edges:
        a, b = index[u], index[v]
        if a != b and b not in succ[a]:
            succ[a].add(b)
            indeg[b] += 1
    order, ready = [], sorted(i for i, d in enumerate(indeg) if d == 0)
    while ready:
        i = ready.pop(0)
        order.append(comps[i])
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready = sorted(ready + [j])
    return order


def _topology(dag: Dag, plan: Plan) -> Topology:
    edges, out_edges, sinks, upstream_sources = [], {n: [] for n in dag.vertices}, {}, {}
    for n in plan.order:
        v = dag.vertices[n]
        upstream_sources[n] = frozenset({n}) if v.kind == "source" else \
            frozenset().union(*(upstream_sources[u] for u in v.upstreams))
        for c, u in enumerate(v.upstreams):
            out_edges[u].append(len(edges))
            if v.kind == "sink":
                sinks[len(edges)] = n
            edges.append((u, n, c, len(v.upstreams)))
    return Topology(tuple(edges), {n: tuple(e) for n, e in out_edges.items()}, sinks, tuple(dag.sources()),
                    upstream_sources)


def _refuse_emitting_marker(name: str, op: OpStateless) -> None:
    out: list = []
    op.on_marker(Marker(1, 0), make_emit(out, name, 0, ()))
    if out:
        raise TraceTypeError(f"vertex {name!r}: OpStateless.on_marker emits, and on Spark a stateless vertex "
                             "runs in every task or key group (fix: emit from a keyed template's on_marker)")


def _unused_name(base: str, taken) -> str:
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def compile_dag(dag: Dag, *, num_key_groups: int = 2, decode: Callable | Mapping[str, Callable] | None = None,
                rates: Mapping[tuple[str, str], float] | None = None) -> CompiledDag:
    """The stages of ``dag`` (see the module docstring). ``decode``: ``(key bytes, value bytes) ->
    (key, value)`` of a source's records (default :func:`~traces.stage.default_decode`), or
    ``{source: decode}``; ``rates``: ``{(upstream, vertex): rate}`` for the fusion planner."""
    plan = dag.check()
    sources = dag.sources()
    periods = {s: dag.vertices[s].period_ms for s in sources}
    if len(set(periods.values())) > 1:
        raise TraceTypeError(f"to_spark: the sources have different periods {periods} (ms); one query closes "
                             "blocks of one period (fix: give every source the same period_ms)")
    for n, v in dag.vertices.items():
        if v.kind == "op" and isinstance(v.op, OpStateless):
            _refuse_emitting_marker(n, v.op)
    decoders = dict(decode) if isinstance(decode, Mapping) else {s: decode for s in sources}
    if set(decoders) != set(sources):
        raise TraceTypeError(f"decode: given for sources {sorted(decoders)}, the DAG has {sources}")
    topology, owner = _topology(dag, plan), _prefix_owner(dag, plan)
    vx = {n: CompiledVertex(n, v.op, plan.glue[n]) for n, v in dag.vertices.items() if v.kind == "op"}
    _, attributes, edges = fusion_input(dag, rates)
    period = periods[sources[0]]

    def stage(vertices, name, source=None, final=True) -> TraceStage:
        prefix = tuple(vx[n] for n in plan.order if owner.get(n) == source) if source else ()
        return TraceStage(vertices=tuple(vx[n] for n in vertices), period_ms=period, num_key_groups=num_key_groups,
                          name=name, prefix=prefix, decode=(decoders[source] or default_decode) if source else None,
                          topology=topology, source=source, final=final)

    segments = _stages_in_order(attributes, edges)
    one = sources[0] if len(sources) == 1 else None
    if not segments:
        segments = [()]
    names = [seg[0] if seg else _unused_name(one or "merge", dag.vertices) for seg in segments]
    stages = [stage(seg, name, one if i == 0 else None, i == len(segments) - 1)
              for i, (seg, name) in enumerate(zip(segments, names))]
    heads = {} if one else {s: Pipeline([stage((), s, s, final=False)]) for s in sources}
    return CompiledDag(heads, Pipeline(stages), sources)
