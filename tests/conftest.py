"""Shared fixtures: one Kafka broker, one three-node Kafka cluster (started by the first test that
asks for it) and one SparkSession per test session.

The broker comes from :func:`brokers.kafka_broker`: ``KAFKA_BOOTSTRAP_SERVERS`` if set, else an
embedded Apache Kafka node (``DATAFLOW_KAFKA_EMBEDDED=noida-db`` or ``tansu`` picks a development
broker instead).
"""

from __future__ import annotations

import pytest

from tests.support import KafkaHelper


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
def spark(request):
    from dataflow_kafka.datasource.session import spark_session

    # Spark stops before the broker: its Python workers keep cached Kafka clients (range stats
    # producers) that would otherwise retry a stopped broker until the process exits.
    request.getfixturevalue("broker")

    s = spark_session(master="local[2]", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def kafka(bootstrap) -> KafkaHelper:
    return KafkaHelper(bootstrap)



@pytest.fixture(scope="session")
def _kafka_cluster(tmp_path_factory):
    from dataflow_kafka.brokers.cluster import kafka_cluster

    with kafka_cluster(brokers=3, workdir=tmp_path_factory.mktemp("cluster")) as c:
        yield c


@pytest.fixture
def kafka_cluster(_kafka_cluster):
    """The session's three-node Kafka cluster (``brokers.cluster``), every node up and running
    before the test and again after it (a test may kill, stop or pause nodes)."""
    _kafka_cluster.heal()
    yield _kafka_cluster
    _kafka_cluster.heal()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The package's wheel, built once per session from this repository."""
    from tests.support import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def fresh_env(wheel, tmp_path_factory):
    """A fresh virtualenv with the wheel installed (its dependencies from this environment)."""
    from tests.support import venv_with_wheel

    return venv_with_wheel(wheel, tmp_path_factory.mktemp("venv"))
