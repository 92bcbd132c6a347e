"""Shared parts of the per-micro-batch latency benchmarks (``bench.sink_cost``,
``bench.spark_settings``, ``bench.latency_budget``): a trickle producer, an output-topic watcher,
running a streaming query for a while, summaries of ``query.recentProgress``, pipelines and CSV.

A *pipeline* (:class:`Pipeline`) is what the benchmarks measure between the source and the sink;
``build(source_df, output_topic)`` returns the DataFrame of sink rows, ``record(i, send_s,
partition)`` makes the i-th input record, and ``expected(sent)`` says which output keys each input
record leads to (for end-to-end latency). :func:`inverted_index` is today's
``optimistic.spark.build_pipeline(src, inverted_index_stages(2), ...)``; other stage layers plug in
as other :class:`Pipeline` values.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DURATIONS = ("queryPlanning", "latestOffset", "getBatch", "addBatch", "walCommit", "commitOffsets",
             "triggerExecution")
OPERATOR_FIELDS = ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs", "numRowsUpdated", "numRowsTotal",
                   "numRowsRemoved", "memoryUsedBytes")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def create_topic(bootstrap: str, partitions: int, prefix: str) -> str:
    """A new topic named ``prefix-<random>``, once the broker shows all its partitions."""
    from dataflow_kafka.brokers.admin import create_topics, unique_topic

    name = unique_topic(prefix)
    create_topics(bootstrap, {name: partitions})
    return name


@dataclass
class Sent:
    send_s: float
    partition: int
    offset: int
    i: int
    value: bytes


class Trickle(threading.Thread):
    """Produces ``record(i, send_s, partition) -> (key, value)`` to ``topic`` at ``rate`` records/s
    (round robin over partitions; exponential gaps when ``poisson``, else even) until stopped;
    ``sent`` holds the acknowledged records."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float,
                 record: Callable[[int, float, int], tuple[bytes | None, bytes]], poisson: bool = False,
                 seed: int = 1) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "log_level": 3})
        self.topic, self.partitions, self.rate, self.record, self.poisson = topic, partitions, rate, record, poisson
        self.rng = random.Random(seed)
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._active = threading.Event()
        self._active.set()
        self.i = 0

    def pause(self) -> None:
        """Stop producing until :meth:`resume` (the query then has nothing to do)."""
        self._active.clear()

    def resume(self) -> None:
        self._active.set()

    def run(self) -> None:
        next_t = time.time()
        while not self._halt.is_set():
            if not self._active.is_set():
                while not self._active.wait(0.05) and not self._halt.is_set():
                    pass
                if self._halt.is_set():
                    break
                next_t = time.time()
            next_t += self.rng.expovariate(self.rate) if self.poisson else 1 / self.rate
            delay = next_t - time.time()
            if delay > 0:
                self._halt.wait(delay)
            i, part = self.i, self.i % self.partitions
            send = time.time()
            key, value = self.record(i, send, part)

            def done(err, msg, send=send, i=i, value=value):
                if err is None:
                    with self._lock:
                        self.sent.append(Sent(send, msg.partition(), msg.offset(), i, value))

            self.p.produce(self.topic, value=value, key=key, partition=part, on_delivery=done)
            self.p.poll(0)
            self.i += 1
        self.p.flush(30)

    def stop(self) -> None:
        self._halt.set()
        self._active.set()
        self.join(60)

    def sent_between(self, lo: float, hi: float) -> list[Sent]:
        with self._lock:
            return [s for s in self.sent if lo <= s.send_s < hi]


