"""Per-micro-batch cost of ``format("dataflow-kafka")`` with small batches, one task per
topic-partition (Spark's Kafka source layout, the baseline) against ``maxPartitions`` 2 and 1.

    python -m bench.source_batch_cost [--records 12000] [--per-batch 400] [--partitions 4] [--rounds 2]

Produces ``--records`` JSON records over ``--partitions`` partitions on the embedded broker (or
``KAFKA_BOOTSTRAP_SERVERS``), then reads them with ``Trigger.AvailableNow`` and
``maxOffsetsPerTrigger = --per-batch`` into the no-op sink, once per layout, alternating, for
``--rounds`` rounds on ``local[2]``. Prints, per layout and round, the number of batches, the
median ``triggerExecution`` and ``addBatch`` per batch, and the ratio of the baseline's median
trigger time to the layout's (above 1: the layout's batches are cheaper).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from bench._kafka import create_topics, dataflow_kafka_source, produce_json

LAYOUTS = {"one task per partition": {}, "maxPartitions=2": {"maxPartitions": "2"},
           "maxPartitions=1": {"maxPartitions": "1"}}


def _run(spark, bootstrap: str, topic: str, per_batch: int, options: dict) -> tuple[int, float, float]:
    df = dataflow_kafka_source(spark, bootstrap, topic, per_batch, **options)
    q = (df.writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp())
         .trigger(availableNow=True).start())
    q.awaitTermination()
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    return (len(batches), statistics.median(p["durationMs"]["triggerExecution"] for p in batches),
            statistics.median(p["durationMs"]["addBatch"] for p in batches))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=12_000)
    ap.add_argument("--per-batch", type=int, default=400)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)

    import os

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        create_topics(bs, {"batch-cost": args.partitions})
        now = int(time.time() * 1000)
        produce_json(bs, "batch-cost", args.records, args.partitions, lambda i, rng: (None, {"ts": now + i, "v": i}))
        spark = spark_session(shuffle_partitions=2)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        print(f"broker: {broker.kind}; {args.records} records over {args.partitions} partitions, "
              f"{args.per_batch} per batch; Spark local[2]; cores: {os.cpu_count()}; "
              f"load average {os.getloadavg()[0]:.1f}")
        for rnd in range(args.rounds):
            base = None
            for name, options in LAYOUTS.items():
                n, trigger, add = _run(spark, bs, "batch-cost", args.per_batch, options)
                base = base or trigger
                print(f"round {rnd + 1}  {name:24s} {n:4d} batches  median trigger {trigger:6.0f} ms  "
                      f"addBatch {add:6.0f} ms  ratio {base / trigger:.2f}", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        spark.stop()


if __name__ == "__main__":
    main()
