"""End-to-end latency of FlameStream's optimistic scheme on Spark against two buffered baselines
(the experiment of seeds/flamestream-optimistic.txt, section VI, Figures 9-12).

Workload: the inverted index of :mod:`optimistic.workload` with ``--stages`` order-sensitive
stages (default 2: posting lists by word, then document-frequency milestones by word). The text is
**synthetic**: seeded pseudo-words whose frequencies follow Zipf's law by construction
(``generate_documents``, vocabulary 2000, exponent 1.0, 10-30 words per document; shorter than
Wikipedia articles so that 2 shared cores can keep up with a few documents per second).

Input: one producer thread sends documents to a Kafka topic of ``P`` partitions (round robin)
with exponential gaps at a target rate. Event time = wall-clock send time minus a per-partition
clock lag ``partition * --skew-ms`` (sources behind different paths), so event times are in order
within a partition (``gracePeriodMs`` 0) and out of order across partitions: the stateful stages
see late documents and optimism has to repair them.

Variants (one Spark streaming query each, ``optimistic.spark.build_pipeline``):

- ``optimistic``: stages at once, one barrier at the sink waiting on the source's punctuations.
- ``buffered``: a sort buffer before each order-sensitive stage, released by the same punctuations.
- ``native``: what a Spark user writes today: ``withWatermark("event_time", delay)`` and
  event-time timers in each stage (``timeMode="EventTime"``); ``delay`` = ``(P-1) * skew + 200``
  ms, the smallest that covers the disorder (rows Spark drops are counted and reported).

Triggers: Spark's default (the next micro-batch starts as soon as the previous one ends) and a
15 s processing-time trigger (``--trigger-ms``; longer than a micro-batch takes here). Spark applies its event-time watermark one
micro-batch after it sees the data, while our punctuations arrive in the same micro-batch as the
data, so the native baseline pays about one trigger interval more.

Latency of a document: the time its last output record is readable in the output topic (a
consumer thread of this process polls it) minus the time the producer thread sent it; one process,
one clock. The expected outputs per document come from the sequential in-order run
(``optimistic.run_local``) of the same stage objects over everything produced; a document with no
output is not measured. A short query runs first and is discarded (the first query of a
session pays JVM and Python worker start-up). Documents of the first ``--warmup`` seconds and
of the last ``--cooldown`` seconds (produced so that the watermark passes the measured ones)
are skipped. A measured
document still missing outputs when the run ends is counted as ``incomplete`` and enters the
percentiles with its lower bound (run end minus send time).

Reported per (variant, rate, Kafka partitions, shuffle partitions, trigger): p50/p75/p95/p99 latency,
replay ratio (optimistic: everything arriving at the barrier over what it released, from the
metrics topic), barrier buffer and release lag, achieved input rate, output records/s, mean
micro-batch duration, rows dropped by Spark's watermark. Writes ``bench/out/latency.csv`` and
``docs/img/latency_percentiles.png``, ``latency_replay_ratio.png``, ``latency_cdf.png``.

Run: ``.venv/bin/python bench/latency_experiment.py --quick`` (6 docs/s, 2 Kafka / 2 shuffle
partitions, both triggers, 3 variants: about 6 minutes on 2 shared cores), or without ``--quick``
for the grid of the figures (4 and 15 docs/s, levels 2:2 and 4:4, both triggers: about 25
minutes). ``KAFKA_BOOTSTRAP_SERVERS`` uses an external broker; otherwise an embedded noida-db
broker starts.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimistic import Meta, run_local  # noqa: E402
from optimistic.spark import build_pipeline, read_metrics  # noqa: E402
from optimistic.workload import generate_documents, inverted_index_stages  # noqa: E402

VARIANTS = ("optimistic", "buffered", "native")


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


def create_topic(bootstrap: str, partitions: int, prefix: str) -> str:
    from tests.support import KafkaHelper

    return KafkaHelper(bootstrap).topic(partitions, prefix=prefix)


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
    delay = (partitions - 1) * args.skew_ms + 200
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .load())
    out = build_pipeline(src, stages, output_topic=out_topic, mode=variant, key_groups=key_groups,
                         decode=decode_doc, metrics_topic=metrics_topic if variant == "optimistic" else None,
                         output_partitions=shuffle, native_delay_ms=delay)
    ck = tempfile.mkdtemp(prefix="latency-ck-")
    watcher = OutputWatcher(bootstrap, out_topic)
    watcher.start()
    writer = (out.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("checkpointLocation", ck))
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
        from optimistic.spark import encode_json
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
        progress = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0 or p["batchId"] > 0]
    finally:
        q.stop()
        watcher.stop_flag.set()
        watcher.join(10)
    lat, incomplete, wrong = [], 0, 0
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
        lat.append((max(times) - s) * 1000)
    lat.sort()

    def pct(q_):
        return lat[min(len(lat) - 1, int(math.ceil(q_ / 100 * len(lat))) - 1)] if lat else float("nan")

    m = None
    if variant == "optimistic":
        from tests.support import KafkaHelper

        m = read_metrics(KafkaHelper(bootstrap).consume_all(metrics_topic))
    in_window = [s for s, *_ in sent if lo <= s < hi]
    out_in_window = sum(1 for t, _ in watcher.seen.values() if lo <= t < hi)
    batch_ms = [p["durationMs"].get("triggerExecution", 0) for p in progress]
    dropped = sum(op.get("numRowsDroppedByWatermark", 0) for p in q.recentProgress for op in p.get("stateOperators", []))
    shutil.rmtree(ck, ignore_errors=True)
    if args.verbose:
        for p in q.recentProgress:
            print("  batch", p["batchId"], "rows", p.get("numInputRows"), p["durationMs"], flush=True)
    res = Result(variant, stages_n, rate, partitions, shuffle, trigger_ms, key_groups, len(lat), incomplete,
                 pct(50), pct(75), pct(95), pct(99),
                 m["replay_ratio"] if m else None, m["tombstones_in"] if m else None,
                 m["max_buffer"] if m else None, m["lag_max_ms"] if m else None,
                 len(in_window) / args.duration, out_in_window / args.duration,
                 sum(batch_ms) / len(batch_ms) if batch_ms else float("nan"), len(progress), dropped, wrong)
    return res, lat


def _trigger_name(ms: int) -> str:
    return f"{ms / 1000:g} s" if ms else "default"


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(results: list[Result], lats: dict, img_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    configs = sorted({(r.kafka_partitions, r.shuffle_partitions, r.trigger_ms) for r in results})
    rates = sorted({r.rate for r in results})
    colors = {"optimistic": "tab:blue", "buffered": "tab:green", "native": "tab:red"}
    # Figures 10/12: percentiles per rate, one panel per parallelism level
    fig, axes = plt.subplots(1, len(configs), figsize=(4.2 * len(configs), 4.4), squeeze=False)
    fig.suptitle(f"inverted index, {results[0].stages} order-sensitive stages: bar p50, dot p75, dash p95, "
                 "whisker p99", fontsize=10)
    for ax, (kp, sp, tr) in zip(axes[0], configs):
        width = 0.8 / len(VARIANTS)
        for vi, v in enumerate(VARIANTS):
            for ri, rate in enumerate(rates):
                r = next((x for x in results if (x.variant, x.rate, x.kafka_partitions, x.shuffle_partitions,
                                                 x.trigger_ms) == (v, rate, kp, sp, tr)), None)
                if r is None:
                    continue
                x = ri + (vi - (len(VARIANTS) - 1) / 2) * width
                ax.bar(x, r.p50_ms, width * 0.9, color=colors[v], label=v if ri == 0 else None)
                ax.errorbar([x], [r.p50_ms], yerr=[[0], [r.p99_ms - r.p50_ms]], fmt="none", ecolor="black",
                            capsize=3, lw=1)
                ax.plot([x], [r.p95_ms], "k_", ms=8)
                ax.plot([x], [r.p75_ms], "k.", ms=4)
        ax.set_xticks(range(len(rates)), [f"{r:g} docs/s" for r in rates])
        ax.set_ylabel("end-to-end latency, ms")
        ax.set_xlim(-0.6, len(rates) - 0.4)
        ax.set_title(f"{kp} Kafka / {sp} shuffle partitions\ntrigger {_trigger_name(tr)}", fontsize=9)
        ax.legend(fontsize=8)
    paths.append(_save(fig, img_dir / "latency_percentiles.png"))
    # Figure 9: replay ratio
    fig, ax = plt.subplots(figsize=(6, 4))
    for kp, sp, tr in configs:
        pts = sorted((r.rate, r.replay_ratio) for r in results if r.variant == "optimistic"
                     and (r.kafka_partitions, r.shuffle_partitions, r.trigger_ms) == (kp, sp, tr) and r.replay_ratio)
        if pts:
            ax.plot(*zip(*pts), "o-", label=f"{kp} Kafka / {sp} shuffle partitions, trigger {_trigger_name(tr)}")
    ax.axhline(1.1, color="grey", ls="--", lw=1, label="target 1.1")
    ax.set_xlabel("input rate, docs/s")
    ax.set_ylabel("replay ratio (arrived at barrier / released)")
    ax.legend(fontsize=8)
    paths.append(_save(fig, img_dir / "latency_replay_ratio.png"))
    # latency CDFs per variant at each rate, first configuration
    fig, axes = plt.subplots(len(configs), len(rates), figsize=(5 * len(rates), 3.6 * len(configs)), squeeze=False)
    for row, (kp, sp, tr) in zip(axes, configs):
        for ax, rate in zip(row, rates):
            for v in VARIANTS:
                lat = lats.get((v, rate, kp, sp, tr))
                if lat:
                    ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], color=colors[v], label=v)
            ax.set_xlabel("latency, ms")
            ax.set_title(f"{rate:g} docs/s, {kp} Kafka / {sp} shuffle\ntrigger {_trigger_name(tr)}", fontsize=9)
            ax.legend(fontsize=8)
        row[0].set_ylabel("fraction of documents")
    paths.append(_save(fig, img_dir / "latency_cdf.png"))
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one rate, one parallelism level, short runs")
    ap.add_argument("--rates", type=float, nargs="+", help="documents per second")
    ap.add_argument("--kafka-partitions", type=int, nargs="+")
    ap.add_argument("--shuffle-partitions", type=int, nargs="+")
    ap.add_argument("--levels", nargs="+", help="parallelism levels as KAFKA:SHUFFLE partitions (instead of "
                    "the product of --kafka-partitions and --shuffle-partitions), e.g. 2:2 4:4")
    ap.add_argument("--trigger-ms", type=int, nargs="+", help="processing-time trigger; 0 = Spark's default")
    ap.add_argument("--stages", type=int, default=2, choices=(1, 2, 3))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--skew-ms", type=int, default=100, help="event-time lag added per Kafka partition")
    ap.add_argument("--warmup", type=float)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--cooldown", type=float, default=4.0)
    ap.add_argument("--drain", type=float, default=20.0, help="max seconds to wait for the last outputs")
    ap.add_argument("--no-session-warmup", action="store_true", help="skip the discarded first query")
    ap.add_argument("--verbose", action="store_true", help="print every micro-batch's durations")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "latency.csv"))
    ap.add_argument("--img-dir", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--plot-only", action="store_true", help="redraw the figures from --out")
    args = ap.parse_args(argv)
    if args.plot_only:
        return report(*_read(Path(args.out)), args)
    args.rates = args.rates or ([6] if args.quick else [4, 15])
    args.kafka_partitions = args.kafka_partitions or [2]
    args.shuffle_partitions = args.shuffle_partitions or [2]
    if not args.quick and not args.levels:
        args.levels = ["2:2", "4:4"]
    args.trigger_ms = args.trigger_ms or [0, 15000]
    args.warmup = args.warmup if args.warmup is not None else (5 if args.quick else 8)
    args.duration = args.duration if args.duration is not None else (15 if args.quick else 20)

    from brokers import kafka_broker
    from datasource.session import spark_session

    results, lats = [], {}
    with kafka_broker(workdir=tempfile.mkdtemp(prefix="latency-broker-")) as broker:
        spark = spark_session(master="local[2]", app_name="latency-experiment",
                              shuffle_partitions=args.shuffle_partitions[0])
        levels = ([tuple(int(x) for x in lv.split(":")) for lv in args.levels] if args.levels
                  else [(kp, sp) for kp in args.kafka_partitions for sp in args.shuffle_partitions])
        if not args.no_session_warmup:   # the first query of a session pays JVM and worker start-up
            t0 = time.time()
            run_one(spark, broker.bootstrap_servers, args.variants[0], args.stages, args.rates[0], *levels[0],
                    0, argparse.Namespace(**{**vars(args), "warmup": 2, "duration": 4, "cooldown": 2, "drain": 10}))
            print(f"session warm-up query done ({time.time() - t0:.0f}s), discarded", flush=True)
        grid = [(tr, kp, sp, rate, v) for kp, sp in levels for tr in args.trigger_ms
                for rate in args.rates for v in args.variants]
        for tr, kp, sp, rate, v in grid:
            t0 = time.time()
            r, lat = run_one(spark, broker.bootstrap_servers, v, args.stages, rate, kp, sp, tr, args)
            results.append(r)
            lats[(v, rate, kp, sp, tr)] = lat
            _write(results, lats, Path(args.out))   # after every run: a long grid can be cut short
            print(f"{v:10s} rate={rate:g}/s P={kp} S={sp} trigger={tr}ms: p50={r.p50_ms:.0f} p75={r.p75_ms:.0f} "
                  f"p95={r.p95_ms:.0f} p99={r.p99_ms:.0f} ms, n={r.docs_measured} "
                  f"incomplete={r.incomplete} replay={r.replay_ratio} batch={r.batch_ms_mean:.0f}ms "
                  f"dropped={r.dropped_by_watermark} wrong={r.wrong_values} ({time.time() - t0:.0f}s)",
                  flush=True)
        spark.stop()
    return report(results, lats, args)


def _write(results: list[Result], lats: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(results[0])))
        w.writeheader()
        for r in results:
            w.writerow(asdict(r))
    out.with_suffix(".latencies.json").write_text(json.dumps([[list(k), v] for k, v in lats.items()]))


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
    lats = {tuple(k): v for k, v in json.loads(out.with_suffix(".latencies.json").read_text())}
    return results, lats


def report(results: list[Result], lats: dict, args) -> int:
    _write(results, lats, Path(args.out))
    print(f"wrote {args.out}")
    for p in plot(results, lats, Path(args.img_dir)):
        print(f"wrote {p}")
    for tr, kp, sp, rate in sorted({(r.trigger_ms, r.kafka_partitions, r.shuffle_partitions, r.rate) for r in results}):
        by = {r.variant: r for r in results
              if (r.trigger_ms, r.rate, r.kafka_partitions, r.shuffle_partitions) == (tr, rate, kp, sp)}
        if "optimistic" in by and "native" in by:
            o, n = by["optimistic"], by["native"]
            print(f"trigger={tr}ms rate={rate:g} P={kp} S={sp}: optimistic/native p50 {o.p50_ms / n.p50_ms:.2f}, "
                  f"p99 {o.p99_ms / n.p99_ms:.2f}, replay ratio {o.replay_ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
