"""Source throughput: rows/s of ``format("dataflow-kafka")`` into Spark's no-op sink, against
Spark's JVM Kafka connector (``format("kafka")``), the raw confluent-kafka consume rate on the same
broker and data, and the platform's floor, measured in the same run.

    python -m bench.source_throughput [--records 1000000] [--partitions 4] [--value-bytes 100]
                                      [--repeat 3] [--variants ...] [--csv docs/data/source_throughput.csv]

**Spark's connector** (``spark-1``, ``spark-10``, ``spark-100``, ``spark-batch``): the same query
shapes over ``format("kafka")`` (:mod:`bench.spark_kafka`; skipped with a message when not
resolved); every ``dataflow-kafka`` variant is also printed as a ratio to its twin of the same
repeat (``SPARK_TWIN``: ``ts-1 / spark-1``, ...). ``punct-1``, ``punct-10`` (not run by
default): Spark's connector followed by :func:`jvm_ingest.punctuate` (this project's rows and
punctuations, event time from the record timestamp, as ``ts-*``).

**Raw consumer (ratio 1.00)**: one Python process consuming every partition with
``Consumer.consume(10000)`` and touching each record's key, value, offset and timestamp (what any
consumer must do; settings ``RAW_CONSUMER``), measured before and after each repeat's Spark runs;
the better of the two is the repeat's baseline (so the ratio errs against the source).

**CPU bounds**: the raw consumer's CPU seconds (its process, librdkafka's threads included) and
the broker's while it serves it, and the same for the source's own range reader
(``datasource.source._read``: consume, decode, Arrow batches) run in the benchmark process over
every partition; per repeat the benchmark prints the shortest time a Kafka variant could take if
the floor variant's Spark CPU plus a reader's CPU plus the broker's were spread over every core
without loss, and the largest ratio that allows.

**Variants** (``--variants``, comma-separated; default: all but the 100-batch ones): streaming
queries with ``Trigger.AvailableNow`` into the no-op sink, timed from ``start()`` to the end of
the query (Spark's query start and stop included), in one micro-batch (``*-1``), ten
(``*-10``, ``maxOffsetsPerTrigger`` = records / 10) or a hundred (``*-100``); event time from the
record timestamp (``ts-*``) or a JSON field (``json-*``); ``ts-10-mp2`` with ``maxPartitions=2`` (``ts-1-mp1``, not run by default: one task for every partition);
``batch`` is ``spark.read``. ``floor-*`` run the same query shape over a Python data source
(:class:`FloorSource`, ``format("dataflow-floor")``) with the same schema, partitions, offsets,
admission control and Arrow batch size, whose ``read()`` yields prebuilt Arrow batches (no Kafka,
no decoding): what the platform costs before the source does any work. A ``floor`` ratio below a
target means the target is out of reach for any Python data source on this machine.

Everything runs once first, on the same topic (a long-running query has a JIT-compiled JVM and
started Python workers; the first query of a JVM reads several times slower). Each repeat runs
every variant once, in the listed order in odd repeats and in reverse in even ones (``--ab``
pairs instead swap places in even repeats); on noida-db each run starts after the broker has gone
idle (it works for seconds after any produce, such as the source's range stats, in proportion to
all the records it stores; Apache Kafka does not); every run is printed (and written to
``--csv``) with the CPU seconds the Spark processes used, split by role (:func:`_cpu_split`: the
JVM, pyspark's Python workers, other live Python processes, and exited children: a finished
query's Python planner and Hadoop's shell commands for checkpoint files), and the broker's,
then the median, min and max ratio per variant, and each variant's CPU against its Spark twin's,
whole and in the JVM and Python workers only (:func:`cpu_summary`). ``/proc/loadavg`` is printed at the start and
end of every repeat: the machine is shared, so compare ratios within a run, not rates across runs.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from bench._kafka import create_topics, produce_json

# --------------------------------------------------------------------------------------------
# The floor: a Python data source yielding prebuilt Arrow batches of the source's schema.

FLOOR_CHUNK = 20_000      # rows per Arrow batch: the real source's consume chunk (kafka_read.CHUNK)
_prebuilt: dict = {}      # (value_bytes, chunk) -> (data batch, punctuation batch), per Python worker process


def _floor_batches(value_bytes: int, chunk: int) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """One ``chunk``-row data batch of this benchmark's records and a one-row punctuation batch
    in the source's Arrow schema, built once per process."""
    hit = _prebuilt.get((value_bytes, chunk))
    if hit is not None:
        return hit
    from dataflow_kafka.datasource.kafka_read import make_rows_batch
    from dataflow_kafka.datasource.schema import arrow_schema

    now, n = 1_700_000_000_000, chunk
    pad = "x" * max(0, value_bytes - 40)
    us = pa.timestamp("us", tz="UTC")
    ts = pa.array([(now + i // 100) * 1000 for i in range(n)], us)
    schema = arrow_schema(False)
    cols = {
        "key": pa.array([b"k%d" % (i % 1000) for i in range(n)], pa.binary()),
        "value": pa.array([json.dumps({"i": i, "ts": now - (i % 977), "p": pad}).encode() for i in range(n)],
                          pa.binary()),
        "topic": pa.array(["bench"] * n, pa.string()), "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()), "timestamp": ts, "timestampType": pa.array([0] * n, pa.int32()),
        "kind": pa.array(["data"] * n, pa.string()), "event_time": ts,
        "processing_time": pa.array([now * 1000] * n, us),
    }
    data = pa.RecordBatch.from_arrays([cols.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)
    punct = make_rows_batch([{"topic": "bench", "partition": 0, "offset": n, "kind": "punctuation",
                              "punctuation": now, "processing_time": now}], False)
    _prebuilt[(value_bytes, chunk)] = data, punct
    return data, punct


class _FloorRange(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.partition, self.start, self.end = partition, start, end


def _floor_read(value_bytes: int, chunk: int, r: _FloorRange) -> Iterator[pa.RecordBatch]:
    data, punct = _floor_batches(value_bytes, chunk)
    left = r.end - r.start
    while left > 0:
        k = min(chunk, left)
        yield data if k == chunk else data.slice(0, k)
        left -= k
    yield punct


def _floor_sizes(records: int, parts: int) -> list[int]:
    return [records // parts + (1 if p < records % parts else 0) for p in range(parts)]


class _FloorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, records: int, partitions: int, value_bytes: int, chunk: int, max_offsets: int | None) -> None:
        self.sizes, self.value_bytes, self.chunk = _floor_sizes(records, partitions), value_bytes, chunk
        self.max_offsets = max_offsets

    def initialOffset(self) -> dict:
        return {"o": [0] * len(self.sizes)}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the data is fixed

    def latestOffset(self, start: dict, limit) -> dict:
        from dataflow_kafka.datasource.offsets import rate_limit

        begin = dict(enumerate(start["o"]))
        end = rate_limit(begin, dict(enumerate(self.sizes)), limit.max_rows if isinstance(limit, ReadMaxRows) else None)
        return {"o": [end[p] for p in range(len(self.sizes))]}

    def partitions(self, start: dict, end: dict) -> list[_FloorRange]:
        return [_FloorRange(p, s, e) for p, (s, e) in enumerate(zip(start["o"], end["o"]))]

    def read(self, partition: _FloorRange) -> Iterator[pa.RecordBatch]:
        return _floor_read(self.value_bytes, self.chunk, partition)

    def commit(self, end: dict) -> None:
        pass


class _FloorBatchReader(DataSourceReader):
    def __init__(self, records: int, partitions: int, value_bytes: int, chunk: int) -> None:
        self.sizes, self.value_bytes, self.chunk = _floor_sizes(records, partitions), value_bytes, chunk

    def partitions(self) -> list[_FloorRange]:
        return [_FloorRange(p, 0, n) for p, n in enumerate(self.sizes)]

    def read(self, partition: _FloorRange) -> Iterator[pa.RecordBatch]:
        return _floor_read(self.value_bytes, self.chunk, partition)


class FloorSource(DataSource):
    """``format("dataflow-floor")``, options ``records``, ``partitions``, ``valueBytes``,
    ``maxOffsetsPerTrigger``, ``chunk`` (rows per Arrow batch, default the source's): the
    source's schema and offsets, prebuilt Arrow batches."""

    @classmethod
    def name(cls) -> str:
        return "dataflow-floor"

    def schema(self):
        from dataflow_kafka.datasource.schema import source_schema

        return source_schema(False)

    def _opts(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.options.items()}

    def _shape(self) -> tuple[int, int, int, int]:
        o = self._opts()
        return (int(o.get("records", 1_000_000)), int(o.get("partitions", 4)), int(o.get("valuebytes", 100)),
                int(o.get("chunk", FLOOR_CHUNK)))

    def streamReader(self, schema) -> _FloorStreamReader:
        m = self._opts().get("maxoffsetspertrigger")
        return _FloorStreamReader(*self._shape(), int(m) if m else None)

    def reader(self, schema) -> _FloorBatchReader:
        return _FloorBatchReader(*self._shape())


# --------------------------------------------------------------------------------------------
# The benchmark.

def _produce(bootstrap: str, topic: str, n: int, partitions: int, value_bytes: int) -> None:
    now = int(time.time() * 1000)
    pad = "x" * max(0, value_bytes - 40)
    produce_json(bootstrap, topic, n, partitions,
                 lambda i, rng: (b"k%d" % (i % 1000), {"i": i, "ts": now - (i % 977), "p": pad}),
                 timestamp=lambda i: now + i // 100)


#: The raw consumer's settings per broker kind, spelled out so that changing the source's settings
#: does not move the baseline. Apache Kafka: librdkafka's defaults but ``fetch.queue.backoff.ms``
#: 10 (the default 1000 postpones a partition's next fetch by a second whenever its prefetch queue
#: is full: 130-180k rec/s with the defaults, 0.9-1.3M with 10, measured 2026-11-27). noida-db:
#: the settings of the noida-db figures (it ignores fetch limits: ``receive.message.max.bytes``
#: must hold a whole partition).
RAW_CONSUMER = {
    "kafka": {"fetch.queue.backoff.ms": 10},
    "noida-db": {"enable.partition.eof": True, "fetch.max.bytes": 52428800, "receive.message.max.bytes": 400_000_000},
}


def _raw_consume(bootstrap: str, topic: str, partitions: int, n: int, kind: str = "kafka") -> tuple[float, float]:
    """``(records/s, CPU seconds of this process, librdkafka's threads included)``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "log_level": 3, **RAW_CONSUMER.get(kind, RAW_CONSUMER["kafka"])})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    cpu0 = os.times()
    t0 = time.perf_counter()
    got = 0
    sink = 0
    while got < n:
        for m in c.consume(10000, timeout=1.0):
            if m.error() is None:
                got += 1
                sink += len(m.value()) + m.offset() + m.timestamp()[1] + len(m.key() or b"")
    dt = time.perf_counter() - t0
    cpu1 = os.times()
    c.close()
    return n / dt, (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)


def _served(broker_pids: list[int], read, *args, settle: bool = True):
    """``read(*args)`` (once the broker is idle, with ``settle``: noida-db only), and the broker's
    CPU seconds meanwhile (None without /proc)."""
    if settle:
        _settle(broker_pids)
    b0 = _cpu_seconds(broker_pids)
    out = read(*args)
    return out, (None if b0 is None else _cpu_seconds(broker_pids) - b0)


def _own_read(bootstrap: str, topic: str, partitions: int, n: int) -> tuple[float, float]:
    """The source's own range reader (``datasource.source._read``: consume, decode, Arrow
    batches) over every partition, one after the other, in this process: ``(seconds, CPU
    seconds)``, librdkafka's threads included."""
    from dataflow_kafka.datasource.options import parse_source_options
    from dataflow_kafka.datasource.source import OffsetRange, _read

    opts = parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "rangeStatsTopic": ""},
                                streaming=True)
    sizes = _floor_sizes(n, partitions)
    cpu0, t0 = os.times(), time.perf_counter()
    rows = 0
    for p in range(partitions):
        for rb in _read(opts, OffsetRange(topic, p, 0, sizes[p], None, int(time.time() * 1000), [])):
            rows += rb.num_rows
    dt, cpu1 = time.perf_counter() - t0, os.times()
    if rows < n:
        raise RuntimeError(f"own read: {rows} rows for {n} records")
    return dt, (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)


def _print_cpu_bound(runs: dict, n: int, raw: float, reads: dict[str, tuple[float, float | None]]) -> None:
    """Lower bounds of a Kafka variant's time from CPU alone: the floor variant's Spark CPU (what
    Spark spends on the rows of any Python source) plus a reader's CPU and the broker's while
    serving it, spread over every core without loss; ``reads``: reader -> (its CPU seconds, the
    broker's). Prints the largest ratio to the raw consumer each bound allows."""
    cores = os.cpu_count() or 1
    for floor, kafka in (("floor-1", "ts-1"), ("floor-10", "ts-10")):
        f = runs.get(floor)
        if f is None or f.get("spark_cpu_s") is None:
            continue
        for reader, (read_cpu, broker_cpu) in reads.items():
            if broker_cpu is None:
                continue
            cpu = f["spark_cpu_s"] + read_cpu + broker_cpu
            bound_s = max(cpu / cores, f["seconds"])
            print(f"  cpu bound for {kafka} with {reader}: {floor} Spark {f['spark_cpu_s']:.2f} + read {read_cpu:.2f} + "
                  f"broker {broker_cpu:.2f} = {cpu:.2f} cpu s over {cores} cores -> at least {bound_s:.2f} s, "
                  f"ratio at most {n / bound_s / raw:.2f}", flush=True)


def _variants(n: int, ab: bool) -> dict[str, tuple[str, dict]]:
    """name -> (kind, options); kind: '[ab-]stream' / '[ab-]batch' (dataflow-kafka, or the --ab
    revision's source) or 'floor-stream' / 'floor-batch'."""
    m10, m100 = {"maxOffsetsPerTrigger": str(n // 10)}, {"maxOffsetsPerTrigger": str(n // 100)}
    out: dict[str, tuple[str, dict]] = {}
    for name, kind, options in [
        ("floor-1", "floor-stream", {}),
        ("ts-1", "stream", {}),
        ("ts-1-mp1", "stream", {"maxPartitions": "1"}),
        ("json-1", "stream", {"eventTimeField": "ts"}),
        ("floor-10", "floor-stream", m10),
        ("ts-10", "stream", m10),
        ("json-10", "stream", {**m10, "eventTimeField": "ts"}),
        ("ts-10-mp2", "stream", {**m10, "maxPartitions": "2"}),
        ("floor-100", "floor-stream", m100),
        ("ts-100", "stream", m100),
        ("ts-100-mp2", "stream", {**m100, "maxPartitions": "2"}),
        ("floor-batch", "floor-batch", {}),
        ("batch", "batch", {}),
        ("spark-1", "kafka-stream", {}),
        ("spark-10", "kafka-stream", m10),
        ("spark-100", "kafka-stream", m100),
        ("spark-batch", "kafka-batch", {}),
        ("punct-1", "kafka-punct-stream", {}),
        ("punct-10", "kafka-punct-stream", m10),
    ]:
        if ab and kind in ("stream", "batch"):
            out["ab-" + name] = ("ab-" + kind, options)
        out[name] = (kind, options)
    return out


DEFAULT_VARIANTS = "floor-1,spark-1,ts-1,json-1,floor-10,spark-10,ts-10,json-10,ts-10-mp2,floor-batch,batch"
#: variant -> Spark's connector variant it is compared with (``dataflow-kafka / Spark``)
SPARK_TWIN = {"floor-1": "spark-1", "ts-1": "spark-1", "json-1": "spark-1", "ts-1-mp1": "spark-1",
              "floor-10": "spark-10", "ts-10": "spark-10", "json-10": "spark-10", "ts-10-mp2": "spark-10",
              "floor-100": "spark-100", "ts-100": "spark-100", "ts-100-mp2": "spark-100",
              "floor-batch": "spark-batch", "batch": "spark-batch", "punct-1": "spark-1", "punct-10": "spark-10"}
AB_FORMAT = "dataflow-kafka-ab"


def _ab_source(rev: str) -> str:
    """Extract ``datasource/`` of git revision ``rev`` as package ``datasource_ab`` (its imports of
    itself renamed, its ``require_module_name`` too; the rest of ``dataflow_kafka`` is this tree's)
    with a source named ``dataflow-kafka-ab``; returns the directory to put on the
    ``PYTHONPATH`` of the driver and of Spark's Python workers."""
    import re
    import subprocess
    import tarfile

    root = Path(__file__).resolve().parents[1]
    out = Path(tempfile.mkdtemp(prefix="dataflow-kafka-ab-"))
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", rev, "datasource"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    pkg = out / "datasource_ab"
    (out / "datasource").rename(pkg)
    for f in pkg.glob("*.py"):
        text = re.sub(r"\bdataflow_kafka\.datasource\b", "datasource_ab", f.read_text())  # its one name, too
        text = re.sub(r"\b(from|import) datasource\b", r"\1 datasource_ab", text)   # trees before the one name
        f.write_text(text)
    with open(pkg / "__init__.py", "a") as f:
        f.write("\n\nclass ABSource(DataflowKafkaDataSource):\n    @classmethod\n    def name(cls):\n"
                f"        return {AB_FORMAT!r}\n")
    return str(out)


CPU_ROLES = ("jvm", "python_workers", "python_other", "exited_children")


def _cpu_split(root_pids: list[int]) -> dict[str, float] | None:
    """CPU seconds (user + system) of ``root_pids`` and every process below them, from /proc,
    per role (None where /proc is missing): ``jvm`` the root processes themselves; ``python_workers``
    pyspark's daemon and the workers it forks (their exited children included); ``python_other``
    other live processes (a query's Python planner, ``python_streaming_source_runner``, while it
    runs); ``exited_children`` the CPU of the roots' children that have exited and been reaped: a
    finished query's Python planner, and the short shell commands (``chmod``, ``readlink``) Hadoop's
    local file system starts for checkpoint files."""
    if not os.path.isdir("/proc"):
        return None
    stats: dict[int, tuple[int, int, int, str]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    head, tail = f.read().rsplit(")", 1)
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            fields = tail.split()
            stats[int(d)] = (int(fields[1]), int(fields[11]) + int(fields[12]),
                             int(fields[13]) + int(fields[14]), cmd or head.split("(", 1)[-1])
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in stats.items():
        children.setdefault(ppid, []).append(pid)
    split = dict.fromkeys(CPU_ROLES, 0)
    roots = [p for p in root_pids if p]
    todo, seen = [(p, None) for p in roots], set()
    while todo:
        pid, inherited = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        _, own, reaped, cmd = stats[pid]
        role = inherited or ("jvm" if pid in roots else "python_workers" if "pyspark.daemon" in cmd
                             else "python_other")
        split[role] += own
        split["exited_children" if pid in roots else role] += reaped
        todo += [(c, None if role == "jvm" else role) for c in children.get(pid, [])]
    tick = os.sysconf("SC_CLK_TCK")
    return {k: v / tick for k, v in split.items()}


def _cpu_seconds(root_pids: list[int]) -> float | None:
    """CPU time (user + system, reaped children included) of ``root_pids`` and every process
    below them, from /proc (None where /proc is missing)."""
    split = _cpu_split(root_pids)
    return None if split is None else sum(split.values())


def _settle(broker_pids: list[int], idle_share: float = 0.1, step_s: float = 0.5, limit_s: float = 20.0,
            quiet_steps: int = 4) -> float:
    """Wait until the broker has used less than ``idle_share`` of a core for ``quiet_steps``
    consecutive steps; returns the seconds waited. For noida-db only: it keeps working for
    seconds after any produce (e.g. the source's range stats), in proportion to all the records it
    stores, and starts about a second after the produce, so that work must not land on the next
    run. Apache Kafka does no such work (a run's broker CPU is its fetches)."""
    t0 = time.perf_counter()
    if not broker_pids or _cpu_seconds(broker_pids) is None:
        return 0.0
    quiet = 0
    while time.perf_counter() - t0 < limit_s and quiet < quiet_steps:
        before = _cpu_seconds(broker_pids)
        time.sleep(step_s)
        quiet = quiet + 1 if _cpu_seconds(broker_pids) - before < idle_share * step_s else 0
    return time.perf_counter() - t0


def _run(spark, kind: str, options: dict, bootstrap: str, topic: str, n: int, partitions: int,
         value_bytes: int) -> dict:
    """One timed query: seconds from start to end, rows/s, the rate inside micro-batches."""
    if kind.startswith("floor"):
        fmt, base = "dataflow-floor", {"records": str(n), "partitions": str(partitions), "valueBytes": str(value_bytes)}
    elif kind.startswith("kafka-"):     # Spark's JVM connector
        fmt, base = "kafka", {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    else:
        fmt = AB_FORMAT if kind.startswith("ab-") else "dataflow-kafka"
        base = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    if kind.endswith("batch"):
        reader = spark.read.format(fmt)
        for k, v in {**base, **options}.items():
            reader = reader.option(k, v)
        t0 = time.perf_counter()
        reader.load().write.format("noop").mode("overwrite").save()
        dt = time.perf_counter() - t0
        return {"seconds": dt, "rows_per_s": n / dt, "batches": 1, "in_batch_rows_per_s": None}
    reader = spark.readStream.format(fmt)
    for k, v in {**base, **options}.items():
        reader = reader.option(k, v)
    t0 = time.perf_counter()
    df = reader.load()
    if kind == "kafka-punct-stream":       # Spark's connector, then our rows (jvm_ingest.punctuate)
        from dataflow_kafka.jvm_ingest import punctuate

        df = punctuate(df, partitions={topic: partitions})
    q = (df.writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp())
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t0
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in batches)
    assert rows >= n, f"query read {rows} rows, expected at least {n}"
    in_batches = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    return {"seconds": dt, "rows_per_s": n / dt, "batches": len(batches), "in_batch_rows_per_s": n / in_batches}


def _per_record_cpu(row: dict) -> float:
    """A run's CPU in the JVM and the Python workers only: without the query's Python planner (alive
    at the end of the run or exited) and Hadoop's shell commands, costs of a query, not of its records."""
    return row["jvm_cpu_s"] + row["python_workers_cpu_s"]


def cpu_summary(rows: list[dict], names: list[str]) -> list[str]:
    """The summary's CPU lines: per variant the median CPU seconds of Spark's processes and of each
    role, and per repeat its CPU over its Spark twin's (:data:`SPARK_TWIN`), whole and in the JVM and
    Python workers only (:func:`_per_record_cpu`: a Python source's planner process, started once per
    query, left out); no lines when no run has CPU figures."""
    if not any(r["spark_cpu_s"] is not None for r in rows):
        return []
    out = ["CPU seconds of Spark's processes per run, median per role (" + " / ".join(CPU_ROLES) + "); "
           "ours / Spark's connector's of the same repeat, per repeat: whole; JVM and Python workers only"]
    for name in names:
        mine = [r for r in rows if r["variant"] == name and r["spark_cpu_s"] is not None]
        if not mine:
            continue
        roles = " / ".join(f"{statistics.median(r[f'{k}_cpu_s'] for r in mine):.2f}" for k in CPU_ROLES)
        twins = {r["repeat"]: r for r in rows if r["variant"] == SPARK_TWIN.get(name) and r["spark_cpu_s"]}
        pairs = [(r, twins[r["repeat"]]) for r in mine if r["repeat"] in twins]
        line = f"  {name:14s} {statistics.median(r['spark_cpu_s'] for r in mine):5.2f} ({roles})"
        if pairs:
            whole = [a["spark_cpu_s"] / b["spark_cpu_s"] for a, b in pairs]
            per_record = [_per_record_cpu(a) / _per_record_cpu(b) for a, b in pairs if _per_record_cpu(b)]
            line += (f"  / {SPARK_TWIN[name]}: " + " ".join(f"{x:.2f}" for x in whole)
                     + f" (median {statistics.median(whole):.2f}); JVM and Python workers only "
                     + " ".join(f"{x:.2f}" for x in per_record)
                     + (f" (median {statistics.median(per_record):.2f})" if per_record else ""))
        out.append(line)
    return out


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"comma-separated; 'all' for every one "
                    f"(default {DEFAULT_VARIANTS})")
    ap.add_argument("--ab", metavar="REV", help="also run the source of git revision REV (variants 'ab-*', "
                    "each right before its twin): before/after under the same conditions")
    ap.add_argument("--csv", default=None, help="write every run to this CSV file")
    ap.add_argument("--no-warmup", action="store_true")
    args = ap.parse_args(argv)

    if args.ab:  # before the session starts: Spark's Python workers inherit PYTHONPATH
        ab_dir = _ab_source(args.ab)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ab_dir, os.environ.get("PYTHONPATH")) if p)
        import sys

        sys.path.insert(0, ab_dir)

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    n = args.records
    every = _variants(n, bool(args.ab))
    names = list(every) if args.variants == "all" else [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.ab and args.variants != "all":
        names = [x for v in names for x in ([f"ab-{v}"] if f"ab-{v}" in every else []) + [v]]
    unknown = [v for v in names if v not in every]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {list(every)}")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    rows: list[dict] = []
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        # One topic only: noida-db spends CPU after every produce (the source's range stats)
        # in proportion to all the records it stores (measured: 1.85 CPU-s per million).
        # (Apache Kafka does not; one topic keeps the runs alike.)
        create_topics(bs, {"bench": args.partitions})
        _produce(bs, "bench", n, args.partitions, args.value_bytes)
        from bench import spark_kafka

        if any(every[v][0].startswith("kafka-") for v in names) and spark_kafka.connector_jars() is None:
            print(f"skipping {[v for v in names if every[v][0].startswith('kafka-')]}: {spark_kafka.missing_message()}",
                  flush=True)
            names = [v for v in names if not every[v][0].startswith("kafka-")]
        spark = spark_session(shuffle_partitions=2, extra=spark_kafka.session_extra())
        from bench import source_throughput  # not __main__: workers import the floor and keep its batches

        spark.dataSource.register(source_throughput.FloorSource)
        if args.ab:
            from datasource_ab import ABSource

            spark.dataSource.register(ABSource)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "1000")  # every batch's progress
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        spark_pids = [proc.pid] if proc is not None else []
        broker_proc = getattr(broker, "_proc", None)
        broker_pids = [broker_proc.pid] if broker_proc is not None else []
        settle = broker.kind == "noida-db"      # _settle: noida-db's post-produce work
        shape = (n, args.partitions, args.value_bytes)
        print(f"broker: {broker.kind}; {n} records x ~{args.value_bytes} B over {args.partitions} partitions; "
              f"Spark local[2]; cores: {os.cpu_count()}; started {started}"
              + (f"; ab-* = source of {args.ab}" if args.ab else ""), flush=True)
        if not args.no_warmup:  # JIT, Python workers: what a running query has
            print(f"warm-up (loadavg {_loadavg()})", flush=True)
            for name in names:
                _run(spark, *every[name], bs, "bench", *shape)
        for rep in range(1, args.repeat + 1):
            load_start = _loadavg()
            raw_reads = [_served(broker_pids, _raw_consume, bs, "bench", args.partitions, n, broker.kind,
                                 settle=settle)]
            runs = {}
            order = names if rep % 2 or args.ab else names[::-1]
            if args.ab and rep % 2 == 0:  # ab-X before X in odd repeats, after it in even ones
                order = []
                for name in names:
                    if order and order[-1] == f"ab-{name}":
                        order.insert(len(order) - 1, name)
                    else:
                        order.append(name)
            for name in order:
                if settle:
                    _settle(broker_pids)
                split0, broker0 = _cpu_split(spark_pids), _cpu_seconds(broker_pids)
                runs[name] = _run(spark, *every[name], bs, "bench", *shape)
                split1, broker1 = _cpu_split(spark_pids), _cpu_seconds(broker_pids)
                roles = ({k: round(split1[k] - split0[k], 2) for k in CPU_ROLES}
                         if split0 is not None and split1 is not None and spark_pids else dict.fromkeys(CPU_ROLES))
                runs[name]["spark_cpu_s"] = None if roles["jvm"] is None else round(sum(roles.values()), 2)
                runs[name]["broker_cpu_s"] = (None if broker0 is None or broker1 is None or not broker_pids
                                              else round(broker1 - broker0, 2))
                runs[name]["roles"] = roles
            raw_reads.append(_served(broker_pids, _raw_consume, bs, "bench", args.partitions, n, broker.kind,
                                     settle=settle))
            (raw_before, _), (raw_after, _) = (r for r, _ in raw_reads)
            (raw, consumer_cpu), broker_cpu = max(raw_reads, key=lambda r: r[0][0])   # the faster one
            (own_s, own_cpu), own_broker = _served(broker_pids, _own_read, bs, "bench", args.partitions, n,
                                                   settle=settle)
            load_end = _loadavg()
            print(f"repeat {rep}: loadavg {load_start} -> {load_end}; raw confluent-kafka consume "
                  f"{raw_before:,.0f} / {raw_after:,.0f} rec/s (baseline {raw:,.0f}; cpu s: consumer "
                  f"{consumer_cpu:.2f}, broker {broker_cpu if broker_cpu is None else round(broker_cpu, 2)}); the "
                  f"source's range reader in one process {n / own_s:,.0f} rec/s (ratio {n / own_s / raw:.2f}; cpu s: "
                  f"reader {own_cpu:.2f}, broker {own_broker if own_broker is None else round(own_broker, 2)})",
                  flush=True)
            _print_cpu_bound(runs, n, raw, {"the raw consumer": (consumer_cpu, broker_cpu),
                                            "the source's reader": (own_cpu, own_broker)})
            for name in names:
                r = runs[name]
                inb = r["in_batch_rows_per_s"]
                twin = runs.get(SPARK_TWIN.get(name, ""))
                to_spark = r["rows_per_s"] / twin["rows_per_s"] if twin else None
                print(f"  {name:14s} {r['rows_per_s']:10,.0f} rows/s  ratio {r['rows_per_s'] / raw:.2f}  "
                      + (f"/ {SPARK_TWIN[name]} {to_spark:.2f}  " if twin else "")
                      + f"{r['seconds']:6.2f} s  {r['batches']:3d} batch(es)"
                      + (f"  in batches {inb:10,.0f} rows/s ratio {inb / raw:.2f}" if inb else "")
                      + (f"  cpu s: spark {r['spark_cpu_s']} ("
                         + ", ".join(f"{k} {v}" for k, v in r["roles"].items()) + f"), broker {r['broker_cpu_s']}"
                         if r["spark_cpu_s"] is not None else ""), flush=True)
                rows.append({"started": started, "repeat": rep, "variant": name, "records": n,
                             "batches": r["batches"], "seconds": round(r["seconds"], 3),
                             "rows_per_s": round(r["rows_per_s"]), "raw_rec_per_s": round(raw),
                             "ratio": round(r["rows_per_s"] / raw, 3),
                             "spark_twin": SPARK_TWIN.get(name, "") if twin else "",
                             "ratio_to_spark": round(to_spark, 3) if twin else "",
                             "in_batch_rows_per_s": round(inb) if inb else "",
                             "in_batch_ratio": round(inb / raw, 3) if inb else "",
                             "spark_cpu_s": r["spark_cpu_s"], "broker_cpu_s": r["broker_cpu_s"],
                             **{f"{k}_cpu_s": v for k, v in r["roles"].items()},
                             "raw_consumer_cpu_s": round(consumer_cpu, 2),
                             "raw_broker_cpu_s": "" if broker_cpu is None else round(broker_cpu, 2),
                             "own_read_rec_per_s": round(n / own_s), "own_read_cpu_s": round(own_cpu, 2),
                             "own_read_broker_cpu_s": "" if own_broker is None else round(own_broker, 2),
                             "loadavg_start": load_start, "loadavg_end": load_end,
                             "ab_rev": args.ab or ""})
        spark.stop()
    print("summary (ratio to the raw consumer of the same repeat: median [min, max])")
    for name in names:
        ratios = [r["ratio"] for r in rows if r["variant"] == name]
        print(f"  {name:14s} {statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]")
    if any(r["ratio_to_spark"] != "" for r in rows):
        print("dataflow-kafka / Spark's Kafka connector (format(\"kafka\")), rows/s of the same repeat: median [min, max]")
        for name in names:
            ratios = [r["ratio_to_spark"] for r in rows if r["variant"] == name and r["ratio_to_spark"] != ""]
            if ratios:
                print(f"  {name:14s} / {SPARK_TWIN[name]:11s} {statistics.median(ratios):.2f} "
                      f"[{min(ratios):.2f}, {max(ratios):.2f}]")
    for line in cpu_summary(rows, names):
        print(line)
    if args.ab:
        print("after / before, time of the same repeat (below 1: faster now)")
        for name in names:
            if name.startswith("ab-"):
                pairs = [(a["seconds"], b["seconds"]) for a, b in zip(
                    [r for r in rows if r["variant"] == name[3:]], [r for r in rows if r["variant"] == name])]
                print(f"  {name[3:]:14s} " + " ".join(f"{a / b:.2f}" for a, b in pairs))
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
