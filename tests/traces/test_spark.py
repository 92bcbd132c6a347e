"""The IoT DAG (data-trace types Example 4.1) on Spark over Kafka, for both ordering strategies:
every block's output equals Dag.run_local's on the same micro-batches, across a restart from the
checkpoint and a replayed batch; late records are counted as dropped rows, as run_local routes
them to its late side output."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest

from tests.support import BatchCollector, forget_batches_from, now_ms, source_batches
from dataflow_kafka.traces.examples.iot import build
from dataflow_kafka.traces.spark import canonical_blocks, canonical_rows, compile_dag, messages_from_frames, to_spark


PARTITIONS = 2


def _readings(base: int, start: int, n: int, rnd: random.Random) -> list[dict]:
    """Sensor readings on a 100 ms grid, up to 600 ms out of order, every 23rd 2 s late."""
    out = []
    for i in range(start, start + n):
        ts = base + i * 100 - rnd.randrange(7) * 100 - (2_000 if i % 23 == 0 else 0)
        s = rnd.choice(["s1", "s2", "s3", "s4"])
        out.append({"key": s.encode(), "value": json.dumps({"id": s, "scalar": rnd.randrange(100), "ts": ts}).encode(),
                    "partition": rnd.randrange(PARTITIONS)})
    return out


def _data_rows(batch_rows):
    return sorted(repr(sorted((k, v) for k, v in r.items() if k not in ("processing_time_ms",)))
                  for r in batch_rows)


@pytest.mark.parametrize("ordering", ["sort", "optimistic"])
def test_iot_dag_on_spark_equals_run_local_across_restart_and_replay(spark, kafka, tmp_path, ordering):
    dag = build(par=2, period_ms=1_000, partitions=PARTITIONS, ordering=ordering, step=100)
    assert [len(op) for op in compile_dag(dag, num_key_groups=2).plan()] == [1, 1]   # re-keyed by home
    topic = kafka.topic(PARTITIONS)
    rnd = random.Random(7)
    base = (now_ms() - 60_000) // 1_000 * 1_000
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "maxOffsetsPerTrigger": "60", "watermarkDelayMs": "0"}
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in opts.items():
        reader = reader.option(k, v)
    out = to_spark(dag, reader.load(), num_key_groups=2)
    ck, got = str(tmp_path / "ck"), BatchCollector()

    def run():
        q = out.writeStream.foreachBatch(got).option("checkpointLocation", ck).trigger(availableNow=True).start()
        assert q.awaitTermination(300)
        assert q.exception() is None, q.exception()

    kafka.produce(topic, _readings(base, 0, 120, rnd))
    run()
    kafka.produce(topic, _readings(base, 120, 80, rnd))
    run()                                                   # restart from the checkpoint
    batches = sorted(got.batches)
    assert len(batches) >= 4, batches
    last = batches[-1]
    before = _data_rows(got.batches[last])
    forget_batches_from(ck, last)                           # a crash during the last batch
    run()
    assert sorted(got.batches) == batches
    assert _data_rows(got.batches[last]) == before, "the replayed batch differs"

    frames = source_batches(kafka.consume_all(topic), ck, batches, topic=topic)
    ref = build(par=1, period_ms=1_000, partitions=PARTITIONS, step=100).run_local(messages_from_frames(frames))
    rows = got.rows()
    spark_blocks = canonical_rows(rows, ordered=False)
    assert len(spark_blocks) >= 3
    assert spark_blocks == canonical_blocks(ref.outputs["out"], ordered=False)
    dropped = sum(r["dropped_count"] for r in rows if r["kind"] == "dropped" and r["dropped_reason"] == "late")
    jfm_kept = [r for r in ref.late["hub"] if r.value["id"] in ("s1", "s2", "s4")]   # JFM keeps window sensors
    assert dropped == len(jfm_kept) > 0
    if ordering == "optimistic":             # items were processed at once: some were replayed
        metrics = [json.loads(r["metrics"]) for r in rows if r["kind"] == "metrics" and r["topic"] == "li"]
        assert max(m["li.tombstones_in"] for m in metrics) > 0
