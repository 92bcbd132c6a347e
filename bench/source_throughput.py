"""Source throughput: rows/s of ``format("dataflow-kafka")`` into Spark's no-op sink, against the
raw confluent-kafka consume rate on the same broker and data, measured in the same run.

    python -m bench.source_throughput [--records 400000] [--partitions 4] [--value-bytes 100]

Prints both rates and their ratio (target: >= 0.5). The baseline is one Python process
consuming every partition with ``Consumer.consume(10000)`` and touching each record's key, value,
offset and timestamp (what any consumer must do). The Spark side runs the streaming query with
``Trigger.AvailableNow`` (driver punctuation scan included) and, separately, the batch read; each
is timed from query start to end, after a warm-up query on another topic; for the stream the
rate inside its micro-batches (sum of ``triggerExecution``, which includes the driver's
punctuation scan in ``latestOffset``) is printed too.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench._kafka import create_topics, produce_json


def _produce(bootstrap: str, topic: str, n: int, partitions: int, value_bytes: int) -> None:
    now = int(time.time() * 1000)
    pad = "x" * max(0, value_bytes - 40)
    produce_json(bootstrap, topic, n, partitions,
                 lambda i, rng: (b"k%d" % (i % 1000), {"i": i, "ts": now - (i % 977), "p": pad}),
                 timestamp=lambda i: now + i // 100)


def _raw_consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    from confluent_kafka import TopicPartition

    from datasource import kafka_read

    c = kafka_read.consumer({"bootstrap.servers": bootstrap})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    t0 = time.perf_counter()
    got = 0
    sink = 0
    while got < n:
        for m in c.consume(10000, timeout=1.0):
            if m.error() is None:
                got += 1
                sink += len(m.value()) + m.offset() + m.timestamp()[1] + len(m.key() or b"")
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def _spark_stream(spark, bootstrap: str, topic: str, n: int, options: dict) -> float:
    reader = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    t0 = time.perf_counter()
    q = (reader.load().writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp())
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t0
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in batches)
    assert rows >= n, f"query read {rows} rows, expected at least {n}"
    in_batches = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    scan = sum(p["durationMs"].get("latestOffset", 0) for p in batches) / 1000
    return n / dt, n / in_batches, scan / in_batches


def _spark_batch(spark, bootstrap: str, topic: str, n: int) -> float:
    t0 = time.perf_counter()
    (spark.read.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
     .load().write.format("noop").mode("overwrite").save())
    return n / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    args = ap.parse_args(argv)

    from brokers import kafka_broker
    from datasource.session import spark_session

    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        create_topics(bs, {"bench": args.partitions, "warmup": args.partitions})
        _produce(bs, "warmup", 20_000, args.partitions, args.value_bytes)
        _produce(bs, "bench", args.records, args.partitions, args.value_bytes)
        spark = spark_session(shuffle_partitions=2)
        _spark_stream(spark, bs, "warmup", 20_000, {})  # starts the Python workers
        raw = _raw_consume(bs, "bench", args.partitions, args.records)
        streams = {
            "stream, record-timestamp event time": _spark_stream(spark, bs, "bench", args.records, {}),
            "stream, JSON eventTimeField": _spark_stream(spark, bs, "bench", args.records, {"eventTimeField": "ts"}),
        }
        batch = _spark_batch(spark, bs, "bench", args.records)
        raw2 = _raw_consume(bs, "bench", args.partitions, args.records)
        raw = max(raw, raw2)
        print(f"broker: {broker.kind}; {args.records} records x ~{args.value_bytes} B over {args.partitions} "
              f"partitions; Spark local[2]; cores: {os.cpu_count()}")
        print(f"{'raw confluent-kafka consume (1 process, best of 2)':55s} {raw:12,.0f} rec/s   ratio 1.00")
        for name, (rate, steady, scan_share) in streams.items():
            print(f"{'dataflow-kafka ' + name:55s} {rate:12,.0f} rows/s  ratio {rate / raw:.2f}   "
                  f"(in micro-batches, without query start/stop: {steady:,.0f} rows/s, ratio {steady / raw:.2f}; "
                  f"driver punctuation scan {scan_share:.0%} of batch time)")
        print(f"{'dataflow-kafka batch read':55s} {batch:12,.0f} rows/s  ratio {batch / raw:.2f}")
        spark.stop()


if __name__ == "__main__":
    main()
