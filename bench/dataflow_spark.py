"""Elements/s of the Dataflow Spark operator (``watermarks.spark.apply_windowing``) end to end,
against Spark's built-in windowed aggregation on the same Kafka input, in the same run.

    python -m bench.dataflow_spark [--records 50000] [--partitions 4] [--batches 5]

Workload (as ``bench/dataflow_engine.py``): keyed integers (100 keys) in a JSON value
``{"ts", "score"}``, event times 10 ms apart on average with 3 s of jitter, 2 % delayed by 30 s
(late data). Both queries read ``format("dataflow-kafka")`` with ``eventTimeField=ts`` and
``maxOffsetsPerTrigger = records / batches`` under ``Trigger.AvailableNow``, so both see the same
micro-batches, and write through ``foreachBatch`` counting the rows (one Spark action per batch
on each side). Each is timed from query start to termination after a warm-up of the same query
on another topic.

* operator: fixed 60 s windows, ``AfterWatermark(early=AfterProcessingTime(10_000),
  late=AfterCount(1))``, accumulating, 60 s allowed lateness, sums; ``num_key_groups=2``
  (= shuffle partitions on local[2]). Watermark: min over partitions of the newest event time.
* Spark: ``withWatermark("event_time", "60 seconds").groupBy(key, window(event_time, "60
  seconds")).sum(score)`` in update mode (an updated row per changed window per batch, the
  nearest Spark has to early + late refinements; it has no on-time pane, pane index or
  retraction). Spark's watermark lags the max event time by 60 s, so it keeps windows for as long
  as the operator's allowed lateness.

The ratio is operator elements/s divided by Spark elements/s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench._kafka import create_topics, dataflow_kafka_source, produce_json

KEYS = 100


def _produce(bootstrap: str, topic: str, n: int, partitions: int, seed: int = 7) -> None:
    now = int(time.time() * 1000)
    base = 1_700_000_000_000

    def record(i, rng):
        ts = base + i * 10 + rng.randint(0, 3_000) - (30_000 if rng.random() < 0.02 else 0)
        return b"k%d" % rng.randrange(KEYS), {"ts": ts, "score": rng.randint(0, 9)}

    produce_json(bootstrap, topic, n, partitions, record, seed, timestamp=lambda i: now)


def _source(spark, bootstrap: str, topic: str, max_offsets: int):
    return dataflow_kafka_source(spark, bootstrap, topic, max_offsets, eventTimeField="ts")


VALUE = "CAST(get_json_object(CAST(value AS STRING), '$.score') AS LONG)"


def operator_query(src):
    from dataflow_kafka.watermarks import AccumulationMode, AfterCount, AfterProcessingTime, AfterWatermark
    from dataflow_kafka.windowing import Sum, TumblingWindow
    from dataflow_kafka.watermarks.spark import apply_windowing

    return apply_windowing(src, "CAST(key AS STRING)", VALUE, TumblingWindow(60_000),
                           AfterWatermark(early=AfterProcessingTime(10_000), late=AfterCount(1)),
                           AccumulationMode.ACCUMULATING, allowed_lateness_ms=60_000,
                           aggregations=[Sum()], num_key_groups=2)


def spark_query(src):
    from pyspark.sql import functions as F

    return (src.where("kind = 'data'").withColumn("score", F.expr(VALUE))
            .withWatermark("event_time", "60 seconds")
            .groupBy(F.col("key").cast("string").alias("key"), F.window("event_time", "60 seconds"))
            .agg(F.sum("score").alias("value")))


def _run(df, mode: str, n: int) -> tuple[float, int, int]:
    rows = [0]

    def count(batch_df, _):
        rows[0] += batch_df.count()

    t0 = time.perf_counter()
    q = (df.writeStream.foreachBatch(count).outputMode(mode).option("checkpointLocation", tempfile.mkdtemp())
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t0
    if q.exception() is not None:
        raise q.exception()
    read = sum(p["numInputRows"] for p in q.recentProgress)
    assert read >= n, f"query read {read} rows, expected at least {n}"
    return dt, rows[0], len([p for p in q.recentProgress if p["numInputRows"] > 0])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args(argv)


    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    n, per_batch = args.records, -(-args.records // args.batches)
    warm_n = min(5_000, n)
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        create_topics(bs, {"bench": args.partitions, "warmup": args.partitions})
        _produce(bs, "warmup", warm_n, args.partitions)
        _produce(bs, "bench", n, args.partitions)
        spark = spark_session(shuffle_partitions=2)
        results = {}
        for name, build, mode in (("dataflow operator (apply_windowing)", operator_query, "append"),
                                  ("Spark window() + sum, update mode", spark_query, "update")):
            _run(build(_source(spark, bs, "warmup", -(-warm_n // 2))), mode, warm_n)
            results[name] = _run(build(_source(spark, bs, "bench", per_batch)), mode, n)
        print(f"broker: {broker.kind}; {n} records over {args.partitions} partitions, ~{args.batches} "
              f"micro-batches; Spark local[2]; cores: {os.cpu_count()}; load avg {os.getloadavg()[0]:.1f}")
        for name, (dt, out_rows, batches) in results.items():
            print(f"{name:40s} {n / dt:10,.0f} elements/s  ({dt:6.1f} s, {batches} batches, {out_rows} output rows)")
        (op_dt, _, _), (sp_dt, _, _) = results.values()
        print(f"operator/spark elements/s = {sp_dt / op_dt:.2f}")
        spark.stop()


if __name__ == "__main__":
    main()
