"""Faults injected into the three-node Kafka cluster under the query of :mod:`pipeline_job`, and
what each cost: the time from the fault to the next committed micro-batch.

A fault is a function of the cluster and the running query's :class:`Run` that hurts the cluster
and returns what it did and how to heal; :func:`run_under_faults` injects the faults one after the
other while the query runs (each once the query has committed batches since the last one healed),
then checks the output topic against the local run of the same micro-batches.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dataflow_kafka.brokers.admin import create_topics, unique_topic
from tests.reliability import pipeline_job as job
from tests.support import KafkaHelper, now_ms

__all__ = ["Run", "Fault", "FAULTS", "run_under_faults", "commit_times"]


@dataclass
class Run:
    """The topics and query one run of :func:`run_under_faults` uses."""

    cluster: object
    topic: str
    out_topic: str
    control_topic: str
    stats_topic: str
    checkpoint: str
    query: object = None

    @property
    def commit_topic(self) -> str:
        return f"{self.out_topic}-commits"

    def transactional_id(self, partition: int = 0) -> str:
        """The sink's transactional id of the task writing ``partition`` (datasource/sink.py)."""
        return f"dataflow-kafka-{self.query.id}-{partition}"


@dataclass
class Fault:
    """A fault by name: ``inject(run)`` hurts the cluster and returns ``(what, heal)``."""

    name: str
    inject: Callable[[Run], tuple[str, Callable[[], None]]]
    heal_after_s: float = 0.0         # the heal waits this long after the fault (a pause's length)


def _kill(node, run: Run, what: str) -> tuple[str, Callable[[], None]]:
    node.kill()
    return f"{what}: node {node.node_id} SIGKILLed", node.start


def _leader_kill(topic_of: Callable[[Run], str], partition: int, role: str) -> Callable:
    def inject(run: Run):
        topic = topic_of(run)
        return _kill(run.cluster.wait_for_leader(topic, partition), run, f"{role} ({topic}-{partition}) leader")
    return inject


def _coordinator_kill(run: Run):
    tid = run.transactional_id(0)
    return _kill(run.cluster.transaction_coordinator(tid), run, f"transaction coordinator of {tid}")


def _pause(topic_of: Callable[[Run], str], partition: int, role: str) -> Callable:
    def inject(run: Run):
        node = run.cluster.wait_for_leader(topic_of(run), partition)
        node.pause()
        return f"{role} leader node {node.node_id} paused (SIGSTOP)", node.resume
    return inject


#: the faults of the issue, by name
FAULTS = {
    "source leader killed": Fault("source leader killed", _leader_kill(lambda r: r.topic, 0, "source partition")),
    "sink leader killed": Fault("sink leader killed", _leader_kill(lambda r: r.out_topic, 0, "sink partition")),
    "transaction coordinator killed": Fault("transaction coordinator killed", _coordinator_kill),
    "commit topic leader killed": Fault("commit topic leader killed",
                                        _leader_kill(lambda r: r.commit_topic, 0, "sink commit topic")),
    "control topic leader killed": Fault("control topic leader killed",
                                         _leader_kill(lambda r: r.control_topic, 0, "control topic")),
    "range-stats topic leader killed": Fault("range-stats topic leader killed",
                                             _leader_kill(lambda r: r.stats_topic, 0, "range-stats topic")),
    "sink leader paused 20 s": Fault("sink leader paused 20 s", _pause(lambda r: r.out_topic, 1, "sink partition"),
                                     heal_after_s=20.0),
}


def commit_times(checkpoint: str) -> dict[int, tuple[float, float]]:
    """``{batch id: (planned, committed)}`` wall-clock times of the committed batches (the offset
    log's and the commit log's file times)."""
    ck = Path(checkpoint)
    out = {}
    if not (ck / "commits").is_dir():
        return out
    for f in (ck / "commits").iterdir():
        if f.name.isdigit():
            out[int(f.name)] = ((ck / "offsets" / f.name).stat().st_mtime, f.stat().st_mtime)
    return out


def _wait_commits(run: Run, n: int, timeout_s: float) -> None:
    """Wait until the query has committed ``n`` more batches (or ended)."""
    target = len(commit_times(run.checkpoint)) + n
    deadline = time.monotonic() + timeout_s
    while len(commit_times(run.checkpoint)) < target and run.query.isActive:
        assert time.monotonic() < deadline, f"no {n} new committed batches within {timeout_s:.0f} s"
        time.sleep(0.1)


def _recovery(checkpoint: str, fault_at: float) -> tuple[float | None, float | None]:
    """Seconds from the fault to the next commit, and to the commit of the first batch planned
    after the fault (None: not seen)."""
    times = commit_times(checkpoint)
    after = [c for _, c in times.values() if c > fault_at]
    planned_after = [c for p, c in times.values() if p > fault_at]
    return (min(after) - fault_at if after else None, min(planned_after) - fault_at if planned_after else None)


