"""Running a NEXMark query: on Spark over Kafka (ours, Spark's native form) and without Spark.

* :func:`run_ours`: ``format("dataflow-kafka")`` on the bid topic (event time ``dateTime``,
  ``endOfInput=punctuate`` so the last windows close), the query's variant given the source's
  reader (its tasks route and pack the first operator's rows, as the throughput harness runs
  it), Trigger.AvailableNow, every micro-batch's output collected as a pandas frame;
* :func:`run_native`: the query in Spark's API over ``format("kafka")`` (Spark's JVM connector,
  when its jars are on the session: :mod:`bench.spark_kafka`) or over the data rows of
  ``format("dataflow-kafka")``, append mode, Trigger.AvailableNow;
* :func:`replayed_batches`: the micro-batches a finished run of ours read, rebuilt from the
  records and its offset log, for :meth:`~bench.nexmark.query.Query.local` (the same batches);
* :func:`local_batches`: micro-batches of generated events as the source would make them
  (per partition: data in arrival order, then a punctuation at the newest event time), the last
  one punctuating to the end of time, without Kafka or Spark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import pandas as pd

from bench.nexmark.generator import Event
from bench.nexmark.query import Query, Settings, parse_bids

__all__ = ["FrameCollector", "Run", "run_ours", "run_native", "replayed_batches", "local_batches", "source_options",
           "final_watermark_ms", "run_available_now"]

#: ``endOfInput=punctuate``'s punctuation: the end of time (``datasource.kafka_read.MAX_EVENT_MS``)
END_OF_TIME_MS = 253_402_300_799_999


class FrameCollector:
    """``foreachBatch`` function keeping each batch's rows as a pandas frame (a replay overwrites)."""

    def __init__(self) -> None:
        self.frames: dict[int, pd.DataFrame] = {}

    def __call__(self, df, batch_id: int) -> None:
        self.frames[batch_id] = df.toPandas()

    def ordered(self) -> list[pd.DataFrame]:
        return [self.frames[b] for b in sorted(self.frames)]


@dataclass
class Run:
    """A finished streaming run: output frames per batch, wall time, Spark's progress reports."""

    frames: list[pd.DataFrame]
    batch_ids: list[int]
    seconds: float
    progress: list[dict] = field(default_factory=list)

    def dropped_by_watermark(self) -> int:
        """Rows Spark's stateful operators dropped as later than its watermark (native runs)."""
        return sum(int(op.get("numRowsDroppedByWatermark", 0)) for p in self.progress
                   for op in p.get("stateOperators", []))


def final_watermark_ms(progress: Sequence[dict]) -> int | None:
    """Spark's event-time watermark after the last of these progress reports (epoch ms), or None."""
    marks = [p.get("eventTime", {}).get("watermark") for p in progress]
    marks = [m for m in marks if m]
    return int(pd.Timestamp(marks[-1]).value // 1_000_000) if marks else None


def source_options(bootstrap: str, topic: str, max_offsets: int | None) -> dict[str, str]:
    """Our source's options for a bounded NEXMark run over ``topic``."""
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "dateTime", "endOfInput": "punctuate"}
    if max_offsets:
        opts["maxOffsetsPerTrigger"] = str(max_offsets)
    return opts


def _reader(spark, fmt: str, options: dict[str, str]):
    reader = spark.readStream.format(fmt)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


def _read(spark, fmt: str, options: dict[str, str]):
    return _reader(spark, fmt, options).load()


def run_available_now(out_df, checkpoint: str, sink, timeout_s: float, on_end=None):
    """Run ``out_df`` with Trigger.AvailableNow into ``foreachBatch(sink)`` until it ends (``on_end()``
    then, however it ended); the finished query. A failed query or a timeout raises."""
    q = out_df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    try:
        finished = q.awaitTermination(timeout_s)
    finally:
        if q.isActive:
            q.stop()
        if on_end is not None:
            on_end()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    if not finished:
        raise TimeoutError(f"query did not finish within {timeout_s:.0f} s")
    return q


