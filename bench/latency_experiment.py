"""End-to-end latency of FlameStream's optimistic scheme on Spark against two buffered baselines
(the experiment of Kuralenok et al., "An optimistic approach to handle out-of-order events within
analytical stream processing", §VI Experiments, Figures 9-12).

Workload: the inverted index of :mod:`optimistic.workload` with 1, 2 or 3 order-sensitive
stages (posting lists by word; then document-frequency milestones by word; then pairs of words
reaching the same milestone, keyed by milestone: another shuffle). The text is
**synthetic**: seeded pseudo-words whose frequencies follow Zipf's law by construction
(``generate_documents``, vocabulary 2000, exponent 1.0, 10-30 words per document; shorter than
Wikipedia articles so that 2 shared cores can keep up with a few documents per second).

Input: one producer thread sends documents to a Kafka topic of ``P`` partitions (round robin)
with exponential gaps at a target rate. Event time = wall-clock send time minus a per-partition
clock lag ``partition * --skew-ms`` (sources behind different paths), so event times are in order
within a partition (``watermarkDelayMs`` 0) and out of order across partitions: the stateful stages
see late documents and optimism has to repair them.

Variants (one Spark streaming query each, ``optimistic.spark.build_pipeline``):

- ``optimistic``: stages at once, one barrier at the sink waiting on the source's punctuations;
  every order-sensitive stage is its own ``transformWithStateInPandas`` operator.
- ``fused``: the same, with consecutive stages keyed by the same key (the word: postings, then
  milestones) in one operator (``fuse_same_key``, the stage layer's fusion), which Spark's native
  plan cannot do: one shuffle, state round trip and commit fewer per micro-batch.
- ``buffered``: a sort buffer before each order-sensitive stage, released by the same punctuations.
- ``native``: Spark's ``withWatermark("event_time", delay)`` and event-time timers in each stage
  (``timeMode="EventTime"``, ``transformWithStateInPandas``) on our source and sink, with the same
  stage objects; ``delay`` = ``(P-1) * skew + 200`` ms, the smallest that covers the disorder
  (rows Spark drops are counted and reported).
- ``spark-jvm``: what a Spark user would run instead of this project (2 stages only):
  ``format("kafka")`` (Spark's JVM connector, :mod:`bench.spark_kafka`), the document split in
  Spark SQL, ``withWatermark`` with the same ``delay``, posting lists and milestones by word in
  one Java ``transformWithState`` with event-time timers, ``format("kafka")`` sink: no Python
  anywhere (:func:`bench.jvm_baseline.milestones_jvm`).
- ``spark-py``: the same with the stateful step in PySpark's Row-based ``transformWithState``
  (what a Python user writes; :func:`bench.jvm_baseline.milestones_py`).
- ``fused-jvm``: ``fused`` with Spark's connector on both ends: ``format("kafka")`` rows through
  :func:`jvm_ingest.punctuate` (per-partition punctuations derived from the rows), the same stages,
  ``format("kafka")`` sink.

Correctness: every output record is checked against the in-order reference: ``wrong_values``
(a key of the reference with another value), ``missing_outputs`` (outputs of measured documents
never seen: dropped), ``extra_outputs`` (keys the reference does not have), and Spark's
``numRowsDroppedByWatermark``.

Triggers: Spark's default (the next micro-batch starts as soon as the previous one ends) and
processing-time triggers (``--trigger-ms``). Spark applies its event-time watermark one micro-batch
after it sees the data (and the timers it lets fire run in that next batch), while our
punctuations arrive in the same micro-batch as the data, so the native baseline pays about one
batch period more. With batch duration ``D`` and period ``W = max(trigger, D)`` a document waits
on average ``W/2`` for its batch to start and ``D`` for it to run: optimistic about ``W/2 + D``,
native about ``W/2 + D + W``. The report prints this model ratio next to the measured one (from
each run's mean batch duration, first batch excluded).

Grid (``--design sweep``, the default): a base point (the first value of ``--stages``, ``--rates``,
``--levels`` and ``--trigger-ms``) and one factor varied at a time around it; ``--design full``
runs every combination. ``--dry-run`` prints the points and an estimate of the run time.

Latency of a document: the time its last output record is readable in the output topic (a
consumer thread of this process polls it) minus the time the producer thread sent it; one process,
one clock. The expected outputs per document come from the sequential in-order run
(``optimistic.run_local``) of the same stage objects over everything produced; a document with no
output is not measured. A short query per variant runs first and is discarded (the first query
of a session pays JVM and Python worker start-up, the first of each plan its code generation). Documents of the first ``--warmup`` seconds and
of the last ``--cooldown`` seconds (produced so that the watermark passes the measured ones)
are skipped. A measured
document still missing outputs when the run ends is counted as ``incomplete`` and enters the
percentiles with its lower bound (run end minus send time).

Reported per variant and point (stages, rate, Kafka partitions, shuffle partitions, trigger):
p50/p75/p95/p99 latency, replay ratio (optimistic: everything arriving at the barrier over what it
released, from the metrics topic), barrier buffer and release lag, achieved input rate, output
records/s, mean micro-batch duration (first batch excluded) and its mean query planning and
addBatch parts, batches without input rows, rows dropped by Spark's watermark. Writes
``docs/img/latency.csv`` (+ ``.latencies.json``; the CSV beside the figures) and ``docs/img/latency_percentiles.png``,
``latency_ratio.png`` (optimistic and buffered over native, p50 and p99, with the model and the 0.5
target), ``latency_replay_ratio.png``, ``latency_cdf.png``; ``--plot-only`` redraws them. ``--quick``
writes ``bench/out/latency-quick.csv`` and its figures to ``bench/out/`` (not the README's).

Run: ``.venv/bin/python -m bench.latency_experiment`` for the figures (8 points x 4 variants, and
``spark-jvm`` at the 2-stage points when Spark's connector is resolved; no ``fused`` run at one
stage: 2 stages at 10 docs/s, 2 Kafka partitions and 1 shuffle partition
(``spark_session()``'s local default), default trigger; stages 1 and 3; 4 and 30 docs/s; 4:2; 5 s
and 15 s triggers), ``--quick`` for a check (2 points). ``KAFKA_BOOTSTRAP_SERVERS`` uses an external broker; otherwise an embedded Apache Kafka broker
starts (``DATAFLOW_KAFKA_EMBEDDED=noida-db``: the development broker of the earlier figures).
The ``spark-*`` and ``fused-jvm`` variants need Spark's connector (``python -m bench.spark_kafka``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import shutil
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from dataflow_kafka.optimistic import Meta, run_local
from dataflow_kafka.optimistic.spark import build_pipeline, read_metrics
from bench._stream import create_topic
from bench.native_baseline import build_native
from dataflow_kafka.optimistic.workload import generate_documents, inverted_index_same_key, inverted_index_stages

VARIANTS = ("optimistic", "fused", "buffered", "native", "spark-jvm", "spark-py", "fused-jvm")
JVM_VARIANTS = ("spark-jvm", "spark-py")     # Spark's operators, format("kafka") in and out; 2 stages only
JVM_IO = JVM_VARIANTS + ("fused-jvm",)       # format("kafka") in and out


def decode_doc(value: bytes):
    d = json.loads(value)
    return (d["id"], d["text"])


@dataclass
class Result:
    variant: str
    stages: int
    rate: float
    kafka_partitions: int
    shuffle_partitions: int
    trigger_ms: int
    key_groups: int
    docs_measured: int
    incomplete: int
    p50_ms: float
    p75_ms: float
    p95_ms: float
    p99_ms: float
    replay_ratio: float | None
    tombstones: int | None
    barrier_max_buffer: int | None
    barrier_lag_max_ms: float | None
    input_rate: float
    output_rate: float
    batch_ms_mean: float
    batches: int
    dropped_by_watermark: int
    wrong_values: int
    plan_ms_mean: float = float("nan")
    add_batch_ms_mean: float = float("nan")
    no_data_batches: int = 0
    missing_outputs: int = 0       # outputs of measured documents never seen (dropped)
    extra_outputs: int = 0         # output keys the in-order reference does not have
    expected_outputs: int = 0      # outputs the reference gives the measured documents
    watermark_delay_ms: int = 0    # Spark's withWatermark delay (native and spark-* variants)


class OutputWatcher(threading.Thread):
    """Polls the output topic; remembers when each key (an item's order key) was first readable."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex[:8]}",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 10, "fetch.min.bytes": 1, "log_level": 3})
        self.c.subscribe([topic])
        self.seen: dict[bytes, tuple[float, bytes]] = {}
        self.records = 0
        self.stop_flag = threading.Event()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            for m in self.c.consume(1000, 0.05):
                if m.error():
                    continue
                now = time.time()
                self.records += 1
                self.seen.setdefault(bytes(m.key()), (now, bytes(m.value())))
        self.c.close()


def produce(bootstrap: str, topic: str, partitions: int, docs, rate: float, skew_ms: int, seconds: float,
            seed: int) -> list[tuple[float, int, int, int, tuple]]:
    """Send documents with exponential gaps for ``seconds``; returns (send_time, event_ms,
    partition, offset, doc) per delivered document."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "log_level": 3})
    rng = random.Random(seed)
    sent: list = []
    lock = threading.Lock()
    t0 = time.time()
    next_t = t0
    i = 0
    while True:
        next_t += rng.expovariate(rate)
        delay = next_t - time.time()
        if delay > 0:
            time.sleep(delay)
        if next_t - t0 > seconds:
            break
        doc = docs[i % len(docs)]
        doc = (i, doc[1])
        part = i % partitions
        send = time.time()
        event = int(send * 1000) - part * skew_ms

        def on_delivery(err, msg, send=send, event=event, doc=doc):
            if err is None:
                with lock:
                    sent.append((send, event, msg.partition(), msg.offset(), doc))

        p.produce(topic, value=json.dumps({"ts": event, "id": doc[0], "text": doc[1]}).encode(),
                  partition=part, on_delivery=on_delivery)
        p.poll(0)
        i += 1
    p.flush(30)
    return sent


def run_one(spark, bootstrap: str, variant: str, stages_n: int, rate: float, partitions: int, shuffle: int,
            trigger_ms: int, args) -> tuple[Result, list[float]]:
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle))
    stages = inverted_index_stages(stages_n)
    topic = create_topic(bootstrap, partitions, "docs")
    out_topic = create_topic(bootstrap, shuffle, "index")
    metrics_topic = create_topic(bootstrap, 1, "metrics")
    key_groups = 2 * shuffle
    delay = (partitions - 1) * args.skew_ms + 200 if args.native_delay_ms is None else args.native_delay_ms
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .load())
    if variant in JVM_VARIANTS:
        from bench import jvm_baseline

        if stages_n != 2:
            raise ValueError(f"{variant} runs 2 order-sensitive stages only, not {stages_n}")
        jsrc = jvm_baseline.kafka_source(spark, bootstrap, topic)
        build = jvm_baseline.milestones_jvm if variant == "spark-jvm" else jvm_baseline.milestones_py
        out = build(jsrc, delay)
    elif variant == "fused-jvm":
        from bench import jvm_baseline
        from dataflow_kafka.jvm_ingest import punctuate

        rows = punctuate(jvm_baseline.kafka_source(spark, bootstrap, topic), partitions={topic: partitions},
                         event_time_field="ts")
        out = build_pipeline(rows, stages, output_topic=out_topic, mode="optimistic", key_groups=key_groups,
                             decode=decode_doc, metrics_topic=metrics_topic, output_partitions=shuffle,
                             fuse_same_key=inverted_index_same_key(stages_n))
    elif variant == "native":
        out = build_native(src, stages, output_topic=out_topic, key_groups=key_groups, decode=decode_doc,
                           output_partitions=shuffle, native_delay_ms=delay)
    else:
        optimistic = variant in ("optimistic", "fused")
        out = build_pipeline(src, stages, output_topic=out_topic, mode="optimistic" if optimistic else variant,
                             key_groups=key_groups, decode=decode_doc,
                             metrics_topic=metrics_topic if optimistic else None, output_partitions=shuffle,
                             fuse_same_key=inverted_index_same_key(stages_n) if variant == "fused" else False)
    ck = tempfile.mkdtemp(prefix="latency-ck-")
    watcher = OutputWatcher(bootstrap, out_topic)
    watcher.start()
    writer = (out.writeStream.format("kafka" if variant in JVM_IO else "dataflow-kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("checkpointLocation", ck))
    if variant in JVM_VARIANTS:
        writer = writer.option("topic", out_topic)
    if trigger_ms:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    q = writer.start()
    try:
        deadline = time.time() + 120
        while q.lastProgress is None and time.time() < deadline:   # the first (empty) batch ran
            if q.exception():
                raise q.exception()
            time.sleep(0.2)
        docs = generate_documents(500, vocabulary_size=2000, words_per_doc=(10, 30), seed=1)
        total_s = args.warmup + args.duration + args.cooldown
        t_start = time.time()
        sent = produce(bootstrap, topic, partitions, docs, rate, args.skew_ms, total_s, seed=rate * 1000 + partitions)
        t_produced = time.time()
        # reference outputs per document (sequential, in order)
        arrivals = sorted((e, part, off, doc) for _, e, part, off, doc in sent)
        ref = run_local(stages, arrivals)
        expected: dict[tuple[int, int], dict[bytes, bytes]] = defaultdict(dict)
        from dataflow_kafka.optimistic.spark import encode_json
        for item in ref.released:
            expected[(item.meta.source, item.meta.offset)][item.meta.sort_key()] = encode_json(item.payload)
        lo, hi = t_start + args.warmup, t_start + args.warmup + args.duration
        measured = [(s, part, off) for s, _, part, off, _ in sent if lo <= s < hi and (part, off) in expected]

        def missing():
            return sum(1 for _, part, off in measured if any(k not in watcher.seen for k in expected[(part, off)]))

        wait_until = time.time() + args.drain + 2 * trigger_ms / 1000
        while missing() and time.time() < wait_until:
            if q.exception():
                raise q.exception()
            time.sleep(0.5)
        t_end = time.time()
        progress = [p for p in q.recentProgress if p["batchId"] > 0]   # batch 0 includes start-up
    finally:
        q.stop()
        watcher.stop_flag.set()
        watcher.join(10)
    lat, incomplete, wrong, missing_n = [], 0, 0, 0
    reference = {k: v for outs in expected.values() for k, v in outs.items()}
    extra = sum(1 for k in watcher.seen if k not in reference)
    for s, part, off in measured:
        keys = expected[(part, off)]
        times = []
        for k, v in keys.items():
            got = watcher.seen.get(k)
            if got is None:
                times.append(t_end)
            else:
                times.append(got[0])
                wrong += got[1] != v
        incomplete += any(k not in watcher.seen for k in keys)
        missing_n += sum(1 for k in keys if k not in watcher.seen)
        lat.append((max(times) - s) * 1000)
    lat.sort()

    def pct(q_):
        return lat[min(len(lat) - 1, int(math.ceil(q_ / 100 * len(lat))) - 1)] if lat else float("nan")

    m = None
    if variant in ("optimistic", "fused", "fused-jvm"):
        from dataflow_kafka.datasource.replay import read_topic

        m = read_metrics(read_topic(bootstrap, metrics_topic))
    in_window = [s for s, *_ in sent if lo <= s < hi]
    out_in_window = sum(1 for t, _ in watcher.seen.values() if lo <= t < hi)
    batch_ms = [p["durationMs"].get("triggerExecution", 0) for p in progress]

    def mean_of(field):
        xs = [p["durationMs"].get(field, 0) for p in progress]
        return sum(xs) / len(xs) if xs else float("nan")
    dropped = sum(op.get("numRowsDroppedByWatermark", 0) for p in q.recentProgress for op in p.get("stateOperators", []))
    shutil.rmtree(ck, ignore_errors=True)
    if args.verbose:
        for p in q.recentProgress:
            ops = [(op.get("operatorName"), op.get("allUpdatesTimeMs"), op.get("commitTimeMs"),
                    op.get("numRowsUpdated")) for op in p.get("stateOperators", [])]
            print("  batch", p["batchId"], "rows", p.get("numInputRows"), p["durationMs"],
                  "ops (name, updates ms, commit ms, rows updated):", ops, flush=True)
    res = Result(variant, stages_n, rate, partitions, shuffle, trigger_ms, key_groups, len(lat), incomplete,
                 pct(50), pct(75), pct(95), pct(99),
                 m["replay_ratio"] if m else None, m["tombstones_in"] if m else None,
                 m["max_buffer"] if m else None, m["lag_max_ms"] if m else None,
                 len(in_window) / args.duration, out_in_window / args.duration,
                 sum(batch_ms) / len(batch_ms) if batch_ms else float("nan"), len(progress), dropped, wrong,
                 mean_of("queryPlanning"), mean_of("addBatch"),
                 sum(1 for p in progress if not p.get("numInputRows")),
                 missing_n, extra, sum(len(expected[(part, off)]) for _, part, off in measured),
                 delay if variant in ("native",) + JVM_VARIANTS else 0)
    return res, lat


# -- the grid ------------------------------------------------------------------------------------

FACTORS = ("stages", "rate", "level", "trigger_ms")
FACTOR_NAMES = {"stages": "order-sensitive stages", "rate": "input rate, docs/s",
                "level": "Kafka:shuffle partitions", "trigger_ms": "trigger"}


@dataclass(frozen=True)
class Point:
    """One configuration of the grid; every variant runs at every point."""

    stages: int
    rate: float
    kafka_partitions: int
    shuffle_partitions: int
    trigger_ms: int

    @property
    def level(self) -> str:
        return f"{self.kafka_partitions}:{self.shuffle_partitions}"

    def value(self, factor: str):
        return self.level if factor == "level" else getattr(self, factor)

    def label(self, factor: str) -> str:
        v = self.value(factor)
        if factor == "trigger_ms":
            return _trigger_name(v)
        return f"{v:g}" if factor == "rate" else str(v)


def point_of(r: Result) -> Point:
    return Point(r.stages, r.rate, r.kafka_partitions, r.shuffle_partitions, r.trigger_ms)


def grid(stages: list[int], rates: list[float], levels: list[tuple[int, int]], triggers: list[int],
         design: str) -> list[Point]:
    """``full``: every combination. ``sweep``: the base point (the first value of every list) and,
    for each factor, its other values with the rest at the base (one factor at a time)."""
    if design == "full":
        return [Point(st, r, kp, sp, tr) for st in stages for (kp, sp) in levels for tr in triggers for r in rates]
    base = Point(stages[0], rates[0], *levels[0], triggers[0])
    pts = [base]
    pts += [Point(st, base.rate, base.kafka_partitions, base.shuffle_partitions, base.trigger_ms) for st in stages[1:]]
    pts += [Point(base.stages, r, base.kafka_partitions, base.shuffle_partitions, base.trigger_ms) for r in rates[1:]]
    pts += [Point(base.stages, base.rate, kp, sp, base.trigger_ms) for kp, sp in levels[1:]]
    pts += [Point(base.stages, base.rate, base.kafka_partitions, base.shuffle_partitions, tr) for tr in triggers[1:]]
    return list(dict.fromkeys(pts))


def panels(points: list[Point]) -> list[tuple[str, list[Point]]]:
    """Groups of points where one factor varies and the others are equal (what each plot panel
    shows), sorted by the varying factor; a single point makes one panel."""
    out = []
    for f in FACTORS:
        groups: dict[tuple, list[Point]] = defaultdict(list)
        for p in points:
            groups[tuple(p.value(g) for g in FACTORS if g != f)].append(p)
        for pts in groups.values():
            if len({p.value(f) for p in pts}) > 1:
                out.append((f, sorted(pts, key=lambda p: (p.value(f) if f != "level"
                                                           else (p.kafka_partitions, p.shuffle_partitions)))))
    return out or [("rate", sorted(points, key=lambda p: p.rate))]


def _fixed(factor: str, p: Point) -> str:
    return ", ".join(f"{g.replace('_ms', '')} {p.label(g)}" for g in FACTORS if g != factor)


def model_ratio(o: Result, n: Result) -> float:
    """The structural p50 ratio from the measured micro-batch durations ``D``: a document waits on
    average half a batch period ``W = max(trigger, D)`` for its batch to start and ``D`` for it to
    run; the native baseline waits one more period, because Spark applies the watermark the data
    moved only in the next micro-batch, whose timers then release it."""
    def period(r):
        return max(r.trigger_ms, r.batch_ms_mean)
    return (period(o) / 2 + o.batch_ms_mean) / (period(n) / 2 + n.batch_ms_mean + period(n))


# -- plots -----------------------------------------------------------------------------------------

def _trigger_name(ms: int) -> str:
    return f"{ms / 1000:g} s" if ms else "default"


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


COLORS = {"optimistic": "tab:blue", "fused": "tab:purple", "buffered": "tab:green", "native": "tab:red",
          "spark-jvm": "tab:brown", "spark-py": "tab:orange", "fused-jvm": "tab:pink"}


def _by(results: list[Result]) -> dict[tuple[str, Point], Result]:
    return {(r.variant, point_of(r)): r for r in results}


def _decorate(ax, factor: str, pts: list[Point], ylabel: str, legend_size: int) -> None:
    """Axes of a panel where ``factor`` varies over ``pts`` (x positions 0, 1, ...)."""
    ax.set_xticks(range(len(pts)), [p.label(factor) for p in pts])
    ax.set_xlabel(FACTOR_NAMES[factor])
    ax.set_ylabel(ylabel)
    ax.set_title(_fixed(factor, pts[0]), fontsize=8)
    ax.legend(fontsize=legend_size)


def plot(results: list[Result], lats: dict, img_dir: Path, prefix: str = "latency") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    by, paths = _by(results), []
    points = list(dict.fromkeys(point_of(r) for r in results))
    pans = panels(points)
    variants = [v for v in VARIANTS if any(r.variant == v for r in results)]

    def axes_for(n_panels, h=4.2):
        cols = min(4, n_panels)
        rows = math.ceil(n_panels / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, h * rows), squeeze=False)
        for ax in axes.flat[n_panels:]:
            ax.set_visible(False)
        return fig, list(axes.flat)

    # Figures 10/12 of the paper: percentiles; one panel per varied factor
    fig, axes = axes_for(len(pans))
    fig.suptitle("inverted index latency: bar p50, dot p75, dash p95, whisker p99", fontsize=10)
    for ax, (f, pts) in zip(axes, pans):
        width = 0.8 / len(variants)
        for vi, v in enumerate(variants):
            for xi, p in enumerate(pts):
                r = by.get((v, p))
                if r is None:
                    continue
                x = xi + (vi - (len(variants) - 1) / 2) * width
                ax.bar(x, r.p50_ms / 1000, width * 0.9, color=COLORS[v], label=v if xi == 0 else None)
                ax.errorbar([x], [r.p50_ms / 1000], yerr=[[0], [(r.p99_ms - r.p50_ms) / 1000]], fmt="none",
                            ecolor="black", capsize=3, lw=1)
                ax.plot([x], [r.p95_ms / 1000], "k_", ms=8)
                ax.plot([x], [r.p75_ms / 1000], "k.", ms=4)
        _decorate(ax, f, pts, "end-to-end latency, s", 7)
    paths.append(_save(fig, img_dir / f"{prefix}_percentiles.png"))
    # the target: optimistic / native, p50 and p99, against 0.5
    fig, axes = axes_for(len(pans))
    base = "native" if "native" in variants else "spark-jvm"
    fig.suptitle(f"latency relative to {base} (target: p50 and p99 <= 0.5)", fontsize=10)
    for ax, (f, pts) in zip(axes, pans):
        xs = range(len(pts))
        for v, mk in (("optimistic", "o"), ("fused", "s"), ("buffered", "x"), ("spark-jvm", "v"), ("spark-py", "^"),
                      ("fused-jvm", "P")):
            if v == base or v not in variants:
                continue
            p50 = [by[(v, p)].p50_ms / by[(base, p)].p50_ms if (v, p) in by and (base, p) in by
                   else float("nan") for p in pts]
            p99 = [by[(v, p)].p99_ms / by[(base, p)].p99_ms if (v, p) in by and (base, p) in by
                   else float("nan") for p in pts]
            ax.plot(xs, p50, mk + "-", color=COLORS[v], label=f"{v} p50")
            ax.plot(xs, p99, mk + "--", color=COLORS[v], alpha=0.6, label=f"{v} p99")
        model = [model_ratio(by[("optimistic", p)], by[("native", p)])
                 if ("optimistic", p) in by and ("native", p) in by else float("nan") for p in pts]
        ax.plot(xs, model, "d", mfc="none", color="black", label="model p50 (batch durations)")
        ax.axhline(0.5, color="grey", ls=":", lw=1)
        ax.set_ylim(bottom=0)
        _decorate(ax, f, pts, f"latency / {base} latency", 6)
    paths.append(_save(fig, img_dir / f"{prefix}_ratio.png"))
    # Figure 9: replay ratio
    fig, axes = axes_for(len(pans), h=3.6)
    for ax, (f, pts) in zip(axes, pans):
        ys = [by[("optimistic", p)].replay_ratio if ("optimistic", p) in by and by[("optimistic", p)].replay_ratio
              else float("nan") for p in pts]
        ax.plot(range(len(pts)), ys, "o-", color=COLORS["optimistic"], label="optimistic")
        ax.axhline(1.1, color="grey", ls="--", lw=1, label="target 1.1")
        ax.set_ylim(0.98, max(1.15, max((y for y in ys if y == y), default=1.0) + 0.02))
        _decorate(ax, f, pts, "replay ratio (arrived at barrier / released)", 7)
    paths.append(_save(fig, img_dir / f"{prefix}_replay_ratio.png"))
    # latency CDFs, one panel per point
    fig, axes = axes_for(len(points), h=3.4)
    for ax, p in zip(axes, points):
        for v in variants:
            lat = lats.get((v, p))
            if lat:
                ax.plot([x / 1000 for x in lat], [(i + 1) / len(lat) for i in range(len(lat))], color=COLORS[v],
                        label=v)
        ax.set_xlabel("latency, s")
        ax.set_title(f"{p.stages} stages, {p.rate:g} docs/s, {p.level}, trigger {_trigger_name(p.trigger_ms)}",
                     fontsize=8)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("fraction of documents")
    paths.append(_save(fig, img_dir / f"{prefix}_cdf.png"))
    return paths


# -- main ------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small check: 2 stages, 8 docs/s, 2:1, "
                    "default and 5 s triggers, 12 s measured per run")
    ap.add_argument("--design", choices=("sweep", "full"), default="sweep",
                    help="sweep: the base point (first value of every list) and one factor varied at a "
                    "time; full: every combination")
    ap.add_argument("--stages", type=int, nargs="+", choices=(1, 2, 3), help="order-sensitive stages")
    ap.add_argument("--rates", type=float, nargs="+", help="documents per second")
    ap.add_argument("--levels", nargs="+", help="parallelism levels as KAFKA:SHUFFLE partitions, e.g. 2:1 4:2")
    ap.add_argument("--trigger-ms", type=int, nargs="+", help="processing-time trigger; 0 = Spark's default")
    ap.add_argument("--variants", nargs="+", default=None, choices=VARIANTS,
                    help="default: optimistic fused buffered native, and spark-jvm when Spark's connector is "
                    "resolved")
    ap.add_argument("--skew-ms", type=int, default=100, help="event-time lag added per Kafka partition")
    ap.add_argument("--native-delay-ms", type=int, default=None,
                    help="withWatermark delay of the native and spark-* variants (default (P-1) * skew + 200, the "
                    "smallest that covers the disorder; less makes Spark drop late rows, counted)")
    ap.add_argument("--warmup", type=float)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--cooldown", type=float, default=4.0)
    ap.add_argument("--drain", type=float, default=20.0, help="max seconds to wait for the last outputs")
    ap.add_argument("--spark-conf", nargs="*", default=[], metavar="KEY=VALUE",
                    help="extra Spark settings for every variant")
    ap.add_argument("--no-session-warmup", action="store_true", help="skip the discarded first query")
    ap.add_argument("--dry-run", action="store_true", help="print the grid and an estimate of its run time")
    ap.add_argument("--verbose", action="store_true", help="print every micro-batch's durations")
    ap.add_argument("--out", default=None,
                    help="CSV of the runs (default docs/img/latency.csv; --quick: bench/out/latency-quick.csv)")
    ap.add_argument("--img-dir", default=None,
                    help="figures (default docs/img, the README's; --quick: bench/out, so a check does not "
                    "replace the documented figures)")
    ap.add_argument("--plot-only", action="store_true", help="redraw the figures from --out")
    args = ap.parse_args(argv)
    out_dir = ROOT / "bench" / "out"
    args.out = args.out or str(out_dir / "latency-quick.csv" if args.quick else ROOT / "docs" / "img" / "latency.csv")
    args.img_dir = args.img_dir or str(out_dir if args.quick else ROOT / "docs" / "img")
    if args.plot_only:
        return report(*_read(Path(args.out)), args)
    if args.variants is None:
        from bench.spark_kafka import connector_jars

        args.variants = ["optimistic", "fused", "buffered", "native"] + (["spark-jvm"] if connector_jars() else [])
    args.stages = args.stages or ([2] if args.quick else [2, 1, 3])
    args.rates = args.rates or ([8] if args.quick else [10, 4, 30])
    args.levels = args.levels or (["2:1"] if args.quick else ["2:1", "4:2"])
    args.trigger_ms = args.trigger_ms or ([0, 5000] if args.quick else [0, 5000, 15000])
    args.warmup = args.warmup if args.warmup is not None else (4 if args.quick else 6)
    args.duration = args.duration if args.duration is not None else (12 if args.quick else 15)
    levels = [tuple(int(x) for x in lv.split(":")) for lv in args.levels]
    points = grid(args.stages, args.rates, levels, args.trigger_ms, args.design)
    runs = [(p, v) for p in points for v in args.variants
            if not (v in ("fused", "fused-jvm") and p.stages == 1)    # one stage: nothing to fuse
            and not (v in JVM_VARIANTS and p.stages != 2)]     # the JVM baselines have 2 stages
    estimate = sum(_estimate_s(p, args) for p, _ in runs) + (0 if args.no_session_warmup else 25 * len(args.variants))
    print(f"{len(points)} points x {len(args.variants)} variants = {len(runs)} runs, about "
          f"{estimate / 60:.0f} min on an idle 2-core machine", flush=True)
    for p in points:
        print(f"  {p.stages} stages, {p.rate:g} docs/s, {p.level}, trigger {_trigger_name(p.trigger_ms)}")
    if args.dry_run:
        return 0

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    from bench import spark_kafka

    results, lats = [], {}
    if set(args.variants) & set(JVM_IO) and spark_kafka.connector_jars() is None:
        raise SystemExit(spark_kafka.missing_message())
    extra = {**spark_kafka.session_extra(), **dict(kv.split("=", 1) for kv in args.spark_conf)}
    with kafka_broker(workdir=tempfile.mkdtemp(prefix="latency-broker-")) as broker:
        spark = spark_session(master="local[2]", app_name="latency-experiment",
                              shuffle_partitions=points[0].shuffle_partitions, extra=extra)
        if not args.no_session_warmup:
            # The first query of a session pays JVM and worker start-up, and the first query of each
            # plan its class loading and code generation: measured, the first variant of the first
            # point ran 40% longer batches than when it ran last. One short query per variant first.
            t0 = time.time()
            p = points[0]
            for v in dict.fromkeys(args.variants):
                if v in JVM_VARIANTS and p.stages != 2 or v in ("fused", "fused-jvm") and p.stages == 1:
                    continue
                run_one(spark, broker.bootstrap_servers, v, p.stages, p.rate, p.kafka_partitions,
                        p.shuffle_partitions, 0,
                        argparse.Namespace(**{**vars(args), "warmup": 2, "duration": 4, "cooldown": 2, "drain": 10}))
            print(f"warm-up queries done, one per variant ({time.time() - t0:.0f}s), discarded", flush=True)
        for p, v in runs:
            t0 = time.time()
            r, lat = run_one(spark, broker.bootstrap_servers, v, p.stages, p.rate, p.kafka_partitions,
                             p.shuffle_partitions, p.trigger_ms, args)
            results.append(r)
            lats[(v, p)] = lat
            _write(results, lats, Path(args.out))   # after every run: a long grid can be cut short
            print(f"{v:10s} stages={p.stages} rate={p.rate:g}/s {p.level} trigger={_trigger_name(p.trigger_ms)}: "
                  f"p50={r.p50_ms:.0f} p75={r.p75_ms:.0f} p95={r.p95_ms:.0f} p99={r.p99_ms:.0f} ms, "
                  f"n={r.docs_measured} incomplete={r.incomplete} replay={r.replay_ratio} "
                  f"batch={r.batch_ms_mean:.0f}ms (plan {r.plan_ms_mean:.0f}, addBatch {r.add_batch_ms_mean:.0f}, "
                  f"{r.no_data_batches} of {r.batches} without data) dropped={r.dropped_by_watermark} "
                  f"wrong={r.wrong_values} missing={r.missing_outputs}/{r.expected_outputs} "
                  f"extra={r.extra_outputs} load={_stream_load()} ({time.time() - t0:.0f}s)", flush=True)
        spark.stop()
    return report(results, lats, args)


def _stream_load() -> str:
    from bench._stream import loadavg

    return loadavg().replace(" ", "/")


def _estimate_s(p: Point, args) -> float:
    """Wall time of one run on an idle machine: query start, production, the drain (about two
    trigger periods for the native baseline), stop."""
    return 12 + args.warmup + args.duration + args.cooldown + 6 + 2 * p.trigger_ms / 1000


def _write(results: list[Result], lats: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(results[0])))
        w.writeheader()
        for r in results:
            w.writerow(asdict(r))
    out.with_suffix(".latencies.json").write_text(json.dumps([[v, asdict(p), lat] for (v, p), lat in lats.items()]))


def _read(out: Path) -> tuple[list[Result], dict]:
    types = {f: t for f, t in Result.__annotations__.items()}
    results = []
    with out.open() as f:
        for row in csv.DictReader(f):
            conv = {}
            for k, v in row.items():
                t = types[k]
                conv[k] = (None if v in ("", "None") else int(float(v)) if t.startswith("int")
                           else float(v) if "float" in t else v)
            results.append(Result(**conv))
    lats = {}
    for entry in json.loads(out.with_suffix(".latencies.json").read_text()):
        if len(entry) == 3:
            v, p, lat = entry
            lats[(v, Point(**p))] = lat
        else:   # files written before the stages axis: [[variant, rate, kafka, shuffle, trigger], lat]
            (v, rate, kp, sp, tr), lat = entry
            stages = next((r.stages for r in results if r.variant == v and r.rate == rate), 2)
            lats[(v, Point(stages, rate, kp, sp, tr))] = lat
    return results, lats


def report(results: list[Result], lats: dict, args) -> int:
    _write(results, lats, Path(args.out))
    print(f"wrote {args.out}")
    for path in plot(results, lats, Path(args.img_dir), Path(args.out).stem):
        print(f"wrote {path}")
    by = _by(results)
    print("point: optimistic/native p50, p99 (model p50 from batch durations) | replay ratio | "
          "mean batch s optimistic, native")
    for p in dict.fromkeys(point_of(r) for r in results):
        o, f, n = by.get(("optimistic", p)), by.get(("fused", p)), by.get(("native", p))
        if o and n:
            fused = (f"; fused {f.p50_ms / n.p50_ms:.2f}, {f.p99_ms / n.p99_ms:.2f} "
                     f"(p50 {f.p50_ms / 1000:.2f} s, p99 {f.p99_ms / 1000:.2f} s, batch {f.batch_ms_mean / 1000:.2f} s)"
                     if f else "")
            print(f"  {p.stages} stages, {p.rate:g} docs/s, {p.level}, trigger {_trigger_name(p.trigger_ms)}: "
                  f"{o.p50_ms / n.p50_ms:.2f}, {o.p99_ms / n.p99_ms:.2f} (model {model_ratio(o, n):.2f}) | "
                  f"{o.replay_ratio} | {o.batch_ms_mean / 1000:.2f}, {n.batch_ms_mean / 1000:.2f}{fused}")
    if any(r.variant == "spark-jvm" for r in results):
        print("against spark-jvm (format(\"kafka\") -> withWatermark -> Java transformWithState -> format(\"kafka\")), "
              "per run in order: p50, p99 ratio to the spark-jvm run of the same point and pass | correctness")
        for p in dict.fromkeys(point_of(r) for r in results):
            runs = [r for r in results if point_of(r) == p]
            base = [r for r in runs if r.variant == "spark-jvm"]
            for r in runs:
                ratios = " ".join(f"{r.p50_ms / b.p50_ms:.2f}, {r.p99_ms / b.p99_ms:.2f}" for b in base)
                print(f"  {p.stages} stages, {p.rate:g} docs/s, {p.level}, trigger {_trigger_name(p.trigger_ms)}: "
                      f"{r.variant:10s} p50 {r.p50_ms / 1000:.2f} s p99 {r.p99_ms / 1000:.2f} s batch "
                      f"{r.batch_ms_mean / 1000:.2f} s | / spark-jvm {ratios} | wrong {r.wrong_values}, missing "
                      f"{r.missing_outputs} of {r.expected_outputs}, extra {r.extra_outputs}, dropped by watermark "
                      f"{r.dropped_by_watermark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
