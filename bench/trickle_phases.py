"""Where our per-micro-batch fixed cost goes at a trickle, outside Spark: the calls Spark makes
into ``format("dataflow-kafka")`` for one small batch, each timed, in one process.

    python -m bench.trickle_phases [--batches 40] [--per-batch 10] [--partitions 2] [--profile N]
        [--profile-phase read|plan]

A 2-partition topic on the embedded broker (or ``KAFKA_BOOTSTRAP_SERVERS``) gets ``--per-batch``
JSON records before every batch; then, as Spark's micro-batch does:

* driver: ``latestOffset`` (timed whole, and inside it the Kafka requests: the topic metadata,
  the offset requests, the range-stats lookup), ``partitions``;
* tasks: ``read`` of each range (pooled consumer; inside it the range-stats write);
* sink: one task's ``write`` of the batch's rows (the at-least-once sink, pooled producer), and
  the driver's commit as Spark's commit runner makes it: ``streamWriter()`` then ``commit``.

Prints the median (and 90th percentile) milliseconds of each phase over ``--batches`` batches
after 3 discarded ones, with the load average. The Kafka calls are timed by wrapping the module
functions the source calls (:data:`TIMED`), so their time is also inside their caller's.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import json
import os
import pstats
import statistics
import time
from collections import defaultdict

import pyarrow as pa
from confluent_kafka import Producer
from pyspark.sql.types import BinaryType, StructField, StructType

from bench._kafka import create_topics
from bench._stream import loadavg
from dataflow_kafka.brokers import kafka_broker
from dataflow_kafka.datasource.options import parse_source_options
from dataflow_kafka.datasource.source import DataflowKafkaDataSource, DataflowKafkaStreamReader

#: (module, class or None, function) timed inside the phases; each is replaced, for this run, by a
#: wrapper that records its duration (also where another module imported it by name)
TIMED = (("dataflow_kafka.datasource.offsets", None, "resolve_partitions"),
         ("dataflow_kafka.datasource.kafka_read", None, "watermarks"),
         ("dataflow_kafka.datasource.kafka_read", None, "list_topics"),
         ("dataflow_kafka.datasource.kafka_read", None, "log_offsets"),
         ("dataflow_kafka.datasource.range_stats", None, "publish"),
         ("dataflow_kafka.datasource.range_stats", "RangeStats", "get"),
         ("dataflow_kafka.datasource.sink", None, "_flush"))
IMPORTERS = ("dataflow_kafka.datasource.source", "dataflow_kafka.datasource.offsets")


def _instrument(times: dict[str, list[float]]) -> None:
    import importlib

    for mod_name, cls, fn in TIMED:
        target = importlib.import_module(mod_name)
        if cls is not None:
            target = getattr(target, cls)
        orig = getattr(target, fn, None)
        if orig is None:
            continue

        @functools.wraps(orig)
        def timed(*a, _orig=orig, _label=f"  {fn}", **kw):
            t0 = time.perf_counter()
            try:
                return _orig(*a, **kw)
            finally:
                times[_label].append((time.perf_counter() - t0) * 1000)

        setattr(target, fn, timed)
        for name in IMPORTERS if cls is None else ():
            m = importlib.import_module(name)
            if getattr(m, fn, None) is orig:
                setattr(m, fn, timed)


@contextlib.contextmanager
def _phase(times: dict[str, list[float]], name: str):
    t0 = time.perf_counter()
    yield
    times[name].append((time.perf_counter() - t0) * 1000)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--per-batch", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also profile a phase (cProfile) and print the top N functions by own time")
    ap.add_argument("--profile-phase", choices=("read", "plan"), default="read",
                    help="the phase --profile profiles: the tasks' reads, or the driver's latestOffset")
    args = ap.parse_args(argv)
    prof = cProfile.Profile()
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        topic, out = f"phases-in-{os.getpid()}", f"phases-out-{os.getpid()}"
        create_topics(bs, {topic: args.partitions, out: 2})
        times: dict[str, list[float]] = defaultdict(list)
        _instrument(times)
        reader = DataflowKafkaStreamReader(parse_source_options(
            {"kafka.bootstrap.servers": bs, "subscribe": topic, "startingOffsets": "earliest",
             "eventTimeField": "ts"}, streaming=True))
        schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
        sink = DataflowKafkaDataSource({"kafka.bootstrap.servers": bs, "topic": out})
        writer = sink.streamWriter(schema, False)
        prod = Producer({"bootstrap.servers": bs, "linger.ms": 0})
        start = reader.initialOffset()
        i = 0
        load0 = loadavg()
        for b in range(args.batches + 3):
            for _ in range(args.per_batch):
                prod.produce(topic, json.dumps({"ts": int(time.time() * 1000), "i": i}).encode(), b"k%d" % i,
                             partition=i % args.partitions)
                i += 1
            prod.flush(10)
            if b == 3:
                times.clear()
            with _phase(times, "driver: latestOffset"):
                if args.profile and args.profile_phase == "plan" and b >= 3:
                    prof.enable()
                end = reader.latestOffset(start, reader.getDefaultReadLimit())
                prof.disable()
            with _phase(times, "driver: partitions"):
                parts = reader.partitions(start, end)
            rows = []
            for p in parts:
                with _phase(times, "task: read one range"):
                    if args.profile and args.profile_phase == "read" and b >= 3:
                        prof.enable()
                    batches = list(reader.read(p))
                    prof.disable()
                rows += [bt.filter(pa.compute.equal(bt.column("kind"), "data")).select(["key", "value"])
                         for bt in batches]
            data = pa.Table.from_batches([r for r in rows if r.num_rows]).combine_chunks().to_batches()
            with _phase(times, "task: sink write (one task)"):
                message = writer.write(iter(data))
            with _phase(times, "driver: sink commit (streamWriter, commit)"):
                sink.streamWriter(schema, False).commit([message], b)   # as Spark's commit runner, per batch
            start = end
        reader.stop()
        load1 = loadavg()
    print(f"per batch: {args.per_batch} records over {args.partitions} partitions; {args.batches} batches; "
          f"broker {broker.kind}; load average {load0} -> {load1}")
    print(f"{'phase (ms)':40s} {'median':>8s} {'p90':>8s} {'calls/batch':>12s}")
    for name, xs in times.items():
        xs = sorted(xs)
        print(f"{name:40s} {statistics.median(xs):8.2f} {xs[int(0.9 * (len(xs) - 1))]:8.2f} "
              f"{len(xs) / args.batches:12.1f}")
    if args.profile:
        what = "the tasks' reads" if args.profile_phase == "read" else "the driver's latestOffset"
        print(f"{what} under cProfile (with its overhead), top {args.profile} by own time:")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
