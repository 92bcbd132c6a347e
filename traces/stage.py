"""A part of a typed DAG as one stage of the stage layer (:class:`keygroups.Stage`), no Spark.

A :class:`TraceStage` runs, in every key group, the vertices the compiler gave it
(:mod:`traces.compile`): keyed vertices HASHed by their key (the stage layer's key groups are the
paper's instances), stateless vertices, and keyed vertices that keep the key (fused: no shuffle),
connected as in the DAG (fan-out: an output goes to every edge leaving its vertex; fan-in: a
vertex takes items from every edge into it). Items travel between stages addressed to an edge of
the DAG (``tedge``); an item for a vertex of a later stage, or for a sink, passes through.
Stateless vertices right after a source run in the router of the stage that reads the source
(per Spark task: any split). SORT and MRG are fused into the processor (§5: "we fuse MRG and
SORT with the operator that follows them"):

- blocks: the stage's input low watermark is the minimum over its senders' punctuations (Spark
  partitions, or the key groups of the stages before it: **every sender of every input**), and
  block ``i`` closes when it reaches ``P*i``; items travel with their block (``tblock``), so an
  item of block ``i+1`` that arrives before the block closes is held, and an item of a closed
  block is late (the stage reading a source: a ``dropped`` row, reason ``late``, and the ``late``
  metric), never merged;
- MRG's alignment (:class:`traces.glue.Merge`): the stage reading a source announces the
  source's first marker (a data row to every key group of the next stage, forwarded to the end);
  a stage closes no block before it knows the first marker of every source it waits for, and
  then closes blocks one by one from the smallest; a vertex takes marker ``i`` only from the
  smallest first marker of the sources upstream of it on;
- SORT (``ordering="sort"``) or the optimistic edge (``"optimistic"``) per vertex, as in
  :mod:`traces.glue`.

Rows between stages: ``tev`` (binary: the pickled ``(key, value, pos)``), ``tblock`` (bigint),
``tedge`` (bigint: the edge, ``-1`` for an announcement) and ``event_time_ms``; the last stage
keeps the items for sinks and adds ``key_text``, ``value_text`` (``repr``) and ``sink``. A
stage's output watermark is ``P * (last closed block)``, so the next stage closes the same blocks.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups import Dropped, PythonRouter, Stage, StageInput, StageOutput
from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.traces.glue import Direct, Optimistic, Sorted, hash_instance
from dataflow_kafka.traces.templates import (
    KeyedOrderedRuntime, KeyedUnorderedRuntime, OpStateless, Template, make_emit, runtime_for,
)
from dataflow_kafka.traces.types import Event, Marker, TraceError

__all__ = ["TraceStage", "Topology", "CompiledVertex", "default_decode", "SOURCE_COLUMNS", "OUTPUT_COLUMNS",
           "ANNOUNCE"]

SOURCE_COLUMNS = [("tev", "binary"), ("tblock", "bigint"), ("tedge", "bigint")]
OUTPUT_COLUMNS = SOURCE_COLUMNS + [("key_text", "string"), ("value_text", "string"), ("sink", "string")]
#: ``tedge`` of an announcement row: ``tev`` holds ``(source, first marker, ())``
ANNOUNCE = -1
_FROM = ["topic", "partition", "offset"]      # kept on routed rows: the order the next stage reads them in


def default_decode(key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
    """A Kafka record as ``(key, value)``: the key as UTF-8 text, the value as JSON."""
    binary = (bytes, bytearray, memoryview)
    return (bytes(key).decode() if isinstance(key, binary) else None,
            json.loads(bytes(value)) if isinstance(value, binary) else None)


@dataclass(frozen=True)
class CompiledVertex:
    """An operator vertex of the DAG as a :class:`TraceStage` runs it: its name, its template and
    the glue before it (``direct``, ``sort`` or ``optimistic``), as :mod:`traces.compile` chose it."""

    name: str
    op: Template
    glue: str                         # "direct", "sort" or "optimistic"


@dataclass(frozen=True, eq=False)
class Topology:
    """The DAG's shape, the same for every stage of one compiled DAG.

    ``edges[i] = (upstream, vertex, input index at vertex, inputs of vertex)``; ``out_edges``:
    per vertex the edges leaving it; ``sinks``: edge -> sink name for the edges into sinks;
    ``upstream_sources``: per vertex the sources it reads from (its first marker is the smallest
    of theirs)."""

    edges: tuple = ()
    out_edges: dict = field(default_factory=dict)
    sinks: dict = field(default_factory=dict)
    sources: tuple = ()
    upstream_sources: dict = field(default_factory=dict)


@dataclass(eq=False)
class TraceStage(Stage):
    """Vertices of one part of a DAG (see the module docstring); built by :func:`traces.compile.compile_dag`."""

    vertices: tuple = ()
    period_ms: int = 1000
    num_key_groups: int = 2
    name: str | None = None
    prefix: tuple = ()                # stateless vertices run in the router (the stage reading ``source``)
    decode: Callable | None = None    # the stage reading ``source``: record (key, value) bytes -> (key, value)
    topology: Topology = field(default_factory=Topology)
    source: str | None = None         # the source this stage reads (blocks, late records, its first marker)
    final: bool = True                # the last stage: only items for sinks leave it

    # -- input ------------------------------------------------------------------------------------
    def routing(self) -> PythonRouter:
        return PythonRouter(self._route, SOURCE_COLUMNS)

    def _route(self, data: Any) -> tuple[pd.DataFrame, np.ndarray]:
        """Source rows, rows of another compiled DAG's stage, or the previous stage's
        ``[(edge, event, block)]`` -> rows and their key groups (announcements to every one)."""
        if isinstance(data, pd.DataFrame) and "tev" not in data.columns:
            items, extra = list(self._from_source(data)), _FROM
        elif isinstance(data, pd.DataFrame):
            items, extra = list(_from_rows(data)), _FROM
        else:
            items, extra = [(edge, e, b, None) for edge, e, b in (data or [])], []
        n = self.num_key_groups
        groups = [hash_instance(e.key, n) if edge != ANNOUNCE else -1 for edge, e, _, _ in items]
        if ANNOUNCE in (edge for edge, _, _, _ in items):
            every = [(i, g) for i, g0 in enumerate(groups) for g in (range(n) if g0 < 0 else (g0,))]
            items = [items[i] for i, _ in every]
            groups = [g for _, g in every]
        frame = _frame([(edge, e, b) for edge, e, b, _ in items])
        for i, c in enumerate(extra):
            frame[c] = [src[i] for _, _, _, src in items]
        return frame, np.asarray(groups, dtype=np.int64)

    def _from_source(self, rows: pd.DataFrame):
        """``(edge, event, block, (topic, partition, offset))`` of source records, through the prefix."""
        decode = self.decode or default_decode
        keys = rows["key"].tolist() if "key" in rows.columns else [None] * len(rows)
        prefix = {v.name: v for v in self.prefix}
        topo, period = self.topology, self.period_ms
        for k, v, ts, topic, p, off in zip(keys, rows["value"].tolist(), rows["event_time_ms"].tolist(),
                                           rows["topic"].tolist(), rows["partition"].tolist(),
                                           rows["offset"].tolist()):
            try:
                key, value = decode(k, v)
            except Exception as exc:
                raise TraceError(f"source record {topic}-{p}@{off}: decode failed: {exc!r}") from exc
            out: list = []
            block, where = ts // period + 1, (topic, p, off)

            def send(vertex: str, e: Event) -> None:
                for edge in topo.out_edges[vertex]:
                    _, dest, c, n_in = topo.edges[edge]
                    if dest not in prefix:
                        out.append((edge, e, block, where))
                        continue
                    x = e._replace(pos=e.pos + (c,)) if n_in > 1 else e
                    nxt: list = []
                    prefix[dest].op.on_item(x.key, x.value, make_emit(nxt, dest, x.ts, x.pos))
                    for y in nxt:
                        send(dest, y)

            send(self.source, Event(key, value, ts, (p, off)))
            yield from out

    # -- output -----------------------------------------------------------------------------------
    def output_columns(self):
        return list(OUTPUT_COLUMNS)

    def output_frame(self, data: Any) -> pd.DataFrame:
        data = data or []
        sinks = self.topology.sinks
        if self.final:
            data = [d for d in data if d[0] in sinks]
        frame = _frame(data)
        if self.final:
            frame["key_text"] = [repr(e.key) for _, e, _ in data]
            frame["value_text"] = [repr(e.value) for _, e, _ in data]
            frame["sink"] = [sinks[edge] for edge, _, _ in data]
        return frame

    # -- state (the default codec) ----------------------------------------------------------------
    def new_state(self) -> dict:
        return {"closed": None, "pending": {}, "procs": None, "late": 0, "firsts": {}}

    def _procs(self, state: dict) -> dict:
        parallel = self.num_key_groups > 1
        procs = {}
        for v in self.vertices:
            if v.glue == "optimistic":
                procs[v.name] = Optimistic(v.op, v.name)
            else:
                rt = runtime_for(v.op, v.name, parallel=parallel)
                procs[v.name] = Sorted(rt) if v.glue == "sort" else Direct(rt)
        if state["procs"] is not None:
            for v, s in zip(self.vertices, state["procs"]):
                procs[v.name].set_state(s)
        return procs

    def describe_state(self, state: dict) -> list[dict]:
        """``block``: the last closed block (``start_ms``: its end, the output watermark), the
        first markers of the sources and the late items so far; ``held``: items of a block not yet
        open (``[start_ms, end_ms)`` the block's span), of a block a SORT holds, or waiting in an
        optimistic vertex's barrier; ``key_state``: a keyed vertex's state per key (and, for
        ``OpKeyedUnordered``, the block's aggregate so far); ``log``: an optimistic vertex's
        entries per key."""
        period, closed = self.period_ms, state["closed"]
        rows = [state_item("block", start_ms=None if closed is None else closed * period, closed_block=closed,
                           first_markers=state["firsts"] or None, late=state["late"] or None)]
        for block in sorted(state["pending"]):
            items = state["pending"][block]
            rows.append(state_item("held", start_ms=(block - 1) * period, end_ms=block * period, count=len(items),
                                   block=block))
        procs = self._procs(state) if state["procs"] is not None else {}
        for name, proc in procs.items():
            if isinstance(proc, Optimistic):
                for key in proc.keyed.keys():
                    entries = proc.keyed.log(key)
                    rows.append(state_item("log", key=key, count=len(entries), vertex=name,
                                           state=proc.keyed.last_state(key)))
                held = proc.barrier.held()
                if held:
                    times = [p.ts for _, p, _ in held if isinstance(p, Event)]
                    rows.append(state_item("held", start_ms=min(times, default=None),
                                           end_ms=max(times) + 1 if times else None, count=sum(n for _, _, n in held),
                                           vertex=name, buffer="barrier"))
                continue
            if isinstance(proc, Sorted) and proc.block:
                times = [e.ts for e in proc.block]
                rows.append(state_item("held", start_ms=min(times), end_ms=max(times) + 1, count=len(times),
                                       vertex=name, buffer="sort"))
            rt = proc.runtime
            if isinstance(rt, KeyedOrderedRuntime):
                rows += [state_item("key_state", key=k, vertex=name, state=v) for k, v in rt.states.items()]
            elif isinstance(rt, KeyedUnorderedRuntime):
                rows += [state_item("key_state", key=k, vertex=name, state=st, block_aggregate=agg)
                         for k, (agg, st) in rt.state_map.items()]
        return rows

    def _waits_for(self) -> tuple:
        """Sources whose first markers this stage needs before it closes a block."""
        return (self.source,) if self.source is not None else tuple(self.topology.sources)

    # -- processing -------------------------------------------------------------------------------
    def process(self, state: dict, batch: StageInput) -> StageOutput:
        run = _Run(self, state, self._procs(state), batch.key_group)
        late: dict[str, int] = {}
        data = batch.data
        if data is not None and len(data):
            for blob, block, edge, ts in zip(data["tev"].tolist(), data["tblock"].tolist(), data["tedge"].tolist(),
                                             data["event_time_ms"].tolist()):
                key, value, pos = pickle.loads(blob)
                edge, block = int(edge), int(block)
                if edge == ANNOUNCE:
                    run.announce(key, value)
                    continue
                e, closed = Event(key, value, int(ts), tuple(pos)), state["closed"]
                if closed is not None and block <= closed:
                    late[repr(key)] = late.get(repr(key), 0) + 1
                elif closed is not None and block == closed + 1:
                    run.deliver(edge, e)
                else:
                    state["pending"].setdefault(block, []).append((edge, e))
        wm = batch.watermark_ms
        if wm is not None:
            run.advance(wm // self.period_ms)
        state["procs"] = [run.procs[v.name].get_state() for v in self.vertices]
        state["late"] += sum(late.values())
        closed = state["closed"]
        metrics = {"late": state["late"], **{f"{v.name}.{k}": c for v in self.vertices
                                            for k, c in run.procs[v.name].counters.items()}}
        return StageOutput(run.out, None if closed is None else closed * self.period_ms,
                           [Dropped(k, "late", c) for k, c in sorted(late.items())], metrics)


class _Run:
    """One batch of one key group of a :class:`TraceStage`: delivery along edges, block closing."""

    def __init__(self, stage: TraceStage, state: dict, procs: dict, key_group: int) -> None:
        self.stage, self.state, self.procs, self.key_group = stage, state, procs, key_group
        self.topo = stage.topology
        self.keyed = {v.name for v in stage.vertices if not isinstance(v.op, OpStateless)}
        self.out: list[tuple[int, Event, int]] = []

    def announce(self, source: str, first: int) -> None:
        """A source's first marker; passed on once (the last stage keeps it)."""
        if source not in self.state["firsts"]:
            self.state["firsts"][source] = first
            self.out.append((ANNOUNCE, Event(source, first, 0, ()), first))

    def deliver(self, edge: int, e: Event, produced_here: bool = False) -> None:
        """``e`` along ``edge``: into a vertex of this stage, or out (a later stage, a sink)."""
        _, dest, c, n_in = self.topo.edges[edge]
        proc = self.procs.get(dest)
        if proc is None:
            self.out.append((edge, e, self.state["closed"] + 1))
            return
        n = self.stage.num_key_groups
        if produced_here and n > 1 and dest in self.keyed and hash_instance(e.key, n) != self.key_group:
            raise TraceError(f"vertex {dest!r} runs fused in key group {self.key_group} but got key {e.key!r} "
                             "of another key group: a vertex before it changed the key (fix: declare "
                             "preserves_key=False on that template)")
        for o in proc.item(e._replace(pos=e.pos + (c,)) if n_in > 1 else e):
            for oe in self.topo.out_edges[dest]:
                self.deliver(oe, o, True)

    def advance(self, target: int) -> None:
        """Close blocks up to ``target`` (the input low watermark's block), once every awaited
        source announced its first marker; the stage reading a source announces its own."""
        state, stage = self.state, self.stage
        if state["closed"] is None:
            if stage.source is not None:
                self.announce(stage.source, target)
            firsts = state["firsts"]
            if any(s not in firsts for s in stage._waits_for()):
                return
            state["closed"] = min(firsts[s] for s in stage._waits_for()) - 1
            first = state["closed"] + 1                       # the first block holds every block below it
            for b in sorted(b for b in state["pending"] if b <= first):
                for edge, e in state["pending"].pop(b):
                    self.deliver(edge, e)
        firsts = state["firsts"]
        while state["closed"] < target:
            k = state["closed"] + 1
            m = Marker(k, k * stage.period_ms)
            for v in stage.vertices:
                if k >= min(firsts[s] for s in self.topo.upstream_sources[v.name]):
                    for o in self.procs[v.name].marker(m):
                        for oe in self.topo.out_edges[v.name]:
                            self.deliver(oe, o, True)
            state["closed"] = k
            for edge, e in state["pending"].pop(k + 1, []):
                self.deliver(edge, e)


def _frame(data: list) -> pd.DataFrame:
    return pd.DataFrame({
        "tev": [pickle.dumps((e.key, e.value, e.pos), protocol=5) for _, e, _ in data],
        "tblock": np.asarray([b for _, _, b in data], dtype=np.int64),
        "tedge": np.asarray([edge for edge, _, _ in data], dtype=np.int64),
        "event_time_ms": np.asarray([e.ts for _, e, _ in data], dtype=np.int64)})


def _from_rows(rows: pd.DataFrame):
    """``(edge, event, block, (topic, partition, offset))`` of the rows another stage emitted."""
    for blob, block, edge, ts, topic, p, off in zip(rows["tev"].tolist(), rows["tblock"].tolist(),
                                                    rows["tedge"].tolist(), rows["event_time_ms"].tolist(),
                                                    rows["topic"].tolist(), rows["partition"].tolist(),
                                                    rows["offset"].tolist()):
        key, value, pos = pickle.loads(blob)
        yield int(edge), Event(key, value, int(ts), tuple(pos)), int(block), (topic, p, off)