class OutputWatcher(threading.Thread):
    """Polls an output topic; remembers when each record key was first readable."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{uuid.uuid4().hex[:8]}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 10, "fetch.min.bytes": 1, "log_level": 3,
                           "receive.message.max.bytes": 400_000_000})
        self.c.subscribe([topic])
        self.seen: dict[bytes, float] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            for m in self.c.consume(1000, 0.05):
                if m.error() or m.key() is None:
                    continue
                self.seen.setdefault(bytes(m.key()), time.time())
        self.c.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


@dataclass
class Pipeline:
    """What runs between the source and the sink (module docstring)."""

    name: str
    build: Callable[[Any, str], Any]                                   # (source_df, output_topic) -> sink rows
    record: Callable[[int, float, int], tuple[bytes | None, bytes]]    # (i, send_s, partition) -> key, value
    expected: Callable[[list[Sent]], dict[tuple[int, int], set[bytes]]] | None = None
    source_options: dict[str, str] = field(default_factory=dict)
    rate: float = 10.0
    poisson: bool = True
    source_format: str = "dataflow-kafka"     # or "kafka": Spark's JVM connector (bench.spark_kafka)
    needs_input_topic: bool = False           # build(source_df, output_topic, input_topic)

    def frame(self, source_df, output_topic: str, input_topic: str):
        """The sink rows: ``build`` applied to the source DataFrame."""
        if self.needs_input_topic:
            return self.build(source_df, output_topic, input_topic)
        return self.build(source_df, output_topic)


def source_reader(spark, bootstrap: str, topic: str, pipeline: Pipeline):
    """``readStream`` of ``topic`` from the earliest offset in ``pipeline.source_format``, with
    ``pipeline.source_options``."""
    from bench._kafka import stream_source

    return stream_source(spark, pipeline.source_format, bootstrap, topic, None, **pipeline.source_options)


def passthrough(rate: float = 20.0) -> Pipeline:
    """Data rows as they are (key, value): the stateless shape of ``bench.sink_cost``."""
    def build(src, out_topic):
        return src.filter("kind = 'data'").selectExpr("key", "value")

    def record(i, send_s, part):
        return b"k%d" % i, json.dumps({"ts": int(send_s * 1000), "i": i}).encode()

    def expected(sent):
        return {(s.partition, s.offset): {b"k%d" % s.i} for s in sent}

    return Pipeline("passthrough", build, record, expected, {"eventTimeField": "ts"}, rate, poisson=False)


def passthrough_data_only(rate: float = 20.0) -> Pipeline:
    """:func:`passthrough` on our source with option ``dataOnly`` (Spark's Kafka columns, the data
    records only, no range stats): key, value."""
    base = passthrough(rate)
    return Pipeline("passthrough, dataOnly", lambda src, out_topic: src.selectExpr("key", "value"), base.record,
                    base.expected, {"dataOnly": "true"}, rate, poisson=False)


def passthrough_kafka(rate: float = 20.0, punctuated: bool = False, partitions: int = 2) -> Pipeline:
    """:func:`passthrough` read through Spark's JVM connector (``format("kafka")``): key, value;
    ``punctuated``: through :func:`jvm_ingest.punctuate` first (input topic of ``partitions``
    partitions), then the data rows' key and value."""
    base = passthrough(rate)

    def build(src, out_topic, in_topic=None):
        if punctuated:
            from dataflow_kafka.jvm_ingest import punctuate

            src = punctuate(src, partitions={in_topic: partitions}, event_time_field="ts").filter("kind = 'data'")
        return src.selectExpr("key", "value")

    return Pipeline("passthrough, format(kafka)" + (", punctuate" if punctuated else ""), build, base.record,
                    base.expected, {}, rate, poisson=False, source_format="kafka", needs_input_topic=punctuated)


def passthrough_floor(rate: float = 20.0) -> Pipeline:
    """:func:`passthrough` through :class:`bench.python_floor.FloorSource` (``format("bench-python-floor")``:
    Spark's Python source path without reading Kafka): key, value."""
    base = passthrough(rate)
    return Pipeline("passthrough, Python floor source", lambda src, out_topic: src.selectExpr("key", "value"),
                    base.record, None, {}, rate, poisson=False, source_format="bench-python-floor")


