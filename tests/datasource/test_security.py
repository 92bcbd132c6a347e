"""Nobody gets in without credentials: the source, the control topic, the range-stats
topic and the sink on an Apache Kafka broker with SASL_PLAINTEXT, SCRAM-SHA-512 and ACLs
(``StandardAuthorizer``, nothing allowed without an ACL).

Principals: ``alice`` may do everything the query needs; ``bob`` may DESCRIBE the input topic but
not READ it; ``carol`` may not WRITE the sink topic; ``dave`` may READ the range-stats topic but not WRITE it;
``erin`` may not READ the control topic. Each denial fails the query with an error naming the
principal, the topic and the operation; a wrong password fails it naming the servers and
"authentication"; no password or JAAS line shows up in the checkpoint, the progress or the output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import now_ms, run_source_to_sink


USERS = {"alice": "alice-secret-4f1c", "bob": "bob-secret-77aa", "carol": "carol-secret-0b3e",
         "dave": "dave-secret-9d21", "erin": "erin-secret-5c6f"}
IN, OUT, CONTROL, STATS = "sec-in", "sec-out", "sec-control", "sec-range-stats"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A SCRAM broker of its own (the session's broker serves the other tests) with the topics,
    some input and the ACLs above."""
    from confluent_kafka.admin import (
        AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType,
    )

    from dataflow_kafka.brokers import Scram, kafka_broker

    scram = Scram(users=USERS)
    with kafka_broker("kafka", workdir=tmp_path_factory.mktemp("scram"), scram=scram) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers, **b.client_conf})
        for f in admin.create_topics([NewTopic(IN, 2, 1), NewTopic(OUT, 1, 1), NewTopic(CONTROL, 1, 1),
                                      NewTopic(STATS, 1, 1)]).values():
            f.result(30)

        def allow(user, rtype, name, op, pattern=ResourcePatternType.LITERAL):
            return AclBinding(rtype, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)

        T, G = ResourceType.TOPIC, ResourceType.GROUP
        acls = [allow("bob", T, IN, AclOperation.DESCRIBE)]
        for user in ("alice", "carol", "dave", "erin"):
            acls.append(allow(user, T, IN, AclOperation.READ))
            acls.append(allow(user, G, "dataflow-kafka", AclOperation.READ, ResourcePatternType.PREFIXED))
            if user != "erin":
                acls.append(allow(user, T, CONTROL, AclOperation.READ))
            acls.append(allow(user, T, STATS, AclOperation.READ))
            if user != "dave":
                acls.append(allow(user, T, STATS, AclOperation.WRITE))
            if user != "carol":
                acls.append(allow(user, T, OUT, AclOperation.WRITE))
        for f in admin.create_acls(acls).values():
            f.result(30)
        t = now_ms() - 60_000
        _produce(b, IN, [{"value": json.dumps({"ts": t + i, "n": i}).encode(), "partition": i % 2}
                         for i in range(200)])
        yield b


def _produce(broker, topic, records) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap_servers, **broker.client_conf})
    for r in records:
        p.produce(topic, r["value"], partition=r.get("partition", 0))
    assert p.flush(30) == 0


def _source_options(broker, user: str, password: str | None = None, spark_names: bool = True, **extra) -> dict:
    login = (broker.scram.spark_options(user, password) if spark_names else
             {f"kafka.{k}": v for k, v in broker.scram.client_conf(user, password).items()})
    return {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": IN, "startingOffsets": "earliest",
            "eventTimeField": "ts", "controlTopic": CONTROL, "rangeStatsTopic": STATS, "maxOffsetsPerTrigger": "60",
            **login, **extra}


def _run(spark, broker, tmp_path, user, password=None, spark_names=True, timeout_s=120, sink_user=None):
    """source (as ``user``) -> dataflow-kafka sink (as ``sink_user``, default ``user``), under
    Trigger.AvailableNow; returns (query or None, the error or None, seconds until it ended)."""
    sink_login = (broker.scram.spark_options(sink_user or user, password if sink_user is None else None)
                  if spark_names else {f"kafka.{k}": v for k, v in
                                       broker.scram.client_conf(sink_user or user, password).items()})
    sink = {"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": OUT, **sink_login}
    return run_source_to_sink(spark, _source_options(broker, user, password, spark_names), sink, tmp_path / "ck",
                              timeout_s)


def _no_secret_in(text: str) -> None:
    for secret in USERS.values():
        assert secret not in text
    assert "ScramLoginModule required" not in text


