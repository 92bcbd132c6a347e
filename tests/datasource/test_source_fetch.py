"""``kafka_read.fetch_range`` on a real broker: offset ranges, data loss, and the log's bounds
asked for only when a read does not begin at its start offset, in each of its forms (messages;
columns of ``Consumer.consume``'s messages, with the garbage collector held off while they are
built; columns of the C reader, ``kafka_read.column_reader``) (broker, no JVM)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from dataflow_kafka.datasource import kafka_read


@pytest.fixture
def consumer(kafka):
    c = kafka_read.consumer({"bootstrap.servers": kafka.bootstrap})
    yield c
    c.close()


def _use_c_reader(monkeypatch, use: bool) -> None:
    """Columns through the C reader or through ``Consumer.consume``'s messages, for this test."""
    monkeypatch.setenv("DATAFLOW_KAFKA_C_READER", "1" if use else "0")
    kafka_read.column_reader.cache_clear()
    assert (kafka_read.column_reader() is not None) == use, "the C reader (_rdcolumns) was not built: make setup"


@pytest.fixture(params=["messages", "columns", "columns-c"])
def columns(request, monkeypatch):
    """The read's form: messages, or columns (of ``Consumer.consume``'s messages, or of the C reader)."""
    _use_c_reader(monkeypatch, request.param == "columns-c")
    yield request.param != "messages"
    kafka_read.column_reader.cache_clear()


@pytest.fixture(params=[False, True], ids=["consume", "c"])
def c_reader(request, monkeypatch):
    _use_c_reader(monkeypatch, request.param)
    yield request.param
    kafka_read.column_reader.cache_clear()


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


def _read(c, topic, start, end, fail=False, columns=False):
    offsets, notes = [], []
    for chunk, note in kafka_read.fetch_range(c, topic, 0, start, end, 30_000, fail, columns=columns):
        offsets += chunk.offsets.tolist() if columns else [m.offset() for m in chunk]
        notes += [note] if note else []
    return offsets, notes


def test_a_range_inside_the_log_needs_no_round_trip_for_its_bounds(kafka, consumer, calls, columns):
    topic = _truncated_topic(kafka, log_start=0)
    for start, end in ((0, 100), (10, 40), (40, 100), (0, 100)):   # one consumer, reassigned
        assert _read(consumer, topic, start, end) == (list(range(start, end)), [])
    assert calls == []
    assert consumer.assignment() == []


def test_offsets_deleted_before_the_range_start(kafka, consumer, calls, columns):
    topic = _truncated_topic(kafka)
    with pytest.raises(kafka_read.DataLossError,
                       match=r"offsets \[20, 60\) are no longer on the broker \(log start 60, end 100\).*"
                             r"set failOnDataLoss=false"):
        _read(consumer, topic, 20, 80, fail=True, columns=columns)
    offsets, notes = _read(consumer, topic, 20, 80, columns=columns)
    assert offsets == list(range(60, 80))
    assert len(notes) == 1 and "offsets [20, 60) are no longer on the broker" in notes[0]
    assert "skipped (failOnDataLoss=false)" in notes[0]
    offsets, notes = _read(consumer, topic, 10, 50, columns=columns)                  # the whole range is gone
    assert offsets == [] and len(notes) == 1 and "offsets [10, 50) are no longer" in notes[0]
    assert _read(consumer, topic, 60, 100, columns=columns) == (list(range(60, 100)), [])
    assert len(calls) == 3                                            # only the reads that did not begin at start


def test_ranges_past_the_log_end(kafka, consumer, columns):
    topic = _truncated_topic(kafka, log_start=0)
    offsets, notes = _read(consumer, topic, 150, 160, columns=columns)                 # starts beyond the end
    assert offsets == [] and "offsets [150, 160) are no longer on the broker (log start 0, end 100)" in notes[0]
    offsets, notes = _read(consumer, topic, 90, 120, columns=columns)                  # ends beyond it
    assert offsets == list(range(90, 100))
    assert notes == [f"{topic}-0: offsets [100, 120) are gone (log end is now 100); skipped (failOnDataLoss=false)"]
    with pytest.raises(kafka_read.DataLossError, match=r"offsets \[100, 120\) are gone"):
        _read(consumer, topic, 90, 120, fail=True, columns=columns)
    with pytest.raises(kafka_read.DataLossError, match=r"offsets \[100, 120\) are gone"):
        _read(consumer, topic, 100, 120, fail=True, columns=columns)                   # begins at the log end


