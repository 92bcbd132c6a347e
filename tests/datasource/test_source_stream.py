"""End-to-end: the dataflow-kafka source on a real broker and real Spark, with checkpoints."""

from __future__ import annotations

import json
import random
from collections import defaultdict

from dataflow_kafka.datasource import consumer_lag
from tests.support import BatchCollector, forget_batches_from, now_ms, offset_log, run_available_now


GRACE = 50


def _events(n: int, base: int, seed: int = 7) -> list[dict]:
    """``n`` JSON events over 4 partitions; 20% of them 0..2 s late in event time."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ts = base + i * 10 - (rng.randint(0, 2000) if rng.random() < 0.2 else 0)
        out.append({"key": b"k%d" % (i % 13), "value": json.dumps({"i": i, "ts": ts}).encode(),
                    "partition": i % 4})
    return out


def _ts_ms(dt) -> int:
    return int(round(dt.timestamp() * 1000))


def test_exactly_once_punctuations_and_modifications_across_restart_and_replay(spark, kafka, tmp_path):
    topic, control = kafka.topic(4), kafka.topic(1, prefix="ctl")
    n = 2000
    events = _events(n, now_ms() - 60_000)
    ck = str(tmp_path / "ck")
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "watermarkDelayMs": str(GRACE), "maxOffsetsPerTrigger": "300",
            "controlTopic": control}
    out = BatchCollector()

    kafka.produce(topic, events[:1200])
    q = run_available_now(spark, opts, ck, out)                  # run 1: first 1200 records
    first_run_batches = set(out.batches)
    assert len(first_run_batches) >= 4                           # 1200 / 300
    # Consumer lag from progress: after the first batch 900 of 1200 records are still behind.
    lags = [consumer_lag(p) for p in q.recentProgress if p["numInputRows"]]
    assert sum(lags[0].values()) == 1200 - 300 and sum(lags[-1].values()) == 0
    assert set(lags[0]) == {(topic, p) for p in range(4)}

    command = json.dumps({"op": "move-key-group", "key_group": 3, "to": 1})
    kafka.produce(control, [{"value": command.encode(), "partition": 0}])
    kafka.produce(topic, events[1200:])
    run_available_now(spark, opts, ck, out)                      # run 2: restart from the checkpoint

    data = out.rows("data")
    seen = [(r["partition"], r["offset"]) for r in data]
    assert len(seen) == n and len(set(seen)) == n                # every record exactly once
    assert sorted(seen) == sorted((i % 4, i // 4) for i in range(n))
    assert not out.rows("error")
    assert {r["timestampType"] for r in data} == {0}             # Spark's code for CreateTime

    # Timestamp punctuations: one per partition per batch, monotone, = newest event time - grace.
    newest: dict[int, int] = {}
    last: dict[int, int] = {}
    for b in sorted(out.batches):
        rows = out.batches[b]
        puncts = [r for r in rows if r["kind"] == "punctuation"]
        assert sorted(r["partition"] for r in puncts) == [0, 1, 2, 3]
        for r in rows:
            if r["kind"] == "data":
                p = r["partition"]
                newest[p] = max(newest.get(p, -1), _ts_ms(r["event_time"]))
        for r in puncts:
            p = r["partition"]
            value = _ts_ms(r["punctuation"])
            assert value == newest[p] - GRACE
            assert value >= last.get(p, value)
            last[p] = value
            assert r["offset"] == max(x["offset"] for x in rows if x["kind"] == "data" and x["partition"] == p) + 1 \
                if any(x["kind"] == "data" and x["partition"] == p for x in rows) else True

    # The modification: once per partition, all in the same (first) batch of run 2, before data.
    mods = out.rows("modification")
    assert sorted(r["partition"] for r in mods) == [0, 1, 2, 3]
    assert {r["modification"] for r in mods} == {command}
    (mod_batch,) = {r["batch"] for r in mods}
    assert mod_batch == max(first_run_batches) + 1
    for p in range(4):
        part_rows = [r for r in out.batches[mod_batch] if r["partition"] == p]
        assert part_rows[0]["kind"] == "modification"
    assert len({r["processing_time"] for r in out.batches[mod_batch]}) == 1

    # Crash during the modification batch: Spark re-runs it from its offset log entry. The replay
    # must give the same rows: data, punctuations, modification and processing time.
    before = {b: sorted(map(repr, rows)) for b, rows in out.batches.items()}
    logged = offset_log(ck, mod_batch)
    forget_batches_from(ck, mod_batch)
    run_available_now(spark, opts, ck, out)
    assert sorted(map(repr, out.batches[mod_batch])) == before[mod_batch]
    assert offset_log(ck, mod_batch) == logged
    data = out.rows("data")
    assert sorted((r["partition"], r["offset"]) for r in data) == sorted((i % 4, i // 4) for i in range(n))
    assert len(out.rows("modification")) == 4                    # not repeated after the replay


def test_batch_read_equals_streaming_read(spark, kafka, tmp_path):
    topic = kafka.topic(4)
    kafka.produce(topic, _events(600, now_ms() - 30_000, seed=3))
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "watermarkDelayMs": str(GRACE), "maxOffsetsPerTrigger": "250"}
    out = BatchCollector()
    run_available_now(spark, opts, str(tmp_path / "ck"), out)
    ending = json.dumps({topic: {str(p): 150 for p in range(4)}})
    batch = (spark.read.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", ending)
             .option("eventTimeField", "ts").option("watermarkDelayMs", str(GRACE)).load())
    cols = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "event_time", "kind"]
    got = sorted(tuple(r[c] for c in cols) for r in batch.collect() if r["kind"] == "data")
    expected = sorted(tuple(r[c] for c in cols) for r in out.rows("data"))
    assert got == expected and len(got) == 600
    # The batch read's one punctuation per partition equals the stream's last one.
    final = {}
    for r in out.rows("punctuation"):
        final[r["partition"]] = r["punctuation"]
    assert {r["partition"]: r["punctuation"] for r in batch.filter("kind = 'punctuation'").collect()} == final

    # minPartitions splits a partition's range over tasks; each piece emits a punctuation and
    # their maximum per partition and batch is the unsplit stream's punctuation. The driver learns
    # each range's newest event time from the tasks' range stats (above), from its own background
    # scan (minPartitions), or scans when the stats topic is off: the same punctuations.
    split, unshared = BatchCollector(), BatchCollector()
    run_available_now(spark, {**opts, "minPartitions": "8"}, str(tmp_path / "ck-split"), split)
    run_available_now(spark, {**opts, "rangeStatsTopic": ""}, str(tmp_path / "ck-unshared"), unshared)
    def per_batch(c: BatchCollector) -> list[dict]:
        out_ = []
        for b in sorted(c.batches):
            best: dict = {}
            for r in c.batches[b]:
                if r["kind"] == "punctuation":
                    best[r["partition"]] = max(best.get(r["partition"], r["punctuation"]), r["punctuation"])
            out_.append(best)
        return out_
    assert any(sum(r["kind"] == "punctuation" for r in rows) > 4 for rows in split.batches.values())
    assert per_batch(split) == per_batch(out) == per_batch(unshared)

    # maxPartitions=1 reads the 4 ranges of a batch in one task: the same rows in every batch.
    class TaskCounter(BatchCollector):
        def __call__(self, df, batch_id: int) -> None:
            tasks[batch_id] = df.rdd.getNumPartitions()
            super().__call__(df, batch_id)

    tasks: dict[int, int] = {}
    packed = TaskCounter()
    run_available_now(spark, {**opts, "maxPartitions": "1"}, str(tmp_path / "ck-packed"), packed)
    assert set(tasks.values()) == {1}
    keep = ("kind", "topic", "partition", "offset", "key", "value", "event_time", "punctuation", "error")
    def rows(c: BatchCollector) -> list[list[str]]:
        return [sorted(repr(tuple(r[k] for k in keep)) for r in c.batches[b]) for b in sorted(c.batches)]
    assert rows(packed) == rows(out)


def test_sink_writes_what_the_query_produced(spark, kafka, tmp_path):
    src, dst = kafka.topic(4), kafka.topic(2, prefix="out")
    events = _events(500, now_ms() - 10_000, seed=5)
    kafka.produce(src, events)
    df = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").option("includeHeaders", "true").load()
          .filter("kind = 'data'").selectExpr("key", "value", "headers",
                                             "CAST(partition % 2 AS INT) AS partition"))
    q = (df.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert q.exception() is None
    written = kafka.consume_all(dst)
    assert sorted((m.key(), m.value()) for m in written) == sorted((e["key"], e["value"]) for e in events)
    by_part = defaultdict(int)
    for m in written:
        by_part[m.partition()] += 1
    assert dict(by_part) == {0: 250, 1: 250}


def test_batch_write(spark, kafka):
    dst = kafka.topic(1, prefix="bw")
    df = spark.createDataFrame([("a", "1"), (None, "2")], "key string, value string")
    (df.write.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
     .option("topic", dst).mode("append").save())
    assert sorted(m.value() for m in kafka.consume_all(dst)) == [b"1", b"2"]
