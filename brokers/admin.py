"""Topics on a Kafka cluster: the one admin helper of the jobs, tests and benchmarks."""

from __future__ import annotations

import time
import uuid
from typing import Mapping

from dataflow_kafka.errors import KafkaTimeoutError

__all__ = ["create_topics", "unique_topic", "admin_conf", "BROKER_DEFAULT"]


def _conf(kafka: str | Mapping[str, str]) -> dict[str, str]:
    return {"bootstrap.servers": kafka} if isinstance(kafka, str) else dict(kafka)


def admin_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings of an admin client that asks about topics without creating them: an
    admin client is a producer to librdkafka, whose metadata requests let a broker with
    ``auto.create.topics.enable=true`` (Kafka's default) create a missing topic with
    ``num.partitions`` partitions, racing the topic being created with the partitions asked for."""
    return {**conf, "log_level": 3, "allow.auto.create.topics": "false"}


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other run uses: ``<prefix>-<10 hex digits>``."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


#: ``replication`` of :func:`create_topics` that means "the broker's ``default.replication.factor``".
BROKER_DEFAULT = -1


def create_topics(kafka: str | Mapping[str, str], topics: Mapping[str, int], replication: int = BROKER_DEFAULT,
                  exist_ok: bool = False, timeout_s: float = 30.0) -> None:
    """Create ``{name: partitions}`` and wait until every broker's metadata shows all their
    partitions (a topic is usable then, not only created). ``kafka``: a bootstrap address or
    librdkafka settings (a SASL login, say). ``replication``: the replication factor, by default
    the cluster's own (``default.replication.factor``, as a topic Kafka creates itself), so a
    topic on a replicated cluster survives the loss of a broker (Kafka caps ``min.insync.replicas``
    at a topic's replication factor: a topic of one replica accepts ``acks=all`` writes and is
    lost with its broker). An existing topic is an error unless ``exist_ok``; any other failure is
    raised as the client's ``KafkaException`` (the caller names its role)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = _conf(kafka)
    admin = AdminClient(admin_conf(conf))
    futures = admin.create_topics([NewTopic(t, p, replication) for t, p in topics.items()],
                                  request_timeout=timeout_s)
    wanted = dict(topics)
    retry_with_one = []
    for topic, future in futures.items():
        try:
            future.result(timeout_s)
        except Exception as e:  # noqa: BLE001 - only "already exists" may pass
            if exist_ok and "TOPIC_ALREADY_EXISTS" in str(e):
                wanted[topic] = 1               # it exists with the partitions it has
            elif replication == BROKER_DEFAULT and "INVALID_REPLICATION_FACTOR" in str(e):
                retry_with_one.append(topic)    # a development broker without the "default" form
            else:
                raise
    if retry_with_one:
        create_topics(kafka, {t: topics[t] for t in retry_with_one}, 1, exist_ok, timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(timeout=max(1.0, deadline - time.monotonic())).topics
        missing = [t for t, p in wanted.items()
                   if t not in md or md[t].error is not None or len(md[t].partitions) < p]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise KafkaTimeoutError(f"topic(s) {missing} not visible at kafka.bootstrap.servers="
                               f"{conf.get('bootstrap.servers')!r} within {timeout_s:.0f} s of their creation")
        time.sleep(0.1)
