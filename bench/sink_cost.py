"""Per-micro-batch cost of the dataflow-kafka sink: ``format("dataflow-kafka")`` -> data rows ->
the project's sink, against the same query into Spark's ``noop`` sink (the baseline), side by side.

    python -m bench.sink_cost [--quick] [--cycles 3] [--phase 12] [--csv bench/out/sink_cost.csv]

Input: a trickle of about 20 JSON records/s (even gaps) to a 2-partition topic on the embedded
broker (or ``KAFKA_BOOTSTRAP_SERVERS``); Spark's default trigger (the next micro-batch starts when
the previous one ends and new data is there); ``spark_session()`` defaults on ``local[2]``. For
each variant, the noop query and the variant's query run at the same time in one session, each on
its own input topic fed by its own trickle, and take turns (``bench._stream.interleaved``): in each
cycle one gets ``--phase`` seconds of input while the other's input is paused. Variants:

* ``sink``: the project's sink (one producer per Python worker, reused across micro-batches).
* ``sink, producer per task``: the same sink with its cached producer dropped after every task,
  which reproduces the sink before producer reuse (a new idempotent producer in each task).
* ``python null sink``: a Python data source sink that drops its rows: the cost of any Python
  sink in Spark 4.3, without Kafka.

Per variant and cycle: the median ``durationMs.triggerExecution`` and ``addBatch`` of each query's
micro-batches with input rows that started in its phase; ratio = variant / noop of the same cycle.
The summary is the median of the per-cycle ratios. Target: sink/noop <= 1.6. A first, short pair
(discarded) starts the Python workers and warms the JVM.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

from dataflow_kafka.datasource import sink as _sink
from dataflow_kafka.datasource.options import parse_sink_options
from dataflow_kafka.datasource.source import DataflowKafkaDataSource

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


VARIANTS = ("sink", "sink, producer per task", "python null sink")
#: Extra variants (``--variants``): asynchronous progress tracking (offset and commit logs written
#: in the background). Spark 4.3 allows it only for a list of its own sinks unless the internal
#: writeStream option ``_asyncProgressTrackingOverrideSinkSupportCheck`` is set, and the sink's
#: option check refuses both options today (docs/latency.md).
ASYNC_VARIANTS = ("noop, async progress", "sink, async progress")


def _arm(name: str, pipeline) -> "object":
    from bench import _stream

    opts = {}
    base = name
    if name.endswith(", async progress"):
        base = name.removesuffix(", async progress")
        opts["asyncProgressTrackingEnabled"] = "true"
        if base != "noop":
            opts["_asyncProgressTrackingOverrideSinkSupportCheck"] = "true"
    if base == "noop":
        return _stream.Arm(name, pipeline, "noop", sink_options=opts)
    fmt = {"sink": "dataflow-kafka", "sink, producer per task": PerTaskSink.name(),
           "python null sink": NullSink.name()}[base]
    return _stream.Arm(name, pipeline, "kafka", sink_format=fmt, sink_options=opts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from bench import _stream

    _stream.add_interleave_arguments(ap)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS + ASYNC_VARIANTS)
    ap.add_argument("--csv", default=None, help="default bench/out/sink_cost[-quick].csv")
    args = ap.parse_args(argv)
    cycles, phase = _stream.cycles_and_phase(args)
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" / f"sink_cost{'-quick' if args.quick else ''}.csv")

    from bench import sink_cost as this   # classes by reference: Spark's Python workers import bench.sink_cost
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    rows = []
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        spark = spark_session(app_name="bench-sink-cost")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        spark.dataSource.register(this.PerTaskSink)
        spark.dataSource.register(this.NullSink)
        pipe = _stream.passthrough(args.rate)
        print(f"broker {broker.kind}; {args.rate:g} records/s over {args.partitions} partitions; local[2]; per "
              f"variant: noop and the variant run at the same time and take turns, {cycles} cycles of {phase:g} s "
              f"of input each; {_stream.machine()}", flush=True)
        try:
            _stream.interleaved(spark, bs, [_arm("noop", pipe), _arm("sink", pipe)], 1, 2, 2,
                                partitions=args.partitions)   # discarded: Python workers, JIT
            for v in args.variants:
                load = _stream.loadavg()
                res = _stream.interleaved(spark, bs, [_arm("noop", pipe), _arm(v, pipe)], cycles, phase, args.warmup,
                                          partitions=args.partitions)
                for c in range(1, cycles + 1):
                    got = {r["arm"]: r["progress"] for r in res if r["cycle"] == c}
                    base = _stream.median_of(got["noop"], "triggerExecution")
                    for name in ("noop", v):
                        p = got[name]
                        trig, add = _stream.median_of(p, "triggerExecution"), _stream.median_of(p, "addBatch")
                        rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "variant": v, "cycle": c, "arm": name,
                                     "batches": len(p), "median_trigger_ms": trig, "median_addBatch_ms": add,
                                     "mean_rows_per_batch": round(statistics.mean(x["numInputRows"] for x in p), 1)
                                     if p else float("nan"),
                                     "ratio_vs_noop": round(trig / base, 3), "loadavg_at_start": load})
                    vt = rows[-1]
                    nt = rows[-2]
                    print(f"{v:24s} cycle {c}: noop {nt['batches']:2d} batches {nt['median_trigger_ms']:5.0f} ms "
                          f"(addBatch {nt['median_addBatch_ms']:4.0f}, {nt['mean_rows_per_batch']} rows) | variant "
                          f"{vt['batches']:2d} batches {vt['median_trigger_ms']:5.0f} ms (addBatch "
                          f"{vt['median_addBatch_ms']:4.0f}, {vt['mean_rows_per_batch']} rows) | ratio "
                          f"{vt['ratio_vs_noop']:.2f}", flush=True)
                print(f"{v:24s} load {load} -> {_stream.loadavg()}", flush=True)
        finally:
            spark.stop()
    print(f"summary: median of the per-cycle ratios variant / noop (target sink/noop <= {TARGET})")
    for v in args.variants:
        ratios = [r["ratio_vs_noop"] for r in rows if r["variant"] == v and r["arm"] == v]
        trig = [r["median_trigger_ms"] for r in rows if r["variant"] == v and r["arm"] == v]
        base = [r["median_trigger_ms"] for r in rows if r["variant"] == v and r["arm"] == "noop"]
        print(f"  {v:24s} ratio {statistics.median(ratios):5.2f} (cycles: {' '.join(f'{x:.2f}' for x in ratios)}); "
              f"median trigger {statistics.median(trig):.0f} ms against noop {statistics.median(base):.0f} ms")
    print(f"load average after: {_stream.loadavg()}; wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
