"""NEXMark Q3, local item suggestion: persons in OR, ID or CA joined with the auctions they sell in
category 10, incrementally (each match once, as soon as both are in)::

    SELECT Istream(P.name, P.city, P.state, A.id)
    FROM Auction A [ROWS UNBOUNDED], Person P [ROWS UNBOUNDED]
    WHERE A.seller = P.id AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA') AND A.category = 10

This project's form (``join``): a :class:`~joins.stage.WindowJoinStage` over one source reading the
person and auction topics (each input takes its topic's rows, ``where``), in the global window
with a trigger per element (``Repeatedly(AfterCount(1))``) in discarding mode: every pane holds the
pairs new since the last, so each pair comes once, when its later row arrives. Nothing is late
in the global window and nothing is freed (the state of both inputs grows, as in Spark's native
unbounded join). Result rows: ``(name, city, state, auction)``.

This module also holds what the persons-auctions joins (:mod:`~bench.nexmark.queries.q8` too)
share, since the suite's runners read bids only: :class:`PersonAuctionJoin` (a
:class:`~bench.nexmark.query.Query` of two event kinds), :func:`join_batches` (micro-batches of
the two topics without Kafka), :func:`run_ours`/:func:`run_native`/:func:`replayed_batches` on
Spark, and the benchmark, ``python -m bench.nexmark.queries.q3`` (throughput and latency beside
Spark's native stream-stream join, checked against the reference; ``--help``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from bench.nexmark.generator import Event
from bench.nexmark.query import Query, Settings, epoch_ms, field
from joins.stage import JoinInput, WindowJoinStage, current_joins
from keygroups import Computed, Pipeline
from watermarks import AfterCount, Repeatedly
from windowing import GlobalWindow

__all__ = ["Q3", "PersonAuctionJoin", "join_batches", "run_ours", "run_native", "replayed_batches",
           "PERSON_DDL", "AUCTION_DDL"]

PERSON_DDL = ("id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, "
              "dateTime BIGINT, extra STRING")
AUCTION_DDL = ("id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, dateTime BIGINT, "
               "expires BIGINT, seller BIGINT, category BIGINT, extra STRING")
JOIN_KINDS = ("person", "auction")
END_OF_TIME_MS = 253_402_300_799_999          # endOfInput=punctuate's punctuation


class _OfKind:
    """``where`` of an input (a class: pickles by reference): rows of the ``kind`` topic (the
    generator names it ``<prefix>-<kind>``) whose JSON value passes ``test`` (field -> allowed values)."""

    def __init__(self, kind: str, **test: tuple) -> None:
        self.kind, self.test = kind, test

    def __call__(self, frame: pd.DataFrame) -> list[bool]:
        out = []
        for topic, value in zip(frame["topic"], frame["value"]):
            ok = isinstance(topic, str) and topic.endswith(f"-{self.kind}")
            if ok and self.test:
                rec = json.loads(value)
                ok = all(rec.get(f) in allowed for f, allowed in self.test.items())
            out.append(ok)
        return out

    def __repr__(self) -> str:
        return f"of_kind({self.kind!r}, {self.test!r})"


def of_kind(kind: str, **test: tuple) -> Computed:
    """An input's ``where``: the rows of ``kind``'s topic, filtered (both runners evaluate it)."""
    return Computed(_OfKind(kind, **test), "boolean", ("topic", "value"))


class PersonAuctionJoin(Query):
    """A NEXMark query joining persons and auctions (``seller = id``): a join stage over one source
    reading both topics. Subclasses give :meth:`join_stage`, :meth:`pair_rows` (the result rows of
    one person and the auctions it joined) and :meth:`native`. Unlike the bid queries, the
    reference and the latency hooks take events of both kinds (:class:`~bench.nexmark.generator.Event`)."""

    kinds = JOIN_KINDS
    variants = ("join",)
    #: A partition whose end offset has not moved for this long (batch processing time) leaves the
    #: minimum: the generator puts event i in partition i % partitions, so with an even number of
    #: partitions every other person partition stays empty, and an empty partition gives no
    #: guarantee (its punctuation is null): without this the join's watermark would wait for the
    #: end of input (keygroups.PunctuationTracker's idle policy; Flink's withIdleness).
    idle_timeout_ms = 3_000

    # -- ours -------------------------------------------------------------------------------------
    def spark(self, variant, source, settings=Settings()):
        self._check(variant)
        return self.pipeline(variant, settings).apply(epoch_ms(source), idle_timeout_ms=self.idle_timeout_ms)

    def local(self, variant, batches, settings=Settings()):
        self._check(variant)
        return self.pipeline(variant, settings).run_local(batches, idle_timeout_ms=self.idle_timeout_ms)

    def join_stage(self, settings: Settings) -> WindowJoinStage:
        raise NotImplementedError

    def pipeline(self, variant, settings=Settings()):
        self._check(variant)
        return Pipeline([self.join_stage(settings)])

    def results(self, variant, frames, settings=Settings()):
        stage = self.pipeline(variant, settings).stages[-1]
        frames = [f for f in frames if len(f) and "kind" in f.columns]
        out = []
        for (key, window), pairs in current_joins(frames, stage).items():
            for (person, auction), n in pairs.items():
                out += [self.pair_row(key, window, person, auction)] * n
        return sorted(out, key=repr)

    def pair_row(self, key: Any, window: tuple, person: tuple, auction: tuple) -> tuple:
        """A result row of one joined pair: ``person``, ``auction`` = ``(ts, column values)``."""
        raise NotImplementedError

    # -- the answer -------------------------------------------------------------------------------
    def reference(self, events: Iterable[Event], variant=None) -> list[tuple]:
        raise NotImplementedError

    # -- Spark's native form ----------------------------------------------------------------------
    def native(self, source, delay: str, topics: Mapping[str, str]):
        """The query in Spark's API over one streaming DataFrame of both topics' Kafka rows (``topic``
        and ``value`` columns), ``topics`` = ``{kind: topic}``, ``withWatermark(delay)``."""
        raise NotImplementedError

    # -- latency ----------------------------------------------------------------------------------
    def sent_index(self, sent: Sequence[tuple[Event, int]]) -> dict:
        """``{("person", id) | ("auction", id): send time ms}`` of the events sent, and
        ``("auction of", seller, reserve) -> auction id``."""
        index: dict = {(e.kind, e.record["id"]): t for e, t in sent if e.kind in self.kinds}
        index.update({("auction of", e.record["seller"], e.record["reserve"]): e.record["id"]
                      for e, _ in sent if e.kind == "auction"})
        index.update({("seller", e.record["id"]): e.record["seller"] for e, _ in sent if e.kind == "auction"})
        return index

    def pair_ids(self, row: tuple, index: dict) -> tuple[Any, Any]:
        """``(person id, auction id)`` of a result row."""
        raise NotImplementedError

    def ready_ms(self, row: tuple, index: dict) -> int | None:
        """A pair is known once both its rows were sent: the later send time."""
        person, auction = self.pair_ids(row, index)
        p, a = index.get(("person", person)), index.get(("auction", auction))
        return None if p is None or a is None else max(p, a)


def _parse(df, topic: str, ddl: str, prefix: str):
    """Spark: one topic's records as columns (``from_json``), event time ``<prefix>_time``."""
    from pyspark.sql import functions as F

    rec = df.where(F.col("topic") == topic).select(F.from_json(F.col("value").cast("string"), ddl).alias("r"))
    return rec.select("r.*").withColumn(f"{prefix}_time", F.timestamp_millis("dateTime"))


