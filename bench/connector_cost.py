"""Per-micro-batch cost at a trickle: ``format("dataflow-kafka")`` against Spark's JVM Kafka
connector (``format("kafka")``), as a source into ``noop`` and as source and sink; and
(``--shape stages``) the latency experiment's fused stages on either connector against the Java
``transformWithState`` baseline.

    python -m bench.connector_cost [--shape passthrough|stages] [--quick] [--cycles 3] [--phase 12]
                                   [--csv bench/out/connector_cost.csv]

Nine queries run at the same time in one session and take turns (``bench._stream.interleaved``:
in each cycle one query gets ``--phase`` seconds of input while the others' inputs are paused,
the order rotating), each on its own 2-partition input topic fed by its own trickle of about 20
JSON records/s (even gaps), Spark's default trigger, ``spark_session()`` defaults on ``local[2]``:

* ``dataflow-kafka -> noop``: our source, its data rows' key and value, Spark's ``noop`` sink;
* ``kafka -> noop``: Spark's connector, key and value, ``noop``;
* ``dataflow-kafka -> dataflow-kafka``: our source and our sink (a 2-partition output topic);
* ``dataflow-kafka dataOnly -> noop`` and ``-> dataflow-kafka``: the same two on our source with
  option ``dataOnly`` (Spark's Kafka columns, data records only, no range stats);
* ``kafka -> kafka``: Spark's connector and Spark's Kafka sink;
* ``kafka -> punctuate -> noop``: Spark's connector through :func:`jvm_ingest.punctuate` (the
  source's rows rebuilt in one ``mapInArrow`` step), data rows' key and value, ``noop``;
* the platform's floor for a Python source and sink (:mod:`bench.python_floor`): ``python floor ->
  noop``, a Python source that asks Kafka for the high watermarks and yields prebuilt rows, and
  ``python floor -> null sink``, the same into a Python sink that drops its rows
  (:class:`bench.sink_cost.NullSink`): what any Python data source pays per batch on Spark.

``--shape stages``: four queries at 10 documents/s (the latency experiment's base point, 2 input
partitions):

* ``fused, dataflow-kafka in and out``: ``optimistic.spark.build_pipeline`` with the two
  word-keyed stages fused, our source and sink (the ``fused`` variant);
* ``fused, format(kafka) + punctuate, Spark's sink``: the same stages on Spark's connector through
  :func:`jvm_ingest.punctuate`, Spark's Kafka sink (``fused-jvm``);
* ``spark-jvm``: Spark's connector, the Java ``transformWithState`` of
  :func:`bench.jvm_baseline.milestones_jvm`, Spark's Kafka sink;
* ``floor``: Spark's connector, one ``transformWithStateInPandas`` that only reads and writes its
  key group's state and passes the rows on (``bench._stream.floor_shape``), Spark's sink: what any
  pipeline with one Python stateful operator costs per batch here, before doing any work.

Per query and cycle: the median ``durationMs.triggerExecution`` (and ``addBatch``) of its
micro-batches with input rows that started in its phase. Ratios of the same cycle: ours / Spark's
into noop, ours / Spark's with the sink, and each sink's batch over its own source into noop. The
summary is the median over cycles. Needs the connector (``python -m bench.spark_kafka``); a
first, short round (discarded) starts the Python workers and warms the JVM.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


ARMS = ("dataflow-kafka -> noop", "kafka -> noop", "dataflow-kafka -> dataflow-kafka", "kafka -> kafka",
        "kafka -> punctuate -> noop", "python floor -> noop", "python floor -> null sink",
        "dataflow-kafka dataOnly -> noop", "dataflow-kafka dataOnly -> dataflow-kafka")
RATIOS = (("source into noop: ours / Spark's", "dataflow-kafka -> noop", "kafka -> noop"),
          ("source and sink: ours / Spark's", "dataflow-kafka -> dataflow-kafka", "kafka -> kafka"),
          ("source into noop, dataOnly: ours / Spark's", "dataflow-kafka dataOnly -> noop", "kafka -> noop"),
          ("source and sink, dataOnly: ours / Spark's", "dataflow-kafka dataOnly -> dataflow-kafka", "kafka -> kafka"),
          ("our sink / noop (our source)", "dataflow-kafka -> dataflow-kafka", "dataflow-kafka -> noop"),
          ("Spark's sink / noop (Spark's source)", "kafka -> kafka", "kafka -> noop"),
          ("punctuate() / nothing (Spark's source, noop)", "kafka -> punctuate -> noop", "kafka -> noop"),
          ("Python floor source / Spark's source, noop", "python floor -> noop", "kafka -> noop"),
          ("Python floor source and sink / Spark's", "python floor -> null sink", "kafka -> kafka"),
          ("our source / Python floor source, noop", "dataflow-kafka -> noop", "python floor -> noop"),
          ("our source and sink / Python floor's", "dataflow-kafka -> dataflow-kafka", "python floor -> null sink"),
          ("null sink / noop (Python floor source)", "python floor -> null sink", "python floor -> noop"))


STAGE_ARMS = ("fused, dataflow-kafka in and out", "fused, format(kafka) + punctuate, Spark's sink", "spark-jvm",
              "floor: format(kafka), 1 no-op Python operator")
STAGE_RATIOS = (("fused on format(kafka) / fused on ours", STAGE_ARMS[1], STAGE_ARMS[0]),
                ("fused on ours / spark-jvm", STAGE_ARMS[0], STAGE_ARMS[2]),
                ("fused on format(kafka) / spark-jvm", STAGE_ARMS[1], STAGE_ARMS[2]),
                ("floor / spark-jvm", STAGE_ARMS[3], STAGE_ARMS[2]))


def arms(rate: float, shape: str = "passthrough", partitions: int = 2):
    from bench import _stream

    if shape == "stages":
        return [_stream.Arm(STAGE_ARMS[0], _stream.inverted_index(fused=True, rate=rate, key_groups=2,
                                                                  partitions=partitions)),
                _stream.Arm(STAGE_ARMS[1], _stream.inverted_index(fused=True, rate=rate, io="kafka", key_groups=2,
                                                                  partitions=partitions), sink_format="kafka"),
                _stream.Arm(STAGE_ARMS[2], _stream.inverted_index(rate=rate, io="spark-jvm", partitions=partitions),
                            sink_format="kafka"),
                _stream.Arm(STAGE_ARMS[3], _stream.floor_shape(2, rate, _stream.inverted_index().record, operators=1,
                                                               source_format="kafka"), sink_format="kafka")]
    ours, spark = _stream.passthrough(rate), _stream.passthrough_kafka(rate)
    return [_stream.Arm(ARMS[0], ours, "noop"), _stream.Arm(ARMS[1], spark, "noop"),
            _stream.Arm(ARMS[2], ours, "kafka"), _stream.Arm(ARMS[3], spark, "kafka", sink_format="kafka"),
            _stream.Arm(ARMS[4], _stream.passthrough_kafka(rate, punctuated=True, partitions=partitions), "noop"),
            _stream.Arm(ARMS[5], _stream.passthrough_floor(rate), "noop"),
            _stream.Arm(ARMS[6], _stream.passthrough_floor(rate), "kafka", sink_format="bench-null-sink"),
            _stream.Arm(ARMS[7], _stream.passthrough_data_only(rate), "noop"),
            _stream.Arm(ARMS[8], _stream.passthrough_data_only(rate), "kafka")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from bench import _stream, spark_kafka

    _stream.add_interleave_arguments(ap, "query")
    ap.add_argument("--shape", choices=("passthrough", "stages"), default="passthrough")
    ap.add_argument("--csv", default=None, help="default bench/out/connector_cost[-quick].csv")
    args = ap.parse_args(argv)
    cycles, phase = _stream.cycles_and_phase(args)
    stages = args.shape == "stages"
    rate = 10.0 if stages and args.rate == 20.0 else args.rate
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" /
                              f"connector_cost{'-stages' if stages else ''}{'-quick' if args.quick else ''}.csv")

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    if spark_kafka.connector_jars() is None:
        raise SystemExit(spark_kafka.missing_message())
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        spark = spark_session(app_name="bench-connector-cost", extra=spark_kafka.session_extra())
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        from bench import python_floor, sink_cost   # classes by reference: the Python workers import them
        spark.dataSource.register(python_floor.FloorSource)
        spark.dataSource.register(sink_cost.NullSink)
        print(f"broker {broker.kind}; {args.shape}; {rate:g} records/s over {args.partitions} partitions per query; "
              f"local[2]; {4 if stages else len(ARMS)} queries take turns, {cycles} cycles of {phase:g} s of input each; Spark's connector "
              f"{spark_kafka.CONNECTOR_VERSION} in pyspark {spark.version}; {_stream.machine()}", flush=True)
        try:
            _stream.interleaved(spark, bs, arms(rate, args.shape, args.partitions), 1, 2, 2,
                                partitions=args.partitions)   # discarded
            load = _stream.loadavg()
            res = _stream.interleaved(spark, bs, arms(rate, args.shape, args.partitions), cycles, phase, args.warmup,
                                      partitions=args.partitions,
                                      log=lambda m: print(m, flush=True))
        finally:
            spark.stop()
    rows = _stream.summarise(res, list(STAGE_RATIOS if stages else RATIOS), load, lambda m: print(m, flush=True))
    print(f"wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
