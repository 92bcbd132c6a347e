"""``kafka_read.fetch_range`` on a real broker: offset ranges, data loss, and the log's bounds
asked for only when a read does not begin at its start offset (broker, no JVM)."""

from __future__ import annotations

import pytest

from dataflow_kafka.datasource import kafka_read


@pytest.fixture
def consumer(kafka):
    c = kafka_read.consumer({"bootstrap.servers": kafka.bootstrap})
    yield c
    c.close()


@pytest.fixture
def calls(monkeypatch):
    """Count the round trips for the log's bounds."""
    counted = []
    real = kafka_read.watermarks

    def watermarks(*args, **kwargs):
        counted.append(args[1:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(kafka_read, "watermarks", watermarks)
    return counted


def _truncated_topic(kafka, n: int = 100, log_start: int = 60) -> str:
    """A one-partition topic with offsets [0, n), of which [0, log_start) were deleted."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": 0} for i in range(n)])
    if log_start:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for f in admin.delete_records([TopicPartition(topic, 0, log_start)]).values():
            f.result(10)
    return topic


def _read(c, topic, start, end, fail=False):
    offsets, notes = [], []
    for msgs, note in kafka_read.fetch_range(c, topic, 0, start, end, 30_000, fail):
        offsets += [m.offset() for m in msgs]
        notes += [note] if note else []
    return offsets, notes


def test_a_range_inside_the_log_needs_no_round_trip_for_its_bounds(kafka, consumer, calls):
    topic = _truncated_topic(kafka, log_start=0)
    for start, end in ((0, 100), (10, 40), (40, 100), (0, 100)):   # one consumer, reassigned
        assert _read(consumer, topic, start, end) == (list(range(start, end)), [])
    assert calls == []
    assert consumer.assignment() == []


def test_offsets_deleted_before_the_range_start(kafka, consumer, calls):
    topic = _truncated_topic(kafka)
    with pytest.raises(kafka_read.DataLossError,
                       match=r"offsets \[20, 60\) are no longer on the broker \(log start 60, end 100\).*"
                             r"set failOnDataLoss=false"):
        _read(consumer, topic, 20, 80, fail=True)
    offsets, notes = _read(consumer, topic, 20, 80)
    assert offsets == list(range(60, 80))
    assert len(notes) == 1 and "offsets [20, 60) are no longer on the broker" in notes[0]
    assert "skipped (failOnDataLoss=false)" in notes[0]
    offsets, notes = _read(consumer, topic, 10, 50)                  # the whole range is gone
    assert offsets == [] and len(notes) == 1 and "offsets [10, 50) are no longer" in notes[0]
    assert _read(consumer, topic, 60, 100) == (list(range(60, 100)), [])
    assert len(calls) == 3                                            # only the reads that did not begin at start


def test_ranges_past_the_log_end(kafka, consumer):
    topic = _truncated_topic(kafka, log_start=0)
    offsets, notes = _read(consumer, topic, 150, 160)                 # starts beyond the end
    assert offsets == [] and "offsets [150, 160) are no longer on the broker (log start 0, end 100)" in notes[0]
    offsets, notes = _read(consumer, topic, 90, 120)                  # ends beyond it
    assert offsets == list(range(90, 100))
    assert notes == [f"{topic}-0: offsets [100, 120) are gone (log end is now 100); skipped (failOnDataLoss=false)"]
    with pytest.raises(kafka_read.DataLossError, match=r"offsets \[100, 120\) are gone"):
        _read(consumer, topic, 90, 120, fail=True)
    with pytest.raises(kafka_read.DataLossError, match=r"offsets \[100, 120\) are gone"):
        _read(consumer, topic, 100, 120, fail=True)                   # begins at the log end