def inverted_index(stages: int = 2, key_groups: int = 4, skew_ms: int = 100, rate: float = 10.0,
                   output_partitions: int = 2, fused: bool = False, io: str = "dataflow-kafka",
                   partitions: int = 2) -> Pipeline:
    """Today's optimistic inverted index, as ``bench/latency_experiment.py`` drives it: documents of
    synthetic Zipf text, event time = send time minus ``partition * skew_ms``, ``stages``
    order-sensitive stages, ``key_groups`` key groups per stage, one barrier. ``fused``: stages
    keyed by the same key run in one operator (``inverted_index_same_key``). ``io``:
    ``"dataflow-kafka"`` (our source), ``"kafka"`` (Spark's connector through
    :func:`jvm_ingest.punctuate`, input topic of ``partitions`` partitions; use Spark's sink), or
    ``"spark-jvm"`` (not our stages: Spark's connector and the Java ``transformWithState`` of
    :func:`bench.jvm_baseline.milestones_jvm`, 2 stages, watermark delay ``(partitions - 1) *
    skew_ms + 200``)."""
    from dataflow_kafka.optimistic.spark import build_pipeline
    from dataflow_kafka.optimistic.workload import generate_documents, inverted_index_same_key, inverted_index_stages

    docs = generate_documents(500, vocabulary_size=2000, words_per_doc=(10, 30), seed=1)
    stage_list = inverted_index_stages(stages)

    def decode(value: bytes):
        d = json.loads(value)
        return (d["id"], d["text"])

    def build(src, out_topic, in_topic=None):
        if io == "spark-jvm":
            from bench.jvm_baseline import milestones_jvm

            return milestones_jvm(src, (partitions - 1) * skew_ms + 200)
        if io == "kafka":
            from dataflow_kafka.jvm_ingest import punctuate

            src = punctuate(src, partitions={in_topic: partitions}, event_time_field="ts")
        return build_pipeline(src, stage_list, output_topic=out_topic, mode="optimistic", key_groups=key_groups,
                              decode=decode, output_partitions=output_partitions,
                              fuse_same_key=inverted_index_same_key(stages) if fused else False)

    def record(i, send_s, part):
        return None, json.dumps({"ts": int(send_s * 1000) - part * skew_ms, "id": i,
                                 "text": docs[i % len(docs)][1]}).encode()

    def expected(sent):
        from dataflow_kafka.optimistic import run_local

        arrivals = sorted((json.loads(s.value)["ts"], s.partition, s.offset, decode(s.value)) for s in sent)
        out: dict[tuple[int, int], set[bytes]] = {}
        for item in run_local(stage_list, arrivals).released:
            out.setdefault((item.meta.source, item.meta.offset), set()).add(bytes(item.meta.sort_key()))
        return out

    if io not in ("dataflow-kafka", "kafka", "spark-jvm"):
        raise ValueError(f"io must be 'dataflow-kafka', 'kafka' or 'spark-jvm', got {io!r}")
    ours = io == "dataflow-kafka"
    return Pipeline(f"inverted index, {stages} order-sensitive stages" + ("" if ours else f", {io}"), build, record,
                    expected, {"eventTimeField": "ts"} if ours else {}, rate, poisson=True,
                    source_format="dataflow-kafka" if ours else "kafka", needs_input_topic=not ours)


@dataclass
class QueryRun:
    progress: list[dict]        # steady-state progress events (after the warm-up)
    all_progress: list[dict]
    started_s: float            # wall time of the first progress event
    measured: tuple[float, float]


def run_query(start: Callable[[], Any], seconds: float, warmup_s: float,
              drain: Callable[[float, float], bool] | None = None, drain_s: float = 0.0,
              timeout_s: float = 240.0, warmup_batches: int = 2, min_batches: int = 5) -> QueryRun:
    """Start a query; warm-up: wait until ``warmup_batches`` micro-batches with input rows have
    completed (the first ones pay the query's start-up) and at least ``warmup_s`` since the first
    progress event; then measure for ``seconds`` (the window ``lo, hi``), extended up to three times
    as long until ``min_batches`` micro-batches started in it; optionally wait up to ``drain_s``
    until ``drain(lo, hi)`` is true; stop. The measured progress events are those whose trigger
    started inside the window."""
    q = start()

    def check():
        if q.exception():
            raise q.exception()
        if time.time() > deadline:
            raise RuntimeError(f"the query did not get through its warm-up within {timeout_s:.0f} s")

    try:
        deadline = time.time() + timeout_s
        while not q.recentProgress:
            check()
            time.sleep(0.1)
        t0 = time.time()
        while time.time() < t0 + warmup_s or len(with_data(q.recentProgress)) < warmup_batches:
            check()
            time.sleep(0.1)
        lo = time.time()
        time.sleep(seconds)
        while (sum(1 for p in q.recentProgress if _epoch(p["timestamp"]) >= lo) < min_batches
               and time.time() < lo + 3 * seconds):
            time.sleep(0.2)
        hi = time.time()
        if drain is not None:
            until = time.time() + drain_s
            while not drain(lo, hi) and time.time() < until:
                time.sleep(0.2)
        if q.exception():
            raise q.exception()
        every = list(q.recentProgress)
    finally:
        q.stop()
    measured = [p for p in every if lo <= _epoch(p["timestamp"]) < hi]
    return QueryRun(measured, every, t0, (lo, hi))


