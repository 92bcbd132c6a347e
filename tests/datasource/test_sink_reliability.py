"""The sink when things go wrong: an unreachable broker, a broker stopping mid-stream, a fatal
producer error, and the exactly-once option (Kafka transactions) across retries and replays."""

from __future__ import annotations

import time
from collections import Counter

import pyarrow as pa
import pytest

from dataflow_kafka.brokers.launcher import free_port
from dataflow_kafka.datasource import sink
from dataflow_kafka.datasource.options import OptionError, parse_sink_options


@pytest.fixture
def fresh_producers():
    sink.close_producers()
    yield sink.producer_stats()
    sink.close_producers()


def _opts(bootstrap: str, topic: str, **extra) -> "sink.SinkOptions":
    return parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic, **extra})


def _writer(opts):
    from pyspark.sql.types import BinaryType, StructField, StructType

    return sink.DataflowKafkaBatchWriter(opts, StructType([StructField("value", BinaryType())]))


def _batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": values}, schema=pa.schema([("value", pa.binary())]))


def _read(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Values of ``topic`` (every partition, start to end of log) as a consumer with ``isolation``
    sees them. Polls to end-of-partition: a transactional log ends with a control record, which
    no consumer receives."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False, "receive.message.max.bytes": 400_000_000})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out, eof, deadline = [], set(), time.monotonic() + 30
        while len(eof) < len(parts) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                eof.add(m.partition())
                continue
            out.append(m.value())
        assert len(eof) == len(parts), f"{topic}: no end of partition within 30 s"
        return out
    finally:
        c.close()


# -- clear errors ---------------------------------------------------------------------------------------

def test_delivery_timeout_defaults_to_30_s_and_a_bad_value_names_the_option():
    assert sink.PRODUCER_DEFAULTS["delivery.timeout.ms"] == 30_000
    with pytest.raises(OptionError, match=r"option 'kafka.delivery.timeout.ms' must be a whole number .* '30s'"):
        _writer(_opts("127.0.0.1:9", "t", **{"kafka.delivery.timeout.ms": "30s"}))
    with pytest.raises(OptionError, match=r"'exactlyOnce' applies to writeStream only"):
        _writer(_opts("127.0.0.1:9", "t", exactlyOnce="true"))


def test_a_record_refused_at_once_and_one_whose_delivery_failed_count_as_one_error():
    # produce() refuses a record for a partition its metadata lacks with the text "Unable to produce
    # message: Local: Unknown partition"; when the metadata arrives later, the delivery report says
    # "Local: Unknown partition". Which one a record gets is timing: the failure counts them together.
    from confluent_kafka import KafkaError

    task = sink._TaskDelivery(sink._Entry({"bootstrap.servers": "127.0.0.1:9"}))
    task.sent = 5
    at_once = KafkaError(KafkaError._UNKNOWN_PARTITION, "Unable to produce message: Local: Unknown partition")
    for err in [at_once, at_once, KafkaError(KafkaError._UNKNOWN_PARTITION)] + [KafkaError(KafkaError._UNKNOWN_PARTITION)] * 2:
        task.on_delivery(err, sink._Refused("t", 5))
    msg = task.failure({"bootstrap.servers": "127.0.0.1:9"}, 0)
    assert "delivery failed for 5 of 5 records: topic 't' partition 5: Local: Unknown partition " \
        "(_UNKNOWN_PARTITION): 5 records (" in msg, msg


def test_a_flush_that_raises_the_kafka_error_object_itself_fails_the_task_naming_it():
    # Seen once in a clean-clone run: a fenced transactional producer's flush() raised its
    # KafkaError object itself, which is not an exception class (only a bare except catches it)
    # and crashed the pytest worker. Reproduced with the same C call confluent-kafka makes.
    import ctypes

    from confluent_kafka import KafkaError

    def raise_raw(obj):
        for o in (type(obj), obj):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(o))      # PyErr_Restore steals both
        ctypes.pythonapi.PyErr_Restore(ctypes.py_object(type(obj)), ctypes.py_object(obj), None)

    class Producer:
        def __init__(self, err):
            self.err = err

        def flush(self, timeout):
            raise_raw(self.err)

        def poll(self, timeout):
            return 0

        def abort_transaction(self, timeout):
            return None

    conf = {"bootstrap.servers": "127.0.0.1:9"}
    for err, expected in [
            (KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True),
             r"^dataflow-kafka sink: the producer hit a fatal error: fenced by a newer instance \(_FENCED\) at "
             r"kafka.bootstrap.servers='127.0.0.1:9'"),
            (KafkaError(KafkaError._TRANSPORT, "broker gone"),
             r"^dataflow-kafka sink: the producer's flush raised KafkaError\{code=_TRANSPORT.*broker gone.* at "
             r"kafka.bootstrap.servers='127.0.0.1:9'")]:
        entry = sink._Entry(conf)
        entry.producer = Producer(err)
        with pytest.raises(RuntimeError, match=expected):
            sink._flush(sink._TaskDelivery(entry), conf, 1.0)