class _Feeder:
    """Clicks into the source topic from a thread: ``first`` at once, then ``per_s`` a second until
    :meth:`finish`, so that the query has input for as many faults as a run injects (the
    reference is the local run of the micro-batches the offset log records, however they fell)."""

    def __init__(self, bootstrap: str, topic: str, first: int = 1500, per_s: int = 50) -> None:
        self.helper, self.topic, self.per_s = KafkaHelper(bootstrap), topic, per_s
        self._clicks = iter(job.clicks(200_000, now_ms() - 2_000_000))
        self.sent = 0
        self._stop = threading.Event()
        self._send(first)
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _send(self, n: int) -> None:
        self.helper.produce(self.topic, [next(self._clicks) for _ in range(n)])
        self.sent += n

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._send(self.per_s)

    def finish(self) -> None:
        """Stop feeding (again: nothing)."""
        self._stop.set()
        self._t.join()


def _caught_up(run: Run) -> bool:
    """Whether the last committed batch ends at the end of every source partition."""
    from dataflow_kafka.datasource import kafka_read
    from tests.support import offset_log

    times = commit_times(run.checkpoint)
    if not times:
        return False
    ends = offset_log(run.checkpoint, max(times), run.topic)["partitions"].get(run.topic, {})
    c = kafka_read.consumer({"bootstrap.servers": run.cluster.bootstrap_servers})
    try:
        return all(ends.get(str(p), {}).get("o") == kafka_read.watermarks(c, run.topic, p)[1]
                   for p in range(job.PARTITIONS))
    finally:
        c.close()


def run_under_faults(spark, cluster, faults: list[Fault], tmp_path: Path) -> dict:
    """Run the query while clicks arrive, inject ``faults`` one by one, let the query read the
    rest, and return the figures: per fault what it did and its recovery times, the normal gap
    between commits, and the output's comparison with the local run (``lost``, ``duplicated``,
    ``equal``)."""
    bs = cluster.bootstrap_servers
    run = Run(cluster, unique_topic("faults-in"), unique_topic("faults-out"), unique_topic("faults-control"),
              unique_topic("faults-stats"), str(tmp_path / "ck"))
    # the sink's commit topic and the range-stats topic are the project's to create (with the
    # cluster's replication factor): not created here
    create_topics(bs, {run.topic: job.PARTITIONS, run.out_topic: 2, run.control_topic: 1})
    feeder = _Feeder(bs, run.topic)
    run.query = job.start_query(spark, bs, run.topic, run.out_topic, run.checkpoint, control_topic=run.control_topic,
                                range_stats_topic=run.stats_topic, trigger={"processingTime": "500 milliseconds"})
    done = []
    try:
        _wait_commits(run, 3, 300)
        for fault in faults:
            _wait_commits(run, 2, 300)
            fault_at = time.time()
            what, heal = fault.inject(run)
            healer = threading.Timer(fault.heal_after_s, heal) if fault.heal_after_s else None
            if healer:
                healer.start()
            _wait_commits(run, 1, 300)
            if healer:
                healer.join()
            else:
                heal()
            cluster.heal()
            cluster.wait_in_sync([run.topic, run.out_topic])
            done.append((fault.name, what, fault_at))
        feeder.finish()
        deadline = time.monotonic() + 600
        while not _caught_up(run):
            assert run.query.exception() is None and time.monotonic() < deadline, \
                f"the query did not read the rest of the input: {run.query.exception()}"
            time.sleep(1)
        while run.query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.1)                 # stopped between batches (a stop mid-batch: Spark's StackOverflowError)
    finally:
        feeder.finish()
        run.query.stop()
    error = run.query.exception()
    times = commit_times(run.checkpoint)
    first_fault = done[0][2] if done else float("inf")
    commits = sorted(c for _, c in times.values())
    gaps = [b - a for a, b in zip(commits, commits[1:]) if b < first_fault]
    figures = {"records": feeder.sent, "batches": len(times), "normal_gap_s": round(statistics.median(gaps), 2) if gaps else None,
               "faults": []}
    for name, what, at in done:
        first, planned = _recovery(run.checkpoint, at)
        figures["faults"].append({"fault": name, "what": what, "next_commit_s": first and round(first, 1),
                                  "recovered_s": planned and round(planned, 1)})
    figures["error"] = str(error) if error else None
    figures["replicas"] = {role: len(cluster.partition_state(t, 0)[1])
                           for role, t in (("commit topic", run.commit_topic), ("range-stats topic", run.stats_topic))}
    if error is None:
        got, expected = job.sunk_rows(bs, run.out_topic), job.expected_rows(bs, run.topic, run.checkpoint)
        figures.update(rows=sum(expected.values()), lost=sum((expected - got).values()),
                       duplicated=sum((got - expected).values()), equal=got == expected)
    return figures
