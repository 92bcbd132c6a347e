"""A typed DAG on Spark: :func:`compile_dag` cuts it into :class:`~traces.stage.TraceStage` s of
one :class:`keygroups.Pipeline`; :func:`to_spark` applies it to ``format("dataflow-kafka")`` rows.

Compilation (linear DAGs: one source, one sink, every vertex one upstream):

- stateless vertices before the first keyed vertex run in the first stage's router (the ingest
  ``mapInPandas`` step: any split is a valid split for them, Theorem 4.3);
- the vertices from the first keyed one on are cut into stages by the fusion planner
  (:func:`keygroups.fusion.plan_fusion`, Enorm §4.4.1 Algorithm 1): a keyed vertex's partition
  attribute is its key, the previous keyed vertex's when everything since that one keeps the key
  (``OpKeyedOrdered``, or a template with ``preserves_key = True``), else a new one; a stateless
  vertex's is its input's key (it runs in the key groups of the vertex before it); edge rates are
  ``rates`` (default 1). So a keyed vertex runs in the previous stage, without a shuffle, exactly
  when the key is provably kept ("fuse while the partition attributes intersect"); with one key
  per vertex no two fusions conflict, so the rates do not change the stages of a linear DAG;
- every stage is HASH by its first vertex's key into ``num_key_groups`` key groups;
- SORT / the optimistic edge and MRG are fused into each stage (:mod:`traces.stage`).

The source's punctuations are the markers: block ``i`` closes when the low watermark over the
topic's partitions passes ``P*i``. An ``OpStateless`` whose ``on_marker`` emits cannot run on
Spark (it would run in several instances); :func:`compile_dag` refuses it.

Also pure helpers to compare a query's output with :meth:`traces.Dag.run_local`:
:func:`messages_from_frames` (micro-batches of source rows -> records and punctuations) and
:func:`canonical_rows` (output rows -> blocks in canonical form, like :func:`traces.canonical`).
"""

from __future__ import annotations

import math
import pickle
from typing import Any, Callable, Iterable, Mapping

from traces.dag import Dag, TraceTypeError, _content
from traces.stage import TraceStage, _Vertex, default_decode
from traces.templates import OpKeyedOrdered, OpStateless, make_emit
from traces.types import Event, Marker, Punctuation, Record

__all__ = ["compile_dag", "fusion_input", "to_spark", "messages_from_frames", "canonical_rows", "canonical_blocks",
           "events_of_rows"]


def _chain(dag: Dag) -> tuple[str, list[str], str]:
    srcs = dag.sources()
    sinks = [n for n, v in dag.vertices.items() if v.kind == "sink"]
    if len(srcs) != 1 or len(sinks) != 1:
        raise TraceTypeError(f"to_spark compiles linear DAGs: one source and one sink (got sources {srcs}, "
                             f"sinks {sinks}; fix: run_local/run_parallel run any DAG)")
    order = dag.check().order
    chain = [n for n in order if dag.vertices[n].kind == "op"]
    prev = srcs[0]
    for n in chain + sinks:
        if dag.vertices[n].upstreams != (prev,):
            raise TraceTypeError(f"to_spark compiles linear DAGs: vertex {n!r} has upstreams "
                                 f"{list(dag.vertices[n].upstreams)}, expected [{prev!r}]")
        prev = n
    return srcs[0], chain, sinks[0]


def _refuse_emitting_marker(name: str, op: OpStateless) -> None:
    out: list = []
    op.on_marker(Marker(1, 0), make_emit(out, name, 0, ()))
    if out:
        raise TraceTypeError(f"vertex {name!r}: OpStateless.on_marker emits, and on Spark a stateless vertex "
                             "runs in every task or key group (fix: emit from a keyed template's on_marker)")


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
    """What :func:`compile_dag` asks the fusion planner (module docstring): the stateless vertices
    before the first keyed one (they run in the router), ``{vertex: partition attributes}`` of
    the others in chain order, and ``{(upstream, vertex): rate}`` of the edges between those."""
    src, chain, _ = _chain(dag)
    rates = _edge_rates(dag, rates)
    prefix: list[str] = []
    attributes: dict[str, frozenset[str]] = {}
    key, keeps = 0, False
    for n in chain:
        op = dag.vertices[n].op
        if isinstance(op, OpStateless):
            if not attributes:
                prefix.append(n)
                continue
            keeps = keeps and _keeps_key(op)
        else:
            if not keeps:
                key += 1
            keeps = _keeps_key(op)
        attributes[n] = frozenset({f"key{key}"})
    names = list(attributes)
    return prefix, attributes, {(a, b): rates.get((a, b), 1.0) for a, b in zip(names, names[1:])}