def _run(out_df, checkpoint: str, timeout_s: float) -> Run:
    got = FrameCollector()
    t0 = time.monotonic()
    q = run_available_now(out_df, checkpoint, got, timeout_s)
    seconds = time.monotonic() - t0
    return Run(got.ordered(), sorted(got.frames), seconds, [dict(p) for p in q.recentProgress])


def run_ours(spark, bootstrap: str, topic: str, query: Query, variant: str, checkpoint: str,
             settings: Settings = Settings(), max_offsets: int | None = None, timeout_s: float = 600) -> Run:
    """``query``'s ``variant`` over ``format("dataflow-kafka")``; see the module docstring."""
    reader = _reader(spark, "dataflow-kafka", source_options(bootstrap, topic, max_offsets))
    source = reader if type(query).spark is Query.spark else reader.load()    # a stage pipeline takes the reader
    return _run(query.spark(variant, source, settings), checkpoint, timeout_s)


def run_native(spark, bootstrap: str, topic: str, query: Query, delay: str, checkpoint: str,
               connector: str = "kafka", max_offsets: int | None = None, timeout_s: float = 600) -> Run:
    """``query``'s Spark-native form with ``withWatermark(delay)``, over ``format(connector)``
    (``"kafka"``: Spark's connector; ``"dataflow-kafka"``: our source's data rows)."""
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    if max_offsets:
        opts["maxOffsetsPerTrigger"] = str(max_offsets)
    if connector == "dataflow-kafka":
        opts["eventTimeField"] = "dateTime"
    bids = parse_bids(_read(spark, connector, opts), with_kind=connector == "dataflow-kafka")
    return _run(query.native(bids, delay), checkpoint, timeout_s)


def replayed_batches(bootstrap: str, topic: str, checkpoint: str, batch_ids: Sequence[int]) -> list[pd.DataFrame]:
    """The source's micro-batches of a finished run of ours, rebuilt from the topic's records and
    the run's offset log (``dataflow_kafka.datasource.replay.source_batches``), with ``endOfInput``'s punctuation on
    the batch the log marks ``eoi``."""
    from dataflow_kafka.datasource.replay import offset_log, read_topic, source_batches

    frames = source_batches(read_topic(bootstrap, topic), checkpoint, batch_ids, "dateTime")
    for b, frame in zip(batch_ids, frames):
        if offset_log(checkpoint, b).get("eoi"):
            frame.loc[frame["kind"] == "punctuation", "punctuation_ms"] = END_OF_TIME_MS
    return frames


def local_batches(events: Sequence[Event], per_batch: int, kind: str = "bid", partitions: int = 4,
                  topic: str = "bid") -> list[pd.DataFrame]:
    """Micro-batches of the ``kind`` events as the source makes them from a topic where each
    partition holds its events in arrival order: per batch about ``per_batch`` records (split
    evenly over the partitions), per partition its data rows then one punctuation row (the
    newest event time read from it so far); the last batch punctuates to the end of time."""
    parts: list[list[Event]] = [[] for _ in range(partitions)]
    for e in events:
        if e.kind == kind:
            parts[e.partition % partitions].append(e)
    take = max(1, per_batch // partitions)
    n_batches = max(1, max((len(p) + take - 1) // take for p in parts))
    newest: list[int | None] = [None] * partitions
    frames = []
    for b in range(n_batches):
        rows = []
        last = b == n_batches - 1
        for p, evs in enumerate(parts):
            lo, hi = b * take, len(evs) if last else min(len(evs), (b + 1) * take)
            for off in range(lo, hi):
                e = evs[off]
                newest[p] = e.ts_ms if newest[p] is None else max(newest[p], e.ts_ms)
                rows.append({"kind": "data", "topic": topic, "partition": p, "offset": off, "key": None,
                             "value": e.value(), "event_time_ms": e.ts_ms, "processing_time_ms": b})
            rows.append({"kind": "punctuation", "topic": topic, "partition": p, "offset": max(lo, hi),
                         "punctuation_ms": END_OF_TIME_MS if last else newest[p], "processing_time_ms": b})
        frames.append(pd.DataFrame(rows))
    return frames