def _checkpoint_text(tmp_path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in Path(tmp_path / "ck").rglob("*") if p.is_file())


@pytest.mark.parametrize("spark_names", [True, False], ids=["spark-option-names", "librdkafka-names"])
def test_source_control_range_stats_and_sink_work_for_a_principal_with_the_acls(spark, secured, tmp_path, capfd,
                                                                                spark_names):
    before = _count(secured, OUT)
    stats_before = _count(secured, STATS)
    q, error, _ = _run(spark, secured, tmp_path, "alice", spark_names=spark_names)
    assert error is None, error
    assert _count(secured, OUT) - before == 200
    assert _count(secured, STATS) > stats_before        # the tasks wrote range stats as alice
    progress = str(q.recentProgress)
    # a command written after the query started reaches the next run's offset log
    command = '{"op": "noop", "id": "%s"}' % tmp_path.name
    _produce(secured, CONTROL, [{"value": command.encode()}])
    q, error, _ = _run(spark, secured, tmp_path, "alice", spark_names=spark_names)
    assert error is None, error
    assert json.dumps(command) in _checkpoint_text(tmp_path), "the control command is not in the offset log"
    progress += str(q.recentProgress)
    _no_secret_in(_checkpoint_text(tmp_path) + progress + "".join(capfd.readouterr()))


def _count(broker, topic) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "dataflow-kafka-count",
                  **broker.client_conf})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions)
    finally:
        c.close()


def test_a_wrong_password_fails_within_30_s_naming_servers_and_authentication(spark, secured, tmp_path, capfd):
    _, error, took = _run(spark, secured, tmp_path, "alice", password="not-the-password")
    assert error is not None
    msg = str(error)
    assert "Kafka authentication failed" in msg and f"kafka.bootstrap.servers='{secured.bootstrap_servers}'" in msg
    assert "for user 'alice'" in msg, msg[:2000]
    assert took < 45, took
    _no_secret_in(msg + "".join(capfd.readouterr()) + _checkpoint_text(tmp_path))
    assert "not-the-password" not in msg


@pytest.mark.parametrize("user, operation, topic", [
    ("bob", "READ", IN),          # may DESCRIBE the input topic, not READ it
    ("erin", "READ", CONTROL),    # may not read the control topic
    ("dave", "WRITE", STATS),     # may not write range stats
    ("carol", "WRITE", OUT),      # may not write the sink topic
])
def test_a_missing_acl_fails_naming_principal_topic_and_operation(spark, secured, tmp_path, capfd, user, operation,
                                                                 topic):
    _, error, took = _run(spark, secured, tmp_path, user)
    assert error is not None, f"{user} was let through"
    msg = str(error)
    assert f"User:{user} is not authorized to {operation} topic '{topic}'" in msg, msg[:3000]
    assert took < 60, took
    _no_secret_in(msg + "".join(capfd.readouterr()))


def test_a_task_denied_read_names_the_topic_and_operation(secured):
    """Executor side, past the driver's check (an ACL removed while the query runs): the read of a
    range fails naming the principal, topic and READ."""
    from dataflow_kafka.datasource.kafka_security import KafkaAuthorizationError
    from dataflow_kafka.datasource.options import parse_source_options
    from dataflow_kafka.datasource.source import OffsetRange, _read

    opts = parse_source_options(_source_options(secured, "bob"), streaming=True)
    with pytest.raises(KafkaAuthorizationError, match=f"User:bob is not authorized to READ topic '{IN}'"):
        list(_read(opts, OffsetRange(IN, 0, 0, 10, None, now_ms())))


def test_a_task_denied_write_names_the_topic_and_operation(secured):
    """Executor side of the sink, past the driver's check (rows that name their topic, or an ACL
    removed while the query runs): the task fails naming the principal, topic and WRITE."""
    import pyarrow as pa

    from dataflow_kafka.datasource import sink
    from dataflow_kafka.datasource.kafka_security import KafkaAuthorizationError
    from dataflow_kafka.datasource.options import parse_sink_options

    opts = parse_sink_options({"kafka.bootstrap.servers": secured.bootstrap_servers, "topic": OUT,
                               "kafka.delivery.timeout.ms": "10000", **secured.scram.spark_options("carol")})
    batch = pa.RecordBatch.from_pydict({"value": [b"1", b"2"]}, schema=pa.schema([("value", pa.binary())]))
    with pytest.raises(KafkaAuthorizationError, match=f"User:carol is not authorized to WRITE topic '{OUT}'"):
        sink._produce(opts, iter([batch]))
