"""OptimisticStage in the stage layer, without Spark: what leaves the barrier equals the sequential
in-order run of the same FlameStream stages, whatever the key groups, fused or not, optimistic
or buffered."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.optimistic import run_local
from dataflow_kafka.optimistic.order import Meta
from dataflow_kafka.optimistic.stage import OptimisticStage, optimistic_stages
from dataflow_kafka.optimistic.stages import Grouping
from dataflow_kafka.optimistic.workload import generate_documents, inverted_index_same_key, inverted_index_stages

from tests.suite import examples

PARTS = 3


def decode_doc(value: bytes):
    d = json.loads(value)
    return (d["id"], d["text"])


def _batches(seed: int, n_docs: int = 40, per_batch: int = 8, delay: int = 40):
    """Source micro-batches of documents spread over partitions, out of order within ``delay``."""
    rng = random.Random(seed)
    docs = generate_documents(n_docs, vocabulary_size=30, words_per_doc=(2, 6), seed=seed)
    arrivals = []
    for i, (doc_id, text) in enumerate(docs):
        t = 10 * i + rng.randint(0, 3)
        arrivals.append((t + rng.uniform(0, delay), t, doc_id, text))
    arrivals.sort()
    offsets, newest, frames = [0] * PARTS, [None] * PARTS, []
    for b in range(0, len(arrivals), per_batch):
        rows = []
        for _, t, doc_id, text in arrivals[b:b + per_batch]:
            p = rng.randrange(PARTS)
            rows.append({"kind": "data", "topic": "docs", "partition": p, "offset": offsets[p],
                         "value": json.dumps({"id": doc_id, "text": text}).encode(), "event_time_ms": t,
                         "processing_time_ms": b})
            offsets[p] += 1
            newest[p] = t if newest[p] is None else max(newest[p], t)
        marks = [{"kind": "punctuation", "topic": "docs", "partition": p, "offset": offsets[p],
                  "punctuation_ms": None if newest[p] is None else newest[p] - delay, "processing_time_ms": b}
                 for p in range(PARTS)]
        frames.append(pd.concat([pd.DataFrame(rows), control_frame(marks)], ignore_index=True))
    end = [{"kind": "punctuation", "topic": "docs", "partition": p, "offset": offsets[p],
            "punctuation_ms": 10**12, "processing_time_ms": 10**6} for p in range(PARTS)]
    frames.append(control_frame(end))
    reference = [(t, p, o, decode_doc(r["value"]))
                 for f in frames for t, p, o, r in zip(f["event_time_ms"], f["partition"], f["offset"],
                                                       f.to_dict("records")) if r["kind"] == "data"]
    return frames, reference


def _released(outs) -> list:
    rows = [(bytes(k), bytes(v)) for o in outs for kind, k, v in zip(o["kind"], o["key"], o["value"]) if kind == "data"]
    return sorted(rows)


def _in_order(stages, reference) -> list:
    arrivals = sorted((int(t), int(p), int(o), payload) for t, p, o, payload in reference)
    r = run_local(stages, arrivals)
    return sorted((i.meta.sort_key(), json.dumps(i.payload, separators=(",", ":")).encode()) for i in r.released)


@settings(max_examples=examples(6), deadline=None)
@given(seed=st.integers(0, 1000), n1=st.integers(1, 3), n2=st.integers(1, 3))
def test_barrier_output_equals_in_order_run(seed, n1, n2):
    stages = inverted_index_stages(2)
    frames, reference = _batches(seed)
    expected = _in_order(stages, reference)
    assert expected
    for fuse in (False, True):
        pipe = optimistic_stages(stages, key_groups=[n1, n2] if not fuse else [n1, n1], decode=decode_doc,
                                 fuse_same_key=fuse)
        assert len(pipe.plan()) == (1 if fuse else 2)
        outs = pipe.run_local(frames)
        assert _released(outs) == expected
    buffered = optimistic_stages(stages, key_groups=[n1, n2], decode=decode_doc, mode="buffered").run_local(frames)
    assert _released(buffered) == expected


def test_fusion_per_link_fuses_same_key_stages_only():
    stages = inverted_index_stages(3)
    frames, reference = _batches(11)
    expected = _in_order(stages, reference)
    pipe = optimistic_stages(stages, key_groups=2, decode=decode_doc, fuse_same_key=inverted_index_same_key(3))
    assert [len(op) for op in pipe.plan()] == [2, 1]           # word, word | milestone
    assert _released(pipe.run_local(frames)) == expected
    with pytest.raises(ValueError, match="one per link"):
        optimistic_stages(stages, key_groups=2, decode=decode_doc, fuse_same_key=[True])


def test_tombstones_metrics_and_release_bound_punctuation():
    frames, reference = _batches(3, delay=200)
    pipe = optimistic_stages(inverted_index_stages(1), key_groups=2, decode=decode_doc)
    outs = pipe.run_local(frames)
    def barrier(frame):          # the barrier's counters (every stage writes a metrics row)
        return [m for m in map(json.loads, frame.loc[frame["kind"] == "metrics", "metrics"]) if "released" in m]

    metrics = [m for o in outs for m in barrier(o)]
    newest = {}
    for m in metrics:
        newest[m.get("low_watermark_ms"), len(newest)] = m
    last = barrier(outs[-1])
    assert len(last) == 2 and sum(m["released"] for m in last) == len(_in_order(inverted_index_stages(1), reference))
    assert sum(m["tombstones_in"] for m in last) > 0                  # disorder made some outputs invalid
    for o in outs:                                                    # punctuation = release bound
        p = o[o["kind"] == "punctuation"]
        data = o[o["kind"] == "data"]
        if len(data):
            assert data["event_time_ms"].max() < p["punctuation_ms"].min()
            assert all(Meta.from_sort_key(bytes(k)).time_ms == t for k, t in zip(data["key"], data["event_time_ms"]))


def test_output_mapping_feeds_typed_columns():
    def parity(x):
        return x % 2

    stage = OptimisticStage(stage=Grouping(window=2, key=parity), num_key_groups=2, decode=lambda v: int(v),
                            output=lambda g: {"parity": g[-1] % 2, "size": len(g)},
                            output_schema=(("parity", "int"), ("size", "int")))
    rows = [{"kind": "data", "topic": "t", "partition": 0, "offset": i, "value": str(v).encode(), "event_time_ms": v,
             "processing_time_ms": 0} for i, v in enumerate((3, 1, 2, 4))]
    frame = pd.concat([pd.DataFrame(rows), control_frame([{"kind": "punctuation", "topic": "t", "partition": 0,
                                                            "offset": 4, "punctuation_ms": 100}])])
    from dataflow_kafka.keygroups import Pipeline

    (out,) = Pipeline([stage]).run_local([frame])
    data = out[out["kind"] == "data"].sort_values("event_time_ms")
    assert list(zip(data["parity"], data["size"], data["event_time_ms"])) == [(1, 1, 1), (0, 1, 2), (1, 2, 3), (0, 2, 4)]


def test_rejects_bad_configuration():
    with pytest.raises(ValueError, match="order-sensitive stage"):
        OptimisticStage(stage=None)
    with pytest.raises(ValueError, match="mode must be one of"):
        OptimisticStage(stage=Grouping(window=2, key=abs), mode="eager")
    with pytest.raises(ValueError, match="key_groups must be a positive int or 2 positive ints"):
        optimistic_stages(inverted_index_stages(2), key_groups=[1, 2, 3])
