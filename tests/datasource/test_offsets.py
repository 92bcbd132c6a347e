"""Starting offsets, topic resolution, admission control and minPartitions (broker, no JVM)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from dataflow_kafka.datasource import kafka_read
from dataflow_kafka.datasource.offsets import from_json_partitions, rate_limit, resolve_partitions, starting_offsets
from dataflow_kafka.datasource.options import OptionError, parse_source_options
from dataflow_kafka.datasource.source import OffsetRange, RangeGroup, _apply_max_partitions, _apply_min_partitions
from tests.support import now_ms


def _resolve(kafka, **options):
    opts = parse_source_options({"kafka.bootstrap.servers": kafka.bootstrap, **options}, streaming=True)
    c = kafka_read.consumer(opts.kafka)
    try:
        tps = resolve_partitions(c, opts)
        return tps, starting_offsets(c, opts, tps)
    finally:
        c.close()


def test_starting_offsets_earliest_latest_json_and_timestamps(kafka):
    topic = kafka.topic(2)
    base = now_ms() - 100_000
    kafka.produce(topic, [{"value": b"x", "partition": i % 2, "timestamp": base + i * 1000} for i in range(20)])
    assert _resolve(kafka, subscribe=topic)[1] == {(topic, 0): 10, (topic, 1): 10}
    assert _resolve(kafka, subscribe=topic, startingOffsets="earliest")[1] == {(topic, 0): 0, (topic, 1): 0}
    spec = json.dumps({topic: {"0": 3, "1": -2}})
    assert _resolve(kafka, subscribe=topic, startingOffsets=spec)[1] == {(topic, 0): 3, (topic, 1): 0}
    # partition 0 holds i = 0, 2, 4, ...: first timestamp >= base + 7000 is i = 8 (offset 4);
    # partition 1 holds i = 1, 3, 5, 7, ...: i = 7 (offset 3)
    assert _resolve(kafka, subscribe=topic, startingTimestamp=str(base + 7000))[1] == {(topic, 0): 4, (topic, 1): 3}
    by_ts = json.dumps({topic: {"0": base + 7000, "1": base + 100_000}})
    with pytest.raises(OptionError, match="no record in .* has a timestamp >="):
        _resolve(kafka, subscribe=topic, startingOffsetsByTimestamp=by_ts)
    got = _resolve(kafka, subscribe=topic, startingOffsetsByTimestamp=by_ts,
                   startingOffsetsByTimestampStrategy="latest")[1]
    assert got == {(topic, 0): 4, (topic, 1): 10}


def test_subscribe_pattern_and_assign(kafka):
    a, b = kafka.topic(1, prefix="pat"), kafka.topic(2, prefix="pat")
    tps, _ = _resolve(kafka, subscribePattern=r"pat-.*")
    assert {(a, 0), (b, 0), (b, 1)} <= set(tps)
    tps, _ = _resolve(kafka, assign=json.dumps({b: [1]}))
    assert tps == [(b, 1)]
    with pytest.raises(OptionError, match=r"option 'assign': partitions \['.*-7'\] do not exist"):
        _resolve(kafka, assign=json.dumps({b: [7]}))


def test_named_topics_metadata_is_asked_for_by_name(kafka, monkeypatch):
    """``subscribe`` / ``assign`` of a few topics ask for those topics' metadata only (the list of
    every topic grows with the cluster); a pattern, or more than ``NAMED_METADATA_MAX`` topics,
    ask for every topic at once."""
    from dataflow_kafka.datasource import offsets

    a, b = kafka.topic(1, prefix="named"), kafka.topic(2, prefix="named")
    asked = []
    real = kafka_read.list_topics
    monkeypatch.setattr(kafka_read, "list_topics", lambda c, topic=None, *r: asked.append(topic) or real(c, topic, *r))
    assert _resolve(kafka, subscribe=f"{a},{b}")[0] == sorted([(a, 0), (b, 0), (b, 1)])
    assert asked == [a, b]
    asked.clear()
    assert _resolve(kafka, assign=json.dumps({b: [1]}))[0] == [(b, 1)]
    assert asked == [b]
    asked.clear()
    _resolve(kafka, subscribePattern=r"named-.*")
    assert asked == [None]
    asked.clear()
    many = [kafka.topic(1, prefix="named") for _ in range(offsets.NAMED_METADATA_MAX + 1)]
    assert _resolve(kafka, subscribe=",".join(many))[0] == sorted((t, 0) for t in many)
    assert asked == [None]


@given(st.dictionaries(st.tuples(st.sampled_from("ab"), st.integers(0, 3)), st.integers(0, 1000), min_size=1),
       st.integers(1, 3000))
def test_rate_limit_admits_at_most_the_limit_in_proportion(backlog, limit):
    start = {tp: 100 for tp in backlog}
    latest = {tp: 100 + lag for tp, lag in backlog.items()}
    end = rate_limit(start, latest, limit)
    admitted = {tp: end[tp] - start[tp] for tp in backlog}
    assert all(0 <= admitted[tp] <= backlog[tp] for tp in backlog)
    assert sum(admitted.values()) == min(limit, sum(backlog.values()))
    total = sum(backlog.values())
    for tp in backlog:            # within one record of the proportional share
        assert abs(admitted[tp] - backlog[tp] * min(limit, total) / max(total, 1)) <= 1 + 1e-9
    assert rate_limit(start, latest, limit) == end                   # deterministic


def test_min_partitions_splits_ranges_keeping_modifications_first():
    r = OffsetRange("t", 0, 10, 110, 5, 0, mods=[{"value": "{}"}])
    pieces = _apply_min_partitions([r, OffsetRange("t", 1, 0, 0, None, 0)], 5)
    t0 = [p for p in pieces if p.partition == 0]
    assert [(p.start, p.end) for p in t0] == [(10, 30), (30, 50), (50, 70), (70, 90), (90, 110)]
    assert [bool(p.mods) for p in t0] == [True, False, False, False, False]
    assert [p.newest_before_ms for p in t0] == [5] * 5   # each piece's punctuation starts from p
    assert len(pieces) >= 5
    assert [(p.start, p.end) for p in pieces if p.partition == 1] == [(0, 0)]


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=12), st.integers(1, 6))
def test_max_partitions_packs_every_range_once_into_balanced_tasks(sizes, max_parts):
    ranges = [OffsetRange("t", p, 100, 100 + n, None, 0) for p, n in enumerate(sizes)]
    tasks = _apply_max_partitions(ranges, max_parts)
    if len(ranges) <= max_parts:
        assert tasks == ranges
        return
    assert tasks == _apply_max_partitions(list(reversed(ranges)), max_parts)      # deterministic
    assert len(tasks) <= max_parts and all(isinstance(t, RangeGroup) for t in tasks)
    got = [r for t in tasks for r in t.ranges]
    assert sorted(got, key=lambda r: r.partition) == ranges                       # each range once
    for t in tasks:                                                               # read in offset order
        assert t.ranges == sorted(t.ranges, key=lambda r: (r.topic, r.partition, r.start))
    loads = [sum(r.end - r.start for r in t.ranges) for t in tasks]
    assert max(loads) - min(loads) <= max(sizes)                                  # greedy balance


def _stream_reader(kafka, partitions: int, records: int):
    """A stream reader from the start of a new topic holding ``records`` JSON records round robin."""
    from dataflow_kafka.datasource.source import DataflowKafkaStreamReader

    topic = kafka.topic(partitions)
    kafka.produce(topic, [{"value": b'{"ts": %d}' % i, "partition": i % partitions} for i in range(records)])
    return topic, DataflowKafkaStreamReader(parse_source_options(
        {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
         "eventTimeField": "ts", "rangeStatsTopic": ""}, streaming=True))


def _counting_requests(monkeypatch, asked: list) -> None:
    """Append each offset request of ``kafka_read`` to ``asked``: ``watermarks``' partition, or
    ``log_offsets``' ``(which, number of partitions)`` (none when it has no partition to ask for)."""
    real_watermarks, real_log_offsets = kafka_read.watermarks, kafka_read.log_offsets
    monkeypatch.setattr(kafka_read, "watermarks", lambda *a, **k: asked.append(a[1:3]) or real_watermarks(*a, **k))
    monkeypatch.setattr(kafka_read, "log_offsets",
                        lambda *a, **k: (list(a[1]) and asked.append((a[2], len(a[1])))) or real_log_offsets(*a, **k))


