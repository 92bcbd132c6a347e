"""optimistic.spark without a JVM: segmentation, routing, row round trips, and the processors'
``on_batch`` chained by hand (ingest → stage key groups → fused barrier) with markers between them,
against the sequential in-order run."""

from __future__ import annotations

import json
import random

import pandas as pd

from keygroups.processor import split_batch
from optimistic import Item, Map, Meta, run_local
from optimistic.spark import (
    OptimisticStageProcessor, _ingest_fn, _items_of, _Router, _Rows, _SinkSpec, encode_json, route, segments_of,
)
from optimistic.workload import generate_documents, inverted_index_stages
from watermarks.punctuation import PunctuationTracker


def test_segments_cut_at_order_sensitive_stages():
    stages = inverted_index_stages(3)
    leading, segments = segments_of(stages)
    assert leading == (stages[0],) and [s.stage for s in segments] == stages[1:]
    extra = Map(lambda x: [x])
    _, segs = segments_of([stages[1], extra, stages[2]])
    assert segs[0].maps == (extra,) and segs[1].maps == ()


def test_route_is_stable_and_in_range():
    assert route("word", 7) == route("word", 7) and 0 <= route(("a", 1), 3) < 3


def test_rows_round_trip_items_and_tombstones():
    rows = _Rows(5, "s1", 0)
    items = [Item.source(3, 1, 2, ("a", (1, 2))), Item.source(3, 1, 2, ("a", (1, 2))).retraction(),
             Item.source(4, 0, 7, "b").derive(1, "c")]
    for it in items:
        rows.item(0 if it.payload != "c" else 2, it)
    rows.marker(1, "s1", 0, 1, None)
    f = rows.frame()
    got = _items_of(f[f["kind"] == "data"])
    assert got == items and all(type(i.meta) is Meta and type(i.meta.path) is tuple for i in got)
    assert list(f["kind"]) == ["data", "data", "punctuation"] and list(f["key_group"]) == [0, 2, 1]
    assert f["punctuation_ms"].isna().all() and list(f["topic"]) == ["s1"] * 3


def _source_frame(records, puncts, pt):
    """Source rows of one micro-batch as the ingest sees them."""
    rows = [dict(kind="data", topic="docs", partition=p, offset=o, value=v, event_time_ms=t,
                 punctuation_ms=None, processing_time_ms=pt) for p, o, t, v in records]
    rows += [dict(kind="punctuation", topic="docs", partition=p, offset=o, value=None, event_time_ms=None,
                  punctuation_ms=w, processing_time_ms=pt) for p, o, w in puncts]
    return pd.DataFrame(rows)


def _decode(v):
    d = json.loads(v)
    return (d["id"], d["text"])


def test_processors_chained_by_hand_equal_in_order_run():
    rng = random.Random(3)
    stages = inverted_index_stages(2)
    leading, segs = segments_of(stages)
    n1, n2 = 3, 2
    sink = _SinkSpec("out", encode_json)
    procs = [OptimisticStageProcessor(1, segs[0], _Router(segs[1].stage.key, n2)),
             OptimisticStageProcessor(2, segs[1], None, sink, "metrics")]
    states = [dict(), dict()]                  # key group -> (engine blob, tracker)
    ingest = _ingest_fn(leading, _Router(segs[0].stage.key, n1), _decode)
    docs = generate_documents(120, vocabulary_size=30, words_per_doc=(2, 6), seed=2)
    per_part = {0: [], 1: []}
    for i, (d, text) in enumerate(docs):
        per_part[i % 2].append((1000 + 10 * (i // 2) + (300 if i % 2 else 0), json.dumps({"id": d, "text": text}).encode()))
    offsets, arrivals, released, metrics = {0: 0, 1: 0}, [], [], {}
    for b in range(12):                        # partition 1 runs 300 ms ahead in event time
        recs = []
        for p in (0, 1):
            take = per_part[p][offsets[p]:offsets[p] + rng.randint(2, 9)]
            for j, (t, v) in enumerate(take):
                recs.append((p, offsets[p] + j, t, v))
                arrivals.append((t, p, offsets[p] + j, _decode(v)))
            offsets[p] += len(take)
        newest = {p: max([t for q, _, t, _ in recs if q == p], default=None) for p in (0, 1)}
        puncts = [(p, offsets[p], newest[p]) for p in (0, 1)]
        frame = pd.concat(list(ingest(iter([_source_frame(recs, puncts, b)]))), ignore_index=True)
        for i, proc in enumerate(procs):
            outs = []
            for kg, rows in frame.groupby("key_group"):
                blob, tracker = states[i].get(kg, (None, PunctuationTracker()))
                engine = proc.load(blob)
                batch = split_batch(int(kg), rows.sample(frac=1, random_state=b).reset_index(drop=True), tracker)
                outs += list(proc.on_batch(engine, batch))
                states[i][kg] = (proc.dump(engine), tracker)
            frame = pd.concat(outs, ignore_index=True) if outs else frame.iloc[0:0]
        released += [(bytes(k), bytes(v)) for k, v, t in zip(frame["key"], frame["value"], frame["topic"]) if t == "out"]
        metrics.update({bytes(k): json.loads(v) for k, v, t in zip(frame["key"], frame["value"], frame["topic"])
                        if t == "metrics"})
    low = min(max(t for t, *_ in per_part[p][:offsets[p]]) for p in (0, 1))
    ref = run_local(stages, sorted(arrivals))
    expected = [(i.meta.sort_key(), encode_json(i.payload)) for i in ref.released if i.meta.time_ms < low]
    assert sorted(released) == expected and len(released) == len(set(released))
    assert sum(m["tombstones_in"] for m in metrics.values()) > 0      # late items were repaired
    assert sum(m["released"] for m in metrics.values()) == len(expected)
