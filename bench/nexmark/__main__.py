"""``python -m bench.nexmark``: NEXMark queries with this project's API against the same queries
in Spark's native API, in the same run, on the embedded Apache Kafka broker.

Two phases ([docs/nexmark.md](../../docs/nexmark.md)):

* **throughput** (per share of delayed events, default 0% and 10%): the bids pre-produced,
  each query bounded (Trigger.AvailableNow, ``maxOffsetsPerTrigger``) and timed from ``start()``
  to its end; our variants over ``format("dataflow-kafka")`` (``endOfInput=punctuate``) and Spark's
  native form over ``format("kafka")`` (Spark's connector, :mod:`bench.spark_kafka`; without its
  jars over our source's data rows, said in the output) with ``withWatermark`` 5 s and 0 s. Our
  results are checked against the reference; Spark's are compared with it on the windows its
  final watermark closed (windows still open at the end of a bounded run are never emitted in
  append mode: counted apart as ``open``).
* **latency** (10% delayed): events sent in real time at ``--latency-rate``, each query running
  continuously for ``--latency-seconds``; p50/p99 of each final result row's latency and its
  accuracy against the reference (:mod:`bench.nexmark.latency`).

Every row of the output and CSV carries the machine's 1-minute load average before and after.
Ratios: ours / Spark's native (``withWatermark`` 5 s) of the same query in the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
import uuid
from pathlib import Path

import pandas as pd

from bench.nexmark.generator import NexmarkConfig, bids, generate, produce
from bench.nexmark.latency import EventTrickle, measure, run_timed
from bench.nexmark.queries import REGISTRY, get
from bench.nexmark.query import Query, parse_bids
from bench.nexmark.runs import final_watermark_ms, run_native, run_ours, source_options
from bench.nexmark.stats import load1, multiset_diff as _diff, percentile as _pct, write_rows

NATIVE_DELAYS = ("5 seconds", "0 seconds")
FIELDS = ["date", "phase", "delayed", "query", "side", "variant", "connector", "bids", "seconds", "rows_per_s",
          "batches", "expected", "missing", "extra", "open", "stale", "dropped", "correct", "p50_ms", "p99_ms", "latency_n",
          "load_before", "load_after"]


def _arms(q: Query) -> list[tuple[str, str]]:
    """``(side, variant)``: our variants, Spark's native form per watermark delay (one for a projection)."""
    return [("ours", v) for v in q.variants] + [("spark", d) for d in (NATIVE_DELAYS[:1] if q.variants == ("sql",)
                                                                       else NATIVE_DELAYS)]


def _native_label(q: Query, delay: str) -> str:
    return "sql" if q.variants == ("sql",) else f"withWatermark {delay}"


def _dropped(frames) -> int:
    return int(sum(f.loc[f["kind"] == "dropped", "dropped_count"].sum() for f in frames if "kind" in f.columns))


