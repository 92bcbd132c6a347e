"""NEXMark Q3, local item suggestion: persons in OR, ID or CA joined with the auctions they sell in
category 10, incrementally (each match once, as soon as both are in)::

    SELECT Istream(P.name, P.city, P.state, A.id)
    FROM Auction A [ROWS UNBOUNDED], Person P [ROWS UNBOUNDED]
    WHERE A.seller = P.id AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA') AND A.category = 10

This project's form (``join``): a :class:`~joins.stage.WindowJoinStage` over one source reading the
person and auction topics (each input takes its topic's rows, ``where``; the JSON fields are
columns Spark computes, :data:`FIELDS`), in the global window
with a trigger per element (``Repeatedly(AfterCount(1))``) in discarding mode: every pane holds the
pairs new since the last, so each pair comes once, when its later row arrives. Nothing is late
in the global window and nothing is freed (the state of both inputs grows, as in Spark's native
unbounded join). Result rows: ``(name, city, state, auction)``.

This module also holds what the persons-auctions joins (:mod:`~bench.nexmark.queries.q8` too)
share, since the suite's runners read bids only: :class:`PersonAuctionJoin` (a
:class:`~bench.nexmark.query.Query` of two event kinds), :func:`join_batches` (micro-batches of
the two topics without Kafka), :func:`run_ours`/:func:`run_native`/:func:`replayed_batches` on
Spark; the joins' benchmark is ``python -m bench.nexmark.queries.q8`` (throughput and latency beside
Spark's native stream-stream join, checked against the reference; ``--help``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from bench.nexmark.generator import Event
from bench.nexmark.query import Query, Settings, epoch_ms
from dataflow_kafka.joins.stage import JoinInput, WindowJoinStage, current_joins
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.watermarks import AfterCount, Repeatedly
from dataflow_kafka.windowing import GlobalWindow

__all__ = ["Q3", "PersonAuctionJoin", "join_batches", "run_ours", "run_native", "replayed_batches",
           "PERSON_DDL", "AUCTION_DDL"]

PERSON_DDL = ("id BIGINT, name STRING, emailAddress STRING, creditCard STRING, city STRING, state STRING, "
              "dateTime BIGINT, extra STRING")
AUCTION_DDL = ("id BIGINT, itemName STRING, description STRING, initialBid BIGINT, reserve BIGINT, dateTime BIGINT, "
               "expires BIGINT, seller BIGINT, category BIGINT, extra STRING")
JOIN_KINDS = ("person", "auction")
END_OF_TIME_MS = 253_402_300_799_999          # endOfInput=punctuate's punctuation


#: The fields the joins read, as flat columns of the source's rows (null on the other kind's rows):
#: ``{column: (kind, JSON field, Spark type)}``. Spark computes them in the JVM, one ``from_json`` per
#: record (:func:`with_fields`); ``run_local`` gets the same columns from pandas (:func:`fields_frame`).
FIELDS = {"p_id": ("person", "id", "bigint"), "p_name": ("person", "name", "string"),
          "p_city": ("person", "city", "string"), "p_state": ("person", "state", "string"),
          "a_id": ("auction", "id", "bigint"), "a_seller": ("auction", "seller", "bigint"),
          "a_reserve": ("auction", "reserve", "bigint"), "a_category": ("auction", "category", "bigint")}
_RECORD_DDL = ", ".join(dict.fromkeys(f"{f} {t.upper()}" for _, f, t in FIELDS.values()))


def _kind_of(topic: Any) -> str | None:
    """The event kind of a generator topic (``<prefix>-<kind>``)."""
    return topic.rsplit("-", 1)[-1] if isinstance(topic, str) else None


def with_fields(df, filters: Mapping[str, tuple[str, dict]]):
    """Spark: ``df`` (source rows) with the :data:`FIELDS` columns and a boolean column per filter
    (``{column: (kind, {field: allowed values})}``: a row of that kind whose fields are allowed)."""
    from pyspark.sql import functions as F

    rec = F.from_json(F.col("value").cast("string"), _RECORD_DDL)
    df = df.withColumn("_rec", F.when(F.col("kind") == "data", rec))
    is_kind = {k: F.coalesce(F.col("topic").endswith(f"-{k}"), F.lit(False)) for k in JOIN_KINDS}
    cols = {c: F.when(is_kind[k], F.col(f"_rec.{f}")) for c, (k, f, _) in FIELDS.items()}
    for c, (k, test) in filters.items():
        cond = is_kind[k] & (F.col("kind") == "data")
        for f, allowed in test.items():
            cond = cond & F.coalesce(F.col(f"_rec.{f}").isin(*allowed), F.lit(False))
        cols[c] = cond
    return df.withColumns(cols).drop("_rec")


def fields_frame(frame: pd.DataFrame, filters: Mapping[str, tuple[str, dict]]) -> pd.DataFrame:
    """pandas: :func:`with_fields` of a micro-batch of source rows."""
    if "kind" not in frame.columns:
        return frame
    cols: dict[str, list] = {c: [] for c in [*FIELDS, *filters]}
    for kind, topic, value in zip(frame["kind"], frame["topic"], frame.get("value", [None] * len(frame))):
        rec = json.loads(value) if kind == "data" and value is not None else None
        k = _kind_of(topic) if rec is not None else None
        for c, (ck, f, _) in FIELDS.items():
            cols[c].append(rec.get(f) if k == ck else None)
        for c, (ck, test) in filters.items():
            cols[c].append(k == ck and all(rec.get(f) in allowed for f, allowed in test.items()))
    return frame.assign(**{c: pd.Series(v, index=frame.index, dtype=object) for c, v in cols.items()})


def fields_types(filters: Mapping[str, Any]) -> dict[str, str]:
    """The Spark types of :func:`with_fields`' columns (``run_local(input_types=...)``)."""
    return {c: t for c, (_, _, t) in FIELDS.items()} | {c: "boolean" for c in filters} | {
        "kind": "string", "topic": "string", "value": "binary", "event_time_ms": "bigint"}


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
    def filters(self) -> dict[str, tuple[str, dict]]:
        """The boolean columns the inputs' ``where`` read: ``{column: (kind, {field: allowed})}``."""
        return {f"{self.name}_person": ("person", {}), f"{self.name}_auction": ("auction", {})}

    def spark(self, variant, source, settings=Settings()):
        self._check(variant)
        df = with_fields(epoch_ms(source), self.filters())
        return self.pipeline(variant, settings).apply(df, idle_timeout_ms=self.idle_timeout_ms)

    def local(self, variant, batches, settings=Settings()):
        self._check(variant)
        frames = [fields_frame(b, self.filters()) for b in batches]
        return self.pipeline(variant, settings).run_local(frames, idle_timeout_ms=self.idle_timeout_ms,
                                                          input_types=fields_types(self.filters()))

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

    def filters(self):
        return {"q3_person": ("person", {"state": self.states}), "q3_auction": ("auction", {"category": (self.category,)})}

    def join_stage(self, settings):
        persons = JoinInput("person", key={"id": "p_id"}, columns={"name": "p_name", "city": "p_city", "state": "p_state"},
                            where="q3_person")
        auctions = JoinInput("auction", key="a_seller", columns={"auction": "a_id"}, where="q3_auction")
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

