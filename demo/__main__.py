"""The main job: out-of-order events from Kafka through dataflow-kafka, back to Kafka.

1. Starts a broker (``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded noida-db).
2. Produces click events to topic ``events`` (4 partitions) from a background thread: event
   times follow the wall clock, 20% arrive 0.5 to 3 s late; one partition lags behind.
3. Runs a streaming query ``readStream.format("dataflow-kafka")`` with 1 s micro-batches. Every
   batch: per-partition timestamp punctuations are combined into a low watermark
   (``watermarks.PunctuationTracker``, min over partitions); each click is tagged on time or
   late against the watermark before the batch; rows go to topic ``events-tagged`` through
   ``format("dataflow-kafka")``. Halfway through, a modification command is written to the
   control topic and shows up in one batch, on every partition.
4. Prints a line per micro-batch and a summary read back from the output topic.

Run: ``python -m demo [--seconds 40] [--rate 1000]``. The first one or two micro-batches include
Spark's and the Python workers' start-up (about 15 s here); later ones take about 3 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time


def _produce(bootstrap: str, topic: str, control: str, seconds: float, rate: int, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(42)
    t_end = time.time() + seconds
    i = 0
    sent_command = False
    while time.time() < t_end and not stop.is_set():
        tick = time.time()
        for _ in range(rate // 10):
            now = int(time.time() * 1000)
            late = rng.random() < 0.2
            event_ms = now - (rng.randint(500, 3000) if late else 0)
            part = i % 4
            if part == 3:            # a slow partition: its events are 1.5 s behind
                event_ms -= 1500
            value = {"user": f"u{rng.randint(1, 50)}", "page": rng.choice(["/", "/cart", "/pay"]), "ts": event_ms}
            p.produce(topic, key=value["user"].encode(), value=json.dumps(value).encode(), partition=part)
            i += 1
        if not sent_command and time.time() > t_end - seconds / 2:
            p.produce(control, value=json.dumps({"op": "rebalance", "key_groups": {"3": "worker-1"}}).encode())
            sent_command = True
        p.poll(0)
        time.sleep(max(0.0, 0.1 - (time.time() - tick)))
    p.flush(30)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--rate", type=int, default=1000, help="events per second")
    args = ap.parse_args(argv)

    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import functions as F

    from brokers import kafka_broker
    from datasource import consumer_lag
    from datasource.session import spark_session
    from watermarks import PunctuationTracker

    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        print(f"broker: {broker.kind} at {bs}")
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic("events", 4, 1), NewTopic("events-control", 1, 1),
                                      NewTopic("events-tagged", 4, 1)]).values():
            try:
                f.result(15)
            except Exception as e:  # topic exists on an external cluster
                print(f"note: {e}")
        print("starting Spark ...")
        spark = spark_session(shuffle_partitions=2)
        tracker = PunctuationTracker()
        totals = {"data": 0, "late": 0, "error": 0, "modification": 0}

        def per_batch(df, batch_id: int) -> None:
            df = df.cache()
            before = tracker.low_watermark_ms
            rows = df.filter("kind <> 'data'").collect()
            for r in rows:
                if r.kind == "punctuation" and r.punctuation is not None:
                    tracker.update(f"{r.topic}-{r.partition}", int(r.punctuation.timestamp() * 1000),
                                   r.offset, int(r.processing_time.timestamp() * 1000))
            mods = [r.modification for r in rows if r.kind == "modification"]
            errors = [r.error for r in rows if r.kind == "error"]
            wm_expr = "NULL" if before is None else f"timestamp_millis({before})"
            tagged = (df.filter("kind = 'data'")
                      .selectExpr("key", f"to_json(named_struct('click', parse_json(CAST(value AS STRING)), "
                                  f"'late', coalesce(event_time < {wm_expr}, false), 'partition', partition, "
                                  f"'offset', offset)) AS value"))
            counts = {bool(r.late): r["count"] for r in df.filter("kind = 'data'").groupBy(
                F.coalesce(F.expr(f"event_time < {wm_expr}"), F.lit(False)).alias("late")).count().collect()}
            n, late = sum(counts.values()), counts.get(True, 0)
            if n:
                tagged.write.format("dataflow-kafka").option("kafka.bootstrap.servers", bs) \
                    .option("topic", "events-tagged").mode("append").save()
            df.unpersist()
            totals["data"] += n
            totals["late"] += late
            totals["error"] += len(errors)
            totals["modification"] += len(mods)
            wm = tracker.low_watermark_ms
            puncts = {k: _clock(v) for k, v in tracker.source_punctuations().items()}
            print(f"batch {batch_id:3d}: {n:6d} clicks, {late:5d} late vs watermark "
                  f"{_clock(before)} | "
                  f"low watermark now {_clock(wm)} "
                  f"| punctuation per partition {puncts}"
                  + (f" | MODIFICATION on {len(mods)} partitions: {mods[0]}" if mods else "")
                  + (f" | {len(errors)} error rows: {errors[0]}" if errors else ""))

        stop = threading.Event()
        producer = threading.Thread(target=_produce, args=(bs, "events", "events-control", args.seconds,
                                                            args.rate, stop), daemon=True)
        source = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", "events").option("startingOffsets", "earliest")
                  .option("eventTimeField", "ts").option("watermarkDelayMs", "1000")
                  .option("controlTopic", "events-control").load())
        ck = tempfile.mkdtemp(prefix="dataflow-kafka-demo-")
        query = (source.writeStream.foreachBatch(per_batch).option("checkpointLocation", ck)
                 .trigger(processingTime="1 second").start())
        producer.start()
        producer.join()
        time.sleep(3)
        query.processAllAvailable()
        lag = consumer_lag(query.lastProgress)
        query.stop()
        written = _topic_size(bs, "events-tagged")
        print("\nsummary")
        print(f"  clicks read: {totals['data']}, tagged late against the low watermark: {totals['late']}")
        print(f"  records in output topic events-tagged: {written} (at-least-once sink)")
        print(f"  modification rows: {totals['modification']} (one per partition), error rows: {totals['error']}")
        print(f"  consumer lag at stop (records behind latest): {lag}")
        print(f"  checkpoint: {ck}")
        spark.stop()


def _clock(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


def _topic_size(bootstrap: str, topic: str) -> int:
    from datasource import kafka_read

    c = kafka_read.consumer({"bootstrap.servers": bootstrap})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(h - lo for lo, h in (kafka_read.watermarks(c, topic, p) for p in parts))
    finally:
        c.close()


if __name__ == "__main__":
    main()
