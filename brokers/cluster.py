"""A replicated Apache Kafka on loopback: :func:`kafka_cluster` starts three (or more) KRaft nodes
that can be hurt one at a time, for tests and demos of what a real cluster does under faults.

Each node is a combined broker and controller (``process.roles=broker,controller``) of
:mod:`brokers.apache_kafka`, with its own client and controller ports, data directory, log and a
small heap (``-Xmx384m``: three nodes fit beside Spark on two cores; ``heap=`` changes it). The
controllers form a static quorum of all nodes (``controller.quorum.voters``): with three, the
metadata quorum survives the loss of one. What a production cluster sets and a single node cannot:

* ``default.replication.factor=3`` (topics created with the cluster's default, as the project's
  own topics are: ``brokers.admin.create_topics(replication=BROKER_DEFAULT)``), internal topics of
  replication factor 3 (``__consumer_offsets``, ``__transaction_state``);
* ``min.insync.replicas=2``: an ``acks=all`` write is acknowledged once two replicas have it, so
  an acknowledged record survives the loss of any one node;
* ``unclean.leader.election.enable=false`` (Kafka's default, said explicitly): only an in-sync
  replica becomes leader, so no acknowledged record is truncated away;
* ``replica.lag.time.max.ms=10000`` (Kafka: 30 s): a frozen follower leaves the in-sync set after
  10 s, so ``acks=all`` writes to its partitions wait at most that long.

The handle (:class:`KafkaCluster`) says where things are (:meth:`KafkaCluster.leader_of`,
:meth:`KafkaCluster.transaction_coordinator`, :meth:`KafkaCluster.group_coordinator`) and each
:class:`ClusterNode` can be killed (SIGKILL), stopped (SIGTERM: a controlled shutdown), paused and
resumed (SIGSTOP / SIGCONT: a garbage-collection pause) and restarted on the same ports and data.

Example
-------
>>> with kafka_cluster(brokers=3) as cluster:             # doctest: +SKIP
...     create_topics(cluster.bootstrap_servers, {"events": 2})
...     leader = cluster.leader_of("events", 0)
...     leader.kill()
...     new = cluster.wait_for_leader("events", 0, other_than=leader)
...     leader.start()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from dataflow_kafka.brokers.apache_kafka import KafkaNode, KafkaSetupError
from dataflow_kafka.brokers.launcher import Broker, close_producers, free_ports, wait_until_healthy
from dataflow_kafka.errors import BrokerError, KafkaTimeoutError

__all__ = ["KafkaCluster", "ClusterNode", "kafka_cluster", "java_string_hash", "CLUSTER_SETTINGS",
           "CLUSTER_HEAP"]

#: Settings of every node of a cluster besides those of a single node (module docstring).
CLUSTER_SETTINGS = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": "10000",
}
CLUSTER_HEAP = "384m"
_INTERNAL_PARTITIONS = 4     # offsets.topic.num.partitions, transaction.state.log.num.partitions
#: logs "Initialized transactionalId <id> ... on partition __transaction_state-<n>" at INFO: the
#: node that writes it coordinates that id (what :meth:`KafkaCluster.transaction_coordinator`
#: computes, checked against it in the tests)
_COORDINATOR_LOGGER = "kafka.coordinator.transaction.TransactionCoordinator"


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s`` (over UTF-16 code units, 32-bit overflow): what Kafka
    hashes a group id or a transactional id with to find its coordinator's partition."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _coordinator_partition(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions`` (``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class ClusterNode(Broker):
    """One node of a :class:`KafkaCluster`: a :class:`brokers.Broker` (``kill``, ``stop``,
    ``start``, ``restart``, ``pause``, ``resume``) that knows its ``node_id`` and counts as
    started only once the cluster lists it as a live (unfenced) broker."""

    node_id: int = 0
    cluster: "KafkaCluster | None" = field(default=None, repr=False)

    def _await_ready(self) -> None:
        wait_until_healthy(self.bootstrap_servers, 60.0, self.client_conf)
        assert self.cluster is not None
        self.cluster.wait_for_nodes({self.node_id}, timeout_s=60.0)

    def stop(self, close_clients: bool = False) -> None:
        """SIGTERM (a controlled shutdown: the node hands its leaderships over first), then SIGKILL
        after 30 s. Clients of this process stay open: the other nodes still serve them."""
        super().stop(close_clients=close_clients)

    def restart(self, hard: bool = False) -> None:
        """Stop (SIGTERM; SIGKILL when ``hard``) and start again on the same ports and data, back
        once the cluster lists the node as live."""
        (self.kill if hard else self.stop)()
        self._start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


@dataclass
class KafkaCluster:
    """A running embedded Kafka cluster (see the module docstring); ``nodes`` in node-id order."""

    nodes: list[ClusterNode]
    workdir: Path
    kind: str = "kafka-cluster"
    client_conf: dict[str, str] = field(default_factory=dict, repr=False)
    _admin_client: object = field(default=None, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma-separated (clients find the others from any one)."""
        return ",".join(n.bootstrap_servers for n in self.nodes)

    def node(self, node_id: int) -> ClusterNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise BrokerError(f"no node {node_id} in this cluster (nodes: {[n.node_id for n in self.nodes]})")

    # -- where things are --------------------------------------------------------------------------

    def _admin(self):
        """One admin client for the handle's questions (quiet: nodes go away on purpose here)."""
        if self._admin_client is None:
            from confluent_kafka.admin import AdminClient

            from dataflow_kafka.brokers.admin import admin_conf

            self._admin_client = AdminClient({**admin_conf({"bootstrap.servers": self.bootstrap_servers,
                                                            **self.client_conf}),
                                              # a paused node holds its connections open without
                                              # answering: give up on a request after 3 s, not 60 s
                                              "socket.connection.setup.timeout.ms": 2000, "socket.timeout.ms": 3000,
                                              "topic.metadata.refresh.interval.ms": 1000, "log_level": 0})
        return self._admin_client

    def live_nodes(self, timeout_s: float = 10.0) -> set[int]:
        """Node ids the cluster's metadata lists as live brokers (a fenced node is not listed)."""
        return set(self._admin().list_topics(timeout=timeout_s).brokers)

    def wait_for_nodes(self, node_ids: set[int], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                last = self.live_nodes(timeout_s=min(5.0, max(0.5, deadline - time.monotonic())))
                if node_ids <= last:
                    return
            except Exception as e:  # noqa: BLE001 - KafkaException while nodes boot
                last = e
            time.sleep(0.2)
        raise BrokerError(f"Kafka cluster nodes {sorted(node_ids)} not live within {timeout_s:.0f} s (last: {last})")

    def partition_state(self, topic: str, partition: int, timeout_s: float = 10.0) -> tuple[int, list[int], list[int]]:
        """``(leader node id, replicas, in-sync replicas)`` of ``topic``-``partition`` as the
        cluster's metadata says now (leader -1: none). A topic just created may not have reached
        the answering node's metadata cache yet: asked again for up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            md = self._admin().list_topics(topic, timeout=5).topics.get(topic)
            if md is not None and md.error is None and partition in md.partitions:
                break
            if time.monotonic() >= deadline:
                raise BrokerError(f"topic {topic!r} partition {partition} is not in the cluster's metadata"
                                  + (f": {md.error}" if md is not None and md.error is not None else ""))
            time.sleep(0.2)
        p = md.partitions[partition]
        return p.leader, list(p.replicas), list(p.isrs)

    def leader_of(self, topic: str, partition: int) -> ClusterNode:
        """The node that leads ``topic``-``partition`` (raises when none does right now)."""
        leader, _, _ = self.partition_state(topic, partition)
        if leader < 0:
            raise BrokerError(f"{topic}-{partition} has no leader right now")
        return self.node(leader)

    def wait_for_leader(self, topic: str, partition: int, other_than: ClusterNode | int | None = None,
                        timeout_s: float = 60.0) -> ClusterNode:
        """Wait until ``topic``-``partition`` has a leader (other than ``other_than``) and return it."""
        avoid = other_than.node_id if isinstance(other_than, ClusterNode) else other_than
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                leader, _, _ = self.partition_state(topic, partition, timeout_s=0)
                if leader >= 0 and leader != avoid:
                    return self.node(leader)
                last = f"leader {leader}"
            except Exception as e:  # noqa: BLE001 - metadata while a node goes away
                last = e
            time.sleep(0.1)
        raise KafkaTimeoutError(f"{topic}-{partition}: no leader other than node {avoid} within {timeout_s:.0f} s "
                                f"(last: {last})")

    def wait_in_sync(self, topics: list[str], timeout_s: float = 60.0) -> None:
        """Wait until every partition of ``topics`` has all its replicas in sync (after a node
        came back: the next fault then meets a fully replicated cluster)."""
        deadline = time.monotonic() + timeout_s
        behind: list = []
        while time.monotonic() < deadline:
            try:
                md = self._admin().list_topics(timeout=10).topics
                behind = [(t, p.id, sorted(p.isrs), sorted(p.replicas)) for t in topics
                          for p in md[t].partitions.values() if sorted(p.isrs) != sorted(p.replicas)]
                if not behind:
                    return
            except Exception as e:  # noqa: BLE001
                behind = [e]
            time.sleep(0.2)
        raise KafkaTimeoutError(f"replicas not in sync within {timeout_s:.0f} s: {behind}")

    def _internal_partitions(self, topic: str) -> int:
        with contextlib.suppress(Exception):
            md = self._admin().list_topics(topic, timeout=5).topics.get(topic)
            if md is not None and md.error is None and md.partitions:
                return len(md.partitions)
        return _INTERNAL_PARTITIONS

    def transaction_coordinator(self, transactional_id: str) -> ClusterNode:
        """The node coordinating ``transactional_id``: the leader of ``__transaction_state``
        partition ``abs(javaHashCode(id)) % partitions`` (Kafka's ``TransactionStateManager``)."""
        part = _coordinator_partition(transactional_id, self._internal_partitions("__transaction_state"))
        return self.wait_for_leader("__transaction_state", part, timeout_s=30.0)

    def group_coordinator(self, group_id: str) -> ClusterNode:
        """The node coordinating consumer group ``group_id`` (its ``__consumer_offsets`` partition's leader)."""
        part = _coordinator_partition(group_id, self._internal_partitions("__consumer_offsets"))
        return self.wait_for_leader("__consumer_offsets", part, timeout_s=30.0)

    # -- lifecycle ----------------------------------------------------------------------------------

    def memory_mib(self) -> dict[int, float]:
        """Resident memory of each running node's process (MiB), from ``/proc``."""
        out = {}
        for n in self.nodes:
            if n.running:
                with contextlib.suppress(OSError):
                    status = Path(f"/proc/{n.pid}/status").read_text()
                    kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
                    out[n.node_id] = kb / 1024
        return out

    def logs(self, tail: int = 30) -> str:
        return "\n".join(f"-- node {n.node_id} ({n.log_path}):\n{n.logs(tail)}" for n in self.nodes)

    def exit_code(self) -> int | None:
        """The exit code of a node that stopped by itself (not through this handle), else None."""
        for n in self.nodes:
            if n._proc is not None and n._proc.poll() is not None:
                return n._proc.poll()
        return None

    def heal(self) -> None:
        """Resume paused nodes and start stopped or killed ones; back once all are live."""
        for n in self.nodes:
            if n.paused:
                n.resume()
        down = [n for n in self.nodes if not n.running]
        for n in down:
            n._spawn()
        for n in down:
            n._await_started()

    def stop(self) -> None:
        """Stop every node at once (SIGTERM to all, so that no node's controlled shutdown waits for
        a controller quorum the others already left; SIGKILL after 15 s), after this process's
        cached sink and range-stats producers are closed."""
        close_producers()
        self._admin_client = None
        running = [n for n in self.nodes if n.running]
        for n in running:
            n.signal_group(signal.SIGTERM)
            if n.paused:
                n.resume()
        deadline = time.monotonic() + 15.0
        while any(n.running for n in running) and time.monotonic() < deadline:
            time.sleep(0.1)
        errors = []
        for n in running:
            try:
                n.kill()                # reaps the stopped; SIGKILLs one that is still shutting down
            except BrokerError as e:
                errors.append(str(e))
        if errors:
            raise BrokerError("; ".join(errors))


def _start_cluster(workdir: Path, brokers: int, heap: str) -> KafkaCluster:
    drawn = free_ports(2 * brokers)                  # all distinct (a freed port can come back)
    ports = {i: (drawn[2 * i - 2], drawn[2 * i - 1]) for i in range(1, brokers + 1)}
    voters = {i: c for i, (_, c) in ports.items()}
    cluster = KafkaCluster([], workdir)
    cid = None                           # the first node's, for all
    for i, (port, cport) in ports.items():
        node_dir = workdir / f"node-{i}"
        spec = KafkaNode(node_dir, port, cport, heap=heap, node_id=i, voters=voters, replication=3,
                         settings=CLUSTER_SETTINGS, info_loggers=(_COORDINATOR_LOGGER,),
                         **({"cluster_id": cid} if cid else {}))
        cid = spec.cluster_id
        try:
            spec.prepare()
        except KafkaSetupError as e:
            raise BrokerError(str(e)) from None
        cluster.nodes.append(ClusterNode("kafka", f"127.0.0.1:{port}", spec.data_dir, node_dir / "kafka.log",
                                         spec.command(), node_id=i, cluster=cluster))
    for n in cluster.nodes:              # a quorum needs a majority up: start all, then wait
        n._spawn()
    try:
        for n in cluster.nodes:
            n._await_started()
    except BrokerError:
        for n in cluster.nodes:
            with contextlib.suppress(BrokerError):
                n.kill()
        raise
    return cluster


@contextlib.contextmanager
def kafka_cluster(brokers: int = 3, workdir: str | os.PathLike | None = None,
                  heap: str | None = None) -> Iterator[KafkaCluster]:
    """Yield a running :class:`KafkaCluster` of ``brokers`` nodes (at least 3: a quorum that
    survives a node's loss); every node is stopped on exit. Always embedded Apache Kafka
    (``KAFKA_BOOTSTRAP_SERVERS`` is not consulted: the handle must be able to hurt its nodes).
    ``heap``: each node's ``-Xmx`` (default ``DATAFLOW_KAFKA_CLUSTER_HEAP`` or 384m)."""
    if brokers < 3:
        raise BrokerError(f"kafka_cluster needs at least 3 brokers (a controller quorum that survives the loss of "
                          f"one, replication factor 3), got {brokers}; kafka_broker() starts a single one")
    heap = heap or os.environ.get("DATAFLOW_KAFKA_CLUSTER_HEAP", CLUSTER_HEAP)
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="dataflow-kafka-cluster-")
        workdir = tmp
    cluster = _start_cluster(Path(workdir), brokers, heap)
    try:
        yield cluster
    finally:
        try:
            cluster.stop()
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
