"""Shared fixtures: one Kafka broker, one three-node Kafka cluster (started by the first test that
asks for it) and one SparkSession per test session.

The broker comes from :func:`dataflow_kafka.brokers.kafka_broker`: ``KAFKA_BOOTSTRAP_SERVERS`` if
set, else an embedded Apache Kafka node (``DATAFLOW_KAFKA_EMBEDDED=noida-db`` or ``tansu`` picks a
development broker instead). Under pytest-xdist the workers share one broker
(tests/shared_broker.py) and each has its own SparkSession. The marks, Hypothesis profiles and the
suite's own checks are in tests/suite.py (loaded here as a plugin).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import shared_broker
from tests.support import KafkaHelper, own_broker_kind

pytest_plugins = ["tests.suite"]


def pytest_configure(config) -> None:
    if not hasattr(config, "workerinput"):       # a run without workers, or xdist's controller
        os.environ[shared_broker.ENV] = tempfile.mkdtemp(prefix="dataflow-kafka-tests-")


def pytest_sessionfinish(session) -> None:
    """The controller (or a run without workers) stops the broker a worker started for all."""
    if hasattr(session.config, "workerinput") or shared_broker.ENV not in os.environ:
        return
    shared_dir = Path(os.environ.pop(shared_broker.ENV))
    done = shared_broker.stop(shared_dir)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if done and reporter is not None:
        reporter.write_line(done)
    shutil.rmtree(shared_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield shared_broker.attach(Path(os.environ[shared_broker.ENV]))
        return
    from dataflow_kafka.brokers import kafka_broker

    with kafka_broker(workdir=tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture
def own_broker(tmp_path):
    """A broker of this test's own (the session's kind), for a test that stops, kills or restarts it
    (skipped against an external cluster, ``KAFKA_BOOTSTRAP_SERVERS``, which tests leave alone)."""
    from dataflow_kafka.brokers import kafka_broker

    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("an external cluster (KAFKA_BOOTSTRAP_SERVERS) is not stopped or restarted by tests")

    with kafka_broker(own_broker_kind(), workdir=tmp_path / "broker") as b:
        yield b


@pytest.fixture(autouse=True)
def _broker_still_running(request):
    """A test that used the session's broker fails, with the broker's log, if the broker process
    exited during it; a broker of this process is started again (same port and data) for the tests
    after it (one shared by xdist workers is not: the run's later Kafka tests fail too)."""
    yield
    if "broker" not in request.fixturenames:
        return
    b = request.getfixturevalue("broker")
    code = b.exit_code()
    if code is not None:
        log = b.logs()
        if b.managed:
            b.restart()
        pytest.fail(f"the embedded {b.kind} broker exited with code {code} during this test "
                    f"({'restarted' if b.managed else 'not restarted'} for the next tests); last log lines:\n{log}")


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
