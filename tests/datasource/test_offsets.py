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
        return tps, starting_offsets(c, opts, tps, kafka_read.watermarks)
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


def test_available_now_plans_each_batch_without_asking_kafka(kafka, monkeypatch):
    """Under Trigger.AvailableNow the end offsets are fixed when the run starts
    (``prepareForTriggerAvailableNow``); each batch's ``latestOffset`` then asks Kafka for no
    metadata and no log end (as Spark's connector), and still stops at those offsets while records
    arrive meanwhile."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from dataflow_kafka.datasource import source as source_module
    from dataflow_kafka.datasource.source import DataflowKafkaStreamReader

    topic = kafka.topic(2)
    kafka.produce(topic, [{"value": b'{"ts": %d}' % i, "partition": i % 2} for i in range(40)])
    reader = DataflowKafkaStreamReader(parse_source_options(
        {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
         "eventTimeField": "ts", "rangeStatsTopic": ""}, streaming=True))
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        kafka.produce(topic, [{"value": b'{"ts": 99}', "partition": 0} for _ in range(5)])   # after the start
        asked = []
        real_watermarks, real_resolve = kafka_read.watermarks, source_module.resolve_partitions
        monkeypatch.setattr(kafka_read, "watermarks", lambda *a, **k: asked.append(a[1:3]) or real_watermarks(*a, **k))
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
