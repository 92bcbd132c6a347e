"""Bad input: every case gives a clear error naming the problem, or a counted, visible skip."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.datasource.options import OptionError, parse_sink_options, parse_source_options
from tests.support import BatchCollector, now_ms, run_available_now

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "a", "startingOffsetz": "earliest"}, "unknown option(s) ['startingoffsetz']"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of 'subscribe', 'subscribePattern' or 'assign'"),
    ({}, "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, got none"),
    ({"subscribe": "a", "startingOffsets": "newest"}, "option 'startingOffsets' must be 'earliest', 'latest' or JSON"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger' must be >= 1, got 0"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "ten"}, "must be an integer, got 'ten'"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, "option 'failOnDataLoss' must be 'true' or 'false', got 'yes'"),
    ({"subscribe": "a", "endingOffsets": "latest"}, "'endingOffsets' is for batch queries"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "latest"}, "option 'kafka.auto.offset.reset' is not supported"),
    ({"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
     "options 'minOffsetsPerTrigger' (10) and 'maxOffsetsPerTrigger' (5) conflict"),
    ({"subscribe": "a", "maxTriggerDelay": "soon"}, "option 'maxTriggerDelay' must be a duration like '15m'"),
    ({"subscribe": "a", "maxRecordsPerPartition": "0"}, "option 'maxRecordsPerPartition' must be >= 1, got 0"),
    ({"subscribe": "a", "maxEventTimeAheadMs": "-2"}, "option 'maxEventTimeAheadMs' must be >= -1, got -2"),
    ({"subscribe": "a", "groupIdPrefix": " "}, "option 'groupIdPrefix' must not be empty"),
    ({"subscribePattern": "(unclosed"}, "not a valid regex"),
    ({"assign": "[0,1]"}, "option 'assign' must be JSON like"),
    ({"subscribe": "a", "watermarkDelayMs": "-5"}, "option 'watermarkDelayMs' must be >= 0, got -5"),
    ({"subscribe": "a", "gracePeriodMs": "2000"}, "option 'gracePeriodMs' was renamed to 'watermarkDelayMs'"),
    ({"subscribe": "a", "GRACEPERIODMS": "0"}, "option 'gracePeriodMs' was renamed to 'watermarkDelayMs'"),
    ({"subscribe": "a", "maxPartitions": "0"}, "option 'maxPartitions' must be >= 1, got 0"),
    ({"subscribe": "a", "minPartitions": "8", "maxPartitions": "2"},
     "options 'minPartitions' (8) and 'maxPartitions' (2) conflict"),
])
def test_option_errors_name_the_option(options, message):
    with pytest.raises(OptionError) as e:
        parse_source_options({**BOOT, **options}, streaming=True)
    assert message in str(e.value)


def test_bootstrap_servers_required():
    with pytest.raises(OptionError, match="'kafka.bootstrap.servers' is required"):
        parse_source_options({"subscribe": "a"}, streaming=True)


def test_a_setting_librdkafka_does_not_know_is_named():
    """A Java client setting (``kafka.key.deserializer`` is refused earlier, as in Spark) fails when
    the first client is made, naming the option, not as an unreachable broker."""
    from dataflow_kafka.datasource.source import DataflowKafkaStreamReader

    reader = DataflowKafkaStreamReader(parse_source_options({**BOOT, "subscribe": "a", "kafka.foo.bar": "1"},
                                                            streaming=True))
    with pytest.raises(OptionError, match="option 'kafka.foo.bar' is not a setting of librdkafka"):
        reader.initialOffset()


def test_batch_only_option_checks():
    with pytest.raises(OptionError, match="cannot be 'latest' for batch"):
        parse_source_options({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OptionError, match="'maxOffsetsPerTrigger' is for streaming"):
        parse_source_options({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "5"}, streaming=False)


def test_spark_options_with_spark_meanings(caplog):
    opts = parse_source_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "30s",
                                 "maxRecordsPerPartition": "50", "groupIdPrefix": "team-x"}, streaming=True)
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (100, 30_000)
    assert opts.max_records_per_partition == 50 and opts.group_id_prefix == "team-x"
    assert parse_source_options({**BOOT, "subscribe": "a"}, streaming=True).max_trigger_delay_ms == 15 * 60_000
    # kafka.group.id is accepted (Spark 3+), with Spark's caution in the log; it reaches the consumer
    with caplog.at_level("WARNING"):
        opts = parse_source_options({**BOOT, "subscribe": "a", "kafka.group.id": "g"}, streaming=True)
    assert opts.kafka["group.id"] == "g" and "use it with caution" in caplog.text
    # kafka.isolation.level reaches librdkafka as given
    opts = parse_source_options({**BOOT, "subscribe": "a", "kafka.isolation.level": "read_committed"}, streaming=True)
    assert opts.kafka["isolation.level"] == "read_committed"
    # maxEventTimeAheadMs: one day by default, -1 turns the guard off
    assert parse_source_options({**BOOT, "subscribe": "a"}, streaming=True).max_event_time_ahead_ms == 86_400_000
    assert parse_source_options({**BOOT, "subscribe": "a", "maxEventTimeAheadMs": "-1"},
                                streaming=True).max_event_time_ahead_ms is None
    with pytest.raises(OptionError, match="'minOffsetsPerTrigger' is for streaming queries only"):
        parse_source_options({**BOOT, "subscribe": "a", "minOffsetsPerTrigger": "5"}, streaming=False)


def test_sink_option_errors():
    with pytest.raises(OptionError, match=r"unknown option\(s\) \['topik'\]"):
        parse_sink_options({**BOOT, "topik": "x"})
    # what Spark passes itself is accepted
    opts = parse_sink_options({**BOOT, "topic": "t", "queryName": "q", "checkpointLocation": "/c", "path": "p"})
    assert opts.topic == "t"


def _start(spark, options, tmp_path):
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    out = BatchCollector()
    q = reader.load().writeStream.foreachBatch(out).option("checkpointLocation", str(tmp_path / "ck")) \
        .trigger(availableNow=True).start()
    try:
        q.awaitTermination(120)
    except Exception:  # the failure is inspected through q.exception()
        pass
    return q, out


def test_unknown_option_fails_the_query_with_its_name(spark, tmp_path):
    with pytest.raises(Exception, match="startingoffsetz"):
        q, _ = _start(spark, {**BOOT, "subscribe": "a", "startingOffsetz": "x"}, tmp_path)
        if q.exception():
            raise q.exception()


def test_unreachable_broker(spark, tmp_path):
    q, _ = _start(spark, {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "a",
                          "kafkaConsumer.pollTimeoutMs": "3000", "fetchOffset.numRetries": "0"}, tmp_path)
    assert q.exception() is not None
    assert "cannot reach Kafka at kafka.bootstrap.servers='127.0.0.1:9' to read topic(s) a: " in str(q.exception())


def test_missing_topic(spark, kafka, tmp_path):
    q, _ = _start(spark, {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": "no-such-topic-xyz"}, tmp_path)
    assert "option 'subscribe': topic(s) ['no-such-topic-xyz'] do not exist" in str(q.exception())


def _delete_before(kafka, topic, partition, offset):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        f.result(10)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_offsets_removed_by_retention(spark, kafka, tmp_path, fail_on_data_loss):
    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": 0} for i in range(20)])
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "assign": json.dumps({topic: [0]}),
            "startingOffsets": "earliest", "failOnDataLoss": str(fail_on_data_loss).lower()}
    ck = str(tmp_path / "ck")
    out = BatchCollector()
    run_available_now(spark, opts, ck, out)                 # reads [0, 20)
    assert len(out.rows("data")) == 20
    kafka.produce(topic, [{"value": b"%d" % i, "partition": 0} for i in range(20, 100)])
    _delete_before(kafka, topic, 0, 60)                     # "retention" removes [0, 60)
    if fail_on_data_loss:
        with pytest.raises(Exception, match=r"offsets \[20, 60\) are no longer on the broker.*failOnDataLoss=false"):
            run_available_now(spark, opts, ck, out)
    else:
        run_available_now(spark, opts, ck, out)
        offsets = sorted(r["offset"] for r in out.rows("data"))
        assert offsets == list(range(20)) + list(range(60, 100))
        errors = out.rows("error")
        assert len(errors) == 1 and "offsets [20, 60) are no longer on the broker" in errors[0]["error"]
        assert "skipped (failOnDataLoss=false)" in errors[0]["error"]


def test_malformed_records_become_visible_error_rows(spark, kafka, tmp_path):
    topic, control = kafka.topic(2), kafka.topic(1, prefix="ctl")
    t = now_ms() - 5000
    kafka.produce(topic, [
        {"value": json.dumps({"ts": t}).encode(), "partition": 0},
        {"value": b'{"no_ts": 1}', "partition": 0},                                   # field missing
        {"value": b"not json", "partition": 1},                                       # not JSON
        {"value": b"", "partition": 1, "headers": [("dataflow.punctuation", b"12x")]},  # bad punctuation
        {"value": b"", "partition": 1, "headers": [("dataflow.punctuation", str(t).encode())]},  # good one
        {"value": json.dumps({"ts": t + 1}).encode(), "partition": 1},
    ])
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "controlTopic": control}
    out = BatchCollector()
    ck = str(tmp_path / "ck")
    run_available_now(spark, opts, ck, out)
    kafka.produce(control, [{"value": b"{broken", "partition": 0}])
    kafka.produce(topic, [{"value": json.dumps({"ts": t + 2}).encode(), "partition": 0}])
    run_available_now(spark, opts, ck, out)
    errors = sorted(r["error"] for r in out.rows("error"))
    assert len(errors) == 4
    assert any(f"{topic}-0@1 has no event time: value is not a JSON object with integer field 'ts'" in e for e in errors)
    assert any(f"{topic}-1@0 has no event time" in e for e in errors)
    assert any(f"malformed punctuation record {topic}-1@1" in e and "b'12x'" in e for e in errors)
    assert any(f"malformed control record {control}-0@0" in e for e in errors)
    producer_puncts = [r for r in out.rows("punctuation") if r["offset"] == 2 and r["partition"] == 1]
    assert len(producer_puncts) == 1 and int(producer_puncts[0]["punctuation"].timestamp() * 1000) == t
    assert len(out.rows("data")) == 3 and not out.rows("modification")
