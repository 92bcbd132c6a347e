"""The other plans on Spark give the in-order result too: the optimistic stages fused into one
operator (same key), and the two buffered baselines: (a) a sort buffer before each order-sensitive
stage driven by our punctuations, (b) Spark's withWatermark + event-time timers (bench.native_baseline)."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.optimistic import Meta, run_local
from dataflow_kafka.optimistic.spark import build_pipeline, encode_json
from dataflow_kafka.optimistic.workload import inverted_index_same_key, inverted_index_stages
from tests.optimistic.test_optimistic_spark import GRACE_MS, PARTITIONS, _check_output, _expected, _records, decode_doc


def _run(spark, kafka, topic, out_topic, ck, stages, mode, key_groups=(3, 2), **kw):
    from bench.native_baseline import build_native

    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("watermarkDelayMs", GRACE_MS).option("maxOffsetsPerTrigger", 60).load())
    build = build_native if mode == "native" else build_pipeline
    out = build(src, stages, output_topic=out_topic, key_groups=list(key_groups), decode=decode_doc, output_partitions=2,
                **({} if mode == "native" else {"mode": mode}), **kw)
    q = (out.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("checkpointLocation", ck).trigger(availableNow=True).start())
    assert q.awaitTermination(300), "query did not finish"
    assert q.exception() is None, q.exception()
    return q


@pytest.fixture(scope="module")
def documents(kafka):
    topic = kafka.topic(PARTITIONS)
    records, _ = _records(200, seed=11)
    kafka.produce(topic, [r for rs in records.values() for r in rs])
    return topic


def test_fused_optimistic_stages_equal_reference(spark, kafka, documents, tmp_path):
    stages = inverted_index_stages(2)
    out_topic = kafka.topic(2, prefix="out")
    q = _run(spark, kafka, documents, out_topic, str(tmp_path / "ck"), stages, "optimistic", key_groups=(2, 2),
             fuse_same_key=inverted_index_same_key(2))
    assert len(q.recentProgress[-1]["stateOperators"]) == 1                 # one operator for both stages
    _check_output(kafka, out_topic, _expected(kafka, documents, stages))


def test_buffered_per_operator_baseline_equals_reference(spark, kafka, documents, tmp_path):
    stages = inverted_index_stages(2)
    out_topic = kafka.topic(2, prefix="out")
    _run(spark, kafka, documents, out_topic, str(tmp_path / "ck"), stages, "buffered")
    _check_output(kafka, out_topic, _expected(kafka, documents, stages))


def test_spark_native_watermark_baseline_releases_an_in_order_prefix(spark, kafka, documents, tmp_path):
    stages = inverted_index_stages(2)
    out_topic = kafka.topic(2, prefix="out")
    # The delay covers the disorder (grace within a partition, and the skew between partitions).
    q = _run(spark, kafka, documents, out_topic, str(tmp_path / "ck"), stages, "native", native_delay_ms=400)
    dropped = sum(op.get("numRowsDroppedByWatermark", 0) for p in q.recentProgress for op in p["stateOperators"])
    assert dropped == 0
    arrivals = []
    for m in kafka.consume_all(documents):
        d = json.loads(m.value())
        arrivals.append((int(d["ts"]), m.partition(), m.offset(), (d["id"], d["text"])))
    ref = [(i.meta.sort_key(), encode_json(i.payload)) for i in run_local(stages, sorted(arrivals)).released]
    got = {bytes(m.key()): bytes(m.value()) for m in kafka.consume_all(out_topic)}
    assert got and set(got.items()) <= set(ref)
    newest = max(Meta.from_sort_key(k).time_ms for k in got)
    assert sorted(got.items()) == [r for r in ref if Meta.from_sort_key(r[0]).time_ms <= newest]
