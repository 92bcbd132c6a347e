"""The range-stats side channel and the driver's ``p`` (broker, no JVM: the stream reader's
driver methods and the tasks' ``read`` are plain Python)."""

from __future__ import annotations

import contextlib
import json

import pytest

from dataflow_kafka.datasource import kafka_read, range_stats
from dataflow_kafka.datasource.options import parse_source_options
from dataflow_kafka.datasource.source import DataflowKafkaStreamReader, _stats_field
from pyspark.sql.streaming.datasource import ReadAllAvailable
from tests.support import now_ms


@pytest.fixture(autouse=True, scope="module")
def _close_stats_producers():
    yield
    range_stats.close_producers()   # the tasks here run in this process
    kafka_read.close_pooled_consumers()


def _reader(kafka, topic: str, stats_topic: str) -> DataflowKafkaStreamReader:
    return DataflowKafkaStreamReader(parse_source_options(
        {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
         "eventTimeField": "ts", "rangeStatsTopic": stats_topic}, streaming=True))


def _produce(kafka, topic: str, times: list[int]) -> None:
    kafka.produce(topic, [{"value": json.dumps({"ts": t}).encode(), "partition": 0} for t in times])


@contextlib.contextmanager
def _query(kafka, stats_topic: str | None):
    """A fresh one-partition topic, a stream reader on it (stats topic: new, or ``""`` = off),
    its initial offset and a base event time."""
    topic = kafka.topic(1)
    reader = _reader(kafka, topic, kafka.topic(1, prefix="stats") if stats_topic is None else stats_topic)
    try:
        yield topic, reader, reader.initialOffset(), now_ms() - 10_000
    finally:
        reader.stop()


def _run_batch(reader: DataflowKafkaStreamReader, start: dict) -> tuple[dict, list[int | None]]:
    """Plan one batch from ``start`` and run its tasks; returns the end offset and punctuations."""
    end = reader.latestOffset(start, ReadAllAvailable())
    puncts = []
    for task in reader.partitions(start, end):
        for rb in reader.read(task):
            rows = rb.to_pylist()
            puncts += [r["punctuation"] for r in rows if r["kind"] == "punctuation"]
    return end, [None if p is None else int(p.timestamp() * 1000) for p in puncts]


def test_tasks_leave_range_stats_and_the_driver_uses_them(kafka):
    with _query(kafka, None) as (topic, reader, start, base):
        stats = reader.opts.range_stats_topic
        _produce(kafka, topic, [base + 5, base + 30, base + 10])
        end1, p1 = _run_batch(reader, start)
        assert p1 == [base + 30]                             # newest in the range, grace 0
        key = range_stats.range_key(topic, 0, 0, 3, _stats_field(reader.opts, end1["batchTimeMs"]), reader.opts.kafka)
        entries = {m.key(): json.loads(m.value()) for m in kafka.consume_all(stats)}
        assert entries == {key: {"newest_ms": base + 30}}
        # The driver takes the next offset's p from the entry, not from the records: a forged
        # entry for the range shows it (a real entry always equals the records' value).
        kafka.produce(stats, [{"key": key, "value": json.dumps({"newest_ms": base + 999}).encode()}])
        _produce(kafka, topic, [base + 20])
        end2, p2 = _run_batch(reader, end1)
        assert end2["partitions"][topic]["0"] == {"o": 4, "s": 3, "p": base + 999}
        assert p2 == [base + 999]


def test_without_stats_the_driver_scans_the_range(kafka):
    with _query(kafka, "") as (topic, reader, start, base):
        _produce(kafka, topic, [base + 5, base + 30, base + 10])
        end1, p1 = _run_batch(reader, start)
        _produce(kafka, topic, [base + 20])
        end2, p2 = _run_batch(reader, end1)
        assert end2["partitions"][topic]["0"] == {"o": 4, "s": 3, "p": base + 30}
        assert (p1, p2) == ([base + 30], [base + 30])        # monotone: max(p, newest in range)


def test_a_missing_entry_falls_back_to_a_scan(kafka):
    with _query(kafka, None) as (topic, reader, start, base):
        _produce(kafka, topic, [base + 5, base + 30])
        end1 = reader.latestOffset(start, ReadAllAvailable())   # planned, but no task ran
        _produce(kafka, topic, [base + 1])
        end2 = reader.latestOffset(end1, ReadAllAvailable())
        assert end2["partitions"][topic]["0"] == {"o": 3, "s": 2, "p": base + 30}