def test_available_now_plans_each_batch_without_asking_kafka(kafka, monkeypatch):
    """Under Trigger.AvailableNow the end offsets are fixed when the run starts
    (``prepareForTriggerAvailableNow``); each batch's ``latestOffset`` then asks Kafka for no
    metadata and no log end (as Spark's connector), and still stops at those offsets while records
    arrive meanwhile."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from dataflow_kafka.datasource import source as source_module

    topic, reader = _stream_reader(kafka, 2, 40)
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        kafka.produce(topic, [{"value": b'{"ts": 99}', "partition": 0} for _ in range(5)])   # after the start
        asked = []
        real_resolve = source_module.resolve_partitions
        _counting_requests(monkeypatch, asked)
        monkeypatch.setattr(source_module, "resolve_partitions", lambda *a, **k: asked.append("metadata") or real_resolve(*a, **k))
        totals = []
        for _ in range(8):
            end = reader.latestOffset(start, ReadMaxRows(8))
            totals.append(sum(e["o"] for e in from_json_partitions(end["partitions"]).values()))
            start = end
        assert asked == []
        assert totals == [8, 16, 24, 32, 40, 40, 40, 40]          # the 5 records produced after the start wait
    finally:
        reader.stop()


def test_log_offsets_ask_every_partition_at_once_and_agree_with_watermarks(kafka):
    """``kafka_read.log_offsets`` (one request per leader for all partitions) gives what
    ``watermarks`` gives a partition at a time: the log start after records were deleted, the end,
    and under ``read_committed`` the last stable offset while a transaction is open."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic, empty = kafka.topic(3), kafka.topic(1)
    kafka.produce(topic, [{"value": b"x", "partition": i % 3} for i in range(30)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})   # held: its futures end with it
    for f in admin.delete_records([TopicPartition(topic, 1, 4)]).values():
        f.result(10)
    tx = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"log-offsets-{topic}"})
    tx.init_transactions(10)
    tx.begin_transaction()
    tx.produce(topic, b"open", partition=2)
    tx.flush(10)
    tps = [(topic, 0), (topic, 1), (topic, 2), (empty, 0)]
    try:
        for isolation, ends in (("read_uncommitted", [10, 10, 11, 0]), ("read_committed", [10, 10, 10, 0])):
            c = kafka_read.consumer({"bootstrap.servers": kafka.bootstrap, "isolation.level": isolation})
            try:
                assert kafka_read.log_offsets(c, tps, "end") == dict(zip(tps, ends))
                assert kafka_read.log_offsets(c, tps, "start") == dict(zip(tps, [0, 4, 0, 0]))
                assert kafka_read.log_bounds(c, tps) == {tp: kafka_read.watermarks(c, *tp) for tp in tps}
                assert kafka_read.log_offsets(c, [], "end") == {}
            finally:
                c.close()
    finally:
        tx.abort_transaction(10)


def test_latest_offset_asks_for_every_partition_end_in_one_call(kafka, monkeypatch):
    """Outside Trigger.AvailableNow each batch's ``latestOffset`` asks for the partitions' ends once
    for all of them (Spark's connector's one ``listOffsets``), not once per partition."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic, reader = _stream_reader(kafka, 6, 60)
    try:
        start = reader.initialOffset()
        asked = []
        _counting_requests(monkeypatch, asked)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert asked == [("end", 6)]
        assert {tp: e["o"] for tp, e in from_json_partitions(end["partitions"]).items()} == {
            (topic, p): 10 for p in range(6)}
    finally:
        reader.stop()
