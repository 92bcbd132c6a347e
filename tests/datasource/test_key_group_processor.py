"""PunctuatedKeyGroupProcessor end to end: Kafka → key groups → transformWithStateInPandas."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from keygroups import PunctuatedKeyGroupProcessor, with_key_groups
from tests.support import BatchCollector, now_ms

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

OUT = "key_group int, batch_rows long, total_rows long, low_watermark_ms long, mods string"


class CountingOperator(PunctuatedKeyGroupProcessor):
    """Counts data rows per key group; reports the group's low watermark and modifications."""

    def load(self, blob):
        return {"total": 0} if blob is None else json.loads(blob)

    def dump(self, engine):
        return json.dumps(engine).encode()

    def on_batch(self, engine, batch):
        engine["total"] += len(batch.data)
        yield pd.DataFrame({"key_group": [batch.key_group], "batch_rows": [len(batch.data)],
                            "total_rows": [engine["total"]], "low_watermark_ms": [batch.low_watermark_ms],
                            "mods": [json.dumps(batch.modifications)]})


def test_processor_sees_every_punctuation_and_modification_per_key_group(spark, kafka, tmp_path):
    topic, control = kafka.topic(4), kafka.topic(1, prefix="ctl")
    base = now_ms() - 60_000
    events = [{"key": b"k%d" % (i % 17), "value": json.dumps({"ts": base + i * 10}).encode(), "partition": i % 4}
              for i in range(800)]
    kafka.produce(topic, events[:400])
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("controlTopic", control).load())
    out_df = with_key_groups(src, "key", 3).groupBy("key_group").transformWithStateInPandas(
        CountingOperator(), OUT, "Append", "None")
    out = BatchCollector()
    ck = str(tmp_path / "ck")

    def run():
        q = out_df.writeStream.foreachBatch(out).option("checkpointLocation", ck).outputMode("append") \
            .trigger(availableNow=True).start()
        q.awaitTermination(300)
        assert q.exception() is None

    run()
    kafka.produce(control, [{"value": b'{"op": "noop"}', "partition": 0}])
    kafka.produce(topic, events[400:])
    run()                                            # restart from the checkpoint: state carries over
    rows = out.rows()
    for b in out.batches:
        assert sorted(r["key_group"] for r in out.batches[b]) == [0, 1, 2]   # every group, every batch
    final = {r["key_group"]: r["total_rows"] for r in rows if r["batch"] == max(out.batches)}
    assert sum(final.values()) == 800
    # Low watermark = min over the 4 partitions of their newest event time (grace 0).
    newest = {p: max(base + i * 10 for i in range(800) if i % 4 == p) for p in range(4)}
    assert {r["low_watermark_ms"] for r in rows if r["batch"] == max(out.batches)} == {min(newest.values())}
    mods = [(r["batch"], r["key_group"]) for r in rows if json.loads(r["mods"]) == ['{"op": "noop"}']]
    assert len(mods) == 3 and len({b for b, _ in mods}) == 1              # once per group, same batch
