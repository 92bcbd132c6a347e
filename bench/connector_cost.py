"""Per-micro-batch cost at a trickle: ``format("dataflow-kafka")`` against Spark's JVM Kafka
connector (``format("kafka")``), as a source into ``noop`` and as source and sink.

    python -m bench.connector_cost [--quick] [--cycles 3] [--phase 12] [--csv bench/out/connector_cost.csv]

Four queries run at the same time in one session and take turns (``bench._stream.interleaved``:
in each cycle one query gets ``--phase`` seconds of input while the others' inputs are paused,
the order rotating), each on its own 2-partition input topic fed by its own trickle of about 20
JSON records/s (even gaps), Spark's default trigger, ``spark_session()`` defaults on ``local[2]``:

* ``dataflow-kafka -> noop``: our source, its data rows' key and value, Spark's ``noop`` sink;
* ``kafka -> noop``: Spark's connector, key and value, ``noop``;
* ``dataflow-kafka -> dataflow-kafka``: our source and our sink (a 2-partition output topic);
* ``kafka -> kafka``: Spark's connector and Spark's Kafka sink.

Per query and cycle: the median ``durationMs.triggerExecution`` (and ``addBatch``) of its
micro-batches with input rows that started in its phase. Ratios of the same cycle: ours / Spark's
into noop, ours / Spark's with the sink, and each sink's batch over its own source into noop. The
summary is the median over cycles. Needs the connector (``python -m bench.spark_kafka``); a
first, short round (discarded) starts the Python workers and warms the JVM.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ARMS = ("dataflow-kafka -> noop", "kafka -> noop", "dataflow-kafka -> dataflow-kafka", "kafka -> kafka")
RATIOS = (("source into noop: ours / Spark's", "dataflow-kafka -> noop", "kafka -> noop"),
          ("source and sink: ours / Spark's", "dataflow-kafka -> dataflow-kafka", "kafka -> kafka"),
          ("our sink / noop (our source)", "dataflow-kafka -> dataflow-kafka", "dataflow-kafka -> noop"),
          ("Spark's sink / noop (Spark's source)", "kafka -> kafka", "kafka -> noop"))


def arms(rate: float):
    from bench import _stream

    ours, spark = _stream.passthrough(rate), _stream.passthrough_kafka(rate)
    return [_stream.Arm(ARMS[0], ours, "noop"), _stream.Arm(ARMS[1], spark, "noop"),
            _stream.Arm(ARMS[2], ours, "kafka"), _stream.Arm(ARMS[3], spark, "kafka", sink_format="kafka")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from bench import _stream, spark_kafka

    _stream.add_interleave_arguments(ap, "query")
    ap.add_argument("--csv", default=None, help="default bench/out/connector_cost[-quick].csv")
    args = ap.parse_args(argv)
    cycles, phase = _stream.cycles_and_phase(args)
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" /
                              f"connector_cost{'-quick' if args.quick else ''}.csv")

    from brokers import kafka_broker
    from datasource.session import spark_session

    if spark_kafka.connector_jars() is None:
        raise SystemExit(spark_kafka.missing_message())
    rows = []
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        spark = spark_session(app_name="bench-connector-cost", extra=spark_kafka.session_extra())
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        print(f"broker {broker.kind}; {args.rate:g} records/s over {args.partitions} partitions per query; local[2]; "
              f"4 queries take turns, {cycles} cycles of {phase:g} s of input each; Spark's connector "
              f"{spark_kafka.CONNECTOR_VERSION} in pyspark {spark.version}; {_stream.machine()}", flush=True)
        try:
            _stream.interleaved(spark, bs, arms(args.rate), 1, 2, 2, partitions=args.partitions)   # discarded
            load = _stream.loadavg()
            res = _stream.interleaved(spark, bs, arms(args.rate), cycles, phase, args.warmup,
                                      partitions=args.partitions,
                                      log=lambda m: print(m, flush=True))
        finally:
            spark.stop()
    load_end = _stream.loadavg()
    med: dict[tuple[int, str], float] = {}
    for r in res:
        p = r["progress"]
        trig, add = _stream.median_of(p, "triggerExecution"), _stream.median_of(p, "addBatch")
        med[(r["cycle"], r["arm"])] = trig
        rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "cycle": r["cycle"], "arm": r["arm"], "batches": len(p),
                     "median_trigger_ms": trig, "median_addBatch_ms": add,
                     "mean_rows_per_batch": round(statistics.mean(x["numInputRows"] for x in p), 1) if p else "",
                     "loadavg_start": load, "loadavg_end": load_end})
        print(f"cycle {r['cycle']} {r['arm']:34s} {len(p):3d} batches  median trigger {trig:5.0f} ms  "
              f"addBatch {add:5.0f} ms", flush=True)
    print(f"summary: median over cycles of the per-cycle ratio of median micro-batch durations "
          f"(load {load} -> {load_end})")
    for name, a, b in RATIOS:
        per = [med[(c, a)] / med[(c, b)] for c in range(1, cycles + 1)]
        for c, x in enumerate(per, 1):
            rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "cycle": c, "arm": f"ratio: {name}", "ratio": round(x, 3),
                         "loadavg_start": load, "loadavg_end": load_end})
        print(f"  {name:38s} {statistics.median(per):5.2f} (cycles: {' '.join(f'{x:.2f}' for x in per)})")
    for a in ARMS:
        print(f"  {a:38s} median batch {statistics.median(med[(c, a)] for c in range(1, cycles + 1)):5.0f} ms")
    print(f"wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