def _epoch(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def with_data(progress: list[dict]) -> list[dict]:
    return [p for p in progress if p.get("numInputRows")]


def median_of(progress: list[dict], name: str) -> float:
    xs = [p["durationMs"].get(name, 0) for p in progress]
    return statistics.median(xs) if xs else float("nan")


def operator_medians(progress: list[dict]) -> list[dict]:
    """Per stateful operator (by position in ``stateOperators``): its name and the median of each
    field of :data:`OPERATOR_FIELDS` over ``progress``."""
    ops: list[dict] = []
    for p in progress:
        for j, op in enumerate(p.get("stateOperators", [])):
            while len(ops) <= j:
                ops.append({"name": op.get("operatorName"), "values": {f: [] for f in OPERATOR_FIELDS}})
            for f in OPERATOR_FIELDS:
                ops[j]["values"][f].append(op.get(f, 0) or 0)
    return [{"name": o["name"], **{f: statistics.median(v) if v else float("nan") for f, v in o["values"].items()}}
            for o in ops]


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q / 100 * len(xs))) - 1)] if xs else float("nan")


def e2e_latencies_ms(sent: list[Sent], expected: dict[tuple[int, int], set[bytes]], seen: dict[bytes, float],
                     end_s: float) -> tuple[list[float], int]:
    """Per input record with expected output: time its last expected output was first readable
    minus its send time (a record still missing outputs counts with ``end_s``, a lower bound);
    returns the latencies and the number of incomplete records."""
    lat, incomplete = [], 0
    for s in sent:
        keys = expected.get((s.partition, s.offset))
        if not keys:
            continue
        times = [seen.get(k) for k in keys]
        incomplete += any(t is None for t in times)
        lat.append((max(end_s if t is None else t for t in times) - s.send_s) * 1000)
    return lat, incomplete


