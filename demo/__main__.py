"""The main job: out-of-order clicks through three engines in one Spark query, back to Kafka.

1. Starts a broker (``KAFKA_BOOTSTRAP_SERVERS`` if set, else the embedded Apache Kafka).
2. Produces clicks ``{"user", "page", "ts"}`` to topic ``clicks`` (4 partitions, keyed by user)
   from a background thread: event times follow the wall clock, 15% arrive 0.5 to 3 s late, and
   partition 3 runs 1 s behind (its punctuations hold the low watermark back).
3. Runs one streaming query, ``readStream.format("dataflow-kafka")`` with a control topic:

   - **sessions** (optimistic, FlameStream): per user, the session a click belongs to (a new one
     after 0.3 s of silence) and its depth (clicks so far in the session). Order-sensitive: a late click is inserted
     where it belongs, the user's later outputs are replayed and the invalid ones retracted
     (tombstones); the barrier releases valid results below the low watermark.
   - **page_windows** (slicer, Scotty): per page, clicks and mean session depth in sliding and
     tumbling windows sharing one set of slices. Re-keyed from user to page: one shuffle.
   - **panes** (Dataflow Model): per page, 15-second windows over the 5-second counts, with early
     panes every 2 s of processing time, an on-time pane and late panes (accumulating; none here:
     the barrier before it releases in order and reports clicks behind its release bound as
     dropped rows). Keyed like page_windows, so both run fused in one operator.

   Halfway, two commands on the control topic add a window query to page_windows and one to panes
   while they run (``{"op": "add_window", "stage": "page_windows", "id": "20s", ...}``): every key
   group applies them at the same point of the stream, and each new query covers what the stage
   still holds (the slicer's slices; the Dataflow driver's element history).
4. Every micro-batch prints what came out: panes by timing, window results per query, the low
   watermark each stage forwarded, late data and where it went, the modification taking effect;
   panes go to topic ``page-panes`` through ``format("dataflow-kafka")``. A summary ends the run.

Run: ``python -m demo [--seconds 30] [--rate 300]`` (``make demo``).

``--cluster``: the same job on a three-node Kafka cluster (``dk.kafka_cluster``: replication factor
3, ``min.insync.replicas=2``) and a Spark standalone master with two workers on loopback
(``brokers.spark_standalone``; two shuffle partitions, the demo's code shipped to the executors with
``spark.submit.pyFiles``). Halfway the leader of ``clicks`` partition 0 and one Spark worker (with
its executor and Python workers) are SIGKILLed, and brought back later; the summary says what
happened and how long the query took to commit its next batch after each fault.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from demo.pipeline import COMMANDS, package_zip, pipeline


# -- input ----------------------------------------------------------------------------------------

def _produce(bootstrap: str, seconds: float, rate: int, stop: threading.Event, sent: dict,
             until: threading.Event | None = None) -> None:
    """Clicks for ``seconds`` (and, with ``until``, until that event is set too)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})

    def on_delivery(err, _msg) -> None:
        sent["acknowledged" if err is None else "failed"] += 1
    rng = random.Random(42)
    users = [f"u{i}" for i in range(40)]
    pages = ["/", "/search", "/item", "/cart", "/pay"]
    t_end = time.time() + seconds
    try:
        while (time.time() < t_end or (until is not None and not until.is_set())) and not stop.is_set():
            tick = time.time()
            for _ in range(max(1, rate // 10)):
                user = rng.choice(users)
                part = hash(user) % 4
                now = int(time.time() * 1000)
                ts = now - (rng.randint(500, 3_000) if rng.random() < 0.15 else 0) - (1_000 if part == 3 else 0)
                value = {"user": user, "page": rng.choice(pages), "ts": ts}
                p.produce("clicks", key=user.encode(), value=json.dumps(value).encode(), partition=part,
                          on_delivery=on_delivery)
                sent["clicks"] += 1
            if not sent["command"] and time.time() > t_end - seconds / 2:
                for command in COMMANDS:
                    p.produce("clicks-control", value=json.dumps(command).encode())
                    print(f"-- control topic: {json.dumps(command)}")
                sent["command"] = True
            p.poll(0)
            time.sleep(max(0.0, 0.1 - (time.time() - tick)))
    finally:
        p.flush(120)


# -- per batch ------------------------------------------------------------------------------------

class Report:
    """What the demo prints per micro-batch, and the totals for the summary."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.started = time.time()
        self.totals: Counter = Counter()
        self.queries: Counter = Counter()
        self.dropped: Counter = Counter()
        self.metrics: dict[int, dict] = {}
        self.modification_batches: list[int] = []
        self.batch_ends: list[float] = []

    def __call__(self, df, batch_id: int) -> None:
        rows = [r.asDict() for r in df.collect()]
        by_kind: dict[str, list] = {}
        for r in rows:
            by_kind.setdefault(r["kind"], []).append(r)
        panes, results = by_kind.get("data", []), by_kind.get("result", [])
        before = sum(m.get("items_in", 0) for m in self.metrics.values())
        for r in by_kind.get("metrics", []):
            if r["topic"] == "sessions":            # the barrier's counters (every stage has a metrics row)
                self.metrics[r["partition"]] = json.loads(r["metrics"])
        m = list(self.metrics.values())
        clicks = sum(x.get("items_in", 0) for x in m) - before
        pane_kinds = Counter((p["query_id"], p["timing"]) for p in panes)
        windows = Counter(r["query_id"] for r in results)
        self.totals.update({f"panes {t}": n for (_, t), n in pane_kinds.items()})
        self.queries.update(windows)
        dropped = Counter()
        for r in by_kind.get("dropped", []):
            dropped[(r["topic"], r["dropped_reason"])] += r["dropped_count"]
        self.dropped.update({f"{s} {why}": n for (s, why), n in dropped.items()})
        errors = by_kind.get("error", [])
        self.totals["errors"] += len(errors)
        wm = [r["punctuation_ms"] for r in by_kind.get("punctuation", []) if r["punctuation_ms"] is not None]
        session_wm = min((x["low_watermark_ms"] for x in m if x.get("low_watermark_ms") is not None), default=None)
        print(f"batch {batch_id:3d} (+{time.time() - self.started:4.0f} s): {clicks:5d} clicks in sessions, "
              f"{sum(x.get('tombstones_in', 0) for x in m):4d} tombstones so far | low watermark: sessions "
              f"{_clock(session_wm)}, panes out {_clock(min(wm) if wm else None)}")
        if windows:
            print(f"    page_windows results by query: {dict(sorted(windows.items()))}")
            latest = max(results, key=lambda r: (r["window_end_ms"], r["count"]))
            print(f"      e.g. {latest['page']} [{_clock(latest['window_start_ms'])}, {_clock(latest['window_end_ms'])})"
                  f" query {latest['query_id']}: {latest['count']} clicks, mean session depth {latest['mean']:.1f}")
        if panes:
            print(f"    panes by (query, timing): {dict(sorted(pane_kinds.items()))}")
            for p in sorted(panes, key=lambda r: (r["timing"] != "LATE", r["window_start_ms"], r["page"]))[:2]:
                print(f"      {p['timing']:7s} pane #{p['pane_index']} of {p['page']} [{_clock(p['window_start_ms'])}, "
                      f"{_clock(p['window_end_ms'])}) query {p['query_id']}: {p['sum']:.0f} clicks")
        if dropped:
            print("    late data: " + ", ".join(f"{n} records {why} at {s} (dropped rows)"
                                               for (s, why), n in sorted(dropped.items())))
        if by_kind.get("modification"):
            self.modification_batches.append(batch_id)
            for r in by_kind["modification"]:
                print(f"    MODIFICATION at control offset {r['control_offset']}, applied in this batch by every "
                      f"key group: {r['modification']}")
        for r in errors[:3]:
            print(f"    error row from {r['topic']}: {r['error']}")
        if panes:
            out = df.where("kind = 'data'").selectExpr(
                "CAST(page AS BINARY) AS key",
                "to_json(named_struct('page', page, 'query', query_id, 'window_start_ms', window_start_ms, "
                "'window_end_ms', window_end_ms, 'timing', timing, 'pane_index', pane_index, 'clicks', sum)) AS value")
            out.write.format("dataflow-kafka").option("kafka.bootstrap.servers", self.bootstrap) \
                .option("topic", "page-panes").mode("append").save()
        self.totals["batches"] += 1
        self.batch_ends.append(time.time())


def _clock(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=int, default=300, help="clicks per second")
    ap.add_argument("--cluster", action="store_true",
                    help="three Kafka nodes and two Spark workers; a partition leader and a worker killed halfway")
    args = ap.parse_args(argv)

    from dataflow_kafka.brokers import kafka_broker, kafka_cluster
    from dataflow_kafka.brokers.spark_standalone import spark_standalone

    if not args.cluster:
        with kafka_broker() as broker:
            print(f"broker: {broker.kind} at {broker.bootstrap_servers}")
            run(args, broker.bootstrap_servers)
        return
    print("starting a three-node Kafka cluster and a Spark master with two workers ...")
    with kafka_cluster(brokers=3) as kafka, spark_standalone(workers=2, cores=1, memory="1500m") as workers:
        print(f"Kafka: nodes {[n.node_id for n in kafka.nodes]} at {kafka.bootstrap_servers}; "
              f"Spark: {workers.master_url}")
        run(args, kafka.bootstrap_servers, Faults(kafka, workers, args.seconds / 2))


class Faults:
    """Halfway through the run (``after_s``, and once the query has finished three micro-batches):
    the leader of ``clicks`` partition 0 and a Spark worker SIGKILLed, both brought back once the
    query has finished a batch after them; ``events`` says what happened, ``done`` is set once the
    query has finished another batch on the healed clusters (the clicks go on until then)."""

    def __init__(self, kafka, workers, after_s: float) -> None:
        self.kafka, self.workers, self.after_s = kafka, workers, after_s
        self.events: list[tuple[float, str]] = []
        self.fault_times: list[tuple[float, str]] = []
        self.done = threading.Event()

    def run(self, report: "Report") -> None:
        try:
            self._hurt_and_heal(report)
        finally:
            self.done.set()

    def _hurt_and_heal(self, report: "Report") -> None:
        time.sleep(self.after_s)
        deadline = time.time() + 600
        while report.totals["batches"] < 3 and time.time() < deadline:
            time.sleep(0.2)
        leader = self.kafka.leader_of("clicks", 0)
        self._fault(f"Kafka node {leader.node_id} (leader of clicks-0) SIGKILLed", leader.kill)
        new = self.kafka.wait_for_leader("clicks", 0, other_than=leader)
        self.events.append((time.time(), f"Kafka node {new.node_id} leads clicks-0"))
        worker = self.workers.workers[0]
        killed = []
        self._fault(f"Spark {worker.name} SIGKILLed", lambda: killed.extend(worker.kill()))
        self.events[-1] = (self.events[-1][0], f"{self.events[-1][1]} with its executor and Python workers "
                                               f"({len(killed)} processes)")
        self._await_batch(report, self.fault_times[-1][0])
        leader.start()
        self.events.append((time.time(), f"Kafka node {leader.node_id} restarted (a follower now)"))
        worker.start()
        self.events.append((time.time(), f"Spark {worker.name} restarted"))
        self._await_batch(report, time.time())

    def _fault(self, what: str, hurt) -> None:
        at = time.time()
        hurt()
        self.fault_times.append((at, what))
        self.events.append((at, what))

    @staticmethod
    def _await_batch(report: "Report", after: float, timeout_s: float = 300) -> None:
        deadline = time.time() + timeout_s
        while not any(t > after for t in report.batch_ends) and time.time() < deadline:
            time.sleep(0.2)

    def summary(self, report: "Report", started: float) -> list[str]:
        lines = [f"    +{at - started:5.1f} s  {what}" for at, what in self.events]
        for at, what in self.fault_times:
            after = [t for t in report.batch_ends if t > at]
            lines.append(f"    {what}: next micro-batch done {after[0] - at:.1f} s later" if after else
                         f"    {what}: no micro-batch finished after it")
        return lines


def run(args, bs: str, faults: Faults | None = None) -> None:
    from dataflow_kafka.brokers.admin import create_topics
    from dataflow_kafka.datasource import consumer_lag
    from dataflow_kafka.datasource.session import spark_session

    started = time.time()
    # the cluster's replication factor; a topic that exists on an external cluster is kept
    create_topics(bs, {"clicks": 4, "clicks-control": 1, "page-panes": 2}, exist_ok=True, timeout_s=15)
    print("starting Spark ...")
    if faults is None:
        spark = spark_session()                 # local: 1 shuffle partition, low-latency defaults
    else:                                       # executors reach the driver at the machine's name
        spark = spark_session(master=faults.workers.master_url, extra={
            "spark.driver.host": socket.gethostname(), "spark.executor.memory": "1g",
            "spark.submit.pyFiles": str(package_zip(Path(tempfile.mkdtemp(prefix="dataflow-kafka-demo-"))))})
    pipe = pipeline()
    print(f"pipeline: {pipe}; operators: {[[s.name for s in op] for op in pipe.plan()]}")
    source = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bs)
              .option("subscribe", "clicks").option("startingOffsets", "earliest")
              .option("eventTimeField", "ts").option("watermarkDelayMs", "2000")
              .option("controlTopic", "clicks-control").load())
    report = Report(bs)
    ck = tempfile.mkdtemp(prefix="dataflow-kafka-demo-")
    query = (pipe.apply(source).writeStream.foreachBatch(report).option("checkpointLocation", ck)
             .trigger(processingTime="1 second").start())
    stop, sent = threading.Event(), Counter(command=False)
    producer = threading.Thread(target=_produce, args=(bs, args.seconds, args.rate, stop, sent,
                                                       faults.done if faults else None), daemon=True)
    producer.start()
    hurt = threading.Thread(target=faults.run, args=(report,), daemon=True) if faults else None
    if hurt:
        hurt.start()
    producer.join()
    if hurt:
        hurt.join()
    time.sleep(3)
    query.processAllAvailable()
    lag = consumer_lag(query.lastProgress)
    query.stop()
    spark.stop()
    written = _topic_size(bs, "page-panes")
    t, m = report.totals, report.metrics.values()
    released = sum(x.get("released", 0) for x in m)
    arrived = sum(x.get("items_in", 0) + x.get("tombstones_in", 0) for x in m)
    print("\nsummary")
    print(f"  clicks produced (acknowledged by Kafka): {sent['acknowledged']}"
          + (f", {sent['failed']} not acknowledged" if sent["failed"] else "")
          + f"; micro-batches: {t['batches']}; {time.time() - started:.0f} s in all")
    print(f"  sessions (optimistic): {released} clicks released in order, {sum(x.get('tombstones_in', 0) for x in m)} "
          f"tombstones repaired late clicks (replay ratio {arrived / max(1, released):.3f})")
    for line in click_accounting(sent["acknowledged"], m, lag):
        print(line)
    print(f"  page_windows (slicer) results by query: {dict(sorted(report.queries.items()))}")
    print(f"  panes: {t['panes EARLY']} early, {t['panes ON_TIME']} on time, {t['panes LATE']} late; "
          f"{written} records in topic page-panes")
    print(f"  records a stage could not use (dropped rows): {dict(report.dropped) or 'none'}; "
          f"error rows: {t['errors']}")
    print(f"  window commands applied in batch(es) {report.modification_batches}")
    print(f"  consumer lag at stop (records behind latest): {lag}")
    if faults is not None:
        print("  faults:")
        for line in faults.summary(report, started):
            print(line)
    sys.stdout.flush()


def click_accounting(produced: int, metrics, lag: dict) -> list[str]:
    """Where every click is at the end: each click is one valid item at the sessions barrier (a
    late click's replays come with a tombstone for every output they replace), and the barrier
    has released it, dropped it (behind its release bound) or still holds it (above the low
    watermark at stop, to be released by later punctuations)."""
    m = list(metrics)
    reached = sum(x.get("items_in", 0) - x.get("tombstones_in", 0) for x in m)
    released = sum(x.get("released", 0) for x in m)
    dropped = sum(x.get("late_items", 0) - x.get("late_tombstones", 0) for x in m)
    held = sum(x.get("buffer", 0) for x in m)
    behind = sum(lag.values())
    lines = [f"  every click: {produced} produced = {reached} reached the sessions stage"
             + (f" + {behind} not read yet at stop" if behind else "")
             + f"; {reached} = {released} released + {dropped} dropped as late + {held} still held by the barrier "
               "at stop (event time above the low watermark)"]
    if produced != reached + behind or reached != released + dropped + held:
        lines.append(f"  (does not balance: {produced - reached - behind} produced clicks and "
                     f"{reached - released - dropped - held} clicks at the barrier unaccounted for)")
    return lines


def _topic_size(bootstrap: str, topic: str) -> int:
    from dataflow_kafka.datasource import kafka_read

    c = kafka_read.consumer({"bootstrap.servers": bootstrap})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(h - lo for lo, h in (kafka_read.watermarks(c, topic, p) for p in parts))
    finally:
        c.close()


if __name__ == "__main__":
    main()
