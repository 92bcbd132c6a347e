"""A typed DAG on Spark: :func:`to_spark` applies the stages of :func:`traces.compile.compile_dag`
to ``format("dataflow-kafka")`` rows, as one streaming query.

One source: ``to_spark(dag, df)``. Several sources: ``to_spark(dag, {source: df})``, one
``readStream`` per source (each source's own punctuations make its blocks and late records;
the stages after them close a block when every sender of every input passed it).

Also pure helpers to compare a query's output with :meth:`traces.Dag.run_local`:
:func:`messages_from_frames` (micro-batches of source rows -> records and punctuations) and
:func:`canonical_rows` (output rows -> blocks in canonical form, like :func:`traces.canonical`).
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Iterable, Mapping

from dataflow_kafka.traces.compile import CompiledDag, compile_dag, fusion_input
from dataflow_kafka.traces.dag import Dag, block_content
from dataflow_kafka.traces.stage import default_decode
from dataflow_kafka.traces.types import Event, Marker, Punctuation, Record

__all__ = ["compile_dag", "fusion_input", "to_spark", "messages_from_frames", "canonical_rows", "canonical_blocks",
           "events_of_rows", "CompiledDag"]


def to_spark(dag: Dag, df, *, num_key_groups: int = 2, decode: Callable | Mapping[str, Callable] | None = None,
             rates: Mapping[tuple[str, str], float] | None = None, **apply_options):
    """The streaming DataFrame of ``dag`` run on ``df`` (``format("dataflow-kafka")`` rows, or
    ``{source: rows}``): the stage layer's rows; data rows carry ``tev``, ``tblock``, ``tedge``,
    ``key_text``, ``value_text`` and ``sink``."""
    return compile_dag(dag, num_key_groups=num_key_groups, decode=decode, rates=rates).apply(df, **apply_options)


# -- comparing with run_local ---------------------------------------------------------------------
def messages_from_frames(frames: Iterable | Mapping[str, Iterable], decode: Callable | None = None):
    """Source micro-batches (frames of the row contract) as the records and punctuations
    :meth:`traces.Dag.run_local` takes: per batch its data rows, then its punctuations, those of
    partitions punctuating for the first time last (a query reads the low watermark after all of
    a batch's punctuations: so the first marker is the same); ``{source: frames}`` gives
    ``{source: messages}``."""
    if isinstance(frames, Mapping):
        return {s: messages_from_frames(f, decode) for s, f in frames.items()}
    decode = decode or default_decode
    msgs: list = []
    punctuated: set[int] = set()
    for f in frames:
        rows = f.to_dict("records")
        for r in rows:
            if r["kind"] == "data":
                key, value = decode(r.get("key"), r["value"])
                msgs.append(Record(int(r["partition"]), int(r["offset"]), int(r["event_time_ms"]), key, value))
        puncts = [Punctuation(int(r["partition"]), int(r["punctuation_ms"])) for r in rows
                  if r["kind"] == "punctuation" and r.get("punctuation_ms") is not None
                  and r["punctuation_ms"] == r["punctuation_ms"]]
        # the stage layer reads a batch's low watermark after all its punctuations: partitions
        # punctuating for the first time go last, so the first low watermark is the batch's
        msgs += sorted(puncts, key=lambda p: p.partition not in punctuated)
        punctuated |= {p.partition for p in puncts}
    return msgs


def events_of_rows(rows: Iterable[dict], sink: str | None = None) -> list[tuple[int, Event]]:
    """``(block, event)`` of a query's data rows (of ``sink`` when given), in (batch, key group,
    offset) order when the rows carry ``batch`` (else as given)."""
    data = [r for r in rows if r["kind"] == "data" and (sink is None or r.get("sink") == sink)]
    if data and "batch" in data[0]:
        data.sort(key=lambda r: (r["batch"], r["partition"], r["offset"]))
    out = []
    for r in data:
        key, value, pos = pickle.loads(bytes(r["tev"]))
        out.append((int(r["tblock"]), Event(key, value, int(r["event_time_ms"]), tuple(pos))))
    return out


def canonical_rows(rows: Iterable[dict], ordered: bool, sink: str | None = None) -> dict[int, Any]:
    """A query's data rows (of ``sink`` when given) as ``{block: canonical content}`` (non-empty blocks)."""
    by_block: dict[int, list] = {}
    for b, e in events_of_rows(rows, sink):
        by_block.setdefault(b, []).append(e)
    return {b: block_content(es, ordered) for b, es in sorted(by_block.items())}


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
    return {b: block_content(es, ordered) for b, es in sorted(by_block.items())}