class Bench:
    def __init__(self, args, spark, bootstrap: str, connector: str) -> None:
        self.args, self.spark, self.bootstrap, self.connector = args, spark, bootstrap, connector
        self.rows: list[dict] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="nexmark-"))

    def _ck(self) -> str:
        return str(self.tmp / uuid.uuid4().hex[:10])

    def _row(self, **kw) -> dict:
        row = {"date": dt.datetime.now().isoformat(timespec="seconds"), **kw}
        self.rows.append(row)
        shown = {k: v for k, v in row.items() if k not in ("date",) and v not in (None, "")}
        print("  " + "  ".join(f"{k}={v:.0f}" if isinstance(v, float) and k != "delayed" and "load" not in k
                                else f"{k}={v}" for k, v in shown.items()), flush=True)
        return row

    # -- throughput -------------------------------------------------------------------------------
    def throughput(self, delayed: float, queries: list[Query]) -> None:
        a = self.args
        cfg = NexmarkConfig(events=a.events, seed=a.seed, events_per_s=a.rate, delayed=delayed, partitions=a.partitions)
        events = generate(cfg)
        topic = produce(self.bootstrap, f"nexmark-{uuid.uuid4().hex[:8]}", events, a.partitions)["bid"]
        records = bids(events)
        print(f"throughput, {delayed:.0%} delayed: {len(events)} events, {len(records)} bids in {topic}", flush=True)
        for k, q in enumerate(queries):
            arms = _arms(q)
            for side, v in arms if k % 2 == 0 else arms[::-1]:      # the order swapped every other query
                before = load1()
                if side == "ours":
                    run = run_ours(self.spark, self.bootstrap, topic, q, v, self._ck(), max_offsets=a.per_batch)
                    got, expected = q.results(v, run.frames), q.reference(records, v)
                    missing, extra = _diff(expected, got)
                    self._row(phase="throughput", delayed=delayed, query=q.name, side="ours", variant=v,
                              connector="dataflow-kafka", bids=len(records), seconds=round(run.seconds, 2),
                              rows_per_s=len(records) / run.seconds, batches=len(run.batch_ids),
                              expected=len(expected), missing=missing, extra=extra, open=0,
                              dropped=_dropped(run.frames), correct=got == expected, load_before=before,
                              load_after=load1())
                else:
                    run = run_native(self.spark, self.bootstrap, topic, q, v, self._ck(), self.connector,
                                     max_offsets=a.per_batch)
                    got = q.native_results(pd.concat(run.frames)) if run.frames else []
                    expected = q.reference(records)
                    wm = final_watermark_ms(run.progress)
                    closed = [r for r in expected if q.ready_column == "" or (wm is not None and q.ready_ms(r, {}) <= wm)]
                    missing, extra = _diff(closed, got)
                    self._row(phase="throughput", delayed=delayed, query=q.name, side="spark",
                              variant=_native_label(q, v), connector=self.connector, bids=len(records),
                              seconds=round(run.seconds, 2), rows_per_s=len(records) / run.seconds,
                              batches=len(run.batch_ids), expected=len(closed), missing=missing, extra=extra,
                              open=len(expected) - len(closed), dropped=run.dropped_by_watermark(),
                              correct=missing == 0 and extra == 0, load_before=before, load_after=load1())

    # -- latency ----------------------------------------------------------------------------------
    def latency(self, delayed: float, queries: list[Query]) -> None:
        a = self.args
        print(f"latency, {delayed:.0%} delayed: {a.latency_rate} events/s for {a.latency_seconds} s per query",
              flush=True)
        for k, q in enumerate(queries):
            arms = _arms(q)
            for side, v in arms if k % 2 == 0 else arms[::-1]:
                self._latency_run(delayed, q, side, v)

    def _latency_run(self, delayed: float, q: Query, side: str, variant: str) -> None:
        a = self.args
        prefix = f"nexmark-lat-{uuid.uuid4().hex[:8]}"
        topics = produce(self.bootstrap, prefix, [], a.partitions, kinds=("bid",))
        opts = source_options(self.bootstrap, topics["bid"], None)
        opts.pop("endOfInput")
        if side == "ours":
            src = self.spark.readStream.format("dataflow-kafka").options(**opts).load()
            out, connector = q.spark(variant, src), "dataflow-kafka"
        else:
            native_opts = {k: v for k, v in opts.items() if k.startswith("kafka.") or k in ("subscribe", "startingOffsets")}
            if self.connector == "dataflow-kafka":
                native_opts["eventTimeField"] = "dateTime"
            src = self.spark.readStream.format(self.connector).options(**native_opts).load()
            out, connector = q.native(parse_bids(src, with_kind=self.connector == "dataflow-kafka"), variant), self.connector
        state: dict = {}

        def start():
            start_ms = int(time.time() * 1000) + 300
            n = int(a.latency_rate * (a.latency_seconds + 10))
            cfg = NexmarkConfig(events=n, seed=a.seed, events_per_s=a.latency_rate, delayed=delayed,
                                partitions=a.partitions, start_ms=start_ms)
            state["start_ms"] = start_ms
            t = EventTrickle(self.bootstrap, topics, generate(cfg), a.partitions)
            t.start()
            return t

        before = load1()
        got, trickle, progress = run_timed(out, self._ck(), start, a.latency_seconds)
        cutoff = state["start_ms"] + (a.latency_seconds - 15) * 1000
        m = measure(q, None if side == "spark" else variant, got.timed(), trickle.sent, cutoff)
        dropped = sum(int(op.get("numRowsDroppedByWatermark", 0)) for p in progress for op in p.get("stateOperators", []))
        self._row(phase="latency", delayed=delayed, query=q.name, side=side,
                  variant=variant if side == "ours" else _native_label(q, variant), connector=connector,
                  bids=sum(e.kind == "bid" for e, _ in trickle.sent), seconds=a.latency_seconds,
                  batches=len(got.frames), expected=m.expected, missing=m.missing, extra=m.extra, stale=m.stale,
                  dropped=dropped if side == "spark" else _dropped(got.ordered()),
                  correct=m.missing == 0 and m.extra == 0, p50_ms=_pct(m.latencies_ms, 0.5),
                  p99_ms=_pct(m.latencies_ms, 0.99), latency_n=len(m.latencies_ms), load_before=before,
                  load_after=load1())

    # -- summary ----------------------------------------------------------------------------------
    def summary(self) -> None:
        print("\nratios ours / Spark native (withWatermark 5 seconds), same run:")
        by = {}
        for r in self.rows:
            by.setdefault((r["phase"], r["delayed"], r["query"]), []).append(r)
        for (phase, delayed, query), rs in by.items():
            native = next((r for r in rs if r["side"] == "spark" and r["variant"] in ("sql", f"withWatermark {NATIVE_DELAYS[0]}")), None)
            for r in (r for r in rs if r["side"] == "ours"):
                if native is None:
                    continue
                if phase == "throughput":
                    ratio = f"rows/s {r['rows_per_s'] / native['rows_per_s']:.2f}"
                else:
                    ratio = ", ".join(f"{p} {r[p] / native[p]:.2f}" for p in ("p50_ms", "p99_ms")
                                      if r.get(p) and native.get(p))
                print(f"  {phase:10s} {delayed:4.0%} {query:4s} {r['variant']:9s} {ratio}")

    def write_csv(self, path: str) -> None:
        print(f"wrote {write_rows(path, FIELDS, self.rows)}")


