"""The stage layer on Spark: a pipeline of three stages (two fused, one re-keyed in Python) over
Kafka equals its local run on the same micro-batches, across a restart and a replayed batch."""

from __future__ import annotations

import json
import random

import pandas as pd

from dataflow_kafka.keygroups import Pipeline
from tests.keygroups.toy_stages import RunningTotal, TumblingCount
from tests.support import BatchCollector, forget_batches_from, now_ms, source_batches


PARTITIONS = 3
KEY = "CAST(key AS STRING)"
VALUE = "CAST(get_json_object(CAST(value AS STRING), '$.v') AS DOUBLE)"


def _pipeline() -> Pipeline:
    return (TumblingCount(key=KEY, value=VALUE, size_ms=500, num_key_groups=3)
            .then(TumblingCount(key="k", value="count", size_ms=2000, num_key_groups=3, name="coarse"))
            .then(RunningTotal(num_key_groups=2)))


def _events(base: int, start: int, n: int, rnd: random.Random) -> list[dict]:
    out = []
    for i in range(start, start + n):
        ts = base + i * 25 - (rnd.randint(0, 1_000) if rnd.random() < 0.3 else 0)
        body = {"ts": ts} if i % 53 == 0 else {"ts": ts, "v": 1}
        out.append({"key": f"{rnd.choice('xyz')}{rnd.randrange(4)}".encode(), "value": json.dumps(body).encode(),
                    "partition": rnd.randrange(PARTITIONS)})
    return out


def _rows(frame: pd.DataFrame) -> list:
    """Comparable content of a batch's output: data, dropped and punctuation rows."""
    out = []
    for r in frame.to_dict("records"):
        if r["kind"] == "data":
            out.append(("data", r["group"], r["total"], r["event_time_ms"]))
        elif r["kind"] == "dropped":
            out.append(("dropped", r["topic"], r["dropped_key"], r["dropped_reason"], r["dropped_count"]))
        elif r["kind"] == "punctuation":
            out.append(("punctuation", r["topic"], r["partition"], r["punctuation_ms"]))
    return sorted(out, key=repr)


def test_count_stateful_operators_fused_and_unfused(spark, kafka):
    from dataflow_kafka.keygroups.pipeline import stateful_operators

    topic = kafka.topic(1)
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).load())
    assert stateful_operators(_pipeline().apply(src)) == 2
    assert stateful_operators(_pipeline().apply(src, fuse=False)) == 3


def test_pipeline_equals_local_run_across_restart_and_replay(spark, kafka, tmp_path):
    topic = kafka.topic(PARTITIONS)
    rnd = random.Random(5)
    base = now_ms() - 60_000
    chunks = [_events(base, 0, 400, rnd), _events(base, 400, 300, rnd)]
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                 "eventTimeField": "ts", "maxOffsetsPerTrigger": "250"}.items():
        reader = reader.option(k, v)
    out_df = _pipeline().apply(reader.load())
    ck = str(tmp_path / "ck")
    got = BatchCollector()

    def run():
        q = out_df.writeStream.foreachBatch(got).option("checkpointLocation", ck).trigger(availableNow=True).start()
        assert q.awaitTermination(240)
        assert q.exception() is None

    kafka.produce(topic, chunks[0])
    run()
    kafka.produce(topic, chunks[1])
    run()                                          # restart from the checkpoint
    batches = sorted(got.batches)
    assert len(batches) >= 3
    last = batches[-1]
    before = _rows(pd.DataFrame(got.batches[last]))
    forget_batches_from(ck, last)                  # crash during the last batch: replayed
    run()
    assert sorted(got.batches) == batches
    assert _rows(pd.DataFrame(got.batches[last])) == before

    inputs = source_batches(kafka.consume_all(topic), ck, batches)
    for frame in inputs:
        data = frame["kind"] == "data"
        frame["k"] = [k.decode() if d else None for k, d in zip(frame.get("key", [None] * len(frame)), data)]
        frame["v"] = [float(json.loads(v)["v"]) if d and "v" in json.loads(v) else None
                      for v, d in zip(frame.get("value", [None] * len(frame)), data)]
    expected = _pipeline().run_local(inputs)
    for b, exp in zip(batches, expected):
        assert _rows(pd.DataFrame(got.batches[b])) == _rows(exp), f"batch {b}"
    all_rows = [r for b in batches for r in _rows(pd.DataFrame(got.batches[b]))]
    assert any(r[0] == "data" for r in all_rows)
    assert {r[3] for r in all_rows if r[0] == "dropped"} >= {"null"}
