"""The executors' pooled consumer (one per Kafka configuration and Python process, reused by every
task and micro-batch): the rows do not depend on it (broker, no JVM: ``read`` is plain Python)."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.datasource import kafka_read
from dataflow_kafka.datasource.options import parse_source_options
from dataflow_kafka.datasource.source import OffsetRange, RangeGroup, _read
from tests.support import now_ms

#: The ranges' processing time (event times ahead of it by more than maxEventTimeAheadMs are errors).
PT = now_ms()


@pytest.fixture(autouse=True)
def _fresh_pool():
    kafka_read.close_pooled_consumers()
    yield
    kafka_read.close_pooled_consumers()


def _rows(opts, part) -> list[tuple]:
    return [(r["kind"], r["partition"], r["offset"], r["value"], r["event_time"], r["punctuation"])
            for rb in _read(opts, part) for r in rb.to_pylist()]


def _pooled(opts, prefetch: int) -> list:
    """The idle pooled consumers of ``opts``'s configuration and prefetch class."""
    return list(kafka_read._idle.get((prefetch, opts.group_id_prefix, *sorted(opts.kafka.items())), []))


def test_one_consumer_reused_across_ranges_gives_the_rows_of_fresh_consumers(kafka):
    topic = kafka.topic(3)
    base = now_ms() - 10_000
    kafka.produce(topic, [{"value": json.dumps({"ts": base + i}).encode(), "partition": i % 3} for i in range(300)])
    opts = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic,
                                 "eventTimeField": "ts", "rangeStatsTopic": ""}, streaming=True)
    ranges = [OffsetRange(topic, p, s, e, None, PT) for s, e in ((0, 40), (40, 100)) for p in (2, 0, 1)]

    first = _rows(opts, ranges[0])
    (pooled,) = _pooled(opts, 2_500)
    reused = [_rows(opts, r) for r in ranges] + [_rows(opts, RangeGroup(ranges[3:]))]
    assert _pooled(opts, 2_500) == [pooled]                    # the same consumer read every range
    assert pooled.assignment() == []                    # and was left without an assignment

    fresh = []
    for r in ranges:
        kafka_read.close_pooled_consumers()             # a new consumer for every range
        fresh.append(_rows(opts, r))
    assert reused[:-1] == fresh and reused[0] == first
    assert reused[-1] == sum(fresh[3:], [])
    assert [len([x for x in rows if x[0] == "data"]) for rows in fresh] == [40, 40, 40, 60, 60, 60]


def test_a_failed_or_abandoned_read_closes_its_consumer(kafka):
    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": 0} for i in range(50)])
    opts = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic,
                                 "rangeStatsTopic": ""}, streaming=True)
    _rows(opts, OffsetRange(topic, 0, 0, 50, None, PT))
    (pooled,) = _pooled(opts, 2_500)
    with pytest.raises(kafka_read.DataLossError, match=r"offsets \[50, 60\) are gone"):  # beyond the log end
        _rows(opts, OffsetRange(topic, 0, 40, 60, None, PT))
    assert _pooled(opts, 2_500) == []                          # closed, not returned to the pool
    it = _read(opts, OffsetRange(topic, 0, 0, 50, None, PT))
    next(it)                                            # Spark stops reading half-way
    it.close()
    assert _pooled(opts, 2_500) == []
    assert len([r for r in _rows(opts, OffsetRange(topic, 0, 0, 50, None, PT)) if r[0] == "data"]) == 50
    assert len(_pooled(opts, 2_500)) == 1 and _pooled(opts, 2_500)[0] is not pooled


def test_the_prefetch_class_grows_with_the_range_within_its_bounds():
    lengths = [0, 1, 2_500, 12_500, 19_999, 20_000, 40_000, 50_000, 79_999, 80_000, 10**9]
    assert [kafka_read.prefetch_for(n) for n in lengths] == [
        2_500, 2_500, 2_500, 2_500, 2_500, 5_000, 10_000, 10_000, 10_000, 20_000, 20_000]
    classes = [kafka_read.prefetch_for(n) for n in range(0, 200_000, 997)]
    assert classes == sorted(classes) and set(classes) == set(kafka_read.PREFETCH)
    assert kafka_read.PREFETCH[-1] == kafka_read.CHUNK


def test_ranges_of_other_lengths_take_consumers_of_their_class_and_give_the_same_rows(kafka):
    topic = kafka.topic(1)
    base = now_ms() - 10_000
    kafka.produce(topic, [{"value": b'{"ts":%d}' % (base + i), "partition": 0} for i in range(20_100)])
    opts = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic,
                                 "eventTimeField": "ts", "rangeStatsTopic": ""}, streaming=True)
    short, long = OffsetRange(topic, 0, 0, 100, None, PT), OffsetRange(topic, 0, 100, 20_100, None, PT)
    rows = _rows(opts, short) + _rows(opts, long) + _rows(opts, RangeGroup([short, long]))
    assert len(_pooled(opts, 2_500)) == 1 and len(_pooled(opts, 5_000)) == 1   # one consumer per class
    assert _pooled(opts, 2_500)[0].assignment() == [] == _pooled(opts, 5_000)[0].assignment()

    # an option of the user's sets the prefetch of every range's consumer: one class, the same rows
    fixed = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap, "kafka.queued.min.messages": "1",
                                  "subscribe": topic, "eventTimeField": "ts", "rangeStatsTopic": ""}, streaming=True)
    assert _rows(fixed, short) + _rows(fixed, long) + _rows(fixed, RangeGroup([short, long])) == rows
    assert len(_pooled(fixed, kafka_read.CHUNK)) == 1
    assert not _pooled(fixed, 2_500) and not _pooled(fixed, 5_000)
    data = [r for r in rows if r[0] == "data"]
    assert [r[2] for r in data] == list(range(20_100)) * 2