def produce_in_order(bootstrap: str, prefix: str, events: Sequence[Event], partitions: int,
                     kinds: Sequence[str] = JOIN_KINDS, attempts: int = 3) -> dict[str, str]:
    """:func:`bench.nexmark.generator.produce` of the ``kinds`` events, checked: every partition
    must hold its events in arrival order (the producer runs without idempotence and, on a loaded
    broker, its retries reordered up to 282 of 16,000 records by up to 80 s, which no longer is
    "delayed up to 5 s"); otherwise produced again into new topics. Returns ``{kind: topic}``."""
    from bench.nexmark.generator import produce
    from dataflow_kafka.datasource.replay import read_topic

    arrival = {(e.kind, e.record["id"]): e.arrival_ms for e in events if e.kind in kinds}
    for attempt in range(attempts):
        topics = produce(bootstrap, f"{prefix}-{attempt}" if attempt else prefix, events, partitions, kinds=kinds)
        behind = 0
        for kind in kinds:
            newest: dict = {}
            for m in read_topic(bootstrap, topics[kind]):
                a = arrival[(kind, json.loads(m.value())["id"])]
                behind += a < newest.get(m.partition(), a)
                newest[m.partition()] = max(newest.get(m.partition(), a), a)
        if not behind:
            return topics
        print(f"produce: {behind} records behind an earlier arrival in their partition; produced again", flush=True)
    raise RuntimeError(f"the producer reordered records in {attempts} attempts")


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
    from dataflow_kafka.datasource.replay import offset_log, read_topic, source_batches

    records = [m for k in kinds for m in read_topic(bootstrap, topics[k])]
    frames = source_batches(records, checkpoint, batch_ids, "dateTime")
    for b, frame in zip(batch_ids, frames):
        if offset_log(checkpoint, b).get("eoi"):
            frame.loc[frame["kind"] == "punctuation", "punctuation_ms"] = END_OF_TIME_MS
    return frames


def native_dropped(progress: Sequence[dict]) -> int:
    """Rows Spark's join dropped as later than its watermark (its progress reports)."""
    return sum(int(op.get("numRowsDroppedByWatermark", 0)) for p in progress for op in p.get("stateOperators", []))


