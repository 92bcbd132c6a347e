"""Bad records and bad offsets on a real broker: each becomes an error row
naming topic-partition@offset, or a clear error, and the query goes on (also after a restart)."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.datasource import kafka_read
from dataflow_kafka.datasource.options import parse_source_options
from dataflow_kafka.datasource.source import DataflowKafkaStreamReader, OffsetRange, _read
from tests.support import BatchCollector, forget_batches_from, now_ms, run_available_now, own_broker_kind

def _opts(kafka, topic, **extra) -> dict:
    return {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "rangeStatsTopic": "", **extra}


def _ms(ts) -> int:
    return round(ts.timestamp() * 1000)


def test_malformed_control_records_become_error_rows_and_the_query_goes_on(spark, kafka, tmp_path):
    topic, control = kafka.topic(1), kafka.topic(1, prefix="ctl")
    t = now_ms() - 5000
    opts = _opts(kafka, topic, eventTimeField="ts", controlTopic=control)
    ck, out = str(tmp_path / "ck"), BatchCollector()
    kafka.produce(topic, [{"value": json.dumps({"ts": t}).encode()}])
    run_available_now(spark, opts, ck, out)                     # control records from here on
    kafka.produce(control, [{"value": None, "key": b"k"},       # 0: tombstone of a compacted topic
                            {"value": b"not json"},               # 1
                            {"value": b"[1, 2]"},                 # 2: JSON, not an object
                            {"value": b'{"op": "noop"}'}])        # 3: a command
    kafka.produce(topic, [{"value": json.dumps({"ts": t + 1}).encode()}])
    run_available_now(spark, opts, ck, out)
    batch = max(out.batches)
    errors = sorted(r["error"] for r in out.batches[batch] if r["kind"] == "error")
    assert errors == [
        f"malformed control record {control}-0@0: a modification must be a JSON object, got a null value "
        f"(tombstone); skipped",
        f"malformed control record {control}-0@1: a modification must be a JSON object, got b'not json', "
        f"which is not JSON (Expecting value: line 1 column 1 (char 0)); skipped",
        f"malformed control record {control}-0@2: a modification must be a JSON object, got b'[1, 2]', "
        f"JSON of type list; skipped",
    ]
    assert [r["control_offset"] for r in out.batches[batch] if r["kind"] == "modification"] == [3]
    assert [r["offset"] for r in out.batches[batch] if r["kind"] == "data"] == [1]
    # A restart replaying that batch from the checkpoint meets the same records and goes on.
    before = sorted(map(repr, out.batches[batch]))
    forget_batches_from(ck, batch)
    kafka.produce(topic, [{"value": json.dumps({"ts": t + 2}).encode()}])
    run_available_now(spark, opts, ck, out)
    assert sorted(map(repr, out.batches[batch])) == before
    assert [r["offset"] for r in out.rows("data")] == [0, 1, 2]


def test_event_times_beyond_int64_or_far_ahead_become_error_rows(spark, kafka, tmp_path):
    topic = kafka.topic(1)
    t = now_ms() - 5000
    raw = [b'{"ts": %d}' % t,                           # 0 good
           b'{"ts": 1e30}',                             # 1 float beyond int64
           b'{"ts": 9223372036854775807}',              # 2 int64 max: beyond Spark timestamps
           b'{"ts": 100000000000000000000000000000}',   # 3 int beyond int64
           b'{"ts": -1e30}',                            # 4
           b'{"ts": NaN}', b'{"ts": Infinity}',         # 5, 6
           b'{"ts": %d}' % (t + 100 * 365 * 86_400_000),  # 7 a year-2126 typo: far ahead
           b'{"ts": %d}' % (t + 1)]                     # 8 good
    kafka.produce(topic, [{"value": v} for v in raw])
    opts = _opts(kafka, topic, eventTimeField="ts")
    ck, out = str(tmp_path / "ck"), BatchCollector()
    run_available_now(spark, opts, ck, out)
    errors = {r["offset"]: r["error"] for r in out.rows("error")}
    assert sorted(errors) == [1, 2, 3, 4, 5, 6, 7]
    for o in (1, 2, 3, 4, 5, 6):
        assert errors[o].startswith(f"record {topic}-0@{o} has no event time: event time ")
        assert "is not an integer epoch-ms within Spark's timestamp range" in errors[o]
    assert "event time 9223372036854775807 in field 'ts'" in errors[2]
    assert errors[7].startswith(f"record {topic}-0@7 has event time {t + 100 * 365 * 86_400_000} (2126-")
    assert "ahead of the batch's processing time" in errors[7] and "maxEventTimeAheadMs=86400000" in errors[7]
    assert [r["offset"] for r in out.rows("data")] == [0, 8]
    (punct,) = out.rows("punctuation")
    assert _ms(punct["punctuation"]) == t + 1                   # the far-future record did not move it
    # The query goes on: the next batch's records are not behind its punctuation.
    kafka.produce(topic, [{"value": b'{"ts": %d}' % (t + 2)}])
    run_available_now(spark, opts, ck, out)
    assert [r["offset"] for r in out.rows("data")] == [0, 8, 9]
    assert _ms(out.rows("punctuation")[-1]["punctuation"]) == t + 2
    # Turned off, the far-future record is data and its event time the punctuation.
    out2 = BatchCollector()
    run_available_now(spark, {**opts, "maxEventTimeAheadMs": "-1"}, str(tmp_path / "ck2"), out2)
    assert [r["offset"] for r in out2.rows("data")] == [0, 7, 8, 9]
    assert _ms(out2.rows("punctuation")[-1]["punctuation"]) == t + 100 * 365 * 86_400_000


def test_starting_offsets_beyond_the_end_or_of_a_missing_partition(spark, kafka, tmp_path):
    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(5)])
    beyond = _opts(kafka, topic, startingOffsets=json.dumps({topic: {"0": 20}}))
    with pytest.raises(Exception, match=rf"option 'startingOffsets': offset 20 for {topic}-0 is beyond the end of "
                                        r"the partition \(log end 5\); set failOnDataLoss=false"):
        run_available_now(spark, beyond, str(tmp_path / "ck1"), BatchCollector())
    with pytest.raises(Exception, match=rf"option 'startingOffsets' names partition\(s\) \['{topic}-3'\] that do "
                                        r"not exist on the broker"):
        run_available_now(spark, _opts(kafka, topic, startingOffsets=json.dumps({topic: {"0": 0, "3": 0}})),
                          str(tmp_path / "ck2"), BatchCollector())
    # The batch read refuses it too.
    reader = spark.read.format("dataflow-kafka")
    for k, v in beyond.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=rf"offset 20 for {topic}-0 is beyond the end"):
        reader.load().collect()
    # failOnDataLoss=false: an error row, and reading starts at the log end, so the records later
    # produced at offsets 5..19 are read, none skipped unseen.
    out, ck = BatchCollector(), str(tmp_path / "ck3")
    lenient = {**beyond, "failOnDataLoss": "false"}
    run_available_now(spark, lenient, ck, out)
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(5, 25)])
    run_available_now(spark, lenient, ck, out)
    (err,) = out.rows("error")
    assert err["error"] == (f"option 'startingOffsets': offset 20 for {topic}-0 is beyond the end of the partition "
                            f"(log end 5); starting at the log end 5 instead (failOnDataLoss=false)")
    assert [r["offset"] for r in out.rows("data")] == list(range(5, 25))


def _recreate(kafka, topic: str, partitions: int = 1) -> None:
    import time

    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.delete_topics([topic]).values():
        f.result(15)
    deadline = time.monotonic() + 15
    while True:
        try:
            for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
                f.result(15)
            break
        except Exception:  # noqa: BLE001 - the deletion may still be in progress
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_topic_deleted_and_recreated_offsets_go_back(spark, kafka, tmp_path):
    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": b"old-%d" % i} for i in range(30)])
    opts = _opts(kafka, topic)
    ck, out = str(tmp_path / "ck"), BatchCollector()
    run_available_now(spark, opts, ck, out)                   # read up to offset 30
    _recreate(kafka, topic)
    kafka.produce(topic, [{"value": b"new-%d" % i} for i in range(10)])
    with pytest.raises(Exception, match=rf"{topic}-0's offset was changed from 30 to 10, some data may have been "
                                        r"missed .*set failOnDataLoss=false"):
        run_available_now(spark, opts, ck, out)
    run_available_now(spark, {**opts, "failOnDataLoss": "false"}, ck, out)
    (err,) = out.rows("error")
    assert err["error"] == (f"{topic}-0's offset was changed from 30 to 10, some data may have been missed (the "
                            f"topic was deleted and recreated, or its log truncated); reading it from its new "
                            f"start 0 (failOnDataLoss=false)")
    values = [bytes(r["value"]) for r in out.rows("data")]
    assert values == [b"old-%d" % i for i in range(30)] + [b"new-%d" % i for i in range(10)]


def test_option_errors_surface_at_load_with_our_message(spark, kafka):
    for options, message in [({"subscribe": "a", "startingOffsetz": "earliest"}, "unknown option(s) ['startingoffsetz']"),
                             ({"subscribe": "a", "maxEventTimeAheadMs": "soon"},
                              "option 'maxEventTimeAheadMs' must be an integer, got 'soon'")]:
        for read in (spark.readStream, spark.read):
            reader = read.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
            for k, v in options.items():
                reader = reader.option(k, v)
            with pytest.raises(Exception) as e:
                reader.load()                                 # before any start()
            assert message in str(e.value) and "UnboundLocalError" not in str(e.value)


def test_broker_unreachable_on_the_read_side_names_servers_and_topic():
    """An executor's read of a range when no broker answers (a real client, a closed port)."""
    opts = parse_source_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "events",
                                 "kafkaConsumer.pollTimeoutMs": "2000"}, streaming=True)
    with pytest.raises(kafka_read.KafkaUnavailableError) as e:
        list(_read(opts, OffsetRange("events", 0, 5, 9, None, now_ms())))
    assert str(e.value).startswith("cannot read topic events-0 offsets [5, 9) from Kafka at "
                                   "kafka.bootstrap.servers='127.0.0.1:9': ")