def _available_now_run(reader, start: dict, max_rows: int, batches: int) -> list[dict]:
    """Plan and read ``batches`` Trigger.AvailableNow batches of at most ``max_rows`` records."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    reader.prepareForTriggerAvailableNow()
    ends, offset = [], start
    for _ in range(batches):
        offset = reader.latestOffset(offset, ReadMaxRows(max_rows))
        for task in reader.partitions(ends[-1] if ends else start, offset):
            list(reader.read(task))
        ends.append(offset)
    return ends


def test_available_now_last_batch_leaves_no_stats(kafka):
    """Range stats serve the next batch's planning: under Trigger.AvailableNow the tasks of the
    last batch write none (no batch of the run follows), those of earlier batches do."""
    with _query(kafka, None) as (topic, reader, start, base):
        stats = reader.opts.range_stats_topic
        _produce(kafka, topic, [base + 5, base + 30, base + 10])
        ends = _available_now_run(reader, start, 2, 2)
        assert [e["partitions"][topic]["0"]["o"] for e in ends] == [2, 3]
        field = _stats_field(reader.opts, ends[0]["batchTimeMs"])
        entries = {m.key() for m in kafka.consume_all(stats)}
        assert entries == {range_stats.range_key(topic, 0, 0, 2, field, reader.opts.kafka)}


def test_a_run_after_available_now_scans_the_last_range_once(kafka, caplog):
    """A query restarted after an AvailableNow run finds no entry for that run's last range: it
    scans that range (the right ``p``) without concluding that the side channel fails, and takes
    the next ranges from the entries its tasks leave again."""
    with _query(kafka, None) as (topic, first, start, base):
        _produce(kafka, topic, [base + 5, base + 30, base + 10])
        (end1,) = _available_now_run(first, start, 10, 1)
        stats = first.opts.range_stats_topic
        second = _reader(kafka, topic, stats)
        try:
            _produce(kafka, topic, [base + 20])
            with caplog.at_level("WARNING", logger="dataflow_kafka.datasource.source"):
                end2, p2 = _run_batch(second, end1)
            assert end2["partitions"][topic]["0"] == {"o": 4, "s": 3, "p": base + 30}   # scanned
            assert p2 == [base + 30]
            assert not [r for r in caplog.records if "range stats" in r.getMessage()]
            assert not second._scans                              # no background scans started
            key = range_stats.range_key(topic, 0, 3, 4, _stats_field(second.opts, end2["batchTimeMs"]),
                                        second.opts.kafka)
            kafka.produce(stats, [{"key": key, "value": json.dumps({"newest_ms": base + 999}).encode()}])
            _produce(kafka, topic, [base + 21])
            end3, _ = _run_batch(second, end2)
            assert end3["partitions"][topic]["0"]["p"] == base + 999   # from the entry, not a scan
        finally:
            second.stop()


def test_the_driver_asks_for_the_stats_topics_partitions_once(kafka, monkeypatch):
    """Each batch's lookups read the entries written since the last, without asking for the stats
    topic's metadata again; a key not found asks again (partitions may have been added)."""
    conf = {"bootstrap.servers": kafka.bootstrap}
    stats = range_stats.RangeStats(conf, kafka.topic(1, prefix="stats"), 30_000)
    assert stats.ensure_topic() is None
    asked = []
    real = kafka_read.list_topics
    monkeypatch.setattr(kafka_read, "list_topics", lambda *a, **k: asked.append(a[1:]) or real(*a, **k))
    try:
        for batch in range(4):
            key = range_stats.range_key("t", 0, batch * 10, batch * 10 + 10, "ts", conf)
            assert range_stats.publish(conf, stats.topic, key, 1_000 + batch)
            assert stats.get(key) == (True, 1_000 + batch)
        assert len(asked) == 1
        assert stats.get(range_stats.range_key("t", 0, 99, 100, "ts", conf)) == (False, None)
        assert len(asked) == 2
    finally:
        stats.close()
        range_stats.close_producers()
