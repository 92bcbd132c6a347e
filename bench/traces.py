"""The Yahoo streaming benchmark query three ways: typed DAG, hand-written stage, Spark's window().

- **typed**: :func:`traces.examples.yahoo.build` compiled by :func:`traces.spark.to_spark`
  (``ViewsToCampaigns`` in the ingest router, ``WindowCount`` as a ``TraceStage``: Table 3 per
  campaign, blocks of 1 s, 10-block windows);
- **hand**: the same query written directly as one stage of the stage layer, with the same Python
  function (:func:`traces.examples.yahoo.view_campaign`) in its router and a per-campaign dict of
  1 s slice counts summed over the last 10 slices at every watermark step: what one would write
  without the typed layer;
- **native**: Spark SQL only: JSON fields, ``event_type = 'view'``, a broadcast join with the ad
  table, ``groupBy(window(event_time, "10 seconds", "1 second"), campaign).count()`` (append).

All read the same pre-produced topic in micro-batches of ``--batch`` records (AvailableNow, noop
sink). Per query: records/s = input rows / summed ``triggerExecution`` of batches with data, and
the median batch duration. One query of each kind runs first and is discarded; then runs alternate,
the order rotated every repeat. Target: typed / hand-written records/s >= 0.8.

Run under the benchmark lock: ``flock /tmp/dfk-bench.lock .venv/bin/python -m bench.traces [--quick]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench._kafka import dataflow_kafka_source
from bench._stream import loadavg
from dataflow_kafka.keygroups import PythonRouter, Stage, StageInput, StageOutput, key_group_of
from dataflow_kafka.keygroups.stage import Dropped
from dataflow_kafka.traces.examples.yahoo import ADS, build, events, view_campaign


@dataclass(eq=False)
class HandWindowCount(Stage):
    """The Yahoo query as one hand-written stage: per campaign, 1 s slice counts, and at every
    watermark step the sum of the last ``window_slices`` slices (windows ending on the step)."""

    slide_ms: int = 1_000
    window_slices: int = 10
    num_key_groups: int = 2
    name: str | None = "hand"

    def routing(self):
        return PythonRouter(self._route, [("campaign", "string")])

    def _route(self, frame: pd.DataFrame):
        camps = [view_campaign(json.loads(bytes(v))) for v in frame["value"]]
        keep = np.asarray([c is not None for c in camps], dtype=bool)
        kept = [c for c in camps if c is not None]
        rows = pd.DataFrame({"campaign": kept,
                             "event_time_ms": frame["event_time_ms"].to_numpy()[keep].astype(np.int64)})
        return rows, np.asarray([key_group_of(c, self.num_key_groups) for c in kept], dtype=np.int64)

    def output_columns(self):
        return [("campaign", "string"), ("window_end_ms", "bigint"), ("count", "bigint")]

    def new_state(self):                    # the default state codec
        return {"slices": {}, "emitted": None}

    def process(self, state, batch: StageInput) -> StageOutput:
        slices, done, late = state["slices"], state["emitted"], {}
        data = batch.data
        if data is not None and len(data):
            for c, ts in zip(data["campaign"], data["event_time_ms"]):
                s = int(ts) // self.slide_ms
                if done is not None and s < done:
                    late[c] = late.get(c, 0) + 1
                    continue
                per = slices.setdefault(c, {})
                per[s] = per.get(s, 0) + 1
        rows = []
        if batch.watermark_ms is not None:
            target = batch.watermark_ms // self.slide_ms
            for end in range(target if done is None else done + 1, target + 1):
                for c, per in slices.items():
                    n = sum(per.get(i, 0) for i in range(end - self.window_slices, end))
                    if n:
                        rows.append((c, end * self.slide_ms, n))
            for per in slices.values():
                for s in [s for s in per if s < target - self.window_slices]:
                    del per[s]
            state["emitted"] = target
        frame = pd.DataFrame(rows, columns=["campaign", "window_end_ms", "count"])
        frame["event_time_ms"] = frame["window_end_ms"] - 1
        return StageOutput(frame, batch.watermark_ms, [Dropped(c, "late", n) for c, n in late.items()])


def query(spark, kind: str, src, key_groups: int):
    from pyspark.sql import functions as F

    from dataflow_kafka.keygroups import Pipeline
    from dataflow_kafka.traces.spark import to_spark

    if kind == "typed":
        return to_spark(build(), src, num_key_groups=key_groups)
    if kind == "hand":
        return Pipeline([HandWindowCount(num_key_groups=key_groups)]).apply(src)
    ads = spark.createDataFrame(sorted(ADS.items()), ["ad_id", "campaign"])
    body = F.col("value").cast("string")
    views = (src.filter("kind = 'data'")
             .select(F.get_json_object(body, "$.event_type").alias("event_type"),
                     F.get_json_object(body, "$.ad_id").alias("ad_id"), "event_time")
             .filter("event_type = 'view'").join(F.broadcast(ads), "ad_id"))
    return (views.withWatermark("event_time", "0 seconds")
            .groupBy(F.window("event_time", "10 seconds", "1 second"), "campaign").count())


def run(spark, bootstrap: str, topic: str, kind: str, batch: int, key_groups: int) -> dict:
    out = query(spark, kind, dataflow_kafka_source(spark, bootstrap, topic, batch, eventTimeField="ts"), key_groups)
    q = (out.writeStream.format("noop").outputMode("append")
         .option("checkpointLocation", tempfile.mkdtemp(prefix=f"traces-{kind}-")).trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise q.exception()
    prog = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in prog]
    rows = sum(p["numInputRows"] for p in prog)
    return {"kind": kind, "batches": len(prog), "rows": rows, "durations": durations,
            "records_per_s": rows / sum(durations) if durations else 0.0,
            "median_batch_s": statistics.median(durations) if durations else 0.0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer records, one repeat")
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--batch", type=int, default=5_000, help="records per micro-batch")
    ap.add_argument("--key-groups", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--csv", default=None, help="write every batch's duration here")
    ap.add_argument("--plot", default=None, help="write a figure of every batch's duration here (PNG)")
    ap.add_argument("--replot", default=None, metavar="CSV", help="only redraw --plot from a CSV of --csv")
    args = ap.parse_args(argv)
    if args.replot:
        replot(args.replot, args.plot or "traces.png")
        return
    if args.quick:
        args.records, args.repeat = 20_000, 1

    from bench._kafka import create_topics, produce_json
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    kinds = ["typed", "hand", "native"]
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        topic = f"yahoo-{int(time.time())}"
        create_topics(bs, {topic: args.partitions})
        base = int(time.time() * 1000) - args.records            # 1 ms apart: 1,000 events per 1 s block
        evs = list(events(args.records, base, spacing_ms=1.0))
        produce_json(bs, topic, args.records, args.partitions, lambda i, rng: evs[i])
        spark = spark_session(shuffle_partitions=args.partitions)
        print(f"{args.records} events in batches of {args.batch}, {args.key_groups} key groups, {args.partitions} "
              f"partitions; loadavg {loadavg()}")
        for kind in kinds:                 # the first query of each kind pays code generation: discarded
            run(spark, bs, topic, kind, args.batch, args.key_groups)
        results: dict[str, list[dict]] = {k: [] for k in kinds}
        csv_rows = []
        for r in range(args.repeat):
            order = kinds[r % 3:] + kinds[:r % 3]
            for kind in order:
                res = run(spark, bs, topic, kind, args.batch, args.key_groups)
                results[kind].append(res)
                csv_rows += [(r, kind, i, d) for i, d in enumerate(res["durations"])]
                print(f"run {r} {kind:6}: {res['batches']} batches, {res['rows']} rows, "
                      f"{res['records_per_s']:.0f} records/s, median batch {res['median_batch_s']:.3f} s")
        rate = {k: statistics.median(x["records_per_s"] for x in v) for k, v in results.items()}
        batch = {k: statistics.median(x["median_batch_s"] for x in v) for k, v in results.items()}
        for k in kinds:
            print(f"{k:6}: {rate[k]:.0f} records/s, median batch {batch[k]:.3f} s")
        print(f"typed/hand-written records/s: {rate['typed'] / rate['hand']:.2f} (target >= 0.8); "
              f"typed/native: {rate['typed'] / rate['native']:.2f}; "
              f"loadavg {loadavg()}")
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["run", "query", "batch", "trigger_execution_s"])
                w.writerows(csv_rows)
        if args.plot:
            plot(csv_rows, args.plot)
        spark.stop()


def plot(rows: list[tuple], path: str) -> None:
    """Every batch's duration per query (one box each; rows ``(run, query, batch, seconds)``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(dict.fromkeys(k for _, k, _, _ in rows))
    per = {k: [float(d) for _, q, _, d in rows if q == k] for k in kinds}
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.boxplot([per[k] for k in kinds],
               tick_labels=[f"{k}\nmedian {statistics.median(per[k]):.2f} s" for k in kinds])
    ax.set_ylabel("micro-batch duration (s)")
    ax.set_title("Yahoo query, 5,000 events per batch: typed vs hand-written vs window()", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def replot(csv_path: str, path: str) -> None:
    with open(csv_path) as f:
        plot([tuple(r) for r in list(csv.reader(f))[1:]], path)


if __name__ == "__main__":
    main()