def _warm_up(bench: Bench) -> None:
    """One untimed bounded run of each side (the first query of a session runs slower)."""
    a = bench.args
    events = generate(NexmarkConfig(events=3000, seed=99, events_per_s=a.rate, partitions=a.partitions))
    topic = produce(bench.bootstrap, f"nexmark-warm-{uuid.uuid4().hex[:8]}", events, a.partitions, kinds=("bid",))["bid"]
    q = REGISTRY["q5"]
    run_ours(bench.spark, bench.bootstrap, topic, q, "slicer", bench._ck(), max_offsets=1000)
    run_native(bench.spark, bench.bootstrap, topic, q, NATIVE_DELAYS[0], bench._ck(), bench.connector, max_offsets=1000)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.nexmark", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=100_000, help="events of a throughput run (46/50 are bids)")
    p.add_argument("--rate", type=int, default=2000, help="event-time rate of a throughput run, events/s")
    p.add_argument("--per-batch", type=int, default=25_000, help="maxOffsetsPerTrigger of a throughput run")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--delayed", default="0,0.1", help="shares of delayed events, throughput phase")
    p.add_argument("--latency-delayed", default="0.1", help="shares of delayed events, latency phase")
    p.add_argument("--latency-rate", type=int, default=500, help="events/s sent in real time")
    p.add_argument("--latency-seconds", type=int, default=60)
    p.add_argument("--queries", default=",".join(REGISTRY), help="comma-separated, e.g. q5,q11")
    p.add_argument("--phases", default="throughput,latency")
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--csv", default="bench/out/nexmark.csv")
    p.add_argument("--quick", action="store_true", help="20,000 events, 25 s of latency per query")
    a = p.parse_args(argv)
    if a.quick:
        a.events, a.per_batch, a.latency_seconds = 20_000, 5_000, 25
    queries = [get(n) for n in a.queries.split(",") if n]
    phases = set(a.phases.split(","))

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    try:
        from bench import spark_kafka
    except ImportError:             # the connector's helper is not in this checkout
        spark_kafka = None
    extra = spark_kafka.session_extra() if spark_kafka is not None else {}
    connector = "kafka" if extra else "dataflow-kafka"
    if not extra:
        why = spark_kafka.missing_message() if spark_kafka is not None else "bench.spark_kafka is missing"
        print(f"{why}; Spark's native queries read format('dataflow-kafka') data rows")
    with kafka_broker(workdir=tempfile.mkdtemp(prefix="nexmark-broker-")) as broker:
        spark = spark_session(master="local[2]", shuffle_partitions=a.shuffle_partitions, extra=extra)
        print(f"broker {broker.kind} at {broker.bootstrap_servers}; Spark {spark.version} local[2], "
              f"{a.shuffle_partitions} shuffle partitions; native side on format({connector!r}); load {load1()}",
              flush=True)
        bench = Bench(a, spark, broker.bootstrap_servers, connector)
        try:
            _warm_up(bench)
            if "throughput" in phases:
                for d in (float(x) for x in a.delayed.split(",") if x):
                    bench.throughput(d, queries)
            if "latency" in phases:
                for d in (float(x) for x in a.latency_delayed.split(",") if x):
                    bench.latency(d, queries)
        finally:
            bench.summary()
            if bench.rows:
                bench.write_csv(a.csv)
            spark.stop()


if __name__ == "__main__":
    main()
