"""A segment of a typed DAG as one stage of the stage layer (:class:`keygroups.Stage`), no Spark.

A :class:`TraceStage` runs, in every key group, a chain of template vertices: a keyed head (HASH
by its key: the stage layer's key groups are the paper's instances), then stateless vertices and
keyed vertices that keep the key (fused: no shuffle). Stateless vertices before the first keyed
one run in the router of the first stage (per Spark task: any split). SORT and MRG are fused
into the processor (§5: "we fuse MRG and SORT with the operator that follows them"):

- MRG across the senders is the stage layer's punctuation: the input low watermark is the minimum
  over the senders' punctuations (Spark partitions, or the key groups of the previous stage), and
  block ``i`` closes when it reaches ``P*i``; items travel with their block (``tblock``), so an
  item of block ``i+1`` that arrives before the block closes is held, and an item of a closed
  block is late (a ``dropped`` row, reason ``late``, and the ``late`` metric), never merged;
- SORT (``ordering="sort"``) or the optimistic edge (``"optimistic"``) per vertex, as in
  :mod:`traces.glue`.

Rows between stages: ``tev`` (binary: the pickled ``(key, value, pos)``), ``tblock`` (bigint) and
``event_time_ms``; the last stage adds ``key_text`` and ``value_text`` (``repr``). A stage's output
watermark is ``P * (last closed block)``, so the next stage closes the same blocks.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from keygroups.stage import Dropped, Stage, StageInput, StageOutput
from traces.glue import Direct, Optimistic, Sorted, drive, hash_instance
from traces.templates import OpKeyedOrdered, OpStateless, Template, make_emit, runtime_for
from traces.types import Event, Marker, TraceError

__all__ = ["TraceStage", "default_decode", "SOURCE_COLUMNS", "OUTPUT_COLUMNS"]

SOURCE_COLUMNS = [("tev", "binary"), ("tblock", "bigint")]
OUTPUT_COLUMNS = SOURCE_COLUMNS + [("key_text", "string"), ("value_text", "string")]


def default_decode(key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
    """A Kafka record as ``(key, value)``: the key as UTF-8 text, the value as JSON."""
    binary = (bytes, bytearray, memoryview)
    return (bytes(key).decode() if isinstance(key, binary) else None,
            json.loads(bytes(value)) if isinstance(value, binary) else None)


@dataclass(frozen=True)
class _Vertex:
    name: str
    op: Template
    glue: str                         # "direct", "sort" or "optimistic"


@dataclass(eq=False)
class TraceStage(Stage):
    """Vertices of one segment (see the module docstring); built by :func:`traces.spark.compile_dag`."""

    vertices: tuple = ()
    period_ms: int = 1000
    num_key_groups: int = 2
    name: str | None = None
    prefix: tuple = ()                # stateless vertices run in the router (first stage only)
    decode: Callable | None = None    # first stage: source (key, value) bytes -> (key, value)

    # -- input ------------------------------------------------------------------------------------
    def python_router(self):
        return self._route

    def routed_columns(self):
        return list(SOURCE_COLUMNS)

    def _route(self, data: Any) -> tuple[pd.DataFrame, np.ndarray]:
        """Source rows (first stage) or the previous stage's ``[(event, block)]`` -> rows, groups."""
        if isinstance(data, pd.DataFrame):
            items = list(self._from_source(data))
            extra = ["topic", "partition", "offset"]
        else:
            items, extra = [(e, b, None) for e, b in (data or [])], []
        n = self.num_key_groups
        frame = pd.DataFrame({
            "tev": [pickle.dumps((e.key, e.value, e.pos), protocol=5) for e, _, _ in items],
            "tblock": np.asarray([b for _, b, _ in items], dtype=np.int64),
            "event_time_ms": np.asarray([e.ts for e, _, _ in items], dtype=np.int64)})
        for i, c in enumerate(extra):
            frame[c] = [src[i] for _, _, src in items]
        groups = np.asarray([hash_instance(e.key, n) for e, _, _ in items], dtype=np.int64)
        return frame, groups

    def _from_source(self, rows: pd.DataFrame):
        decode = self.decode or default_decode
        keys = rows["key"].tolist() if "key" in rows.columns else [None] * len(rows)
        period, prefix = self.period_ms, self.prefix
        for k, v, ts, topic, p, off in zip(keys, rows["value"].tolist(), rows["event_time_ms"].tolist(),
                                           rows["topic"].tolist(), rows["partition"].tolist(),
                                           rows["offset"].tolist()):
            try:
                key, value = decode(k, v)
            except Exception as exc:
                raise TraceError(f"source record {topic}-{p}@{off}: decode failed: {exc!r}") from exc
            events = [Event(key, value, ts, (p, off))]
            for vx in prefix:
                nxt: list = []
                for x in events:
                    vx.op.on_item(x.key, x.value, make_emit(nxt, vx.name, x.ts, x.pos))
                events = nxt
            block = ts // period + 1
            for x in events:
                yield x, block, (topic, p, off)

    # -- output -----------------------------------------------------------------------------------
    def output_columns(self):
        return list(OUTPUT_COLUMNS)

    def output_frame(self, data: Any) -> pd.DataFrame:
        data = data or []
        return pd.DataFrame({
            "tev": [pickle.dumps((e.key, e.value, e.pos), protocol=5) for e, _ in data],
            "tblock": np.asarray([b for _, b in data], dtype=np.int64),
            "event_time_ms": np.asarray([e.ts for e, _ in data], dtype=np.int64),
            "key_text": [repr(e.key) for e, _ in data],
            "value_text": [repr(e.value) for e, _ in data]})

    # -- state ------------------------------------------------------------------------------------
    def new_state(self) -> dict:
        return {"closed": None, "pending": {}, "procs": None, "late": 0}

    def dump_state(self, state: dict) -> bytes:
        return pickle.dumps(state, protocol=5)

    def load_state(self, blob: bytes) -> dict:
        return pickle.loads(blob)

    def _procs(self, state: dict) -> list:
        parallel = self.num_key_groups > 1
        procs = []
        for v in self.vertices:
            if v.glue == "optimistic":
                procs.append(Optimistic(v.op, v.name))
            else:
                rt = runtime_for(v.op, v.name, parallel=parallel)
                procs.append(Sorted(rt) if v.glue == "sort" else Direct(rt))
        if state["procs"] is not None:
            for p, s in zip(procs, state["procs"]):
                p.set_state(s)
        return procs

    # -- processing -------------------------------------------------------------------------------
    def process(self, state: dict, batch: StageInput) -> StageOutput:
        procs = self._procs(state)
        out: list[tuple[Event, int]] = []
        late: dict[str, int] = {}

        def feed(e: Event) -> None:
            self._chain(procs, 0, [e], state, batch.key_group, out)

        data = batch.data
        if data is not None and len(data):
            for blob, block, ts in zip(data["tev"].tolist(), data["tblock"].tolist(), data["event_time_ms"].tolist()):
                key, value, pos = pickle.loads(blob)
                e = Event(key, value, ts, pos)
                closed = state["closed"]
                if closed is not None and block <= closed:
                    late[repr(key)] = late.get(repr(key), 0) + 1
                elif closed is not None and block == closed + 1:
                    feed(e)
                else:
                    state["pending"].setdefault(block, []).append(e)
        wm = batch.watermark_ms
        if wm is not None:
            target = wm // self.period_ms
            if state["closed"] is None:          # the first marker: block `target` holds all below it
                state["closed"] = target - 1
                for b in sorted(b for b in state["pending"] if b <= target):
                    for e in state["pending"].pop(b):
                        feed(e)
            while state["closed"] < target:
                m = Marker(state["closed"] + 1, (state["closed"] + 1) * self.period_ms)
                self._chain(procs, 0, [m], state, batch.key_group, out)
                state["closed"] = m.index
                for e in state["pending"].pop(m.index + 1, []):
                    feed(e)
        state["procs"] = [p.get_state() for p in procs]
        state["late"] += sum(late.values())
        closed = state["closed"]
        metrics = {"late": state["late"], **{f"{v.name}.{k}": c for v, p in zip(self.vertices, procs)
                                            for k, c in p.counters.items()}}
        return StageOutput(out, None if closed is None else closed * self.period_ms,
                           [Dropped(k, "late", c) for k, c in sorted(late.items())], metrics)

    def _chain(self, procs: list, i: int, messages: list, state: dict, key_group: int,
               out: list[tuple[Event, int]]) -> None:
        """``messages`` through vertices ``i..``; outputs of the last go to ``out`` with their block."""
        if i == len(procs):
            block = state["closed"] + 1
            for m in messages:
                if not isinstance(m, Marker):
                    out.append((m, block))
            return
        v = self.vertices[i]
        if i and not isinstance(v.op, OpStateless) and self.num_key_groups > 1:
            for m in messages:
                if not isinstance(m, Marker) and hash_instance(m.key, self.num_key_groups) != key_group:
                    raise TraceError(f"vertex {v.name!r} runs fused in key group {key_group} but got key {m.key!r} "
                                     "of another key group: a vertex before it changed the key (fix: declare "
                                     "preserves_key=False on that template)")
        nxt = drive(procs[i], messages)
        self._chain(procs, i + 1, nxt, state, key_group, out)
