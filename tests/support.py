"""Test support: Kafka helpers and streaming-query helpers shared by the test packages."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path


def own_broker_kind() -> str:
    """The kind of broker a test starts for itself (to stop, kill or restart it): the embedded
    default, Apache Kafka, unless ``DATAFLOW_KAFKA_EMBEDDED`` picks a development broker."""
    return os.environ.get("DATAFLOW_KAFKA_EMBEDDED") or "kafka"


class KafkaHelper:
    """Topic creation and producing for tests (recent timestamps: retention by record time)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def topic(self, partitions: int = 4, prefix: str = "t") -> str:
        from confluent_kafka.admin import AdminClient, NewTopic

        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            f.result(15)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            md = admin.list_topics(name, timeout=5).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions:
                return name
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} not visible")

    def produce(self, topic: str, records, **conf) -> None:
        """``records``: iterable of dicts with value, and optional key, partition, timestamp, headers."""
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **conf})
        errors = []
        for r in records:
            kw = {k: r[k] for k in ("key", "partition", "timestamp", "headers") if r.get(k) is not None}
            while True:
                try:
                    p.produce(topic, value=r.get("value"), on_delivery=lambda e, m: e and errors.append(e), **kw)
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(30) == 0
        assert not errors, errors

    def consume_all(self, topic: str) -> list:
        """Every record of ``topic`` from offset 0 to the high watermark."""
        from datasource import kafka_read

        c = kafka_read.consumer({"bootstrap.servers": self.bootstrap})
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


def now_ms() -> int:
    return int(time.time() * 1000)


class BatchCollector:
    """foreachBatch sink keeping the latest attempt of every batch id (a replay overwrites)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[dict]] = {}

    def __call__(self, df, batch_id: int) -> None:
        self.batches[batch_id] = [r.asDict(recursive=True) for r in df.collect()]

    def rows(self, kind: str | None = None) -> list[dict]:
        return [dict(r, batch=b) for b in sorted(self.batches) for r in self.batches[b]
                if kind is None or r["kind"] == kind]


def run_available_now(spark, options: dict, checkpoint: str, collector: BatchCollector, timeout_s: int = 240):
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load().writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    finished = q.awaitTermination(timeout_s)
    if not finished:
        q.stop()
        raise AssertionError(f"query did not finish within {timeout_s}s")
    if q.exception() is not None:
        raise q.exception()
    return q


def forget_batches_from(checkpoint: str, batch_id: int) -> None:
    """Simulate a crash during ``batch_id``: drop its commit and every later offset and commit."""
    root = Path(checkpoint)
    for sub in ("commits", "offsets"):
        for f in (root / sub).iterdir():
            if f.name.isdigit() and (int(f.name) > batch_id or (sub == "commits" and int(f.name) >= batch_id)):
                f.unlink()
        for f in (root / sub).glob(".*.crc"):
            f.unlink()


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
        raise ValueError(f"batch {batch_id} of {checkpoint}: no source reads topic {topic!r}")
    entry = json.loads(mine[0])
    previous = Path(checkpoint) / "offsets" / str(batch_id - 1)
    if len(lines) > 1 and previous.exists() and mine[0] in _source_lines(checkpoint, batch_id - 1):
        entry["partitions"] = {}
    return entry


def source_batches(records, checkpoint: str, batch_ids, event_time_field: str | None = "ts",
                   delay_ms: int = 0, topic: str | None = None):
    """The source's micro-batches of a finished query, rebuilt without Spark from the records
    (``kafka.consume_all``) and the query's offset log: per batch, modification rows (one copy per
    partition), data rows in offset order, one punctuation row per partition
    (``max(p, newest in range) - delay``), as frames of the row contract with epoch-ms columns.
    The reference input of a pipeline's ``run_local``. ``topic``: the source reading it (several
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
                if event_time_field is None:
                    ts = m.timestamp()[1]
                else:
                    ts = json.loads(m.value())[event_time_field]
                newest = ts if newest is None else max(newest, ts)
                rows.append({"kind": "data", "topic": t, "partition": p, "offset": off, "key": m.key(),
                             "value": m.value(), "event_time_ms": ts, "processing_time_ms": pt})
            rows.append({"kind": "punctuation", "topic": t, "partition": p, "offset": e["o"],
                         "punctuation_ms": None if newest is None else newest - delay_ms,
                         "processing_time_ms": pt})
        frames.append(pd.DataFrame(rows))
    return frames
