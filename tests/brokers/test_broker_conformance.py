"""Kafka behaviour the dataflow-kafka source and sink rely on, checked against the broker.

Runs unchanged against any bootstrap address: ``KAFKA_BOOTSTRAP_SERVERS=host:9092 pytest
tests/brokers`` (a Kafka cluster of yours), the embedded Apache Kafka (the default), or a
development broker (``DATAFLOW_KAFKA_EMBEDDED=noida-db`` or ``tansu``). ``make conformance`` runs it against every embedded candidate; the README records
the results and the choice.
"""

from __future__ import annotations

import time

import pytest

from tests.support import KafkaHelper


def _consumer(bootstrap):
    from dataflow_kafka.datasource import kafka_read

    return kafka_read.consumer({"bootstrap.servers": bootstrap})


def _wm(c, topic, p):
    from confluent_kafka import TopicPartition

    return c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)


def test_topic_creation_with_partitions(kafka):
    topic = kafka.topic(partitions=4)
    c = _consumer(kafka.bootstrap)
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        assert sorted(md.partitions) == [0, 1, 2, 3]
    finally:
        c.close()


def test_high_watermarks_are_exact_after_each_produce(kafka):
    """The source bounds every micro-batch by the high watermark: it must count the last record."""
    topic = kafka.topic(partitions=2)
    c = _consumer(kafka.bootstrap)
    try:
        sent = {0: 0, 1: 0}
        for n in (1, 7, 250):
            kafka.produce(topic, [{"value": b"x", "partition": i % 2} for i in range(n)])
            for i in range(n):
                sent[i % 2] += 1
            assert {p: _wm(c, topic, p) for p in (0, 1)} == {p: (0, sent[p]) for p in (0, 1)}
    finally:
        c.close()


def test_read_exact_offset_range(kafka):
    from dataflow_kafka.datasource import kafka_read

    topic = kafka.topic(partitions=1)
    kafka.produce(topic, [{"value": str(i).encode(), "partition": 0} for i in range(100)])
    c = _consumer(kafka.bootstrap)
    try:
        got = [m for msgs, _ in kafka_read.fetch_range(c, topic, 0, 37, 64, 10_000, True) for m in msgs]
    finally:
        c.close()
    assert [m.offset() for m in got] == list(range(37, 64))
    assert [m.value() for m in got] == [str(i).encode() for i in range(37, 64)]


def test_record_timestamps_keys_and_headers_round_trip(kafka):
    topic = kafka.topic(partitions=1)
    base = int(time.time() * 1000) - 60_000
    recs = [{"value": b"v%d" % i, "key": None if i == 0 else b"k%d" % i, "partition": 0,
             "timestamp": base + (7 - i) * 1000, "headers": [("h", b"%d" % i), ("dup", b"a"), ("dup", b"b")]}
            for i in range(5)]
    kafka.produce(topic, recs)
    msgs = [m for m in kafka.consume_all(topic)]
    assert [m.timestamp() for m in msgs] == [(1, base + (7 - i) * 1000) for i in range(5)]  # CreateTime
    assert [m.key() for m in msgs] == [None] + [b"k%d" % i for i in range(1, 5)]
    assert [m.headers() for m in msgs] == [[("h", b"%d" % i), ("dup", b"a"), ("dup", b"b")] for i in range(5)]


def test_null_value_round_trips(kafka):
    topic = kafka.topic(partitions=1)
    kafka.produce(topic, [{"value": None, "key": b"k", "partition": 0}])
    (m,) = kafka.consume_all(topic)
    assert m.value() is None and m.key() == b"k"


def test_offsets_for_times(kafka):
    """startingTimestamp / startingOffsetsByTimestamp resolve through ListOffsets by time."""
    from confluent_kafka import TopicPartition

    topic = kafka.topic(partitions=1)
    base = int(time.time() * 1000) - 100_000
    kafka.produce(topic, [{"value": b"x", "partition": 0, "timestamp": base + i * 1000} for i in range(10)])
    c = _consumer(kafka.bootstrap)
    try:
        for probe, expected in ((base - 5, 0), (base + 3500, 4), (base + 9000, 9), (base + 99_000, -1)):
            (r,) = c.offsets_for_times([TopicPartition(topic, 0, probe)], timeout=10)
            assert r.offset == expected, (probe, r.offset)
    finally:
        c.close()


def test_delete_records_moves_log_start(kafka):
    """How the tests simulate retention for failOnDataLoss."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = kafka.topic(partitions=1)
    kafka.produce(topic, [{"value": b"x", "partition": 0} for _ in range(20)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 12)]).values():
        f.result(10)
    c = _consumer(kafka.bootstrap)
    try:
        assert _wm(c, topic, 0) == (12, 20)
    finally:
        c.close()


def test_idempotent_producer_acks_all(kafka):
    """The sink's producer settings."""
    topic = kafka.topic(partitions=1)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": 0} for i in range(50)],
                  **{"enable.idempotence": True, "acks": "all"})
    assert [m.value() for m in kafka.consume_all(topic)] == [b"%d" % i for i in range(50)]


