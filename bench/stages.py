"""Fused against unfused stages: three stages keyed by the same key, one query each way.

The pipeline: 1-second tumbling sums per key (slicer) -> 10-second sliding windows over those sums
(slicer) -> early and on-time panes of 30-second fixed windows over the sliding maxima (Dataflow
trigger). All three are keyed by the same key with the same number of key groups, so the stage
layer runs them in **one** ``transformWithStateInPandas`` operator (fused); ``fuse=False`` gives
the plan with one operator per stage (three shuffles, state round trips and commits per batch).

Both plans read the same pre-produced topic in micro-batches of ``--batch`` records
(AvailableNow, ``maxOffsetsPerTrigger``); a batch's duration is ``durationMs.triggerExecution``
from the query's progress, the first ``--warmup`` batches left out. One query of each plan runs
first and is discarded; then runs alternate, the order swapped every repeat, so both see the same
machine; the ratio is fused/unfused of the medians, per run and over all runs. Target:
at most 0.7.

Run: ``python -m bench.stages [--quick] [--repeat 3] [--csv PATH]``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time


def pipeline(key_groups: int):
    from dataflow_kafka.keygroups import Pipeline
    from dataflow_kafka.slicer.stage import SlicerStage
    from dataflow_kafka.watermarks import AfterCount, AfterWatermark
    from dataflow_kafka.watermarks.stage import WindowingStage
    from dataflow_kafka.windowing import Max, SlidingWindow, Sum, TumblingWindow

    return Pipeline([
        SlicerStage(key="CAST(key AS STRING)", value="CAST(get_json_object(CAST(value AS STRING), '$.v') AS DOUBLE)",
                    windows={"1s": TumblingWindow(1_000)}, aggregations=[Sum()], allowed_lateness_ms=0,
                    num_key_groups=key_groups, name="per_second"),
        SlicerStage(key="key", value="sum", windows={"10s": SlidingWindow(10_000, 2_000)}, aggregations=[Max()],
                    allowed_lateness_ms=0, num_key_groups=key_groups, name="sliding"),
        WindowingStage(key="key", value="max", windows=TumblingWindow(30_000),
                       trigger=AfterWatermark(early=AfterCount(1)), accumulation_mode="accumulating",
                       aggregations=[Max()], num_key_groups=key_groups, name="panes"),
    ])


def produce(bootstrap: str, topic: str, n: int, keys: int, partitions: int) -> None:
    from bench._kafka import produce_json

    base = int(time.time() * 1000) - n * 5

    def record(i, rng):
        return f"k{rng.randrange(keys)}".encode(), {"ts": base + i * 5 - rng.randrange(300), "v": rng.randrange(100)}

    produce_json(bootstrap, topic, n, partitions, record)


def run(spark, bootstrap: str, topic: str, fuse: bool, batch: int, key_groups: int) -> tuple[list[float], int]:
    from dataflow_kafka.keygroups.pipeline import stateful_operators

    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("maxOffsetsPerTrigger", str(batch)).load())
    out = pipeline(key_groups).apply(src, fuse=fuse)
    ops = stateful_operators(out)
    q = (out.writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp(prefix="stages-ck-"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise q.exception()
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in q.recentProgress
                 if p.get("numInputRows", 0) > 0]
    return durations, ops


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer records")
    ap.add_argument("--records", type=int, default=40_000)
    ap.add_argument("--batch", type=int, default=2_000, help="records per micro-batch")
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--key-groups", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2, help="first batches left out")
    ap.add_argument("--csv", default=None, help="write every batch's duration here")
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.repeat = 16_000, 2

    from bench._kafka import create_topics
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        topic = f"stages-{int(time.time())}"
        create_topics(bs, {topic: args.partitions})
        produce(bs, topic, args.records, args.keys, args.partitions)
        spark = spark_session(shuffle_partitions=args.partitions)
        rows, medians = [], {True: [], False: []}
        print(f"{args.records} records in batches of {args.batch}, {args.keys} keys, {args.key_groups} key groups, "
              f"{args.partitions} partitions; loadavg {open('/proc/loadavg').read().split()[:3]}")
        for fuse in (True, False):      # a first query of each plan pays code generation: discarded
            run(spark, bs, topic, fuse, args.batch, args.key_groups)
        for r in range(args.repeat):
            for fuse in ((True, False) if r % 2 == 0 else (False, True)):
                d, ops = run(spark, bs, topic, fuse, args.batch, args.key_groups)
                steady = d[args.warmup:] or d
                med = statistics.median(steady)
                medians[fuse].append(med)
                rows += [(r, "fused" if fuse else "unfused", i, x) for i, x in enumerate(d)]
                print(f"run {r} {'fused  ' if fuse else 'unfused'}: {ops} stateful operators, {len(d)} batches, "
                      f"median {med:.3f} s (all: {' '.join(f'{x:.2f}' for x in d)})")
            print(f"run {r} fused/unfused median batch: {medians[True][-1] / medians[False][-1]:.2f}")
        ratio = statistics.median(medians[True]) / statistics.median(medians[False])
        print(f"fused/unfused median batch over {args.repeat} runs: {ratio:.2f} (target <= 0.70); "
              f"loadavg {open('/proc/loadavg').read().split()[:3]}")
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["run", "plan", "batch", "trigger_execution_s"])
                w.writerows(rows)
        spark.stop()


if __name__ == "__main__":
    main()
