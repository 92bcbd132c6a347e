"""Shared fixtures: one Kafka-protocol broker and one SparkSession per test session.

The broker comes from :func:`brokers.kafka_broker` (``KAFKA_BOOTSTRAP_SERVERS`` → Docker →
embedded ``noida-db``; ``DATAFLOW_KAFKA_EMBEDDED=tansu`` picks the other embedded broker).
"""

from __future__ import annotations

import pytest

from tests.support import KafkaHelper


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    from brokers import kafka_broker

    with kafka_broker(workdir=tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture(scope="session")
def bootstrap(broker) -> str:
    return broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark():
    from datasource.session import spark_session

    s = spark_session(master="local[2]", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def kafka(bootstrap) -> KafkaHelper:
    return KafkaHelper(bootstrap)

