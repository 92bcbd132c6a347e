"""The Yahoo query: the typed DAG (compiled, on the stage layer's local runner), its run_local and
the hand-written stage of bench/traces.py give the same windows (without Spark)."""

from __future__ import annotations

import json

from bench.traces import HandWindowCount
from dataflow_kafka.keygroups import Pipeline
from tests.traces.frames import source_frames
from dataflow_kafka.traces.examples.yahoo import build, events
from dataflow_kafka.traces.spark import compile_dag, events_of_rows, messages_from_frames


def test_typed_yahoo_query_equals_hand_written_and_run_local():
    evs = list(events(1_200, 100_000, spacing_ms=20, disorder_ms=300))
    batches = [[(i % 2, v["ts"], f"u{i}", v) for i, (_, v) in enumerate(evs[b:b + 100], start=b)]
               for b in range(0, len(evs), 100)]
    frames = source_frames(batches, 2)
    dag = build()
    typed = {(e.key, e.value[0]): e.value[1]
             for _, e in events_of_rows([dict(r, batch=i) for i, o in enumerate(compile_dag(dag).run_local(
                 [f.copy() for f in frames])) for r in o.to_dict("records")])}
    local = {(e.key, e.value[0]): e.value[1] for e in dag.run_local(messages_from_frames(frames)).events()}
    hand = {(r["campaign"], int(r["window_end_ms"])): int(r["count"])
            for o in Pipeline([HandWindowCount()]).run_local([f.copy() for f in frames])
            for r in o.to_dict("records") if r["kind"] == "data"}
    first = min(end for _, end in typed)     # typed's first block holds all before it: compare the windows
    later = lambda d: {k: v for k, v in d.items() if k[1] >= first + 10_000}   # noqa: E731  after it
    assert typed == local
    assert len(later(typed)) > 50 and later(typed) == later(hand)
    views = sum(v["event_type"] == "view" for _, v in evs)
    assert max(typed.values()) <= views
