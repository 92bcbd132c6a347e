"""Where one source task's time goes: ``format("dataflow-kafka")`` against Spark's JVM connector.

    python -m bench.source_profile [--records 1000000] [--partitions 4] [--top 14]

Same data as ``bench.source_throughput`` (records of about 100 bytes, 4 partitions). Three views:

1. **Spark task metrics** of one ``Trigger.AvailableNow`` batch into ``noop`` per source
   (``dataflow-kafka`` with the record timestamp as event time, Spark's ``format("kafka")``, and
   the floor source of ``bench.source_throughput``: prebuilt Arrow batches), from Spark's event
   log: per task its run time, the JVM's CPU time in it, GC and deserialisation; and the CPU of the
   Python worker processes during the batch (``/proc``), which the JVM's task CPU does not count.
2. **One task's Python work, outside Spark**: ``datasource.source._read`` over one partition's
   range under ``cProfile`` (consume, per-message accessors, decode, Arrow), grouped, with the
   top functions by own time.
3. **librdkafka's own rate** in this process: ``Consumer.consume(10000)`` over the same range
   without touching the messages, and touching key, value, offset and timestamp.

Needs Spark's connector (``python -m bench.spark_kafka``) for the ``format("kafka")`` task.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import json
import os
import pstats
import statistics
import tempfile
import time
import uuid
from pathlib import Path


GROUPS = (("consume (librdkafka, message objects)", ("cimpl", "consume")),
          ("message accessors (key, value, offset, timestamp)", ("Message",)),
          ("decode and Arrow batches (kafka_read, numpy, pyarrow)", ("numpy", "kafka_read.py:", "np.", "pyarrow",
                                                                     "compute.py", "arrow")))


def _group(name: str) -> str:
    for label, needles in GROUPS:
        if any(n in name for n in needles):
            return label
    return "other"


def profile_read(bootstrap: str, topic: str, partition: int, end: int, top: int) -> None:
    from dataflow_kafka.datasource.options import parse_source_options
    from dataflow_kafka.datasource.source import OffsetRange, _read

    opts = parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "rangeStatsTopic": ""},
                                streaming=True)
    r = OffsetRange(topic, partition, 0, end, None, int(time.time() * 1000), [])
    sum(b.num_rows for b in _read(opts, r))    # pooled consumer, imports
    prof = cProfile.Profile()
    t0, cpu0 = time.perf_counter(), os.times()
    prof.enable()
    rows = sum(b.num_rows for b in _read(opts, r))
    prof.disable()
    dt, cpu1 = time.perf_counter() - t0, os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    st = pstats.Stats(prof)
    own: dict[str, float] = {}
    listing = []
    for (file, line, fn), (_, _, tt, _, _) in st.stats.items():
        name = f"{Path(file).name}:{line}({fn})" if file != "~" else fn
        own[_group(name)] = own.get(_group(name), 0.0) + tt
        listing.append((tt, name))
    total = sum(own.values())
    print(f"2. one task's read outside Spark: {rows:,} rows of partition {partition} in {dt:.2f} s "
          f"({rows / dt:,.0f} rows/s), CPU {cpu:.2f} s (librdkafka's threads included); profiled Python time "
          f"{total:.2f} s (with cProfile's overhead):")
    for label, t in sorted(own.items(), key=lambda kv: -kv[1]):
        print(f"   {label:52s} {t:6.2f} s  {t / total:5.1%}  {t / rows * 1e6:5.2f} us/row")
    print(f"   top {top} functions by own time:")
    for tt, name in sorted(listing, reverse=True)[:top]:
        print(f"     {tt:6.3f} s  {name}")


def librdkafka_rate(bootstrap: str, topic: str, partition: int, end: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    for touch in (False, True):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"prof-{uuid.uuid4().hex[:8]}",
                      "enable.auto.commit": False, "fetch.queue.backoff.ms": 10, "log_level": 3})
        c.assign([TopicPartition(topic, partition, 0)])
        t0, cpu0 = time.perf_counter(), os.times()
        got, sink = 0, 0
        while got < end:
            msgs = c.consume(10000, 1.0)
            got += len(msgs)
            if touch:
                for m in msgs:
                    sink += len(m.value()) + m.offset() + m.timestamp()[1] + len(m.key() or b"")
        dt, cpu1 = time.perf_counter() - t0, os.times()
        c.close()
        cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        print(f"3. librdkafka consume(10000), {'touching key, value, offset, timestamp' if touch else 'messages untouched':40s}"
              f" {got / dt:>10,.0f} rec/s, CPU {cpu:.2f} s ({cpu / got * 1e6:.2f} us/record)")


def _python_cpu() -> float:
    """CPU seconds of every pyspark Python worker process (daemon and its children)."""
    total = 0.0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
            total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def task_metrics(spark, log_dir: str, bootstrap: str, topic: str, n: int, partitions: int) -> None:
    from bench.source_throughput import _run

    variants = [("dataflow-kafka (ts-1)", "stream", {}), ("format(kafka) (spark-1)", "kafka-stream", {}),
                ("floor (floor-1)", "floor-stream", {})]
    for _ in range(2):                       # warm-up: JIT, Python workers
        for _, kind, opts in variants:
            _run(spark, kind, opts, bootstrap, topic, n, partitions, 100)
    print("1. Spark task metrics, one micro-batch of every record, median over the tasks (4 tasks on 2 cores):")
    for name, kind, opts in variants:
        py0 = _python_cpu()
        marker = time.time() * 1000
        r = _run(spark, kind, opts, bootstrap, topic, n, partitions, 100)
        py = _python_cpu() - py0
        tasks = _tasks_since(log_dir, marker)
        run = [t["Executor Run Time"] / 1000 for t in tasks]
        jcpu = [t["Executor CPU Time"] / 1e9 for t in tasks]
        gc = [t["JVM GC Time"] / 1000 for t in tasks]
        print(f"   {name:26s} query {r['seconds']:5.2f} s ({r['rows_per_s']:>9,.0f} rows/s); {len(run)} tasks: run "
              f"{statistics.median(run):.2f} s, JVM CPU {statistics.median(jcpu):.2f} s, GC {statistics.median(gc):.2f} s;"
              f" JVM CPU over all tasks {sum(jcpu):.2f} s, Python workers' CPU {py:.2f} s", flush=True)


def _tasks_since(log_dir: str, since_ms: float) -> list[dict]:
    """Task metrics of the tasks launched since ``since_ms``, from the event log."""
    time.sleep(1.5)                          # the event log is flushed by a listener thread
    out = []
    for path in glob.glob(os.path.join(log_dir, "**", "*"), recursive=True):
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            for line in f:
                if '"SparkListenerTaskEnd"' not in line:
                    continue
                e = json.loads(line)
                if e["Task Info"]["Launch Time"] >= since_ms and e["Task Metrics"].get("Executor Run Time") is not None:
                    out.append(e["Task Metrics"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--top", type=int, default=14)
    args = ap.parse_args(argv)

    from bench import spark_kafka
    from bench._kafka import create_topics
    from bench.source_throughput import FloorSource, _produce
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    if spark_kafka.connector_jars() is None:
        raise SystemExit(spark_kafka.missing_message())
    n, parts = args.records, args.partitions
    per = n // parts
    log_dir = tempfile.mkdtemp(prefix="source-profile-events-")
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        create_topics(bs, {"bench": parts})
        _produce(bs, "bench", n, parts, 100)
        print(f"broker {broker.kind}; {n:,} records of ~100 B over {parts} partitions; {time.strftime('%Y-%m-%d %H:%M')}; "
              f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
        events = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir, "spark.eventLog.compress": "false",
                  "spark.eventLog.rolling.enabled": "false", "spark.eventLog.buffer.kb": "4k"}
        spark = spark_session(shuffle_partitions=2, extra={**spark_kafka.session_extra(), **events})
        spark.dataSource.register(FloorSource)
        try:
            task_metrics(spark, log_dir, bs, "bench", n, parts)
        finally:
            spark.stop()
        profile_read(bs, "bench", 0, per, args.top)
        librdkafka_rate(bs, "bench", 0, per)
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