def compile_dag(dag: Dag, *, num_key_groups: int = 2, decode: Callable | None = None,
                rates: Mapping[tuple[str, str], float] | None = None):
    """The :class:`keygroups.Pipeline` of ``dag`` (see the module docstring). ``rates``:
    ``{(upstream, vertex): rate}`` of the DAG's edges for the fusion planner (default 1 each)."""
    from keygroups import Pipeline
    from keygroups.fusion import plan_fusion

    plan = dag.check()
    src, chain, _ = _chain(dag)
    period = dag.vertices[src].period_ms
    for n in chain:
        if isinstance(dag.vertices[n].op, OpStateless):
            _refuse_emitting_marker(n, dag.vertices[n].op)
    vx = {n: _Vertex(n, dag.vertices[n].op, plan.glue[n]) for n in chain}
    prefix_names, attributes, edges = fusion_input(dag, rates)
    if not attributes:
        raise TraceTypeError("to_spark needs at least one keyed vertex (OpKeyedOrdered or OpKeyedUnordered) to "
                             "key the stream by (fix: run a stateless DAG with run_local, or add one)")
    prefix = [vx[n] for n in prefix_names]
    segments = [[vx[n] for n in c.operators] for c in plan_fusion(attributes, edges)]
    for seg in segments:
        if isinstance(seg[0].op, OpStateless):        # cannot happen: it shares its input's key, rate > 0
            raise TraceTypeError(f"vertex {seg[0].name!r}: the fusion planner left a stateless vertex at the "
                                 "head of a stage")
    stages = [TraceStage(vertices=tuple(seg), period_ms=period, num_key_groups=num_key_groups, name=seg[0].name,
                         prefix=tuple(prefix) if i == 0 else (), decode=(decode or default_decode) if i == 0 else None)
              for i, seg in enumerate(segments)]
    return Pipeline(stages)


def to_spark(dag: Dag, df, *, num_key_groups: int = 2, decode: Callable | None = None,
             rates: Mapping[tuple[str, str], float] | None = None, **apply_options):
    """The streaming DataFrame of ``dag`` run on ``df`` (``format("dataflow-kafka")`` rows): the
    stage layer's rows; data rows carry ``tev``, ``tblock``, ``key_text``, ``value_text``."""
    return compile_dag(dag, num_key_groups=num_key_groups, decode=decode, rates=rates).apply(df, **apply_options)


# -- comparing with run_local ---------------------------------------------------------------------
def messages_from_frames(frames: Iterable, decode: Callable | None = None) -> list:
    """Source micro-batches (frames of the row contract) as the records and punctuations
    :meth:`traces.Dag.run_local` takes: per batch its data rows, then its punctuations."""
    decode = decode or default_decode
    msgs: list = []
    for f in frames:
        for r in f.to_dict("records"):
            if r["kind"] == "data":
                key, value = decode(r.get("key"), r["value"])
                msgs.append(Record(int(r["partition"]), int(r["offset"]), int(r["event_time_ms"]), key, value))
        for r in f.to_dict("records"):
            if r["kind"] == "punctuation" and r.get("punctuation_ms") is not None \
                    and r["punctuation_ms"] == r["punctuation_ms"]:
                msgs.append(Punctuation(int(r["partition"]), int(r["punctuation_ms"])))
    return msgs


def events_of_rows(rows: Iterable[dict]) -> list[tuple[int, Event]]:
    """``(block, event)`` of a query's data rows, in (batch, key group, offset) order when the rows
    carry ``batch`` (else as given)."""
    data = [r for r in rows if r["kind"] == "data"]
    if data and "batch" in data[0]:
        data.sort(key=lambda r: (r["batch"], r["partition"], r["offset"]))
    out = []
    for r in data:
        key, value, pos = pickle.loads(bytes(r["tev"]))
        out.append((int(r["tblock"]), Event(key, value, int(r["event_time_ms"]), tuple(pos))))
    return out


def canonical_rows(rows: Iterable[dict], ordered: bool) -> dict[int, Any]:
    """A query's data rows as ``{block: canonical content}`` (non-empty blocks)."""
    by_block: dict[int, list] = {}
    for b, e in events_of_rows(rows):
        by_block.setdefault(b, []).append(e)
    return {b: _content(es, ordered) for b, es in sorted(by_block.items())}


def canonical_blocks(stream: list, ordered: bool) -> dict[int, Any]:
    """A run's stream (:attr:`traces.Result.outputs`) as ``{block: canonical content}`` (non-empty
    blocks; the open block after the last marker is that marker's index + 1)."""
    by_block: dict[int, list] = {}
    cur: list = []
    last = None
    for m in stream:
        if isinstance(m, Marker):
            if cur:
                by_block[m.index] = cur
            cur, last = [], m.index
        else:
            cur.append(m)
    if cur:
        by_block[(last or 0) + 1] = cur
    return {b: _content(es, ordered) for b, es in sorted(by_block.items())}
