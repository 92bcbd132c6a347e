"""FlameStream on Spark, end to end: Kafka (out-of-order event times across partitions) → ingest →
optimistic stages → barrier → dataflow-kafka sink. What leaves the barrier equals the sequential
in-order run of the same stage objects, exactly, across restarts and a replayed micro-batch."""

from __future__ import annotations

import json
import random

from dataflow_kafka.optimistic import run_local
from dataflow_kafka.optimistic.spark import build_pipeline, encode_json, read_metrics
from dataflow_kafka.optimistic.workload import generate_documents, inverted_index_stages
from tests.support import forget_batches_from, now_ms


GRACE_MS = 30
PARTITIONS = 4


def decode_doc(value: bytes):
    d = json.loads(value)
    return (d["id"], d["text"])


def _records(n_docs: int, seed: int):
    """Documents with event times ``base + 10 * (i // 2) + jitter`` (pairs of equal timestamps
    happen), random partitions, and per-partition disorder below the grace period."""
    rng = random.Random(seed)
    base = now_ms() - 120_000
    docs = generate_documents(n_docs, vocabulary_size=60, words_per_doc=(3, 8), seed=seed)
    per_part: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for i, (doc_id, text) in enumerate(docs):
        t = base + 10 * (i // 2) + rng.choice((0, 0, 3))
        per_part[rng.randrange(PARTITIONS)].append((t + rng.uniform(0, GRACE_MS), t, doc_id, text))
    out = {}
    for p, rs in per_part.items():   # produce order: disorder within a partition < GRACE_MS
        out[p] = [{"partition": p, "value": json.dumps({"ts": t, "id": d, "text": x}).encode(), "ts": t}
                  for _, t, d, x in sorted(rs)]
    return out, base


def _run(spark, kafka, topic, out_topic, metrics_topic, ck, stages, mode="optimistic", max_offsets=40):
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("watermarkDelayMs", GRACE_MS).option("maxOffsetsPerTrigger", max_offsets).load())
    out = build_pipeline(src, stages, output_topic=out_topic, metrics_topic=metrics_topic, mode=mode,
                         key_groups=[3, 2], decode=decode_doc, output_partitions=2)
    q = (out.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("checkpointLocation", ck).trigger(availableNow=True).start())
    assert q.awaitTermination(300), "query did not finish"
    assert q.exception() is None, q.exception()
    return q.lastProgress["batchId"] if q.lastProgress else None


def _expected(kafka, topic, stages):
    """Sequential in-order reference over what is in the topic, and the final low watermark."""
    arrivals, newest = [], {}
    for m in kafka.consume_all(topic):
        d = json.loads(m.value())
        arrivals.append((int(d["ts"]), m.partition(), m.offset(), (d["id"], d["text"])))
        newest[m.partition()] = max(newest.get(m.partition(), d["ts"]), d["ts"])
    arrivals.sort()
    ref = run_local(stages, arrivals)
    assert ref.tombstones_in == 0
    w = min(newest.values()) - GRACE_MS
    return [(i.meta.sort_key(), encode_json(i.payload)) for i in ref.released if i.meta.time_ms < w]


def _check_output(kafka, out_topic, expected):
    got, by_part = {}, {}
    for m in kafka.consume_all(out_topic):
        k, v = bytes(m.key()), bytes(m.value())
        assert got.setdefault(k, v) == v, "a replayed batch wrote a different value"
        if by_part.get(m.partition(), [None])[-1] != k and k not in by_part.get(m.partition(), []):
            by_part.setdefault(m.partition(), []).append(k)
    for keys in by_part.values():   # first occurrences leave each barrier key group in order
        assert keys == sorted(keys)
    assert sorted(got.items()) == expected
    return got


def test_two_stages_equal_in_order_reference_across_restart_and_replay(spark, kafka, tmp_path):
    stages = inverted_index_stages(2)          # Map(split) → postings by word → df milestones
    topic, out_topic, metrics = kafka.topic(PARTITIONS), kafka.topic(2, prefix="out"), kafka.topic(1, prefix="m")
    records, base = _records(240, seed=7)
    span = 10 * 120
    # Phase 1: partitions 0-1 up to 2/3 of the time span, 2-3 only up to 1/3: later records of
    # 2-3 reach the stages after newer ones of 0-1 (late inserts, replays, tombstones).
    cut = {0: 2 / 3, 1: 2 / 3, 2: 1 / 3, 3: 1 / 3}
    phase1 = [r for p, rs in records.items() for r in rs if r["ts"] < base + cut[p] * span]
    rest = [r for p, rs in records.items() for r in rs if r["ts"] >= base + cut[p] * span]
    kafka.produce(topic, phase1)
    ck = str(tmp_path / "ck")
    last = _run(spark, kafka, topic, out_topic, metrics, ck, stages)
    assert last >= 2
    forget_batches_from(ck, last)              # crash in the last batch: its output is in Kafka
    kafka.produce(topic, rest)
    _run(spark, kafka, topic, out_topic, metrics, ck, stages)   # restart: replays that batch, goes on
    expected = _expected(kafka, topic, stages)
    got = _check_output(kafka, out_topic, expected)
    assert len(got) > 200
    m = read_metrics(kafka.consume_all(metrics))
    assert m["tombstones_in"] > 0 and m["key_groups"] == 2                 # disorder was repaired
    assert m["late_items"] == 0 and m["late_tombstones"] == 0
    # the replayed batch counts twice in the cumulative counters only if its state was not rolled back
    assert m["released"] == len(expected)