def test_broker_down_mid_stream_names_servers_and_topic(spark, tmp_path):
    """A broker of its own (the session's serves the other tests), stopped under a running query."""
    import time

    from dataflow_kafka.brokers import kafka_broker
    from tests.support import KafkaHelper

    with kafka_broker(own_broker_kind(), workdir=tmp_path / "broker") as b:
        helper = KafkaHelper(b.bootstrap_servers)
        topic = helper.topic(1)
        helper.produce(topic, [{"value": b"%d" % i} for i in range(5)])
        reader = spark.readStream.format("dataflow-kafka")
        for k, v in {**_opts(helper, topic), "kafkaConsumer.pollTimeoutMs": "3000"}.items():
            reader = reader.option(k, v)
        out = BatchCollector()
        q = (reader.load().writeStream.foreachBatch(out).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
        try:
            deadline = time.monotonic() + 120
            while not out.rows("data") and q.isActive and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(out.rows("data")) == 5
            b.stop()
            try:
                q.awaitTermination(120)
            except Exception:  # noqa: BLE001 - the failure is inspected through q.exception()
                pass
        finally:
            q.stop()
    assert q.exception() is not None
    assert (f"cannot reach Kafka at kafka.bootstrap.servers={b.bootstrap_servers!r} to read topic(s) {topic}: "
            in str(q.exception()))


def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(kafka):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic = kafka.topic(2)
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(10)])
    opts = parse_source_options(_opts(kafka, topic, minOffsetsPerTrigger="15", maxTriggerDelay="1h"), streaming=True)
    reader = DataflowKafkaStreamReader(opts)
    try:
        start = reader.initialOffset()
        assert reader.latestOffset(start, ReadAllAvailable()) is start      # 10 < 15 new records: wait
        old = {**start, "batchTimeMs": start["batchTimeMs"] - 3_600_000}    # maxTriggerDelay passed
        assert reader.latestOffset(old, ReadAllAvailable())["partitions"] == {topic: {"0": {"o": 5, "s": 0},
                                                                                      "1": {"o": 5, "s": 0}}}
        kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 2} for i in range(10, 16)])
        end = reader.latestOffset(start, ReadAllAvailable())                # 16 >= 15: a batch
        assert end["partitions"] == {topic: {"0": {"o": 8, "s": 0}, "1": {"o": 8, "s": 0}}}
        # maxRecordsPerPartition splits each range into tasks of at most that many records.
        split = DataflowKafkaStreamReader(parse_source_options(_opts(kafka, topic, maxRecordsPerPartition="3"),
                                                               streaming=True))
        tasks = split.partitions(start, end)
        assert sorted((r.partition, r.start, r.end) for r in tasks) == [
            (p, s, e) for p in (0, 1) for s, e in ((0, 2), (2, 5), (5, 8))]
    finally:
        reader.stop()


