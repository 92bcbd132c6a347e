"""The project under the faults of Kafka's own system tests, on the session's three-node cluster.

1. A running ``format("dataflow-kafka")`` -> demo pipeline (sessions -> page_windows -> panes) ->
   ``exactlyOnce`` sink query while the cluster is hurt, fault after fault (``cluster_faults``):
   what a ``read_committed`` consumer finds must equal the pipeline's local run of the same
   micro-batches (0 lost, 0 duplicated), and each fault's cost is measured as the time from the
   fault to the next committed batch. ``DFK_FAULTS``: the faults by name, comma-separated, or
   ``all`` (``make chaos``); ``make faults`` runs a source partition's leader killed, then the
   sink's transaction coordinator (the suite's leader changes are ``tests/brokers/test_cluster.py``
   and ``tests/datasource/test_cluster_reads.py``).
2. Kafka's ``transactions_test`` analogue: a copier (source -> exactly-once sink, partition to
   partition) runs as a driver process of its own while numbered records arrive; brokers and the
   driver are hard-bounced (SIGKILL) at moments when a transaction is open (the output's last
   stable offset behind its high watermark). A ``read_committed`` consumer must see every record
   once, in order per partition. ``DFK_TXN_BOUNCES`` bounces, the driver and the leader of an
   output partition in turn (1 in ``make faults``: the driver; ``make chaos`` 6).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataflow_kafka.brokers.admin import create_topics, unique_topic
from dataflow_kafka.datasource import kafka_read
from tests.reliability import pipeline_job as job
from tests.reliability.cluster_faults import FAULTS, commit_times, run_under_faults
from tests.reliability.faults import AckedWriter, seen

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.cluster]
SUITE_FAULTS = "source leader killed,transaction coordinator killed"
TXN_BOUNCES = int(os.environ.get("DFK_TXN_BOUNCES", "1"))


def _faults() -> list:
    names = os.environ.get("DFK_FAULTS", SUITE_FAULTS)
    return list(FAULTS.values()) if names == "all" else [FAULTS[n.strip()] for n in names.split(",")]


@pytest.mark.long_fault
def test_the_pipeline_rides_out_kafka_faults_exactly_once(spark, kafka_cluster, tmp_path):
    faults = _faults()
    figures = run_under_faults(spark, kafka_cluster, faults, tmp_path)
    print(f"CLUSTER FAULT FIGURES {json.dumps(figures)}")
    assert figures["error"] is None, figures["error"]
    assert figures["replicas"] == {"commit topic": 3, "range-stats topic": 3}, figures   # the project's own topics
    assert figures["rows"] > 100 and figures["equal"], figures
    assert all(f["recovered_s"] is not None for f in figures["faults"]), figures


def _open_transaction(checker, topic: str, partitions: int) -> bool:
    """Whether a transaction is open on ``topic``: some partition's last stable offset (what a
    ``read_committed`` consumer's offset request answers) is behind its high watermark."""
    committed, uncommitted = checker
    return any(kafka_read.watermarks(committed, topic, p)[1] < kafka_read.watermarks(uncommitted, topic, p)[1]
               for p in range(partitions))


def _when_open(checker, topic: str, partitions: int, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _open_transaction(checker, topic, partitions):
            return True
        time.sleep(0.02)
    return False


def _offsets(checker, topic: str, out: str) -> dict:
    """Per partition: the input's end, and the output's last stable offset and high watermark."""
    committed, uncommitted = checker
    return {p: (kafka_read.watermarks(uncommitted, topic, p)[1], kafka_read.watermarks(committed, out, p)[1],
                kafka_read.watermarks(uncommitted, out, p)[1]) for p in range(job.PARTITIONS)}


def _caught_up(bs: str, checker, topic: str, out: str, acked: int) -> bool:
    """No transaction open on the output (a ``read_committed`` read would stop at it) and as many
    records there as were acknowledged at the input."""
    if any(lso < hwm for _, lso, hwm in _offsets(checker, topic, out).values()):
        return False
    return sum(seen(bs, out).counts.values()) >= acked


def _start_copier(bs: str, topic: str, out: str, ck: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, job.__file__, "copy", "local[2]", bs, topic, out, str(ck)],
                            stdout=subprocess.DEVNULL, stderr=open(log, "ab"), start_new_session=True)


def _kill_group(p: subprocess.Popen) -> None:
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(30)


def _wait_new_commits(ck: Path, n: int, copier: subprocess.Popen, log: Path, timeout_s: float = 300) -> None:
    target = len(commit_times(str(ck))) + n
    deadline = time.monotonic() + timeout_s
    while len(commit_times(str(ck))) < target:
        assert copier.poll() is None, log.read_text(errors="replace")[-4000:]
        assert time.monotonic() < deadline, f"no {n} new committed batches within {timeout_s:.0f} s"
        time.sleep(0.1)


@pytest.mark.long_fault
def test_hard_bounces_of_brokers_and_the_driver_while_transactions_are_open(kafka_cluster, tmp_path):
    bs = kafka_cluster.bootstrap_servers
    topic, out = unique_topic("txn-in"), unique_topic("txn-out")
    create_topics(bs, {topic: job.PARTITIONS, out: job.PARTITIONS})
    writer = AckedWriter(bs, topic, job.PARTITIONS, rate=200)
    ck, log = tmp_path / "ck", tmp_path / "copier.log"
    checker = (kafka_read.consumer({"bootstrap.servers": bs, "isolation.level": "read_committed"}),
               kafka_read.consumer({"bootstrap.servers": bs, "isolation.level": "read_uncommitted"}))
    copier = _start_copier(bs, topic, out, ck, log)
    bounces = []
    try:
        for i in range(TXN_BOUNCES):
            _wait_new_commits(ck, 3, copier, log)
            opened = _when_open(checker, out, job.PARTITIONS)
            if i % 2 == 0:                              # the driver, with its JVM and Python workers
                _kill_group(copier)
                bounces.append({"bounced": "driver", "transaction_open": opened})
                copier = _start_copier(bs, topic, out, ck, log)
            else:                                       # the leader of an output partition
                node = kafka_cluster.leader_of(out, i % job.PARTITIONS)
                node.kill()
                bounces.append({"bounced": f"broker {node.node_id}", "transaction_open": opened})
                _wait_new_commits(ck, 1, copier, log)
                node.start()
                kafka_cluster.wait_in_sync([topic, out])
        writer.stop()
        deadline = time.monotonic() + 180
        while not _caught_up(bs, checker, topic, out, len(writer.acked)):
            assert copier.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, (f"the copier did not catch up within 180 s: "
                                                 f"{_offsets(checker, topic, out)}; bounces {bounces}")
            time.sleep(1)
    finally:
        if copier.poll() is None:
            _kill_group(copier)
        for c in checker:
            c.close()
    got = seen(bs, out)
    figures = {"acked": len(writer.acked), "consumed": sum(got.counts.values()), "lost": got.lost(writer.acked),
               "duplicated": got.duplicated, "out_of_order": len(got.out_of_order), "bounces": bounces}
    print(f"TRANSACTIONS FIGURES {json.dumps(figures)}")
    assert not writer.failed, writer.failed[:3]
    assert figures["lost"] == 0 and figures["duplicated"] == 0 and not got.out_of_order, figures
    assert set(got.counts) == writer.acked, figures
    assert any(b["transaction_open"] for b in bounces), bounces     # the bounces met open transactions
