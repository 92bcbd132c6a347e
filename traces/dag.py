"""Typed transduction DAGs: builder, type checker, sequential reference and parallel executor.

The paper's ``dag.addOp(op, par, upstreams...)`` (data-trace types §5) in Python form::

    dag = Dag(ordering="sort")                        # or "optimistic"; per vertex too
    src = dag.source("hub", period_ms=10_000, partitions=2)
    jfm = dag.add_op(JoinFilterMap(), 2, src)         # OpStateless, 2 instances
    li = dag.add_op(LinearInterpolation(), 2, jfm)    # OpKeyedOrdered: U edge -> SORT inserted
    dag.sink("out", li)
    reference = dag.run_local(records)                # sequential (every vertex one instance)
    parallel = dag.run_parallel(records, seed=7)      # HASH / MRG / SORT, random interleavings
    assert parallel.canonical() == reference.canonical()

:meth:`Dag.check` runs before anything executes (every run calls it). Rules (§4):

- an ``O`` input fed by a ``U`` edge gets SORT (``ordering="sort"``) or the optimistic edge
  (``"optimistic"``, ``OpKeyedOrdered`` only); ``ordering="none"`` refuses it;
- an ``OpStateless`` declared with an ``O`` output keeps it only at ``par=1`` after an ``O`` edge;
  otherwise its merged output is ``U``;
- several inputs to one vertex need the same ``U`` type, or ``O`` types with disjoint keys
  (``disjoint_keys=True``); the sources they come from need the same ``period_ms`` (MRG aligns
  markers by index; sources whose first markers differ are aligned by :class:`~traces.glue.Merge`);
- key and value types of an edge must fit the input of the vertex; the graph is acyclic.

Errors (:class:`TraceTypeError`) name the vertex, the edge and the fix.

Equivalence (Corollary 4.4) is checked in canonical form (:meth:`Result.canonical`): per sink and
block, a multiset for a ``U`` sink, per key a sequence for an ``O`` sink.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from dataflow_kafka.traces.glue import Direct, Merge, Optimistic, Sorted, drive, hash_instance
from dataflow_kafka.traces.templates import (OpKeyedOrdered, OpKeyedUnordered, OpStateless, Template, runtime_for)
from dataflow_kafka.traces.types import Blocker, Event, Marker, Punctuation, Record, StreamType, TraceError, U
from dataflow_kafka.errors import TraceTypeError

__all__ = ["Dag", "Vertex", "Result", "canonical", "ORDERINGS"]

ORDERINGS = ("sort", "optimistic", "none")


@dataclass
class Vertex:
    name: str
    kind: str                        # "source", "op" or "sink"
    op: Template | None = None
    par: int = 1
    upstreams: tuple[str, ...] = ()
    ordering: str | None = None      # None: the DAG's default
    disjoint_keys: bool = False
    period_ms: int | None = None     # sources
    partitions: int | None = None    # sources
    type: StreamType | None = None   # sources: declared output type


@dataclass
class Plan:
    """What :meth:`Dag.check` derived: the type of every edge and the glue of every vertex."""

    edge_types: dict[tuple[str, str], StreamType]
    out_types: dict[str, StreamType]
    glue: dict[str, str]             # vertex -> "direct", "sort" or "optimistic"
    order: list[str]                 # topological order


class Dag:
    """A transduction DAG (§4); see the module docstring."""

    def __init__(self, ordering: str = "sort") -> None:
        _check_ordering("Dag", ordering)
        self.ordering = ordering
        self.vertices: dict[str, Vertex] = {}

    # -- building ---------------------------------------------------------------------------------
    def _add(self, v: Vertex) -> str:
        if v.name in self.vertices:
            raise TraceTypeError(f"vertex {v.name!r} already exists (fix: give it another name)")
        for u in v.upstreams:
            if u not in self.vertices:
                raise TraceTypeError(f"vertex {v.name!r}: upstream {u!r} does not exist (fix: add it first; "
                                     "adding upstreams first keeps the graph acyclic)")
            if self.vertices[u].kind == "sink":
                raise TraceTypeError(f"vertex {v.name!r}: upstream {u!r} is a sink (fix: connect to its upstream)")
        self.vertices[v.name] = v
        return v.name

    def source(self, name: str, period_ms: int, partitions: int | None = None, type: StreamType = U()) -> str:
        """A source of :class:`~traces.types.Record` s and :class:`~traces.types.Punctuation` s,
        blocked with marker period ``period_ms`` (:class:`~traces.types.Blocker`)."""
        if not isinstance(period_ms, int) or period_ms <= 0:
            raise TraceTypeError(f"source {name!r}: period_ms must be a positive int, got {period_ms!r}")
        return self._add(Vertex(name, "source", period_ms=period_ms, partitions=partitions, type=type))

    def add_op(self, op: Template, par: int = 1, *upstreams: str, name: str | None = None,
               ordering: str | None = None, disjoint_keys: bool = False) -> str:
        """Add ``op`` with ``par`` instances after ``upstreams``; returns the vertex name."""
        if not isinstance(op, (OpStateless, OpKeyedOrdered, OpKeyedUnordered)):
            raise TraceTypeError(f"add_op: {op!r} is not a template (subclass OpStateless, OpKeyedOrdered "
                                 "or OpKeyedUnordered)")
        name = name or op.name or _default_name(type(op).__name__, self.vertices)
        if not isinstance(par, int) or par < 1:
            raise TraceTypeError(f"vertex {name!r}: par must be an int >= 1, got {par!r}")
        if not upstreams:
            raise TraceTypeError(f"vertex {name!r}: needs at least one upstream (a source or an op)")
        if ordering is not None:
            _check_ordering(f"vertex {name!r}", ordering)
        names = [_name(u) for u in upstreams]
        if len(set(names)) != len(names):
            raise TraceTypeError(f"vertex {name!r}: upstreams {names} name one vertex twice (fix: list it once)")
        return self._add(Vertex(name, "op", op, par, tuple(_name(u) for u in upstreams), ordering, disjoint_keys))

    def sink(self, name: str, upstream: str) -> str:
        """A sink reading ``upstream``'s output."""
        return self._add(Vertex(name, "sink", upstreams=(_name(upstream),)))

    # -- checking ---------------------------------------------------------------------------------
    def check(self) -> Plan:
        """Type-check the DAG (see the module docstring); returns the derived :class:`Plan`."""
        order = self._topological()
        out_types: dict[str, StreamType] = {}
        edge_types: dict[tuple[str, str], StreamType] = {}
        glue: dict[str, str] = {}
        periods: dict[str, dict[str, int]] = {}          # vertex -> {upstream source: its period_ms}
        for name in order:
            v = self.vertices[name]
            if v.kind == "source":
                if v.upstreams:
                    raise TraceTypeError(f"source {name!r} cannot have upstreams")
                out_types[name] = v.type or U()
                periods[name] = {name: v.period_ms}
                continue
            periods[name] = {s: p for u in v.upstreams for s, p in periods[u].items()}
            if len(set(periods[name].values())) > 1:
                raise TraceTypeError(f"vertex {name!r}: its inputs come from sources with different periods "
                                     f"{periods[name]} (ms); MRG aligns markers by index, so every input needs "
                                     "the same marker timestamps (fix: give these sources the same period_ms)")
            ins = [(u, out_types[u]) for u in v.upstreams]
            for u, t in ins:
                edge_types[(u, name)] = t
            if v.kind == "sink":
                if len(ins) != 1:
                    raise TraceTypeError(f"sink {name!r}: needs exactly one upstream, got {list(v.upstreams)}")
                out_types[name] = ins[0][1]
                continue
            edge = _merged_type(v, ins)
            op = v.op
            if not op.input.accepts(edge):
                u = ins[0][0]
                raise TraceTypeError(f"vertex {name!r}: edge {u!r}->{name!r} carries {edge!r} but "
                                     f"{type(op).__name__} takes {op.input!r} (fix: make the upstream's output "
                                     "type match, or adapt it with an OpStateless)")
            if op.input.ordered and not edge.ordered:
                strategy = v.ordering or self.ordering
                edges = ", ".join(f"{u!r}->{name!r}" for u, _ in ins)
                if strategy == "none":
                    raise TraceTypeError(f"vertex {name!r}: {type(op).__name__} needs {op.input!r} but edge {edges} "
                                         f"is {edge!r} (unordered) and ordering='none' (fix: ordering='sort' to "
                                         "insert SORT, or 'optimistic', on this vertex or the Dag)")
                if strategy == "optimistic" and not isinstance(op, OpKeyedOrdered):
                    raise TraceTypeError(f"vertex {name!r}: the optimistic edge {edges} needs an OpKeyedOrdered "
                                         f"after it, got {type(op).__name__} (fix: ordering='sort')")
                glue[name] = strategy
            else:
                glue[name] = "direct"
            out = op.output
            if isinstance(op, OpStateless) and out.ordered and (v.par > 1 or not edge.ordered):
                out = out.unordered()       # the merge of parallel instances loses the order
            out_types[name] = out
        return Plan(edge_types, out_types, glue, order)

    def _topological(self) -> list[str]:
        indeg = {n: 0 for n in self.vertices}
        children: dict[str, list[str]] = {n: [] for n in self.vertices}
        for v in self.vertices.values():
            for u in v.upstreams:
                indeg[v.name] += 1
                children[u].append(v.name)
        ready = [n for n, d in indeg.items() if d == 0]
        order = []
        while ready:
            n = ready.pop(0)
            order.append(n)
            for c in children[n]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
        if len(order) != len(self.vertices):
            cyc = sorted(n for n, d in indeg.items() if d > 0)
            raise TraceTypeError(f"the graph has a cycle through {cyc} (fix: transduction DAGs are acyclic)")
        for n, v in self.vertices.items():
            if v.kind == "op" and not children[n]:
                raise TraceTypeError(f"vertex {n!r} has no downstream (fix: connect it to a sink or an op)")
        return order

    def sources(self) -> list[str]:
        return [n for n, v in self.vertices.items() if v.kind == "source"]

    # -- running ----------------------------------------------------------------------------------
    def run_local(self, inputs: Iterable | dict[str, Iterable]) -> "Result":
        """The sequential reference: one instance per vertex, SORT for every ordered input,
        several inputs merged by MRG after each other."""
        plan = self.check()
        inputs = self._inputs(inputs)
        streams: dict[str, list] = {}
        late: dict[str, list] = {}
        for name in plan.order:
            v = self.vertices[name]
            if v.kind == "source":
                blocker = Blocker(v.period_ms, v.partitions)
                out = []
                for msg in inputs.get(name, []):
                    out.extend(blocker.push(msg))
                streams[name], late[name] = out, blocker.late
                continue
            merge = Merge(len(v.upstreams))
            merged = []
            for c, u in enumerate(v.upstreams):
                for msg in streams[u]:
                    merged.extend(merge.push(c, _tag(msg, c, len(v.upstreams))))
            if v.kind == "sink":
                streams[name] = merged
                continue
            rt = runtime_for(v.op, name)
            proc = Sorted(rt) if plan.glue[name] != "direct" else Direct(rt)
            streams[name] = drive(proc, merged)
        return Result({n: streams[n] for n in plan.order if self.vertices[n].kind == "sink"}, late,
                      {n: plan.out_types[n] for n in plan.order if self.vertices[n].kind == "sink"})

    def run_parallel(self, inputs: Iterable | dict[str, Iterable], seed: int = 0,
                     par: dict[str, int] | None = None) -> "Result":
        """The parallel deployment: ``par`` instances per vertex (overrides by name), HASH by key
        into keyed vertices and a random split into stateless ones, MRG at every instance, SORT or
        the optimistic edge per the plan, and one random interleaving of all channels (``seed``)."""
        plan = self.check()
        rng = random.Random(seed)
        pars = {n: (par or {}).get(n, v.par) if v.kind == "op" else 1 for n, v in self.vertices.items()}
        inputs = self._inputs(inputs)
        children: dict[str, list[str]] = {n: [] for n in self.vertices}
        for v in self.vertices.values():
            for u in v.upstreams:
                children[u].append(v.name)
        # channel index at each receiver instance: upstream vertex -> offset of its instances
        offsets = {n: {} for n in self.vertices}
        for v in self.vertices.values():
            k = 0
            for u in v.upstreams:
                offsets[v.name][u] = k
                k += pars[u]
        merges = {n: [Merge(sum(pars[u] for u in v.upstreams)) for _ in range(pars[n])]
                  for n, v in self.vertices.items() if v.kind != "source"}
        procs = {}
        for n, v in self.vertices.items():
            if v.kind != "op":
                continue
            insts = []
            for _ in range(pars[n]):
                g = plan.glue[n]
                if g == "optimistic":
                    insts.append(Optimistic(v.op, n))
                else:
                    rt = runtime_for(v.op, n, parallel=pars[n] > 1)
                    insts.append(Sorted(rt) if g == "sort" else Direct(rt))
            procs[n] = insts
        channels: dict[tuple, deque] = {}
        sinks: dict[str, list] = {n: [] for n, v in self.vertices.items() if v.kind == "sink"}

        def send(u: str, i: int, messages: list) -> None:
            for c in children[u]:
                keyed = self.vertices[c].kind == "op" and not isinstance(self.vertices[c].op, OpStateless)
                for msg in messages:
                    if isinstance(msg, Marker):
                        targets = range(pars[c])
                    elif keyed:
                        targets = [hash_instance(msg.key, pars[c])]
                    else:
                        targets = [rng.randrange(pars[c])]
                    for j in targets:
                        channels.setdefault((u, i, c, j), deque()).append(msg)

        def deliver(key: tuple) -> None:
            u, i, c, j = key
            ups = self.vertices[c].upstreams
            msg = _tag(channels[key].popleft(), ups.index(u), len(ups))
            for m in merges[c][j].push(offsets[c][u] + i, msg):
                if self.vertices[c].kind == "sink":
                    sinks[c].append(m)
                else:
                    send(c, j, drive(procs[c][j], [m]))

        blockers = {n: Blocker(self.vertices[n].period_ms, self.vertices[n].partitions) for n in self.sources()}
        feeds = {n: deque(inputs.get(n, [])) for n in blockers}
        while True:
            busy = [k for k, q in channels.items() if q]
            fed = [n for n, q in feeds.items() if q]
            if not busy and not fed:
                break
            if fed and (not busy or rng.random() < 0.3):
                n = rng.choice(fed)
                send(n, 0, blockers[n].push(feeds[n].popleft()))
            else:
                deliver(rng.choice(busy))
        return Result(sinks, {n: b.late for n, b in blockers.items()},
                      {n: plan.out_types[n] for n in sinks})


    def _inputs(self, inputs) -> dict[str, list]:
        srcs = self.sources()
        if isinstance(inputs, dict):
            unknown = set(inputs) - set(srcs)
            if unknown:
                raise TraceError(f"inputs for unknown sources {sorted(unknown)} (sources: {srcs})")
            return {k: list(v) for k, v in inputs.items()}
        if len(srcs) != 1:
            raise TraceError(f"the DAG has sources {srcs}: pass inputs as {{source: messages}}")
        msgs = list(inputs)
        for m in msgs:
            if not isinstance(m, (Record, Punctuation)):
                raise TraceError(f"source {srcs[0]!r}: input {m!r} is neither a Record nor a Punctuation")
        return {srcs[0]: msgs}


