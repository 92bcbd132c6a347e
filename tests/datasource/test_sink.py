"""The sink's producers: one per Python worker process and Kafka configuration, reused across tasks
and micro-batches; a task returns only after all its records are acknowledged; a delivery error
fails its own task only; a producer that reported a fatal error is replaced."""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from dataflow_kafka.datasource import sink
from dataflow_kafka.datasource.options import parse_sink_options
from dataflow_kafka.datasource.source import DataflowKafkaDataSource
from tests.support import now_ms


@pytest.fixture
def fresh_producers():
    """In-process writes (no Spark) start and end without cached sink producers in this process;
    yields this process's counts before the test (they only grow)."""
    sink.close_producers()
    yield sink.producer_stats()
    sink.close_producers()


def _writer(bootstrap: str, topic: str):
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    schema = StructType([StructField("value", BinaryType()), StructField("key", BinaryType()),
                         StructField("partition", IntegerType())])
    opts = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic})
    return sink.DataflowKafkaBatchWriter(opts, schema)


def _batch(values: list[bytes], partitions: list[int | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": values, "key": values, "partition": partitions},
                                      schema=pa.schema([("value", pa.binary()), ("key", pa.binary()),
                                                        ("partition", pa.int32())]))


# -- in this process (real broker, no JVM) ----------------------------------------------------------

def test_tasks_of_one_process_share_one_producer_and_each_waits_for_its_records(kafka, fresh_producers):
    topic = kafka.topic(2, prefix="sink")
    w = _writer(kafka.bootstrap, topic)
    created = fresh_producers["created"]
    written = []
    for task in range(5):
        values = [b"t%d-%d" % (task, i) for i in range(50)]
        res = w.write(iter([_batch(values[:20], [i % 2 for i in range(20)]), _batch(values[20:], [None] * 30)]))
        written += values
        assert (res.records, res.pid, res.producers_created) == (50, os.getpid(), created + 1)
        # returned only after every record was acknowledged: all of them are readable now
        assert sorted(m.value() for m in kafka.consume_all(topic)) == sorted(written)
    assert sink.producer_stats() == {**fresh_producers, "created": created + 1, "cached": 1}
    # a task without rows does not need a producer at all
    assert w.write(iter([])).records == 0


def test_a_delivery_error_fails_its_task_with_topic_and_partition_and_not_the_next_task(kafka, fresh_producers):
    topic = kafka.topic(2, prefix="sink-err")
    w = _writer(kafka.bootstrap, topic)
    # the producer does not know the topic yet: the record waits for metadata, then its delivery fails
    with pytest.raises(RuntimeError, match=rf"delivery failed for 1 of 3 records: topic '{topic}' partition 7: "
                                           r".*Unknown partition \(_UNKNOWN_PARTITION\): 1 record \(kafka.bootstrap.servers="):
        w.write(iter([_batch([b"a", b"b", b"c"], [0, 7, 1])]))
    # the producer knows the topic now: produce() itself refuses the partition
    with pytest.raises(RuntimeError, match=rf"delivery failed for 1 of 2 records: topic '{topic}' partition 9: "
                                           r".*Unknown partition \(_UNKNOWN_PARTITION\): 1 record \(kafka.bootstrap.servers="):
        w.write(iter([_batch([b"d", b"e"], [1, 9])]))
    # the failed tasks leave nothing behind: the next task succeeds on the same producer
    res = w.write(iter([_batch([b"f", b"g"], [0, 1])]))
    assert (res.records, res.producers_created) == (2, fresh_producers["created"] + 1)
    assert sink.producer_stats()["dropped"] == fresh_producers["dropped"]
    # at least once: the failed tasks' good records may be in Kafka too (they are re-run); the
    # successful task's records are
    assert {b"f", b"g"} <= {m.value() for m in kafka.consume_all(topic)}


def test_a_producer_that_reported_a_fatal_error_is_replaced(kafka, fresh_producers):
    from confluent_kafka import KafkaError

    topic = kafka.topic(1, prefix="sink-fatal")
    w = _writer(kafka.bootstrap, topic)
    created, dropped = fresh_producers["created"], fresh_producers["dropped"]
    assert w.write(iter([_batch([b"1"], [0])])).producers_created == created + 1
    entry = sink._producers.acquire(dict(w.opts.kafka))
    # librdkafka reports fatal errors (e.g. the idempotent producer's OUT_OF_ORDER_SEQUENCE_NUMBER
    # after a broker lost acknowledged records) through error_cb; the cache's callback is what a
    # real one calls
    entry.on_error(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "injected", fatal=True))
    res = w.write(iter([_batch([b"2", b"3"], [0, 0])]))
    assert (res.records, res.producers_created) == (2, created + 2)
    assert sink.producer_stats() == {"created": created + 2, "dropped": dropped + 1, "cached": 1}
    # a non-fatal client error keeps the producer
    sink._producers.acquire(dict(w.opts.kafka)).on_error(KafkaError(KafkaError._TRANSPORT, "injected"))
    assert w.write(iter([_batch([b"4"], [0])])).producers_created == created + 2
    assert sorted(m.value() for m in kafka.consume_all(topic)) == [b"1", b"2", b"3", b"4"]