def parse_persons(df, topic: str):
    return _parse(df, topic, PERSON_DDL, "p")


def parse_auctions(df, topic: str):
    return _parse(df, topic, AUCTION_DDL, "a")


class Q3(PersonAuctionJoin):
    name = "q3"
    title = "local item suggestion"
    columns = ("name", "city", "state", "auction")
    states = ("OR", "ID", "CA")
    category = 10

    def join_stage(self, settings):
        persons = JoinInput("person", key=field("id"), where=of_kind("person", state=self.states),
                            columns={"name": field("name", "string"), "city": field("city", "string"),
                                     "state": field("state", "string")})
        auctions = JoinInput("auction", key=field("seller"), columns={"auction": field("id")},
                             where=of_kind("auction", category=(self.category,)))
        return WindowJoinStage(persons, auctions, window=GlobalWindow(), how="inner",
                               trigger=Repeatedly(AfterCount(1)), accumulation_mode="discarding",
                               timestamp_combiner="latest", num_key_groups=settings.key_groups, name="q3")

    def pair_row(self, key, window, person, auction):
        return (*person[1], auction[1][0])

    def pair_ids(self, row, index):
        return index.get(("seller", row[3])), row[3]

    def reference(self, events, variant=None):
        events = list(events)
        people = {e.record["id"]: e.record for e in events if e.kind == "person" and e.record["state"] in self.states}
        return sorted(((p["name"], p["city"], p["state"], a["id"])
                       for a in (e.record for e in events if e.kind == "auction")
                       if a["category"] == self.category and (p := people.get(a["seller"])) is not None), key=repr)

    def native(self, source, delay, topics):
        from pyspark.sql import functions as F

        persons = parse_persons(source, topics["person"]).where(F.col("state").isin(*self.states))
        auctions = parse_auctions(source, topics["auction"]).where(F.col("category") == self.category)
        joined = persons.select("id", "name", "city", "state").join(
            auctions.select(F.col("id").alias("auction"), "seller"), F.col("id") == F.col("seller"))
        return joined.select(*self.columns)


# -- micro-batches of both topics without Kafka ----------------------------------------------------------