def _tag(msg: Any, edge: int, edges: int) -> Any:
    """An item entering a vertex of several inputs gets its input edge's index appended to its
    position: one item's outputs on two branches stay distinct in SORT's total order."""
    if edges == 1 or isinstance(msg, Marker):
        return msg
    return msg._replace(pos=msg.pos + (edge,))


def _merged_type(v: Vertex, ins: list[tuple[str, StreamType]]) -> StreamType:
    if len(ins) == 1:
        return ins[0][1]
    types = {t for _, t in ins}
    if all(not t.ordered for t in types):
        if len(types) != 1:
            raise TraceTypeError(f"vertex {v.name!r}: inputs {[f'{u}: {t!r}' for u, t in ins]} have different "
                                 "U types; MRG needs the same U(K, V) on every input (fix: map them to one type)")
        return ins[0][1]
    if all(t.ordered for t in types):
        if not v.disjoint_keys:
            raise TraceTypeError(f"vertex {v.name!r}: merging O inputs {[u for u, _ in ins]} keeps the order only "
                                 "if their key sets are disjoint (fix: add_op(..., disjoint_keys=True) if they "
                                 "are, or make the op take U)")
        return StreamType(True, None, None) if len(types) > 1 else ins[0][1]
    raise TraceTypeError(f"vertex {v.name!r}: inputs mix U and O edges {[f'{u}: {t!r}' for u, t in ins]} "
                         "(fix: merge U with U, or O with O of disjoint keys)")


