"""A first dataflow-kafka pipeline, with nothing but ``import dataflow_kafka``.

Out-of-order purchases go to an embedded Apache Kafka broker; one pipeline (per-user tumbling
windows in the slicer, then an hourly maximum per user with Dataflow triggers) runs on Spark
through ``format("dataflow-kafka")`` and, on the same micro-batches, locally without Spark. Both
give the same final windows; the script prints them and exits non-zero if they differ.

Run from anywhere: ``python docs/examples/first_pipeline.py`` (about a minute: Kafka and Spark
start). Uses ``KAFKA_BOOTSTRAP_SERVERS`` if set.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time

import dataflow_kafka as dk
from dataflow_kafka.brokers.admin import create_topics, unique_topic
from dataflow_kafka.datasource.replay import BatchCollector, read_topic, source_batches


def amount(frame):
    """The purchase amount of each record (a JSON value): read the same way by Spark and locally."""
    return [float(json.loads(v)["amount"]) for v in frame["value"]]


def build_pipeline() -> dk.Pipeline:
    per_minute = dk.SlicerStage(key="key", value=dk.Computed(amount, "double"),
                                windows={"1m": dk.TumblingWindow(60_000)}, aggregations=[dk.Sum(), dk.Count()],
                                allowed_lateness_ms=30_000)
    biggest_minute = dk.WindowingStage(key="key", value="sum", windows=dk.TumblingWindow(3_600_000),
                                       aggregations=[dk.Max()], trigger=dk.AfterWatermark(),
                                       accumulation_mode="accumulating", allowed_lateness_ms=3_600_000)
    return per_minute.then(biggest_minute)


def purchases(n: int = 400, seed: int = 7) -> list[tuple[bytes, bytes]]:
    """``n`` purchases of 5 users over 10 minutes, a fifth of them up to 20 s late."""
    rng = random.Random(seed)
    start = int(time.time() * 1000) // 60_000 * 60_000 - 20 * 60_000
    out = []
    for i in range(n):
        ts = start + i * 1_500 - (rng.randint(0, 20_000) if rng.random() < 0.2 else 0)
        out.append((f"user-{rng.randint(1, 5)}".encode(),
                    json.dumps({"ts": ts, "amount": round(rng.uniform(1, 100), 2)}).encode()))
    return out


def main() -> int:
    from confluent_kafka import Producer

    pipeline = build_pipeline()
    with dk.kafka_broker() as broker:
        bs = broker.bootstrap_servers
        topic = unique_topic("purchases")
        create_topics(bs, {topic: 2})
        producer = Producer({"bootstrap.servers": bs})
        for i, (key, value) in enumerate(purchases()):
            producer.produce(topic, value, key, partition=i % 2)
        producer.flush(30)

        spark = dk.spark_session()
        events = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
                  .option("maxOffsetsPerTrigger", "150").option("endOfInput", "punctuate").load())
        out = BatchCollector()
        checkpoint = tempfile.mkdtemp(prefix="first-pipeline-")
        query = (pipeline.apply(events).writeStream.foreachBatch(out).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination(600)
        if query.exception() is not None:
            raise query.exception()
        spark.stop()

        # The same pipeline without Spark, on the micro-batches the query read (from its offset log).
        batches = source_batches(read_topic(bs, topic), checkpoint, sorted(out.batches))
        local = pipeline.run_local(batches)

    import pandas as pd

    on_spark = dk.current_results(pd.DataFrame(out.rows()), pipeline.stages[-1])
    locally = dk.current_results(local.result if hasattr(local, "result") else local, pipeline.stages[-1])
    columns = ["key", "window_start_ms", "window_end_ms", "max"]
    # rows collected from Spark hold nulls beside integers (float columns); compare as int64
    show = lambda f: (f[columns].astype({"window_start_ms": "int64", "window_end_ms": "int64"})
                      .sort_values(columns[:2]).reset_index(drop=True))
    print(show(on_spark).to_string())
    same = show(on_spark).astype(str).equals(show(locally).astype(str))
    print(f"{len(on_spark)} final windows on Spark; the local run gives the same: {same}")
    return 0 if same and len(on_spark) else 1


if __name__ == "__main__":
    sys.exit(main())
