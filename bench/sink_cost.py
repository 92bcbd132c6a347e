"""Per-micro-batch cost of the dataflow-kafka sink: ``format("dataflow-kafka")`` -> data rows ->
the project's sink, against the same query into Spark's ``noop`` sink (the baseline), side by side.

    python -m bench.sink_cost [--quick] [--runs 3] [--seconds 20] [--csv bench/out/sink_cost.csv]

Input: a trickle of about 20 JSON records/s (even gaps) to a 2-partition topic on the embedded
broker (or ``KAFKA_BOOTSTRAP_SERVERS``) for the whole benchmark; every query reads from
``latest`` with Spark's default trigger (the next micro-batch starts when the previous one ends and
new data is there), ``spark_session()`` defaults on ``local[2]``. Variants, each a fresh query and
checkpoint, in the same order within a run (reversed every other run, so a drift of the machine's
load hits both ends alike):

* ``noop``: the baseline.
* ``sink``: the project's sink (one producer per Python worker, reused across micro-batches).
* ``sink, producer per task``: the same sink with its cached producer dropped after every task,
  which reproduces the sink before producer reuse (a new idempotent producer in each task).
* ``python null sink``: a Python data source sink that drops its rows: the cost of any Python
  sink in Spark 4.3, without Kafka.

Per variant and run: a warm-up (``--warmup`` s after the first progress event), then the median
``durationMs.triggerExecution`` and ``addBatch`` of the micro-batches with input rows that started
in the next ``--seconds`` s. Printed: every run, and the ratio of each variant's median to the
noop median of the same run; the summary is the median of the per-run ratios. Target: sink/noop
<= 1.6. A first round of every variant (short, discarded) starts the Python workers and warms the
JVM.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage  # noqa: E402

from datasource import sink as _sink  # noqa: E402
from datasource.options import parse_sink_options  # noqa: E402
from datasource.source import DataflowKafkaDataSource  # noqa: E402

TARGET = 1.6


class _PerTaskWriter(_sink.DataflowKafkaStreamWriter):
    """The project's sink, but each task's producer is dropped when the task ends (the old sink)."""

    def write(self, iterator):
        try:
            return super().write(iterator)
        finally:
            _sink._producers.drop(dict(self.opts.kafka))


class PerTaskSink(DataflowKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-dataflow-kafka-per-task"

    def streamWriter(self, schema, overwrite: bool):
        return _PerTaskWriter(parse_sink_options(self.options), schema)


class _NullWriter(DataSourceStreamArrowWriter):
    def write(self, iterator):
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass


class NullSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-null-sink"

    def streamWriter(self, schema, overwrite: bool):
        return _NullWriter()


VARIANTS = ("noop", "sink", "sink, producer per task", "python null sink")
#: Extra variants (``--variants``): asynchronous progress tracking (offset and commit logs written
#: in the background). Spark 4.3 allows it only for a list of its own sinks unless the internal
#: writeStream option ``_asyncProgressTrackingOverrideSinkSupportCheck`` is set (docs/latency.md).
ASYNC_VARIANTS = ("noop, async progress", "sink, async progress")


def _start(spark, bootstrap: str, in_topic: str, out_topic: str, variant: str, ck: str):
    df = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", in_topic).option("startingOffsets", "latest").option("eventTimeField", "ts")
          .load().filter("kind = 'data'").selectExpr("key", "value"))
    w = df.writeStream.option("checkpointLocation", ck)
    if variant.endswith(", async progress"):
        variant = variant.removesuffix(", async progress")
        w = w.option("asyncProgressTrackingEnabled", "true")
        if variant != "noop":
            w = w.option("_asyncProgressTrackingOverrideSinkSupportCheck", "true")
    if variant == "noop":
        return w.format("noop").start()
    if variant == "python null sink":
        return w.format(NullSink.name()).start()
    fmt = "dataflow-kafka" if variant == "sink" else PerTaskSink.name()
    return w.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 runs of 8 s per variant (about 5 minutes)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per variant and run (default 20)")
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--rate", type=float, default=20.0, help="input records/s")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS + ASYNC_VARIANTS)
    ap.add_argument("--csv", default=None, help="default bench/out/sink_cost[-quick].csv")
    args = ap.parse_args(argv)
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" / f"sink_cost{'-quick' if args.quick else ''}.csv")
    if "noop" not in args.variants:
        args.variants.insert(0, "noop")

    from bench import _stream
    from bench import sink_cost as this   # classes by reference: Spark's Python workers import bench.sink_cost
    from brokers import kafka_broker
    from datasource.session import spark_session

    rows = []
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        spark = spark_session(app_name="bench-sink-cost")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        spark.dataSource.register(this.PerTaskSink)
        spark.dataSource.register(this.NullSink)
        in_topic = _stream.create_topic(bs, args.partitions, "trickle")
        out_topic = _stream.create_topic(bs, args.partitions, "sink-out")
        pipe = _stream.passthrough(args.rate)
        trickle = _stream.Trickle(bs, in_topic, args.partitions, args.rate, pipe.record)
        trickle.start()
        print(f"broker {broker.kind}; {args.rate:g} records/s over {args.partitions} partitions; local[2]; "
              f"{seconds:g} s measured per variant after {args.warmup:g} s warm-up; {_stream.machine()}", flush=True)
        try:
            for v in args.variants:   # discarded: Python workers, JIT, first-query costs
                _stream.run_query(lambda: _start(spark, bs, in_topic, out_topic, v, _stream.checkpoint_dir("sc-")),
                                  2, 2)
            print(f"warm-up round done; load average {_stream.loadavg()}", flush=True)
            for run in range(1, args.runs + 1):
                order = list(args.variants) if run % 2 else list(reversed(args.variants))
                res = {}
                for v in order:
                    load = _stream.loadavg()
                    r = _stream.run_query(lambda: _start(spark, bs, in_topic, out_topic, v,
                                                         _stream.checkpoint_dir("sc-")), seconds, args.warmup)
                    data = _stream.with_data(r.progress)
                    res[v] = (len(data), _stream.median_of(data, "triggerExecution"), _stream.median_of(data, "addBatch"),
                              statistics.mean(p["numInputRows"] for p in data) if data else 0, load)
                base = res["noop"][1]
                for v in args.variants:
                    n, trig, add, rows_per, load = res[v]
                    rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "run": run, "variant": v, "batches": n,
                                 "median_trigger_ms": trig, "median_addBatch_ms": add,
                                 "mean_rows_per_batch": round(rows_per, 1), "ratio_vs_noop": round(trig / base, 3),
                                 "loadavg": load})
                    print(f"run {run}  {v:26s} {n:3d} batches  median trigger {trig:6.0f} ms  addBatch {add:6.0f} ms  "
                          f"rows/batch {rows_per:4.1f}  ratio vs noop {trig / base:5.2f}  (load {load})", flush=True)
        finally:
            trickle.stop()
            spark.stop()
    print("summary (median of the per-run ratios; target sink/noop <= %.1f):" % TARGET)
    for v in args.variants:
        ratios = [r["ratio_vs_noop"] for r in rows if r["variant"] == v]
        trig = [r["median_trigger_ms"] for r in rows if r["variant"] == v]
        print(f"  {v:26s} ratio {statistics.median(ratios):5.2f} (runs: {' '.join(f'{x:.2f}' for x in ratios)}); "
              f"median trigger {statistics.median(trig):.0f} ms")
    print(f"load average after: {_stream.loadavg()}; wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
