"""The control topic on a real broker: ``control_offset`` on modification rows, the one-partition
rule, and the option renamed from ``gracePeriodMs`` to ``watermarkDelayMs``."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.datasource.schema import source_schema
from tests.support import BatchCollector, forget_batches_from, now_ms, run_available_now


def _records(n: int, base: int, first: int = 0, partitions: int = 2) -> list[dict]:
    return [{"value": json.dumps({"i": i, "ts": base + i}).encode(), "partition": i % partitions}
            for i in range(first, first + n)]


def test_control_offset_column_is_last_and_set_only_on_modification_rows(spark, kafka, tmp_path):
    for headers in (False, True):
        schema = source_schema(headers)
        assert schema.names[-1] == "control_offset" and schema["control_offset"].dataType.typeName() == "long"
        assert schema.names[:7] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]

    topic, control = kafka.topic(2), kafka.topic(1, prefix="ctl")
    base = now_ms() - 10_000
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "controlTopic": control, "maxOffsetsPerTrigger": "20"}
    ck = str(tmp_path / "ck")
    out = BatchCollector()
    kafka.produce(topic, _records(40, base))
    run_available_now(spark, opts, ck, out)                          # commands start after this
    first = max(out.batches)
    commands = [json.dumps({"op": "noop", "n": i}) for i in range(3)]
    kafka.produce(control, [{"value": commands[0].encode(), "partition": 0},
                            {"value": commands[1].encode(), "partition": 0}])
    kafka.produce(topic, _records(20, base, first=40))
    run_available_now(spark, opts, ck, out)                          # one batch: commands 0 and 1
    kafka.produce(control, [{"value": commands[2].encode(), "partition": 0}])
    kafka.produce(topic, _records(20, base, first=60))
    run_available_now(spark, opts, ck, out)                          # one batch: command 2

    mods = out.rows("modification")
    # Every Kafka partition's task emits a copy of each command: 2 partitions x 3 commands.
    assert sorted((r["control_offset"], r["partition"]) for r in mods) == [(o, p) for o in range(3) for p in (0, 1)]
    assert {r["control_offset"]: r["modification"] for r in mods} == dict(enumerate(commands))
    assert {r["batch"] for r in mods if r["control_offset"] < 2} == {first + 1}
    assert {r["batch"] for r in mods if r["control_offset"] == 2} == {first + 2}
    # Within a partition of a batch the copies come in control-topic order, before the data.
    for b in (first + 1, first + 2):
        for p in (0, 1):
            rows = [r for r in out.batches[b] if r["partition"] == p]
            kinds = [r["kind"] for r in rows]
            n_mods = kinds.count("modification")
            assert kinds[:n_mods] == ["modification"] * n_mods
            assert [r["control_offset"] for r in rows[:n_mods]] == sorted(r["control_offset"] for r in rows[:n_mods])
    others = [r for r in out.rows() if r["kind"] != "modification"]
    assert others and all(r["control_offset"] is None for r in others)

    # A replay of the batch with two commands gives the same rows, control_offset included.
    before = sorted(map(repr, out.batches[first + 1]))
    forget_batches_from(ck, first + 1)
    run_available_now(spark, opts, ck, out)
    assert sorted(map(repr, out.batches[first + 1])) == before

    # The batch read emits every command of the control topic with its offset too.
    reader = spark.read.format("dataflow-kafka")
    for k, v in opts.items():
        if k != "maxOffsetsPerTrigger":
            reader = reader.option(k, v)
    rows = reader.load().filter("kind = 'modification'").collect()
    assert sorted((r["control_offset"], r["partition"]) for r in rows) == [(o, p) for o in range(3) for p in (0, 1)]


def test_control_topic_with_more_than_one_partition_fails_the_query(spark, kafka, tmp_path):
    topic, control = kafka.topic(2), kafka.topic(3, prefix="ctl")
    kafka.produce(topic, _records(10, now_ms() - 5000))
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "controlTopic": control}
    expected = f"option 'controlTopic': topic {control!r} has 3 partitions; a control topic must have exactly 1"
    with pytest.raises(Exception) as e:
        run_available_now(spark, opts, str(tmp_path / "ck"), BatchCollector(), timeout_s=120)
    assert expected in str(e.value)
    # Processing-time trigger: the query fails when it starts, before any batch runs.
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in opts.items():
        reader = reader.option(k, v)
    out = BatchCollector()
    q = reader.load().writeStream.foreachBatch(out).option("checkpointLocation", str(tmp_path / "ck2")).start()
    try:
        q.awaitTermination(120)
    except Exception:  # noqa: BLE001 - inspected below
        pass
    assert q.exception() is not None and expected in str(q.exception())
    assert not out.batches
    with pytest.raises(Exception) as e:
        reader = spark.read.format("dataflow-kafka")
        for k, v in opts.items():
            reader = reader.option(k, v)
        reader.load().collect()
    assert expected in str(e.value)


def test_renamed_grace_period_option_fails_with_the_new_name(spark, kafka, tmp_path):
    topic = kafka.topic(1)
    kafka.produce(topic, _records(10, now_ms() - 5000, partitions=1))
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "gracePeriodMs": "100"}
    with pytest.raises(Exception, match="option 'gracePeriodMs' was renamed to 'watermarkDelayMs'"):
        run_available_now(spark, opts, str(tmp_path / "ck"), BatchCollector(), timeout_s=120)
    # The new name: punctuation = newest event time read from the partition minus the delay.
    del opts["gracePeriodMs"]
    out = BatchCollector()
    run_available_now(spark, {**opts, "watermarkDelayMs": "100"}, str(tmp_path / "ck2"), out)
    (punct,) = out.rows("punctuation")
    newest = max(round(r["event_time"].timestamp() * 1000) for r in out.rows("data"))
    assert round(punct["punctuation"].timestamp() * 1000) == newest - 100
