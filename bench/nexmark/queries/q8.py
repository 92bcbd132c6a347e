"""NEXMark Q8, new users: persons joined with the auctions they created in the same 10 s tumbling
window (Beam's nexmark Query8: CoGroupByKey of persons by id and auctions by seller per window)::

    SELECT Rstream(P.id, P.name, A.reserve)
    FROM Person [RANGE 10 SECOND] P, Auction [RANGE 10 SECOND] A WHERE P.id = A.seller

This project's form (``join``): a :class:`~joins.stage.WindowJoinStage` in tumbling windows of
10 s, inner, over one source reading the person and auction topics, with an early firing per
element and late firings (``AfterWatermark(early=AfterCount(1), late=AfterCount(1))``) in
discarding mode: each pair comes once, in the micro-batch where its later row arrives (as Spark's
native join emits it); a window is freed when the watermark passes its end plus the allowed
lateness (the suite's 5 s), later rows are dropped rows. Result rows: ``(window_start_ms, id,
name, reserve)``.

``python -m bench.nexmark.queries.q8`` (or ``.q3``): the benchmark of both joins (module
:func:`main`, ``--help``): per query, on the same pre-produced topics (Trigger.AvailableNow), our
join against Spark's native stream-stream join (``withWatermark`` 5 s and 0 s; ``format("kafka")``
when Spark's connector is resolved, :mod:`bench.spark_kafka`), rows/s of input events, result
rows against the reference and rows dropped; then the latency of each with events sent in real
time: a result row's latency is when it reached the driver minus when its later input was sent.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pandas as pd

from bench.nexmark.generator import NexmarkConfig, generate, produce
from bench.nexmark.queries.q3 import Q3, PersonAuctionJoin, native_dropped, parse_auctions, parse_persons
from bench.nexmark.queries.q3 import produce_in_order, run_native, run_ours
from bench.nexmark.stats import load1, multiset_diff as _diff, percentile as _pct
from dataflow_kafka.joins.stage import JoinInput, WindowJoinStage
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.windowing import TumblingWindow

__all__ = ["Q8", "main"]

SIZE_MS = 10_000


class Q8(PersonAuctionJoin):
    name = "q8"
    title = "new users"
    columns = ("window_start_ms", "id", "name", "reserve")

    def join_stage(self, settings):
        persons = JoinInput("person", key={"id": "p_id"}, columns={"name": "p_name"}, where="q8_person")
        auctions = JoinInput("auction", key="a_seller", columns={"reserve": "a_reserve"}, where="q8_auction")
        return WindowJoinStage(persons, auctions, window=TumblingWindow(SIZE_MS), how="inner",
                               trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
                               accumulation_mode="discarding", allowed_lateness_ms=settings.lateness_ms,
                               num_key_groups=settings.key_groups, name="q8")

    def pair_row(self, key, window, person, auction):
        return (window[0], key, person[1][0], auction[1][0])

    def pair_ids(self, row, index):
        return row[1], index.get(("auction of", row[1], row[3]))

    def reference(self, events, variant=None):
        people: dict = {}
        auctions = []
        for e in events:
            if e.kind == "person":
                people[(e.record["id"], e.ts_ms // SIZE_MS)] = e.record
            elif e.kind == "auction":
                auctions.append(e.record)
        return sorted(((w * SIZE_MS, p["id"], p["name"], a["reserve"]) for a in auctions
                       if (p := people.get((a["seller"], (w := a["dateTime"] // SIZE_MS)))) is not None), key=repr)

    def native(self, source, delay, topics):
        from pyspark.sql import functions as F

        persons = parse_persons(source, topics["person"]).withWatermark("p_time", delay) \
            .select("id", "name", "p_time", F.window("p_time", f"{SIZE_MS // 1000} seconds").alias("pw"))
        auctions = parse_auctions(source, topics["auction"]).withWatermark("a_time", delay) \
            .select("seller", "reserve", "a_time", F.window("a_time", f"{SIZE_MS // 1000} seconds").alias("aw"))
        joined = persons.join(auctions, (F.col("id") == F.col("seller")) & (F.col("pw") == F.col("aw")))
        return joined.select(F.unix_millis(F.col("pw.start")).alias("window_start_ms"), "id", "name", "reserve")


# -- the benchmark ----------------------------------------------------------------------------------------

QUERIES = {"q3": Q3(), "q8": Q8()}
NATIVE_DELAYS = ("5 seconds", "0 seconds")
FIELDS = ["date", "phase", "delayed", "query", "side", "variant", "connector", "events", "seconds", "rows_per_s",
          "batches", "expected", "missing", "extra", "dropped", "correct", "p50_ms", "p99_ms", "latency_n",
          "load_before", "load_after"]


class _Bench:
    def __init__(self, args, spark, bootstrap: str, connector: str) -> None:
        self.args, self.spark, self.bootstrap, self.connector = args, spark, bootstrap, connector
        self.rows: list[dict] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="nexmark-joins-"))

    def ck(self) -> str:
        return str(self.tmp / uuid.uuid4().hex[:10])

    def row(self, **kw) -> None:
        self.rows.append({"date": dt.datetime.now().isoformat(timespec="seconds"), **kw})
        print("  " + "  ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in kw.items()
                               if v not in (None, "")), flush=True)

    def arms(self, q: PersonAuctionJoin, k: int) -> list[tuple[str, str]]:
        arms = [("ours", v) for v in q.variants] + [("spark", d) for d in NATIVE_DELAYS]
        return arms if k % 2 == 0 else arms[::-1]                  # the order swapped every other query

    def throughput(self, delayed: float, queries) -> None:
        a = self.args
        cfg = NexmarkConfig(events=a.events, seed=a.seed, events_per_s=a.rate, delayed=delayed, partitions=a.partitions)
        events = generate(cfg)
        topics = produce_in_order(self.bootstrap, f"nexmark-j-{uuid.uuid4().hex[:8]}", events, a.partitions)
        n_in = sum(e.kind in ("person", "auction") for e in events)
        print(f"throughput, {delayed:.0%} delayed: {n_in} persons and auctions of {len(events)} events", flush=True)
        for k, q in enumerate(queries):
            expected = q.reference(events)
            for side, v in self.arms(q, k):
                before = load1()
                if side == "ours":
                    run = run_ours(self.spark, self.bootstrap, topics, q, v, self.ck(), max_offsets=a.per_batch)
                    got = q.results(v, run.frames)
                    dropped = int(sum(f.loc[f["kind"] == "dropped", "dropped_count"].sum() for f in run.frames
                                      if "kind" in f.columns))
                    label, connector = v, "dataflow-kafka"
                else:
                    run = run_native(self.spark, self.bootstrap, topics, q, v, self.ck(), self.connector, a.per_batch)
                    got = q.native_results(pd.concat(run.frames)) if any(len(f) for f in run.frames) else []
                    dropped, label, connector = native_dropped(run.progress), f"withWatermark {v}", self.connector
                missing, extra = _diff(expected, got)
                self.row(phase="throughput", delayed=delayed, query=q.name, side=side, variant=label, connector=connector,
                         events=n_in, seconds=round(run.seconds, 2), rows_per_s=n_in / run.seconds,
                         batches=len(run.batch_ids), expected=len(expected), missing=missing, extra=extra,
                         dropped=dropped, correct=missing == 0 and extra == 0, load_before=before, load_after=load1())

    def latency(self, delayed: float, queries) -> None:
        from bench.nexmark.latency import EventTrickle, run_timed
        from bench.nexmark.queries.q3 import native_source

        a = self.args
        print(f"latency, {delayed:.0%} delayed: {a.latency_rate} events/s for {a.latency_seconds} s per run", flush=True)
        for k, q in enumerate(queries):
            for side, v in self.arms(q, k):
                topics = produce(self.bootstrap, f"nexmark-jl-{uuid.uuid4().hex[:8]}", [], a.partitions,
                                 kinds=("person", "auction"))
                if side == "ours":
                    src = self.spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", self.bootstrap) \
                        .option("subscribe", ",".join(topics.values())).option("startingOffsets", "earliest") \
                        .option("eventTimeField", "dateTime").load()
                    out = q.spark(v, src)
                else:
                    out = q.native(native_source(self.spark, self.bootstrap, topics, q.kinds, self.connector), v, topics)
                state: dict = {}

                def start():
                    cfg = NexmarkConfig(events=int(a.latency_rate * (a.latency_seconds + 10)), seed=a.seed,
                                        events_per_s=a.latency_rate, delayed=delayed, partitions=a.partitions,
                                        start_ms=int(time.time() * 1000) + 300)
                    state["start_ms"] = cfg.start_ms
                    t = EventTrickle(self.bootstrap, topics, generate(cfg), a.partitions)
                    t.start()
                    return t

                before = load1()
                got, trickle, progress = run_timed(out, self.ck(), start, a.latency_seconds)
                cutoff = state["start_ms"] + (a.latency_seconds - 15) * 1000
                index = q.sent_index(trickle.sent)
                expected = Counter(r for r in q.reference([e for e, _ in trickle.sent])
                                   if (t := q.ready_ms(r, index)) is not None and t <= cutoff)
                seen: dict = {}
                for t, frame in got.timed():
                    if len(frame):
                        rows = q.results(v, [frame]) if side == "ours" else q.native_results(frame)
                        for r in rows:
                            seen.setdefault(r, t)
                final = Counter(r for r in seen if (t := q.ready_ms(r, index)) is not None and t <= cutoff)
                lat = [seen[r] - q.ready_ms(r, index) for r in final if r in expected]
                missing, extra = _diff(expected, final)
                dropped = native_dropped(progress) if side == "spark" else int(sum(
                    f.loc[f["kind"] == "dropped", "dropped_count"].sum() for f in got.ordered() if "kind" in f.columns))
                self.row(phase="latency", delayed=delayed, query=q.name, side=side,
                         variant=v if side == "ours" else f"withWatermark {v}",
                         connector="dataflow-kafka" if side == "ours" else self.connector,
                         events=sum(e.kind in q.kinds for e, _ in trickle.sent), seconds=a.latency_seconds,
                         batches=len(got.frames), expected=sum(expected.values()), missing=missing, extra=extra,
                         dropped=dropped, correct=missing == 0 and extra == 0, p50_ms=_pct(lat, 0.5),
                         p99_ms=_pct(lat, 0.99), latency_n=len(lat), load_before=before, load_after=load1())


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="NEXMark Q3 and Q8 (joins): ours against Spark's native stream-stream join")
    p.add_argument("--queries", default="q3,q8")
    p.add_argument("--events", type=int, default=100_000, help="events generated (persons and auctions: 4 in 50)")
    p.add_argument("--rate", type=int, default=1000, help="events per second of event time")
    p.add_argument("--per-batch", type=int, default=2000, help="maxOffsetsPerTrigger")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--seed", type=int, default=8)
    p.add_argument("--delayed", default="0.1", help="shares of delayed events, comma separated")
    p.add_argument("--latency-seconds", type=int, default=60, help="0: no latency phase")
    p.add_argument("--latency-rate", type=int, default=1000, help="events per second sent in the latency phase")
    p.add_argument("--csv", default=None)
    a = p.parse_args(argv)
    from bench import spark_kafka
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    jars = spark_kafka.connector_jars()
    connector = "kafka" if jars else "dataflow-kafka"
    if not jars:
        print(spark_kafka.missing_message(), flush=True)
    queries = [QUERIES[n] for n in a.queries.split(",")]
    with kafka_broker() as broker:
        spark = spark_session(master="local[2]", shuffle_partitions=2, **({"extra": spark_kafka.session_extra()}
                                                                          if jars else {}))
        bench = _Bench(a, spark, broker.bootstrap_servers, connector)
        for delayed in (float(d) for d in a.delayed.split(",")):
            bench.throughput(delayed, queries)
            if a.latency_seconds:
                bench.latency(delayed, queries)
        spark.stop()
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(bench.rows)


if __name__ == "__main__":                     # pragma: no cover - the benchmark, by hand
    main()