def _check_ordering(where: str, ordering: str) -> None:
    if ordering not in ORDERINGS:
        raise TraceTypeError(f"{where}: ordering must be one of {ORDERINGS}, got {ordering!r}")


def _name(v: Any) -> str:
    return v.name if isinstance(v, Vertex) else v


def _default_name(cls: str, taken: dict) -> str:
    base, k = cls.lower(), 2
    name = base
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


@dataclass
class Result:
    """Outputs of a run: per sink its stream (events and markers), per source its late records."""

    outputs: dict[str, list]
    late: dict[str, list]
    types: dict[str, StreamType] = field(default_factory=dict)

    def canonical(self) -> dict[str, list]:
        return {n: canonical(s, self.types[n].ordered) for n, s in self.outputs.items()}

    def events(self, sink: str | None = None) -> list[Event]:
        name = sink or next(iter(self.outputs))
        return [m for m in self.outputs[name] if isinstance(m, Event)]


def canonical(stream: list, ordered: bool) -> list:
    """Blocks of ``stream`` in canonical form: ``(marker, content)`` with content a sorted
    multiset of ``(key, value, ts)`` (``U``) or per key the sequence of ``(value, ts)`` (``O``);
    the trailing block after the last marker has marker ``None``."""
    blocks, cur = [], []
    for m in stream:
        if isinstance(m, Marker):
            blocks.append((tuple(m), block_content(cur, ordered)))
            cur = []
        else:
            cur.append(m)
    blocks.append((None, block_content(cur, ordered)))
    return blocks


def block_content(events: list[Event], ordered: bool):
    if not ordered:
        return sorted(Counter((repr(e.key), repr(e.value), e.ts) for e in events).items())
    per_key: dict[str, list] = {}
    for e in events:
        per_key.setdefault(repr(e.key), []).append((repr(e.value), e.ts))
    return sorted(per_key.items())