# -- in a real streaming query -----------------------------------------------------------------------

class _RecordingWriter(sink.DataflowKafkaStreamWriter):
    """The sink's stream writer; the driver-side commit also appends the tasks' commit messages
    to a file (the only change)."""

    def __init__(self, opts, schema, log_path: str) -> None:
        super().__init__(opts, schema)
        self.log_path = log_path

    def commit(self, messages, batchId: int) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"batch": batchId, "tasks": [
                None if m is None else [m.records, m.pid, m.producers_created] for m in messages]}) + "\n")


class RecordingSink(DataflowKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "dataflow-kafka-recording"

    def streamWriter(self, schema, overwrite: bool):
        opts = {k: v for k, v in self.options.items() if k.lower() != "commitlog"}
        return _RecordingWriter(parse_sink_options(opts), schema, self.options["commitLog"])


def _commits(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _source(spark, kafka, topic: str, **options):
    reader = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().filter("kind = 'data'")


def test_the_access_check_runs_once_per_process_and_configuration_not_per_commit(kafka, monkeypatch):
    """Spark's commit runner creates the stream writer again for every micro-batch's commit: the
    topic ACL check (an admin client and a DescribeTopics round trip) runs once per process and
    Kafka configuration; another topic or configuration is checked on its own."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from dataflow_kafka.datasource import kafka_security

    asked = []
    real = kafka_security.require_topic_operations

    def counting(conf, needs, why, *a, **kw):
        asked.append(sorted(needs))
        return real(conf, needs, why, *a, **kw)

    monkeypatch.setattr(kafka_security, "require_topic_operations", counting)
    monkeypatch.setattr(sink, "_writes_prepared", set())
    schema = StructType([StructField("value", BinaryType())])
    a, b = kafka.topic(1, prefix="sink-acl"), kafka.topic(1, prefix="sink-acl")
    source = DataflowKafkaDataSource({"kafka.bootstrap.servers": kafka.bootstrap, "topic": a})
    for batch_id in range(3):      # what the commit runner does per micro-batch
        source.streamWriter(schema, False).commit([], batch_id)
    assert asked == [[a]]
    DataflowKafkaDataSource({"kafka.bootstrap.servers": kafka.bootstrap, "topic": b}).streamWriter(schema, False)
    DataflowKafkaDataSource({"kafka.bootstrap.servers": kafka.bootstrap, "topic": a,
                             "kafka.client.id": "other"}).streamWriter(schema, False)
    assert asked == [[a], [b], [a]]


def test_the_exactly_once_commit_topic_is_checked_once_per_process_and_configuration(kafka, monkeypatch):
    """The exactly-once stream writer, created again for every micro-batch, finds or creates its
    commit topic (an admin client and a metadata round trip) once per process and configuration;
    a commit topic that does not exist yet is created."""
    from confluent_kafka.admin import AdminClient
    from pyspark.sql.types import BinaryType, StructField, StructType

    from dataflow_kafka.brokers.admin import admin_conf, unique_topic

    ensured = []
    real = sink.ensure_topic

    def counting(conf, topic, *a, **kw):
        ensured.append(topic)
        return real(conf, topic, *a, **kw)

    monkeypatch.setattr(sink, "ensure_topic", counting)
    monkeypatch.setattr(sink, "_writes_prepared", set())
    schema = StructType([StructField("value", BinaryType())])
    out, commits = kafka.topic(1, prefix="eos-once"), unique_topic("eos-once-commits")
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "topic": out, "exactlyOnce": "true",
            "exactlyOnceCommitTopic": commits}
    for batch_id in range(3):      # what the commit runner does per micro-batch
        DataflowKafkaDataSource(opts).streamWriter(schema, False).commit([], batch_id)
    assert ensured == [commits]
    md = AdminClient(admin_conf({"bootstrap.servers": kafka.bootstrap})).list_topics(commits, timeout=10).topics
    assert md[commits].error is None and len(md[commits].partitions) == 1
    DataflowKafkaDataSource({**opts, "kafka.client.id": "other"}).streamWriter(schema, False)
    assert ensured == [commits, commits]


def test_streaming_tasks_reuse_producers_across_micro_batches_and_lose_nothing(spark, kafka, tmp_path):
    spark.dataSource.register(RecordingSink)
    src, dst = kafka.topic(4, prefix="reuse-in"), kafka.topic(2, prefix="reuse-out")
    n = 1200
    kafka.produce(src, [{"key": b"k%d" % i, "value": json.dumps({"i": i, "ts": now_ms()}).encode(),
                         "partition": i % 4} for i in range(n)])
    log = tmp_path / "commits.jsonl"
    df = _source(spark, kafka, src, maxOffsetsPerTrigger="150").selectExpr(
        "key", "value", "CAST(partition % 2 AS INT) AS partition")
    q = (df.writeStream.format("dataflow-kafka-recording").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", dst).option("commitLog", str(log)).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(240)
    assert q.exception() is None
    commits = _commits(log)
    tasks = [t for c in commits for t in c["tasks"] if t is not None and t[0] > 0]
    assert len(commits) >= 8 and sum(t[0] for t in tasks) == n
    # within each worker process, the number of sink producers it ever created did not move during
    # this query: every task after the process's first one reused the producer
    created_by_pid: dict[int, set[int]] = defaultdict(set)
    for _, pid, created in tasks:
        created_by_pid[pid].add(created)
    assert all(len(v) == 1 for v in created_by_pid.values()), dict(created_by_pid)
    assert len(tasks) >= 3 * len(created_by_pid), (len(tasks), dict(created_by_pid))
    # nothing lost, nothing written twice (no task failed)
    written = kafka.consume_all(dst)
    assert len(written) == n
    assert Counter(m.key() for m in written) == Counter(b"k%d" % i for i in range(n))


def test_streaming_delivery_error_fails_the_query_naming_topic_and_partition(spark, kafka, tmp_path):
    spark.dataSource.register(RecordingSink)
    src, dst = kafka.topic(2, prefix="bad-in"), kafka.topic(2, prefix="bad-out")
    kafka.produce(src, [{"value": b"%d" % i, "partition": i % 2} for i in range(40)])
    log = tmp_path / "commits.jsonl"
    # batch 0 writes to existing partitions; batch 1's rows go to partition 5 of a 2-partition topic
    df = _source(spark, kafka, src, maxOffsetsPerTrigger="20").selectExpr(
        "value", "CAST(CASE WHEN offset < 10 THEN partition ELSE 5 END AS INT) AS partition")
    q = (df.writeStream.format("dataflow-kafka-recording").option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("topic", dst).option("commitLog", str(log)).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception) as failed:
        q.awaitTermination(240)
    err = str(failed.value)
    # batch 1 has 10 rows per source partition, one task per source partition (whether produce()
    # refused them at once or their delivery failed depends on the producer's metadata: same message)
    assert f"delivery failed for 10 of 10 records: topic '{dst}' partition 5: " in err, err[:3000]
    assert "Unknown partition (_UNKNOWN_PARTITION): 10 records" in err, err[:3000]
    assert [c["batch"] for c in _commits(log)] == [0]
    assert sorted(int(m.value()) for m in kafka.consume_all(dst)) == list(range(20))
    # the failure stays with its task: the next query in the same worker processes writes everything
    ok_dst = kafka.topic(2, prefix="ok-out")
    df2 = _source(spark, kafka, src).selectExpr("value", "CAST(partition AS INT) AS partition")
    q2 = (df2.writeStream.format("dataflow-kafka-recording").option("kafka.bootstrap.servers", kafka.bootstrap)
          .option("topic", ok_dst).option("commitLog", str(tmp_path / "ok.jsonl"))
          .option("checkpointLocation", str(tmp_path / "ck2")).trigger(availableNow=True).start())
    assert q2.awaitTermination(240)
    assert q2.exception() is None
    assert sorted(int(m.value()) for m in kafka.consume_all(ok_dst)) == list(range(40))


def test_ensure_topic_creates_the_partitions_asked_for_and_asking_creates_nothing(kafka):
    """Kafka creates a missing topic a producer-type client asks about (``auto.create.topics.enable``
    defaults to true, with ``num.partitions=1``): the sink's check must not, or it races the
    creation with 1 partition (the crash test's topic stayed at 1 of 2 partitions, 2026-11-27)."""
    from confluent_kafka.admin import AdminClient

    from dataflow_kafka.brokers.admin import admin_conf, unique_topic
    from dataflow_kafka.datasource.sink import ensure_topic

    conf = {"bootstrap.servers": kafka.bootstrap}
    asked = unique_topic("asked")
    md = AdminClient(admin_conf(conf)).list_topics(asked, timeout=10).topics.get(asked)
    assert md is not None and md.error is not None                      # unknown, and stays so
    time.sleep(1.0)
    assert asked not in AdminClient(admin_conf(conf)).list_topics(timeout=10).topics
    for _ in range(3):
        topic = unique_topic("ensured")
        ensure_topic(conf, topic, partitions=3)
        assert len(AdminClient(admin_conf(conf)).list_topics(topic, timeout=10).topics[topic].partitions) == 3
    ensure_topic(conf, topic, partitions=5)                              # exists: kept as it is
    assert len(AdminClient(admin_conf(conf)).list_topics(topic, timeout=10).topics[topic].partitions) == 3