def checkpoint_dir(prefix: str, base: str | None = None) -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def write_csv(path: str | Path, rows: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path


def machine() -> str:
    return f"cores {os.cpu_count()}, load average {loadavg()}"



def run_pipeline(spark, bootstrap: str, pipeline: Pipeline, sink: str = "kafka", seconds: float = 20.0,
                 warmup_s: float = 6.0, partitions: int = 2, output_partitions: int = 2,
                 checkpoint_base: str | None = None, latency: bool = False, cooldown_s: float = 3.0,
                 drain_s: float = 20.0, sink_format: str = "dataflow-kafka",
                 sink_options: dict[str, str] | None = None) -> dict:
    """One streaming query: a fresh input topic read from ``earliest`` in ``pipeline.source_format``
    (with ``pipeline.source_options``), ``pipeline.build``, then ``sink``: ``"kafka"`` (the
    project's sink, or ``sink_format`` with ``sink_options``, to a fresh output topic) or ``"noop"``. A :class:`Trickle` feeds the input at
    ``pipeline.rate`` from just before the start to the end. Measured: the micro-batches that start
    in the ``seconds`` after the first progress event plus ``warmup_s``; with ``latency`` (Kafka
    sink only), the end-to-end latency of the records sent in that window (their expected outputs
    read from the output topic; after the window the query runs on, ``cooldown_s`` and then up to
    ``drain_s`` until they are all there).

    Returns ``progress`` (measured events with input rows), ``all_progress``, ``latencies_ms``,
    ``incomplete``, ``checkpoint``."""
    in_topic = create_topic(bootstrap, partitions, "in")
    out_topic = create_topic(bootstrap, output_partitions, "out")
    df = pipeline.frame(source_reader(spark, bootstrap, in_topic, pipeline), out_topic, in_topic)
    ck = checkpoint_dir("bench-ck-", checkpoint_base)
    watcher = OutputWatcher(bootstrap, out_topic) if latency and sink == "kafka" else None
    trickle = Trickle(bootstrap, in_topic, partitions, pipeline.rate, pipeline.record, pipeline.poisson)
    state: dict = {}

    def start():
        w = df.writeStream.option("checkpointLocation", ck)
        if sink == "noop":
            w = w.format("noop")
        else:
            w = w.format(sink_format).option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
            for k, v in (sink_options or {}).items():
                w = w.option(k, v)
        trickle.start()
        return w.start()

    def drain(lo: float, hi: float) -> bool:
        if "expected" not in state:
            time.sleep(cooldown_s)
            state["expected"] = pipeline.expected(trickle.sent_between(0, time.time()))
            state["measured"] = [s for s in trickle.sent_between(lo, hi)
                                 if state["expected"].get((s.partition, s.offset))]
        exp, seen = state["expected"], watcher.seen
        return all(k in seen for s in state["measured"] for k in exp[(s.partition, s.offset)])

    want_latency = watcher is not None and pipeline.expected is not None
    if watcher is not None:
        watcher.start()
    try:
        run = run_query(start, seconds, warmup_s, drain if want_latency else None, drain_s)
        end = time.time()
    finally:
        trickle.stop()
        if watcher is not None:
            watcher.stop()
    out = {"progress": with_data(run.progress), "all_progress": run.all_progress, "latencies_ms": [],
           "incomplete": 0, "checkpoint": ck}
    if want_latency:
        out["latencies_ms"], out["incomplete"] = e2e_latencies_ms(state["measured"], state["expected"],
                                                                  watcher.seen, end)
    return out



@dataclass
class Arm:
    """One side of an interleaved comparison: a query and the session settings it starts with."""

    name: str
    pipeline: Pipeline
    sink: str = "kafka"                 # "kafka" (sink_format) or "noop"; sink_options go to either
    settings: dict[str, str] = field(default_factory=dict)
    checkpoint_base: str | None = None
    sink_format: str = "dataflow-kafka"
    sink_options: dict[str, str] = field(default_factory=dict)


def interleaved(spark, bootstrap: str, arms: list[Arm], cycles: int = 3, phase_s: float = 12.0,
                warmup_s: float = 6.0, warmup_batches: int = 2, partitions: int = 2,
                log: Callable[[str], None] | None = None) -> list[dict]:
    """Run the ``arms``' queries at the same time in one session, each on its own input topic fed
    by its own :class:`Trickle`, and take turns: in each cycle every arm's input runs for
    ``phase_s`` seconds while the others' inputs are paused (their queries idle), in an order that
    rotates from cycle to cycle. So every arm is measured under the same background load, sampled
    finely over the same minutes, instead of one after the other (on a shared machine the load
    drifts over minutes). An arm's measured micro-batches: those with input rows that started in
    one of its phases. Session settings are snapshotted by Spark when a query starts: each arm's
    ``settings`` are set just before its start and restored just after.

    Returns one dict per (cycle, arm): ``cycle``, ``arm``, ``progress`` (that phase's batches)."""
    queries, trickles = [], []
    try:
        for arm in arms:
            in_topic = create_topic(bootstrap, partitions, "in")
            out_topic = create_topic(bootstrap, 2, "out")
            df = arm.pipeline.frame(source_reader(spark, bootstrap, in_topic, arm.pipeline), out_topic, in_topic)
            w = df.writeStream.option("checkpointLocation", checkpoint_dir("bench-ck-", arm.checkpoint_base))
            if arm.sink == "noop":
                w = w.format("noop")
            else:
                w = w.format(arm.sink_format).option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
            for k, v in arm.sink_options.items():
                w = w.option(k, v)
            before = {k: spark.conf.get(k, None) for k in arm.settings}
            for k, v in arm.settings.items():
                spark.conf.set(k, v)
            try:
                t = Trickle(bootstrap, in_topic, partitions, arm.pipeline.rate, arm.pipeline.record,
                            arm.pipeline.poisson)
                t.start()
                trickles.append(t)
                queries.append(w.start())
            finally:
                for k, v in before.items():
                    spark.conf.unset(k) if v is None else spark.conf.set(k, v)
        deadline = time.time() + 300
        t0 = time.time()
        while (time.time() < t0 + warmup_s
               or any(len(with_data(q.recentProgress)) < warmup_batches for q in queries)):
            for q in queries:
                if q.exception():
                    raise q.exception()
            if time.time() > deadline:
                raise RuntimeError("the queries did not get through their warm-up within 300 s")
            time.sleep(0.2)
        for t in trickles:
            t.pause()
        _settle(queries)
        windows: list[tuple[int, int, float, float]] = []
        for c in range(cycles):
            order = [(c + j) % len(arms) for j in range(len(arms))]
            for j in order:
                trickles[j].resume()
                lo = time.time()
                time.sleep(phase_s)
                trickles[j].pause()
                hi = time.time()
                windows.append((c + 1, j, lo, hi))
                _settle(queries)
                if queries[j].exception():
                    raise queries[j].exception()
            if log:
                log(f"  cycle {c + 1} done; load average {loadavg()}")
        every = [list(q.recentProgress) for q in queries]
    finally:
        for q in queries:
            q.stop()
        for t in trickles:
            t.stop()
    out = []
    for c, j, lo, hi in windows:
        out.append({"cycle": c, "arm": arms[j].name, "window": (lo, hi),
                    "progress": [p for p in with_data(every[j]) if lo <= _epoch(p["timestamp"]) < hi]})
    return out


def add_interleave_arguments(ap, what: str = "arm") -> None:
    """The command-line options of a benchmark built on :func:`interleaved`: ``--quick``,
    ``--cycles``, ``--phase``, ``--warmup``, ``--rate``, ``--partitions`` (read them back with
    :func:`cycles_and_phase`)."""
    ap.add_argument("--quick", action="store_true", help="2 cycles of 6 s phases")
    ap.add_argument("--cycles", type=int, default=None, help="alternation cycles (default 3)")
    ap.add_argument("--phase", type=float, default=None, help=f"seconds of input per {what} and cycle (default 12)")
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--rate", type=float, default=20.0, help="input records/s")
    ap.add_argument("--partitions", type=int, default=2)


def cycles_and_phase(args) -> tuple[int, float]:
    """``(cycles, phase seconds)`` from :func:`add_interleave_arguments`' options."""
    return args.cycles or (2 if args.quick else 3), args.phase or (6.0 if args.quick else 12.0)


def summarise(res: list[dict], ratios: list[tuple[str, str, str]], load_start: str,
              log: Callable[[str], None] = print) -> list[dict]:
    """Print and return CSV rows for the result of :func:`interleaved`: per cycle and arm the median
    ``triggerExecution`` and ``addBatch`` of its batches, then per ``(name, a, b)`` of ``ratios``
    the per-cycle ratio ``a / b`` of those medians and its median over cycles."""
    load_end = loadavg()
    date = time.strftime("%Y-%m-%d %H:%M")
    rows, med = [], {}
    for r in res:
        p = r["progress"]
        trig, add = median_of(p, "triggerExecution"), median_of(p, "addBatch")
        med[(r["cycle"], r["arm"])] = trig
        rows.append({"date": date, "cycle": r["cycle"], "arm": r["arm"], "batches": len(p), "median_trigger_ms": trig,
                     "median_addBatch_ms": add,
                     "mean_rows_per_batch": round(statistics.mean(x["numInputRows"] for x in p), 1) if p else "",
                     "loadavg_start": load_start, "loadavg_end": load_end})
        log(f"cycle {r['cycle']} {r['arm']:48s} {len(p):3d} batches  median trigger {trig:5.0f} ms  "
            f"addBatch {add:5.0f} ms")
    cycles = sorted({c for c, _ in med})
    log(f"summary: median over cycles of the per-cycle ratio of median micro-batch durations "
        f"(load {load_start} -> {load_end})")
    for name, a, b in ratios:
        per = [med[(c, a)] / med[(c, b)] for c in cycles]
        rows += [{"date": date, "cycle": c, "arm": f"ratio: {name}", "ratio": round(x, 3), "loadavg_start": load_start,
                  "loadavg_end": load_end} for c, x in zip(cycles, per)]
        log(f"  {name:48s} {statistics.median(per):5.2f} (cycles: {' '.join(f'{x:.2f}' for x in per)})")
    for arm in dict.fromkeys(a for _, a in med):
        log(f"  {arm:48s} median batch {statistics.median(med[(c, arm)] for c in cycles):5.0f} ms")
    log("where a batch goes: median ms over every measured batch of an arm")
    log(f"  {'arm':48s} " + " ".join(f"{d[:13]:>13s}" for d in DURATIONS))
    for arm in dict.fromkeys(r["arm"] for r in res):
        every = [p for r in res if r["arm"] == arm for p in r["progress"]]
        parts = {d: median_of(every, d) for d in DURATIONS}
        rows.append({"date": date, "cycle": "all", "arm": arm, "batches": len(every),
                     **{f"median_{d}_ms": parts[d] for d in DURATIONS},
                     "loadavg_start": load_start, "loadavg_end": load_end})
        log(f"  {arm:48s} " + " ".join(f"{parts[d]:13.0f}" for d in DURATIONS))
    return rows


def _settle(queries, timeout_s: float = 20.0) -> None:
    """Wait until no query runs a micro-batch with input (the paused input's last batch ended)."""
    until = time.time() + timeout_s
    time.sleep(1.0)
    while time.time() < until:
        if not any(q.status.get("isDataAvailable") and q.status.get("isTriggerActive") for q in queries):
            return
        time.sleep(0.1)


# -- the same query shape without our stage code ------------------------------------------------------

class FloorProcessor:
    """A ``transformWithStateInPandas`` processor that only does what any stateful processor must:
    read its key's state once, pass its rows on, write the state once (``floor_shape``).
    ``counts=True``: instead of its rows, one row per call, ``(key_group, n)`` with ``n`` the rows
    it received (an operator whose output is small, as a partial aggregation's is)."""

    def __new__(cls, counts: bool = False):
        import pandas as pd
        from pyspark.sql.streaming import StatefulProcessor

        class _Floor(StatefulProcessor):
            def init(self, handle) -> None:
                self.count = handle.getValueState("n", "n long")

            def handleInputRows(self, key, rows, timerValues):
                before = n = self.count.get()[0] if self.count.exists() else 0
                for pdf in rows:
                    n += len(pdf)
                    if not counts:
                        yield pdf
                self.count.update((n,))
                if counts:
                    yield pd.DataFrame({"key_group": [int(key[0])], "n": [n - before]})

            def close(self) -> None:
                pass

        return _Floor()


def floor_shape(key_groups: int = 4, rate: float = 10.0, record=None, source_options=None, operators: int = 2,
                source_format: str = "dataflow-kafka") -> Pipeline:
    """A source -> ``operators`` chained ``transformWithStateInPandas`` processors that do nothing
    (:class:`FloorProcessor`, ``key_groups`` groups each, a shuffle before each) -> sink rows: the
    query shape of the inverted index without our stage code (no ingest step, no optimistic
    processors), so what it costs is Spark's and the source's. ``source_format="kafka"``: Spark's
    JVM connector (its rows have no ``kind``)."""
    def build(src, out_topic):
        if source_format == "dataflow-kafka":
            src = src.filter("kind = 'data'")
        df = src.selectExpr(f"CAST(pmod(hash(value), {key_groups}) AS INT) AS key_group", "value")
        for i in range(operators):
            if i:
                df = df.selectExpr(f"CAST(pmod(key_group + 1, {key_groups}) AS INT) AS key_group", "value")
            df = df.groupBy("key_group").transformWithStateInPandas(FloorProcessor(), "key_group int, value binary",
                                                                     "Append", "None")
        return df.selectExpr("CAST(key_group AS STRING) AS key", "value")

    base = passthrough(rate)
    return Pipeline(f"{operators} no-op transformWithStateInPandas on {source_format}", build, record or base.record,
                    None, dict(source_options if source_options is not None else
                               base.source_options if source_format == "dataflow-kafka" else {}),
                    rate, poisson=True, source_format=source_format)
