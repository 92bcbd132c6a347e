"""Does an embedded broker keep what it acknowledged when it is stopped (SIGTERM to its process
group, as :meth:`brokers.Broker.stop` does) or killed (SIGKILL)? Measured with a private broker
per test: a producer writes (``acks=all``) as fast as it can, the broker is stopped or killed and
started again on the same data directory, and every acknowledged record is looked up.

Findings: Apache Kafka (the embedded default) loses none in every case: an acknowledged record
is in the page cache, which outlives the process. noida-db 0.2.3, stopped while a producer
writes, loses records it acknowledged (thousands in a 1 s load): an xfail on its path.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from dataflow_kafka.brokers import kafka_broker
from tests.support import KafkaHelper, own_broker_kind

pytestmark = pytest.mark.kafka
LOAD_S = 1.0


def _restartable_kind() -> str:
    kind = own_broker_kind()
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("an external broker is not stopped by the tests")
    if kind == "tansu":
        pytest.skip("tansu keeps data in memory only: nothing survives a stop")
    return kind


def _acked_then_lost(tmp_path, drained: bool, kill: bool = False) -> tuple[int, int]:
    """(acknowledged, lost) records of a producer under load when the broker stops: after the
    producer flushed (``drained``) or while it writes; SIGKILLed while it writes (``kill``)."""
    from confluent_kafka import Producer

    with kafka_broker(_restartable_kind(), workdir=tmp_path) as b:
        topic = KafkaHelper(b.bootstrap_servers).topic(2, prefix="durable")
        acked: list[bytes] = []
        stop = threading.Event()
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "acks": "all", "linger.ms": 5, "log_level": 0,
                      "message.timeout.ms": 3000})

        def on_delivery(err, msg) -> None:
            if err is None:
                acked.append(msg.value())

        def load() -> None:
            i = 0
            while not stop.is_set():
                try:
                    p.produce(topic, b"%d" % i, partition=i % 2, on_delivery=on_delivery)
                    i += 1
                except BufferError:
                    p.poll(0.05)
                p.poll(0)
            p.flush(10)

        writer = threading.Thread(target=load)
        writer.start()
        time.sleep(LOAD_S)
        if drained:
            stop.set()
            writer.join()
            b.stop()
        elif kill:
            b.kill()
            stop.set()
            writer.join()
        else:
            os.killpg(b._proc.pid, signal.SIGTERM)     # what Broker.stop() sends first, under load
            b.stop()
            stop.set()
            writer.join()
        p.close()
        b.start()
        present = {m.value() for m in KafkaHelper(b.bootstrap_servers).consume_all(topic)}
    return len(acked), sum(1 for v in acked if v not in present)


def test_a_broker_stopped_after_producers_drained_keeps_every_acknowledged_record(tmp_path):
    acked, lost = _acked_then_lost(tmp_path, drained=True)
    print(f"{_restartable_kind()}: stop after drain: {lost} of {acked} acknowledged records lost")
    assert acked > 1000 and lost == 0, (acked, lost)


def test_a_broker_stopped_under_producer_load_keeps_every_acknowledged_record(tmp_path):
    acked, lost = _acked_then_lost(tmp_path, drained=False)
    print(f"{_restartable_kind()}: SIGTERM under load: {lost} of {acked} acknowledged records lost")
    assert acked > 1000, acked
    if lost and _restartable_kind() == "noida-db":
        pytest.xfail(f"noida-db loses acknowledged records when stopped under load: {lost} of {acked} "
                     "(a development broker: stop it only after producers drained; docs/brokers.md)")
    assert lost == 0, (acked, lost)


def test_a_broker_killed_under_producer_load_keeps_every_acknowledged_record(tmp_path):
    acked, lost = _acked_then_lost(tmp_path, drained=False, kill=True)
    print(f"{_restartable_kind()}: SIGKILL under load: {lost} of {acked} acknowledged records lost")
    assert acked > 1000, acked
    if lost and _restartable_kind() == "noida-db":
        pytest.xfail(f"noida-db loses acknowledged records when killed under load: {lost} of {acked}")
    assert lost == 0, (acked, lost)


def test_stopping_the_broker_closes_our_cached_producers_first(tmp_path, capfd):
    """A range-stats or sink producer left open in this process would log "Connection refused"
    until the process exits once the broker is gone."""
    from dataflow_kafka.datasource import range_stats, sink

    with kafka_broker(_restartable_kind(), workdir=tmp_path) as b:
        topic = KafkaHelper(b.bootstrap_servers).topic(1, prefix="stats")
        assert range_stats.publish({"bootstrap.servers": b.bootstrap_servers}, topic, b"k", 1)
        assert len(range_stats._producers) == 1
    assert len(range_stats._producers) == 0 and len(sink._producers) == 0
    time.sleep(2)
    assert "Connection refused" not in capfd.readouterr().err
