"""The three-node embedded Kafka cluster itself (``brokers.cluster``): its settings, where its
coordinators are, and Kafka's own replication test ported, so the project's fault tests know what
the cluster promises.

Kafka's ``replication_test`` (system tests): under producer load with ``acks=all``, the leader of
a partition is bounced again and again, a new leader elected in between; every acknowledged
record must be consumed, none twice. Here: an idempotent producer writes numbered records to
three partitions (replication factor 3, ``min.insync.replicas=2``) while the leader of partition 0
is SIGKILLed (``hard``) or SIGTERMed (``clean``: a controlled shutdown) and started again,
``DFK_CLUSTER_BOUNCES`` times (1 in the suite, 5 as Kafka's test in ``make chaos``).
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from dataflow_kafka.brokers.admin import create_topics, unique_topic
from tests.reliability.faults import AckedWriter, seen, timed

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]
BOUNCES = int(os.environ.get("DFK_CLUSTER_BOUNCES", "1"))
RATE = 2000        # records per second (Kafka's replication test: 1000)


def test_topics_get_three_replicas_and_two_must_acknowledge(kafka_cluster):
    from confluent_kafka.admin import AdminClient, ConfigResource

    bs = kafka_cluster.bootstrap_servers
    topic = unique_topic("rf")
    create_topics(bs, {topic: 2})                       # the cluster's default replication factor
    for p in (0, 1):
        leader, replicas, isr = kafka_cluster.partition_state(topic, p)
        assert len(replicas) == 3 and sorted(isr) == sorted(replicas) and leader in replicas
    admin = AdminClient({"bootstrap.servers": bs})
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values()
    configs = {k: v.value for k, v in future.result(30).items()}
    assert configs["default.replication.factor"] == "3"
    assert configs["min.insync.replicas"] == "2"
    assert configs["unclean.leader.election.enable"] == "false"
    print(f"CLUSTER MEMORY (RSS MiB per node) {json.dumps(kafka_cluster.memory_mib())}")


def test_the_coordinators_the_handle_names_are_the_ones_kafka_uses(kafka_cluster):
    """Group coordinators against Kafka's answer (DescribeGroups); transaction coordinators
    against the node that logs having initialised the transactional id."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    bs = kafka_cluster.bootstrap_servers
    topic = unique_topic("coord")
    create_topics(bs, {topic: 1})
    groups = [unique_topic("group") for _ in range(4)]
    for g in groups:
        c = Consumer({"bootstrap.servers": bs, "group.id": g, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        c.close()
    admin = AdminClient({"bootstrap.servers": bs})
    for g, future in admin.describe_consumer_groups(groups).items():
        assert future.result(30).coordinator.id == kafka_cluster.group_coordinator(g).node_id, g
    ids = [unique_topic("txn") for _ in range(4)]
    for tid in ids:
        p = Producer({"bootstrap.servers": bs, "transactional.id": tid})
        p.init_transactions(30)
        p.close()
    for tid in ids:
        logged = [n.node_id for n in kafka_cluster.nodes
                  if re.search(rf"Initialized transactionalId {re.escape(tid)} ", n.log_path.read_text(errors="replace"))]
        assert logged == [kafka_cluster.transaction_coordinator(tid).node_id], (tid, logged)


@pytest.mark.parametrize("how", ["hard", "clean"])
def test_every_acknowledged_record_is_consumed_once_across_leader_bounces(kafka_cluster, how):
    bs = kafka_cluster.bootstrap_servers
    topic = unique_topic(f"bounce-{how}")
    create_topics(bs, {topic: 3})
    writer = AckedWriter(bs, topic, 3, rate=RATE)
    elections, restarts = [], []
    try:
        deadline = time.monotonic() + 30
        while len(writer.acked) < RATE and time.monotonic() < deadline:
            time.sleep(0.1)
        for _ in range(BOUNCES):
            leader = kafka_cluster.wait_for_leader(topic, 0)
            t = time.monotonic()
            (leader.kill if how == "hard" else leader.stop)()
            kafka_cluster.wait_for_leader(topic, 0, other_than=leader)
            elections.append(time.monotonic() - t)
            restarts.append(timed(leader.start)[1])
            kafka_cluster.wait_in_sync([topic])
            time.sleep(1.0)                         # load on the full cluster before the next bounce
    finally:
        writer.stop()
    got = seen(bs, topic)
    figures = {"bounce": how, "bounces": BOUNCES, "acked": len(writer.acked), "failed": len(writer.failed),
               "consumed": sum(got.counts.values()), "lost": got.lost(writer.acked), "duplicated": got.duplicated,
               "out_of_order": len(got.out_of_order), "election_s": [round(x, 1) for x in elections],
               "restart_s": [round(x, 1) for x in restarts]}
    print(f"REPLICATION FIGURES {json.dumps(figures)}")
    assert not writer.failed, writer.failed[:3]
    assert figures["lost"] == 0 and figures["duplicated"] == 0 and not got.out_of_order, figures
    assert set(got.counts) == writer.acked, figures   # nothing unacknowledged surfaced either