def join_batches(events: Sequence[Event], per_batch: int, prefix: str = "nexmark", partitions: int = 4,
                 kinds: Sequence[str] = JOIN_KINDS) -> list[pd.DataFrame]:
    """Micro-batches of the ``kinds`` events as one source reading their topics (``<prefix>-<kind>``)
    makes them: events taken in arrival order, about ``per_batch`` per batch; per topic-partition its
    data rows, then one punctuation row (the newest event time read from it so far, None before
    any); the last batch punctuates to the end of time (``endOfInput=punctuate``). Batch ``b``'s
    processing time is ``b`` seconds (what an idle timeout counts)."""
    evs = sorted((e for e in events if e.kind in kinds), key=lambda e: (e.arrival_ms, e.i))
    n_batches = max(1, -(-len(evs) // max(1, per_batch)))
    offsets: Counter = Counter()
    newest: dict = {}
    frames = []
    for b in range(n_batches):
        rows = []
        for e in evs[b * per_batch:(b + 1) * per_batch]:
            tp = (f"{prefix}-{e.kind}", e.partition % partitions)
            newest[tp] = max(newest.get(tp, e.ts_ms), e.ts_ms)
            rows.append({"kind": "data", "topic": tp[0], "partition": tp[1], "offset": offsets[tp], "key": None,
                         "value": e.value(), "event_time_ms": e.ts_ms, "processing_time_ms": b * 1000})
            offsets[tp] += 1
        last = b == n_batches - 1
        for kind in kinds:
            for p in range(partitions):
                tp = (f"{prefix}-{kind}", p)
                rows.append({"kind": "punctuation", "topic": tp[0], "partition": p, "offset": offsets[tp],
                             "punctuation_ms": END_OF_TIME_MS if last else newest.get(tp),
                             "processing_time_ms": b * 1000})
        frames.append(pd.DataFrame(rows))
    return frames


# -- on Spark -------------------------------------------------------------------------------------------

def run_ours(spark, bootstrap: str, topics: Mapping[str, str], query: PersonAuctionJoin, variant: str,
             checkpoint: str, settings: Settings = Settings(), max_offsets: int | None = None, timeout_s: float = 900):
    """``query``'s ``variant`` over one ``format("dataflow-kafka")`` source reading both topics
    (:func:`bench.nexmark.runs.run_ours` with a topic list)."""
    from bench.nexmark import runs

    return runs.run_ours(spark, bootstrap, ",".join(topics[k] for k in query.kinds), query, variant, checkpoint,
                         settings, max_offsets, timeout_s)


def native_source(spark, bootstrap: str, topics: Mapping[str, str], kinds: Sequence[str], connector: str,
                  max_offsets: int | None = None):
    """Spark: one streaming DataFrame of both topics for :meth:`PersonAuctionJoin.native`:
    ``format("kafka")`` (Spark's connector), or the data rows of ``format("dataflow-kafka")``."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format(connector).option("kafka.bootstrap.servers", bootstrap) \
        .option("subscribe", ",".join(topics[k] for k in kinds)).option("startingOffsets", "earliest")
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    if connector == "dataflow-kafka":
        reader = reader.option("eventTimeField", "dateTime")
    df = reader.load()
    return df.where(F.col("kind") == "data") if connector == "dataflow-kafka" else df


def run_native(spark, bootstrap: str, topics: Mapping[str, str], query: PersonAuctionJoin, delay: str,
               checkpoint: str, connector: str = "kafka", max_offsets: int | None = None, timeout_s: float = 900):
    """``query``'s Spark-native join with ``withWatermark(delay)``, Trigger.AvailableNow, append mode."""
    from bench.nexmark import runs

    source = native_source(spark, bootstrap, topics, query.kinds, connector, max_offsets)
    return runs._run(query.native(source, delay, topics), checkpoint, timeout_s)


def replayed_batches(bootstrap: str, topics: Mapping[str, str], checkpoint: str, batch_ids: Sequence[int],
                     kinds: Sequence[str] = JOIN_KINDS) -> list[pd.DataFrame]:
    """The micro-batches a finished run of ours read (one source, both topics), rebuilt from the
    records and its offset log, ``endOfInput``'s punctuation on the batch the log marks ``eoi``."""
    from tests.support import KafkaHelper, offset_log, source_batches

    kafka = KafkaHelper(bootstrap)
    records = [m for k in kinds for m in kafka.consume_all(topics[k])]
    frames = source_batches(records, checkpoint, batch_ids, "dateTime")
    for b, frame in zip(batch_ids, frames):
        if offset_log(checkpoint, b).get("eoi"):
            frame.loc[frame["kind"] == "punctuation", "punctuation_ms"] = END_OF_TIME_MS
    return frames


def native_dropped(progress: Sequence[dict]) -> int:
    """Rows Spark's join dropped as later than its watermark (its progress reports)."""
    return sum(int(op.get("numRowsDroppedByWatermark", 0)) for p in progress for op in p.get("stateOperators", []))


if __name__ == "__main__":                     # pragma: no cover - the benchmark, by hand
    from bench.nexmark.queries.q8 import main

    main()

