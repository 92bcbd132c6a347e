"""A query's micro-batches again, without Spark: collect what a ``foreachBatch`` sink saw, and
rebuild the source's micro-batches from the records and the query's offset log.

Everything a micro-batch of ``format("dataflow-kafka")`` holds is in its offset-log entry (the
ranges, the newest event time before each, the modifications, the processing time, the end of
input) and in the records of those ranges (:mod:`dataflow_kafka.datasource.source`). So the
frames :func:`source_batches` builds are the reference input of ``Pipeline.run_local`` for the
same batches: what a Spark run and a local run of one pipeline are compared on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

from dataflow_kafka.datasource import kafka_read
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["BatchCollector", "offset_log", "source_batches", "read_topic"]


class BatchCollector:
    """A ``foreachBatch`` sink keeping the rows of the latest attempt of every batch id (a replayed
    batch overwrites its first attempt)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[dict]] = {}

    def __call__(self, df, batch_id: int) -> None:
        self.batches[batch_id] = [r.asDict(recursive=True) for r in df.collect()]

    def rows(self, kind: str | None = None) -> list[dict]:
        """Every row in batch order, with its ``batch`` id; only rows of ``kind`` if given."""
        return [dict(r, batch=b) for b in sorted(self.batches) for r in self.batches[b]
                if kind is None or r["kind"] == kind]


def read_topic(kafka: str | Mapping[str, str], topic: str) -> list:
    """Every record of ``topic`` (all partitions, log start to high watermark), as consumer
    messages. ``kafka``: a bootstrap address or librdkafka settings."""
    conf = {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)
    c = kafka_read.consumer(conf)
    try:
        md = kafka_read.list_topics(c, topic).topics[topic]
        out = []
        for p in sorted(md.partitions):
            low, high = kafka_read.watermarks(c, topic, p)   # retried: a broker just restarted
            for msgs, _ in kafka_read.fetch_range(c, topic, p, low, high, 30_000, True):
                out += msgs
        return out
    finally:
        c.close()


def _source_lines(checkpoint: str, batch_id: int) -> list[str]:
    """The offset log's per-source lines of ``batch_id`` (after the version and metadata lines)."""
    return (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()[2:]


def offset_log(checkpoint: str, batch_id: int, topic: str | None = None) -> dict:
    """A source's entry in the offset log of ``batch_id``: the last one (a query's one source), or
    with ``topic`` that of the source reading ``topic`` (a query with several sources). Spark logs
    a source that did not move in a batch with its previous end offset again, and reads nothing
    from it in that batch: such an entry comes back with no partitions (no rows, no punctuation)."""
    lines = _source_lines(checkpoint, batch_id)
    if topic is None:
        return json.loads(lines[-1])
    mine = [ln for ln in lines if ln.startswith("{") and topic in json.loads(ln).get("partitions", {})]
    if not mine:
        raise InvalidArgumentError(f"batch {batch_id} of {checkpoint}: no source reads topic {topic!r}")
    entry = json.loads(mine[0])
    previous = Path(checkpoint) / "offsets" / str(batch_id - 1)
    if len(lines) > 1 and previous.exists() and mine[0] in _source_lines(checkpoint, batch_id - 1):
        entry["partitions"] = {}
    return entry


def source_batches(records: Iterable, checkpoint: str, batch_ids: Iterable[int], event_time_field: str | None = "ts",
                   delay_ms: int = 0, topic: str | None = None):
    """The source's micro-batches of a finished query, rebuilt from the records
    (:func:`read_topic`) and the query's offset log: per batch, modification rows (one copy per
    partition), data rows in offset order, one punctuation row per partition
    (``max(p, newest in range) - delay``, or the end of time in a batch that ended the input), as
    frames of the row contract with epoch-ms columns. ``topic``: the source reading it (several
    sources: each source's batches, :func:`offset_log`), its partitions only."""
    import pandas as pd

    by_tp: dict = {}
    for m in records:
        by_tp.setdefault((m.topic(), m.partition()), {})[m.offset()] = m
    frames = []
    for b in batch_ids:
        log = offset_log(checkpoint, b, topic)
        pt = log["batchTimeMs"]
        rows = []
        parts = [(t, int(p), e) for t, ps in log["partitions"].items() for p, e in ps.items()
                 if topic is None or t == topic]
        mods = sorted(log.get("mods", {}).values(), key=lambda m: m["offset"])
        for t, p, e in sorted(parts):
            for m in mods:
                rows.append({"kind": "modification", "topic": t, "partition": p, "offset": e["s"],
                             "modification": m["value"], "control_offset": m["offset"],
                             "processing_time_ms": pt})
            newest = e.get("p")
            for off in range(e["s"], e["o"]):
                m = by_tp[(t, p)][off]
                ts = m.timestamp()[1] if event_time_field is None else json.loads(m.value())[event_time_field]
                newest = ts if newest is None else max(newest, ts)
                rows.append({"kind": "data", "topic": t, "partition": p, "offset": off, "key": m.key(),
                             "value": m.value(), "event_time_ms": ts, "processing_time_ms": pt})
            punctuation = kafka_read.MAX_EVENT_MS if log.get("eoi") else None if newest is None else newest - delay_ms
            rows.append({"kind": "punctuation", "topic": t, "partition": p, "offset": e["o"],
                         "punctuation_ms": punctuation, "processing_time_ms": pt})
        frames.append(pd.DataFrame(rows))
    return frames