def test_unreachable_broker_fails_the_task_naming_bootstrap_servers_and_the_cause(fresh_producers):
    addr = f"127.0.0.1:{free_port()}"       # nothing listens there
    w = _writer(_opts(addr, "nowhere", **{"kafka.delivery.timeout.ms": "1500"}))
    with pytest.raises(RuntimeError) as failed:
        w.write(iter([_batch([b"a", b"b"])]))
    msg = str(failed.value)
    assert msg.startswith("dataflow-kafka sink: delivery failed for 2 of 2 records: topic 'nowhere' partition None: "
                          "Local: Message timed out (_MSG_TIMED_OUT): 2 records"), msg
    assert f"kafka.bootstrap.servers='{addr}', kafka.delivery.timeout.ms=1500; last client error: " in msg, msg
    assert "Connection refused" in msg, msg
    assert sink.producer_stats()["cached"] == 0    # nothing acknowledged, nothing kept


@pytest.mark.kafka
def test_broker_stopping_mid_stream_fails_the_task_naming_servers_and_topic(fresh_producers, tmp_path, monkeypatch):
    from dataflow_kafka.brokers import kafka_broker, launcher
    from tests.support import own_broker_kind

    # the broker goes away under the producer (Broker.stop would first close this process's producers)
    monkeypatch.setattr(launcher, "close_producers", lambda: None)

    with kafka_broker(own_broker_kind(), workdir=tmp_path) as b:
        from tests.support import KafkaHelper

        topic = KafkaHelper(b.bootstrap_servers).topic(1, prefix="down")
        w = _writer(_opts(b.bootstrap_servers, topic, **{"kafka.delivery.timeout.ms": "2000"}))
        assert w.write(iter([_batch([b"1", b"2"])])).records == 2
        b.stop()
        # librdkafka reports a repeated connection error once: let it come before the next task
        time.sleep(1.5)
        with pytest.raises(RuntimeError) as failed:
            w.write(iter([_batch([b"3"])]))
    msg = str(failed.value)
    assert f"topic '{topic}' partition 0: Local: Message timed out (_MSG_TIMED_OUT): 1 record " in msg, msg
    assert f"kafka.bootstrap.servers='{b.bootstrap_servers}'" in msg and "Connection refused" in msg, msg


def test_a_fatal_error_during_a_task_fails_it_clearly_and_the_retry_gets_a_new_producer(kafka, fresh_producers):
    from confluent_kafka import KafkaError

    topic = kafka.topic(1, prefix="fatal")
    w = _writer(_opts(kafka.bootstrap, topic))
    created = fresh_producers["created"]

    def batches():
        yield _batch([b"1", b"2"])
        # what librdkafka's error_cb reports after a broker lost acknowledged records
        (entry,) = sink._producers._entries.values()
        entry.on_error(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "injected", fatal=True))
        yield _batch([b"3"])

    with pytest.raises(RuntimeError, match=r"^dataflow-kafka sink: the producer hit a fatal error: injected "
                                           r"\(OUT_OF_ORDER_SEQUENCE_NUMBER\) at kafka.bootstrap.servers='.*'; the "
                                           r"producer is discarded and Spark's retry of this task writes with a new one"):
        w.write(batches())
    assert sink.producer_stats() == {"created": created + 1, "dropped": fresh_producers["dropped"] + 1, "cached": 0}
    retry = w.write(iter([_batch([b"1", b"2", b"3"])]))
    assert (retry.records, retry.producers_created) == (3, created + 2)


# -- exactly once -------------------------------------------------------------------------------------

def test_exactly_once_a_replayed_or_retried_task_writes_each_row_once(kafka):
    topic, commits = kafka.topic(2, prefix="eos"), kafka.topic(1, prefix="eos-commits")
    opts = _opts(kafka.bootstrap, topic, exactlyOnce="true", exactlyOnceCommitTopic=commits)
    rows = [b"r%d" % i for i in range(30)]

    def failing():
        yield _batch(rows[:10])
        raise RuntimeError("task killed")

    # attempt 0 of (batch 0, partition 0) fails after producing 10 rows: they are aborted
    with pytest.raises(RuntimeError, match="task killed"):
        sink.write_exactly_once(opts, failing(), "q", 0, 0)
    assert sink.committed_batch(opts.kafka, commits, "q", 0) is None
    # the retry writes the rows; a replay of the same task (after a crash) writes nothing
    first = sink.write_exactly_once(opts, iter([_batch(rows[:20])]), "q", 0, 0)
    again = sink.write_exactly_once(opts, iter([_batch(rows[:20])]), "q", 0, 0)
    assert (first.records, first.skipped, again.records, again.skipped) == (20, False, 0, True)
    # another partition of the same batch and the next batch are not confused with it
    assert sink.write_exactly_once(opts, iter([_batch(rows[20:25])]), "q", 0, 1).records == 5
    assert sink.write_exactly_once(opts, iter([_batch(rows[25:])]), "q", 1, 0).records == 5
    assert sink.committed_batch(opts.kafka, commits, "q", 0) == 1
    assert Counter(_read(kafka.bootstrap, topic, "read_committed")) == Counter(rows)
    # the aborted attempt's records were purged before they were sent, or are in the log as
    # aborted records (invisible to read_committed consumers)
    uncommitted = Counter(_read(kafka.bootstrap, topic, "read_uncommitted"))
    assert Counter(rows) <= uncommitted <= Counter(rows) + Counter(rows[:10])
    markers = _read(kafka.bootstrap, commits, "read_committed")
    assert sorted(markers) == sorted(
        b'{"query": "q", "batch": %d, "partition": %d, "records": %d}' % t for t in ((0, 0, 20), (0, 1, 5), (1, 0, 5)))