def test_data_survives_broker_restart(own_broker):
    """A broker of the test's own: the session's serves other tests (other xdist workers) meanwhile."""
    if not own_broker.persistent:
        pytest.skip(f"{own_broker.kind} keeps data in memory only: nothing to persist")
    kafka = KafkaHelper(own_broker.bootstrap_servers)
    topic = kafka.topic(partitions=2)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(30)])
    own_broker.restart()
    got = sorted(int(m.value()) for m in kafka.consume_all(topic))
    assert got == list(range(30))


# -- transactions (the sink's exactlyOnce option) -------------------------------------------------------

def _values(bootstrap, topic, isolation):
    """Values of partition 0 up to the end of the log as a consumer with ``isolation`` sees them
    (polled to end-of-partition: a transactional log ends with a control record no consumer gets)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "conformance", "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
            elif m is not None:
                return out                       # end of partition
        raise AssertionError(f"{topic}: no end of partition within 20 s")
    finally:
        c.close()


def _transactional(bootstrap, txn_id):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "log_level": 0})
    p.init_transactions(15)
    return p


def test_transactions_commit_and_abort_under_read_committed(kafka):
    topic = kafka.topic(partitions=1)
    p = _transactional(kafka.bootstrap, f"conf-{topic}")
    for value, commit in ((b"c1", True), (b"a1", False), (b"c2", True)):
        p.begin_transaction()
        p.produce(topic, value, partition=0)
        p.flush(10)                                # the aborted record reaches the log
        (p.commit_transaction if commit else p.abort_transaction)(15)
    assert _values(kafka.bootstrap, topic, "read_committed") == [b"c1", b"c2"]
    assert _values(kafka.bootstrap, topic, "read_uncommitted") == [b"c1", b"a1", b"c2"]


def test_a_newer_transactional_producer_fences_the_older(kafka):
    from confluent_kafka import KafkaException

    topic = kafka.topic(partitions=1)
    old = _transactional(kafka.bootstrap, f"conf-{topic}")
    old.begin_transaction()
    old.produce(topic, b"zombie", partition=0)
    old.flush(10)
    new = _transactional(kafka.bootstrap, f"conf-{topic}")   # aborts the old one's open transaction
    new.begin_transaction()
    new.produce(topic, b"new", partition=0)
    new.commit_transaction(15)
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(15)
    assert fenced.value.args[0].fatal()
    assert _values(kafka.bootstrap, topic, "read_committed") == [b"new"]


def test_group_offsets_commit_with_a_transaction(kafka):
    """send_offsets_to_transaction: the offset is committed with the transaction, not before."""
    from confluent_kafka import Consumer, TopicPartition

    topic = kafka.topic(partitions=1)
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{topic}", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    p = _transactional(kafka.bootstrap, f"conf-{topic}")
    try:
        for offset, commit in ((1, True), (2, False), (3, True)):
            p.begin_transaction()
            p.produce(topic, b"marker", partition=0)
            p.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], c.consumer_group_metadata(), 10)
            (p.commit_transaction if commit else p.abort_transaction)(15)
            (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
            assert tp.offset == (offset if commit else offset - 1), (offset, commit, tp)
    finally:
        c.close()


def test_fetch_size_limits_are_honoured(kafka):
    """With the client's prefetch off, a read of a small offset range transfers about that range,
    not the rest of the partition: the broker honours ``max.partition.fetch.bytes`` and
    ``fetch.max.bytes`` (what bounds a micro-batch's network and memory cost on a long backlog)."""
    import json as _json

    from dataflow_kafka.datasource import kafka_read

    topic = kafka.topic(partitions=1)
    # ~3 MB in record batches of at most 16 KB (a fetch returns whole batches, at least one)
    kafka.produce(topic, [{"value": b"x" * 1000, "partition": 0} for _ in range(3000)], **{"batch.size": 16384})
    stats: list[dict] = []
    c = kafka_read.consumer({"bootstrap.servers": kafka.bootstrap, "max.partition.fetch.bytes": "16384",
                             "fetch.max.bytes": "65536", "message.max.bytes": "65536", "statistics.interval.ms": "100",
                             "queued.min.messages": "1", "queued.max.messages.kbytes": "1",   # no prefetch
                             "stats_cb": lambda s: stats.append(_json.loads(s))})
    try:
        got = [m for msgs, _ in kafka_read.fetch_range(c, topic, 0, 0, 100, 10_000, True) for m in msgs]
        for _ in range(5):                          # serve the next statistics event
            c.poll(0.15)
    finally:
        c.close()
    assert [m.offset() for m in got] == list(range(100))
    received = max(sum(b["rxbytes"] for b in s["brokers"].values()) for s in stats)
    assert received < 300_000, f"{received} bytes received for a 100 KB range of a 3 MB partition"
