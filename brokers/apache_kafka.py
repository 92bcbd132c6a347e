"""Apache Kafka as the embedded broker: resolve its jars with Maven, write a KRaft configuration,
format the storage, and build the command line that :mod:`brokers.launcher` runs.

One node in KRaft combined mode (``process.roles=broker,controller``) on loopback: a client
listener (``PLAINTEXT``, or ``SASL_PLAINTEXT`` with SCRAM-SHA-512 and ACLs when users are given),
TLS listeners when asked for (:mod:`brokers.tls`), and a controller listener. The jars come from
``brokers/pom.xml`` (``make setup``), resolved once into ``.jvm/kafka`` of the repository, or into
``~/.cache/dataflow-kafka`` when the package is installed without the repository;
``DATAFLOW_KAFKA_JARS`` points elsewhere.

What the configuration changes from Kafka's defaults, and why: the internal topics have
replication factor 1 (one node) and 4 partitions instead of 50 (a first consumer group or
transaction waits for fewer partitions to be created); ``group.initial.rebalance.delay.ms=0``; a broker session of 4 s instead of 9 s (a node restarted
after a SIGKILL waits for its previous session to expire before it serves);
two network and two I/O threads and a bounded heap (``-Xmx``, default 768 MiB): the broker shares
two cores with Spark. Flush settings stay Kafka's defaults: a record acknowledged with
``acks=all`` is in the page cache, which survives a SIGKILL of the broker process.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from dataflow_kafka.brokers.tls import Tls, TlsFiles, make_certificates
from dataflow_kafka.errors import KafkaSetupError

__all__ = ["KAFKA_VERSION", "Scram", "kafka_jars", "resolve_kafka_jars", "KafkaNode"]

#: The pinned Apache Kafka release (``brokers/pom.xml`` says the same).
KAFKA_VERSION = "4.1.1"
POM = Path(__file__).with_name("pom.xml")
_REPO = Path(__file__).resolve().parents[1]


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()[:12]


def kafka_jars() -> Path:
    """The folder of resolved Kafka jars: ``DATAFLOW_KAFKA_JARS``, else ``.jvm/kafka`` of the
    repository (when running from it), else ``~/.cache/dataflow-kafka/kafka-<version>``."""
    env = os.environ.get("DATAFLOW_KAFKA_JARS")
    if env:
        return Path(env)
    if (_REPO / "pyproject.toml").exists() and (_REPO / "brokers" / "pom.xml").exists():
        return _REPO / ".jvm" / "kafka"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "dataflow-kafka" / f"kafka-{KAFKA_VERSION}"


def _stamp(jars: Path) -> Path:
    return jars / f".resolved-{_pom_digest()}"


def resolve_kafka_jars(quiet: bool = False) -> Path:
    """The jars of :data:`KAFKA_VERSION`, resolved with Maven from ``brokers/pom.xml`` if they are
    not there yet (a stamp per POM content: a second call does nothing). Raises
    :class:`KafkaSetupError` naming the command and its output if Maven fails."""
    jars = kafka_jars()
    if _stamp(jars).exists():
        return jars
    if os.environ.get("DATAFLOW_KAFKA_JARS") and any(jars.glob("kafka_2.13-*.jar")):
        return jars                              # a folder the user filled: trusted as is
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaSetupError(
            f"Apache Kafka {KAFKA_VERSION} is not resolved in {jars} and Maven ('mvn') is not on PATH: install "
            "Maven (e.g. apt-get install maven) and run 'make setup', or set KAFKA_BOOTSTRAP_SERVERS to a "
            "running Kafka")
    if jars.exists():
        shutil.rmtree(jars)                      # jars of another POM version
    jars.mkdir(parents=True)
    cmd = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={jars}"]
    if not quiet:
        print(f"resolving Apache Kafka {KAFKA_VERSION} with Maven into {jars}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not any(jars.glob("kafka_2.13-*.jar")):
        raise KafkaSetupError(f"Maven could not resolve Apache Kafka {KAFKA_VERSION}: {' '.join(cmd)} exited with "
                              f"{done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}")
    _stamp(jars).touch()
    return jars


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else shutil.which("java")
    if not java:
        raise KafkaSetupError("Java 17 is required by Apache Kafka 4 and Spark: 'java' is not on PATH and JAVA_HOME "
                              "is not set")
    return java


@dataclass(frozen=True)
class Scram:
    """SASL_PLAINTEXT with SCRAM-SHA-512 and ACLs (``StandardAuthorizer``): ``users`` maps user
    names to passwords, created when the storage is formatted; ``admin`` is the super user (the
    broker's own inter-broker identity, and the one that creates topics and ACLs in tests).
    Nobody without an ACL may do anything (``allow.everyone.if.no.acl.found=false``)."""

    users: dict[str, str] = field(default_factory=dict)
    admin: str = "admin"
    admin_password: str = field(default_factory=lambda: uuid.uuid4().hex)
    mechanism: str = "SCRAM-SHA-512"

    def client_conf(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka settings of a client logging in as ``user`` (default: the super user)."""
        user = user or self.admin
        password = password if password is not None else (
            self.admin_password if user == self.admin else self.users[user])
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": self.mechanism,
                "sasl.username": user, "sasl.password": password}

    def spark_options(self, user: str, password: str | None = None) -> dict[str, str]:
        """The same login as Spark's Kafka options (``kafka.security.protocol``,
        ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``)."""
        password = self.users[user] if password is None else password
        return {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": self.mechanism,
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                          f'username="{user}" password="{password}";'}


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (what
    ``kafka-storage random-uuid`` prints; it may begin with ``-``, so it is passed as
    ``--cluster-id=ID``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
logger.shutdown.name = kafka.server.BrokerServer
logger.shutdown.level = info
"""


@dataclass
class KafkaNode:
    """The files and command line of one KRaft node in ``workdir`` (ports fixed at creation, so a
    restart keeps its address)."""

    workdir: Path
    port: int
    controller_port: int
    scram: Scram | None = None
    tls: Tls | None = None                                       # TLS listeners (brokers/tls.py)
    tls_ports: dict[str, int] = field(default_factory=dict)      # TLS listener name -> port
    tls_files: TlsFiles | None = None                            # made by prepare()
    heap: str = field(default_factory=lambda: os.environ.get("DATAFLOW_KAFKA_HEAP", "768m"))
    #: this node's id and, for a node of a cluster, every controller (``{node id: controller
    #: port}``, a static quorum) and the cluster id all its nodes are formatted with
    node_id: int = 1
    voters: dict[int, int] | None = None
    cluster_id: str = field(default_factory=_cluster_id)
    #: replication of the internal topics and settings that differ between one node and a cluster
    #: (``brokers.cluster``: ``default.replication.factor``, ``min.insync.replicas``, ...)
    replication: int = 1
    settings: dict[str, str] = field(default_factory=dict)
    #: loggers kept at INFO in ``kafka.log`` besides the start and stop lines
    info_loggers: tuple[str, ...] = ()

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def config_path(self) -> Path:
        return self.workdir / "server.properties"

    def server_properties(self) -> str:
        client = "SASL_PLAINTEXT" if self.scram else "PLAINTEXT"
        tls = {lst.name: (lst.protocol, self.tls_ports[lst.name]) for lst in self.tls.listeners} if self.tls else {}
        served = ",".join(f"{name}://127.0.0.1:{port}" for name, port in
                          [(client, self.port), *((n, p) for n, (_, p) in tls.items())])
        quorum = (f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}" if self.voters is None else
                  "controller.quorum.voters=" + ",".join(f"{n}@127.0.0.1:{p}" for n, p in sorted(self.voters.items())))
        rf, min_isr = self.replication, min(2, self.replication)
        lines = [
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            quorum,
            f"listeners={served},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners={served}",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map={client}:{client},CONTROLLER:PLAINTEXT"
            + "".join(f",{name}:{protocol}" for name, (protocol, _) in tls.items()),
            f"inter.broker.listener.name={client}",
            f"log.dirs={self.data_dir}",
            f"offsets.topic.replication.factor={rf}",
            "offsets.topic.num.partitions=4",
            f"transaction.state.log.replication.factor={rf}",
            f"transaction.state.log.min.isr={min_isr}",
            "transaction.state.log.num.partitions=4",
            f"share.coordinator.state.topic.replication.factor={rf}",
            f"share.coordinator.state.topic.min.isr={min_isr}",
            "group.initial.rebalance.delay.ms=0",
            # a node restarted after a SIGKILL waits for its previous session to expire (default 9 s)
            "broker.heartbeat.interval.ms=500",
            "broker.session.timeout.ms=4000",
            "num.network.threads=2",
            "num.io.threads=2",
            "num.recovery.threads.per.data.dir=1",
            "log.cleaner.threads=1",
            *(f"{k}={v}" for k, v in self.settings.items()),
        ]
        if self.tls:
            if self.tls_files is None or (not self.scram and any(p == "SASL_SSL" for p, _ in tls.values())):
                raise KafkaSetupError("a TLS node needs its certificates (prepare()) and, for a SASL_SSL listener, "
                                      "SCRAM users (scram=Scram(...))")
            jaas = {self.scram.mechanism: self._jaas()} if self.scram else {}
            lines += self.tls.server_properties(self.tls_files, jaas)
        if self.scram:
            s = self.scram
            lines += [
                f"sasl.enabled.mechanisms={s.mechanism}",
                f"sasl.mechanism.inter.broker.protocol={s.mechanism}",
                f"listener.name.sasl_plaintext.{s.mechanism.lower()}.sasl.jaas.config={self._jaas()}",
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "allow.everyone.if.no.acl.found=false",
                # the controller listener is PLAINTEXT on loopback: the node talks to itself as ANONYMOUS
                f"super.users=User:{s.admin};User:ANONYMOUS",
            ]
        return "\n".join(lines) + "\n"

    def _jaas(self) -> str:
        s = self.scram
        return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{s.admin}" ' \
               f'password="{s.admin_password}";'

    def _java_cmd(self, main: str, *args: str) -> list[str]:
        jars = resolve_kafka_jars()
        return [_java(), f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                "-cp", str(jars / "*"), main, *args]

    def prepare(self) -> None:
        """Write the configuration and format the storage once (``StorageTool format
        --standalone``, with the SCRAM users when given); a formatted data directory is kept."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.tls and self.tls_files is None:
            self.tls_files = make_certificates(self.workdir / "tls", self.tls.password)
        self.config_path.write_text(self.server_properties())
        (self.workdir / "log4j2.properties").write_text(_LOG4J2 + "".join(
            f"logger.info{i}.name = {name}\nlogger.info{i}.level = info\n" for i, name in enumerate(self.info_loggers)))
        if (self.data_dir / "meta.properties").exists():
            return
        standalone = ["--standalone"] if self.voters is None else []   # a static quorum is in the configuration
        cmd = self._java_cmd("kafka.tools.StorageTool", "format", *standalone, f"--cluster-id={self.cluster_id}",
                             "-c", str(self.config_path))
        if self.scram:
            for user, password in {self.scram.admin: self.scram.admin_password, **self.scram.users}.items():
                cmd += ["--add-scram", f"{self.scram.mechanism}=[name={user},password={password}]"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise KafkaSetupError(f"formatting Kafka storage in {self.data_dir} failed (exit {done.returncode}):\n"
                                  f"{(done.stdout + done.stderr)[-3000:]}")

    def command(self) -> list[str]:
        return self._java_cmd("kafka.Kafka", str(self.config_path))