def test_exactly_once_a_newer_attempt_fences_a_zombie(kafka):
    """Two attempts of one task at once (e.g. a speculative or a lost-but-alive task): the
    newer one's InitProducerId fences the older, whose commit fails; rows appear once."""
    topic, commits = kafka.topic(1, prefix="eos-z"), kafka.topic(1, prefix="eos-z-commits")
    opts = _opts(kafka.bootstrap, topic, exactlyOnce="true", exactlyOnceCommitTopic=commits)
    outcome = {}

    def zombie():
        yield _batch([b"z1"])
        outcome["newer"] = sink.write_exactly_once(opts, iter([_batch([b"a", b"b"])]), "qz", 0, 0)
        yield _batch([b"z2"])

    with pytest.raises(RuntimeError, match=r"^dataflow-kafka sink: the producer hit a fatal error: .*fenced.* "
                                           r"\(_FENCED\) at kafka.bootstrap.servers="):
        sink.write_exactly_once(opts, zombie(), "qz", 0, 0)
    assert outcome["newer"].records == 2
    assert sorted(_read(kafka.bootstrap, topic, "read_committed")) == [b"a", b"b"]


# -- in real streaming queries --------------------------------------------------------------------------

def _run(spark, kafka, src: str, dst: str, ck, **options) -> None:
    df = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
          .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20")
          .load().filter("kind = 'data'").selectExpr("key", "value"))
    w = (df.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", dst).option("checkpointLocation", str(ck)).trigger(availableNow=True))
    for k, v in options.items():
        w = w.option(k, v)
    q = w.start()
    assert q.awaitTermination(240)
    assert q.exception() is None


def test_exactly_once_streaming_a_replayed_batch_is_written_once(spark, kafka, tmp_path):
    """A crash after the sink wrote a batch and before Spark committed it (here: the batch's file
    in the checkpoint's commit log removed) replays the batch: the at-least-once sink writes it
    again, the exactly-once sink writes nothing."""
    src = kafka.topic(2, prefix="eos-in")
    n = 40
    kafka.produce(src, [{"key": b"k%d" % i, "value": b"%d" % i, "partition": i % 2} for i in range(n)])
    commits = kafka.topic(1, prefix="eos-commits")
    copies = {}
    for mode, options in (("at-least-once", {}), ("exactly-once", {"exactlyOnce": "true",
                                                                    "exactlyOnceCommitTopic": commits})):
        dst, ck = kafka.topic(2, prefix="eos-out"), tmp_path / mode
        _run(spark, kafka, src, dst, ck, **options)
        last = max((ck / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
        last.unlink()                                    # "crashed" before Spark's commit of that batch
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
        _run(spark, kafka, src, dst, ck, **options)      # the restart replays it
        copies[mode] = Counter(Counter(_read(kafka.bootstrap, dst, "read_committed")).values())
    # batches of 20 rows over 2 source partitions: the replayed batch's 20 rows twice, or once
    assert copies == {"at-least-once": {1: n - 20, 2: 20}, "exactly-once": {1: n}}, copies


def test_streaming_to_an_unreachable_broker_fails_naming_bootstrap_servers(spark, tmp_path):
    addr = f"127.0.0.1:{free_port()}"
    q = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 3).load()
         .selectExpr("CAST(value AS STRING) AS value").writeStream.format("dataflow-kafka")
         .option("kafka.bootstrap.servers", addr).option("topic", "t").option("kafka.delivery.timeout.ms", "1000")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception) as failed:
        q.awaitTermination(120)
    err = str(failed.value)
    assert "records: topic 't' partition None: Local: Message timed out (_MSG_TIMED_OUT)" in err, err[:3000]
    assert f"(kafka.bootstrap.servers='{addr}', kafka.delivery.timeout.ms=1000; last client error: " in err, err[:3000]
    assert "Connection refused" in err, err[:3000]