def test_columns_hold_what_the_messages_hold(kafka, consumer, c_reader):
    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": None if i % 7 == 0 else b"v%d" % i, "key": b"k%d" % i if i % 3 else None,
                           "timestamp": 1_700_000_000_000 + i, "partition": 0,
                           "headers": [("h", b"%d" % i)] if i % 5 == 0 else None} for i in range(50)])
    messages = [m for msgs, _ in kafka_read.fetch_range(consumer, topic, 0, 3, 47, 30_000, True) for m in msgs]
    chunks = [c for c, _ in kafka_read.fetch_range(consumer, topic, 0, 3, 47, 30_000, True, columns=True)]
    assert all(isinstance(c, kafka_read.RecordColumns) for c in chunks)
    assert [m.offset() for m in messages] == np.concatenate([c.offsets for c in chunks]).tolist() == list(range(3, 47))
    assert [m.key() for m in messages] == [k for c in chunks for k in c.keys.to_pylist()]
    assert [m.value() for m in messages] == [v for c in chunks for v in c.values.to_pylist()]
    assert [list(m.timestamp()) for m in messages] == np.concatenate([c.timestamps for c in chunks]).tolist()
    assert [m.headers() for m in messages] == [h for c in chunks for h in c.headers]
    picked = chunks[0].take([2, 0])
    assert picked.offsets.tolist() == [5, 3] and picked.values.to_pylist() == [b"v5", b"v3"]
    assert picked.headers[0] == [("h", b"5")]


def test_the_columns_form_keeps_the_collector_off_its_messages(kafka, consumer, c_reader):
    """A poll's messages (tracked by Python's cyclic garbage collector) never meet a collection:
    they are turned into columns and freed while it is held off, and the collector is on again
    between polls (without the pause this read ran 56 collections)."""
    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": b'{"t":%d}' % i, "partition": 0} for i in range(40_000)])
    seen = []

    def count(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    for _ in kafka_read.fetch_range(consumer, topic, 0, 0, 10, 30_000, True, columns=True):
        pass   # the consumer's first fetch, outside the count
    gc.collect()
    gc.callbacks.append(count)
    try:
        enabled_between_polls = []
        for chunk, _ in kafka_read.fetch_range(consumer, topic, 0, 0, 40_000, 30_000, True, columns=True):
            enabled_between_polls.append(gc.isenabled())
    finally:
        gc.callbacks.remove(count)
    assert enabled_between_polls and all(enabled_between_polls)
    assert seen.count(2) == 0 and len(seen) <= 2 * len(enabled_between_polls), seen



def test_the_c_reader_polls_only_an_open_consumer(kafka):
    """``_rdcolumns.consume`` reads librdkafka's handle out of the object it is given: anything but
    a confluent_kafka consumer, or a closed one, is refused before it is touched."""
    from confluent_kafka import Producer

    poll = kafka_read.column_reader()
    assert poll is not None, "the C reader (_rdcolumns) was not built: make setup"
    with pytest.raises(TypeError, match="not a confluent_kafka.Consumer"):
        poll(object(), 10, 0, 100)
    with pytest.raises(TypeError, match="not a confluent_kafka.Consumer"):
        poll(Producer({"bootstrap.servers": kafka.bootstrap}), 10, 0, 100)
    c = kafka_read.consumer({"bootstrap.servers": kafka.bootstrap})
    assert poll(c, 10, 0, 100) == (0, None, [], (0, b"", b"", (b"", b"\0\0\0\0", None, 0), (b"", b"\0\0\0\0", None, 0), []))
    c.close()
    with pytest.raises(RuntimeError, match="Consumer closed"):
        poll(c, 10, 0, 100)


def test_a_confluent_kafka_the_c_reader_was_not_checked_against_reads_through_consume(monkeypatch, caplog):
    """The C reader reads confluent_kafka's C consumer object, so another major version falls back
    to ``Consumer.consume``, and the log says why (once per process)."""
    import logging

    monkeypatch.setattr(kafka_read, "_C_READER_VERSIONS", ("999.",))
    monkeypatch.delenv("DATAFLOW_KAFKA_C_READER", raising=False)
    kafka_read.column_reader.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger=kafka_read.__name__):
            assert kafka_read.column_reader() is None
        assert "not one it was checked against (999.x)" in caplog.text
    finally:
        kafka_read.column_reader.cache_clear()