def test_max_records_per_partition_reads_every_record(spark, kafka):
    topic = kafka.topic(1)
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(10)])
    reader = spark.read.format("dataflow-kafka")
    for k, v in _opts(kafka, topic, maxRecordsPerPartition="4").items():
        reader = reader.option(k, v)
    df = reader.load()
    assert df.rdd.getNumPartitions() == 3
    assert sorted(r["offset"] for r in df.filter("kind = 'data'").collect()) == list(range(10))


def _transactions_supported(kafka) -> bool:
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"probe-{now_ms()}"})
    try:
        p.init_transactions(10)
        return True
    except KafkaException:
        return False


def test_read_committed_skips_aborted_records(spark, kafka, tmp_path):
    from confluent_kafka import Producer

    if not _transactions_supported(kafka):
        pytest.skip("the broker does not support transactions (kafka.isolation.level is passed to librdkafka "
                    "as given: test_spark_options_with_spark_meanings)")
    topic = kafka.topic(1)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions(10)
    for i, commit in enumerate((True, False, True)):
        p.begin_transaction()
        p.produce(topic, b"%d" % i)
        p.flush(10)
        (p.commit_transaction if commit else p.abort_transaction)(10)
    rows = {}
    for level in ("read_committed", "read_uncommitted"):
        reader = spark.read.format("dataflow-kafka")
        for k, v in _opts(kafka, topic, **{"kafka.isolation.level": level}).items():
            reader = reader.option(k, v)
        rows[level] = sorted(bytes(r["value"]) for r in reader.load().filter("kind = 'data'").collect())
    assert rows["read_committed"] == [b"0", b"2"]
    assert rows["read_uncommitted"] == [b"0", b"1", b"2"]
