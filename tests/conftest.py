"""Shared fixtures: one Kafka broker and one SparkSession per test session.

The broker comes from :func:`dataflow_kafka.brokers.kafka_broker`: ``KAFKA_BOOTSTRAP_SERVERS`` if
set, else an embedded Apache Kafka node (``DATAFLOW_KAFKA_EMBEDDED=noida-db`` or ``tansu`` picks a
development broker instead). The marks, Hypothesis profiles and the suite's own checks are in
tests/suite.py (loaded here as a plugin).
"""

from __future__ import annotations

import pytest

from tests.support import KafkaHelper

pytest_plugins = ["tests.suite"]


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    from dataflow_kafka.brokers import kafka_broker

    with kafka_broker(workdir=tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture(autouse=True)
def _broker_still_running(request):
    """A test that used the embedded broker fails, with the broker's log, if the broker process
    exited during it; the broker is started again (same port and data) for the tests after it."""
    yield
    if "broker" not in request.fixturenames:
        return
    b = request.getfixturevalue("broker")
    code = b.exit_code()
    if code is not None:
        log = b.logs()
        b.restart()
        pytest.fail(f"the embedded {b.kind} broker exited with code {code} during this test "
                    f"(restarted for the next tests); last log lines:\n{log}")


@pytest.fixture(scope="session")
def bootstrap(broker) -> str:
    return broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark(broker):
    # Spark stops before the broker (it depends on it): its Python workers keep cached Kafka clients
    # (range stats producers) that would otherwise retry a stopped broker until the process exits.
    from dataflow_kafka.datasource.session import spark_session

    s = spark_session(master="local[2]", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def kafka(bootstrap) -> KafkaHelper:
    return KafkaHelper(bootstrap)

