"""TLS for real (issue 29): the source, the control topic, the range-stats topic and the sink over
``SSL``, mutual TLS and ``SASL_SSL`` on an Apache Kafka broker with TLS listeners and certificates
made for this run, configured with Spark's option names (JKS and PKCS12 stores, converted for
librdkafka) or librdkafka's; and every TLS mistake failing within 30 s with a
:class:`KafkaTlsError` naming the option and the cause (docs/reliability.md, "TLS").

One broker serves the module: its SASL_PLAINTEXT listener (the super user's, and the "plaintext
listener" of the mismatch tests), ``SSL``, ``MTLS`` (client certificates required), ``SASL_SSL``
(SCRAM), and two listeners whose certificates a client must reject: ``EXPIRED`` (ended
yesterday) and ``WRONGHOST`` (for ``kafka.invalid``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dataflow_kafka.brokers.tls import CLIENT_PRINCIPAL
from dataflow_kafka.errors import KafkaAuthenticationError, KafkaTlsError
from tests.support import now_ms, run_source_to_sink

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

USER, USER_PASSWORD = "tls-user", "tls-user-secret-3b9e"
IN, OUT, CONTROL, STATS = "tls-in", "tls-out", "tls-control", "tls-range-stats"
RECORDS = 120


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    """The module's broker with every listener, its topics, some input, and ACLs letting the SCRAM
    user and the client certificate's principal do anything (the SSL listener's anonymous
    clients are super users, as the plaintext controller's)."""
    from confluent_kafka.admin import (
        AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType,
    )

    from dataflow_kafka.brokers import Scram, Tls, TlsListener, kafka_broker

    listeners = (TlsListener("SSL"), TlsListener("MTLS", client_auth="required"), TlsListener("SASL_SSL", "SASL_SSL"),
                 TlsListener("EXPIRED", certificate="expired"), TlsListener("WRONGHOST", certificate="wrong-host"))
    with kafka_broker("kafka", workdir=tmp_path_factory.mktemp("tls"), tls=Tls(listeners),
                      scram=Scram(users={USER: USER_PASSWORD})) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers, **b.client_conf})
        for f in admin.create_topics([NewTopic(IN, 2, 1), NewTopic(OUT, 1, 1), NewTopic(CONTROL, 1, 1),
                                      NewTopic(STATS, 1, 1)]).values():
            f.result(30)
        acls = [AclBinding(rtype, "*", ResourcePatternType.LITERAL, who, "*", AclOperation.ALL, AclPermissionType.ALLOW)
                for who in (f"User:{USER}", CLIENT_PRINCIPAL)
                for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)]
        for f in admin.create_acls(acls).values():
            f.result(30)
        _produce(b.bootstrap_servers, b.client_conf, IN,
                 [(json.dumps({"ts": now_ms() - 60_000 + i, "n": i}).encode(), i % 2) for i in range(RECORDS)])
        yield b


def _produce(servers: str, conf: dict, topic: str, records) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": servers, **conf})
    for value, partition in records:
        p.produce(topic, value, partition=partition)
    assert p.flush(30) == 0


def _count(broker, topic: str) -> int:
    """Records in ``topic`` (committed ones; transaction markers, which take offsets, are not records)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "dataflow-kafka-count",
                  "enable.partition.eof": True, "isolation.level": "read_committed", **broker.client_conf})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        count, open_parts, deadline = 0, set(parts), time.monotonic() + 30
        while open_parts and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=1):
                if m.error() is None:
                    count += 1
                elif m.error().code() == m.error()._PARTITION_EOF:
                    open_parts.discard(m.partition())
        assert not open_parts, f"{topic}: no end of partitions {open_parts} within 30 s"
        return count
    finally:
        c.close()


def _sasl(password: str = USER_PASSWORD) -> dict:
    return {"kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                      f'username="{USER}" password="{password}";'}


def _login(broker, mode: str) -> dict:
    """Client options of a mode: ``<listener>-<JKS|PKCS12>`` with Spark's names, or
    ``<listener>-librdkafka`` with librdkafka's (PEM files)."""
    listener, names = mode.split("-", 1)
    if names == "librdkafka":
        opts = {f"kafka.{k}": v for k, v in broker.tls.client_conf(listener).items()}
    else:
        opts = broker.tls.spark_options(listener, names)
    return {**opts, **(_sasl() if listener == "SASL_SSL" else {})}


def _source(login: dict, **extra) -> dict:
    return {**login, "subscribe": IN, "startingOffsets": "earliest", "eventTimeField": "ts", "controlTopic": CONTROL,
            "rangeStatsTopic": STATS, "maxOffsetsPerTrigger": "50", **extra}


def _run(spark, source: dict, sink: dict, checkpoint: Path):
    return run_source_to_sink(spark, source, {**sink, "topic": OUT}, checkpoint)


def _secrets(broker) -> list[str]:
    return [USER_PASSWORD, broker.tls.files.password, "PRIVATE KEY", "ScramLoginModule required"]


def _no_secret_in(broker, text: str) -> None:
    for secret in _secrets(broker):
        assert secret not in text, f"{secret[:12]}... leaked"


def _checkpoint_text(checkpoint: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in checkpoint.rglob("*") if p.is_file())


@pytest.mark.parametrize("mode, exactly_once, runs", [
    ("SSL-JKS", False, 2),
    ("MTLS-PKCS12", False, 1),
    ("SASL_SSL-JKS", True, 2),
    ("MTLS-librdkafka", False, 1),
])
def test_source_control_range_stats_and_sink_over_tls(spark, tls_broker, tmp_path, capfd, mode, exactly_once, runs):
    """Each TLS mode end to end: the source reads every record over TLS, the tasks leave range
    stats, the sink writes every record (exactly once, in Kafka transactions, over SASL_SSL), and a
    control command written between two runs reaches the second run's offset log."""
    login = _login(tls_broker, mode)
    sink = {**login, **({"exactlyOnce": "true"} if exactly_once else {})}
    before, stats_before = _count(tls_broker, OUT), _count(tls_broker, STATS)
    q, error, _ = _run(spark, _source(login), sink, tmp_path / "ck")
    assert error is None, error
    assert _count(tls_broker, OUT) - before == RECORDS
    assert _count(tls_broker, STATS) > stats_before, "no range stats were written over TLS"
    progress = str(q.recentProgress)
    if runs == 2:
        command = '{"op": "noop", "id": "%s"}' % tmp_path.name
        _produce(tls_broker.bootstrap_servers, tls_broker.client_conf, CONTROL, [(command.encode(), 0)])
        q, error, _ = _run(spark, _source(login), sink, tmp_path / "ck")
        assert error is None, error
        assert json.dumps(command) in _checkpoint_text(tmp_path / "ck"), "the control command is not in the offset log"
        progress += str(q.recentProgress)
    _no_secret_in(tls_broker, _checkpoint_text(tmp_path / "ck") + progress + "".join(capfd.readouterr()))


def _plain(broker) -> dict:
    """The broker's SASL_PLAINTEXT listener: a listener without TLS."""
    return {"kafka.bootstrap.servers": broker.bootstrap_servers}


#: Mistakes run as a streaming query: the source's options, the sink's (None: the source's), and
#: what the message says.
QUERY_MISTAKES = {
    "plaintext client to a TLS listener": (
        lambda b: {"kafka.bootstrap.servers": b.tls.servers["SSL"]}, None,
        ["the listener at", "speaks TLS, but the client does not", "set kafka.security.protocol=SSL"]),
    "SASL_SSL client to a plaintext listener": (
        lambda b: {**_login(b, "SASL_SSL-JKS"), **_plain(b)}, None,
        ["does not speak TLS (a PLAINTEXT or SASL_PLAINTEXT listener)", "security.protocol=SASL_SSL"]),
    "an untrusted certificate authority": (
        lambda b: {**_login(b, "SSL-JKS"), "kafka.ssl.truststore.location": str(b.tls.files.other_truststore)}, None,
        ["is not trusted", "issued by CN=dataflow-kafka test CA",
         "is not signed by an authority in kafka.ssl.truststore.location="]),
    "a wrong trust store password": (
        lambda b: {**_login(b, "SSL-JKS"), "kafka.ssl.truststore.password": "not-the-password"}, None,
        ["option 'kafka.ssl.truststore.password' does not open", "(JKS)"]),
    "a JKS file given where librdkafka reads PEM": (
        lambda b: {**_login(b, "SSL-librdkafka"), "kafka.ssl.ca.location": str(b.tls.files.truststore["JKS"])}, None,
        ["option 'kafka.ssl.ca.location'", "is a Java JKS store", "kafka.ssl.truststore.location"]),
    "the sink without the client certificate its listener requires": (
        lambda b: _login(b, "SSL-JKS"),
        lambda b: {**_login(b, "SSL-JKS"), "kafka.bootstrap.servers": b.tls.servers["MTLS"]},
        ["refused the TLS connection", "requires a client certificate"]),
}


@pytest.mark.parametrize("mistake", list(QUERY_MISTAKES))
def test_a_tls_mistake_fails_the_query_within_30_s_naming_option_and_cause(spark, tls_broker, tmp_path, capfd,
                                                                           mistake):
    source, sink, says = QUERY_MISTAKES[mistake]
    login = source(tls_broker)
    _, error, took = _run(spark, _source(login), sink(tls_broker) if sink else login, tmp_path / "ck")
    assert error is not None, f"{mistake}: the query ran"
    msg = str(error)
    assert "KafkaTlsError" in msg or isinstance(error, KafkaTlsError), msg[:3000]
    for text in says:
        assert text in msg, f"{text!r} not in: {msg[:3000]}"
    assert took < 30, took
    assert "KafkaUnavailableError" not in msg and "is the broker up" not in msg, msg[:3000]
    _no_secret_in(tls_broker, msg + "".join(capfd.readouterr()))


#: Mistakes checked where the driver meets them first (the stream reader's first offset request),
#: each: (options, the error class, what the message says).
DRIVER_MISTAKES = {
    "TLS client to a plaintext listener": (
        lambda b: {**_login(b, "SSL-JKS"), **_plain(b)},
        KafkaTlsError, ["does not speak TLS", "set kafka.security.protocol=PLAINTEXT"]),
    "SASL_PLAINTEXT client to a SASL_SSL listener": (
        lambda b: {**_sasl(), "kafka.security.protocol": "SASL_PLAINTEXT",
                   "kafka.bootstrap.servers": b.tls.servers["SASL_SSL"]},
        KafkaTlsError, ["speaks TLS, but the client does not", "set kafka.security.protocol=SASL_SSL"]),
    "TLS options without security.protocol": (
        lambda b: {**_login(b, "SSL-JKS"), "kafka.security.protocol": "PLAINTEXT"},
        KafkaTlsError, ["kafka.ssl.* options are set, but they apply only with SSL or SASL_SSL"]),
    "an expired broker certificate": (
        lambda b: {**_login(b, "SSL-JKS"), "kafka.bootstrap.servers": b.tls.servers["EXPIRED"]},
        KafkaTlsError, ["has expired", "the broker needs a new certificate"]),
    "a host name the certificate does not name": (
        lambda b: {**_login(b, "SSL-PKCS12"), "kafka.bootstrap.servers": b.tls.servers["WRONGHOST"]},
        KafkaTlsError, ["for DNS:kafka.invalid", "does not name the host the client connected to",
                        "kafka.ssl.endpoint.identification.algorithm"]),
    "an untrusted authority (librdkafka's names)": (
        lambda b: {**_login(b, "SSL-librdkafka"), "kafka.ssl.ca.location": str(b.tls.files.other_ca)},
        KafkaTlsError, ["is not signed by an authority in kafka.ssl.ca.location="]),
    "no client certificate for a listener that requires one": (
        lambda b: {**_login(b, "SSL-JKS"), "kafka.bootstrap.servers": b.tls.servers["MTLS"]},
        KafkaTlsError, ["refused the TLS connection", "requires a client certificate",
                        "set kafka.ssl.keystore.location"]),
    "a wrong key store password": (
        lambda b: {**_login(b, "MTLS-PKCS12"), "kafka.ssl.keystore.password": "not-the-password"},
        KafkaTlsError, ["option 'kafka.ssl.keystore.password' does not open", "(PKCS12)"]),
    "a wrong key password": (
        lambda b: {**_login(b, "MTLS-JKS"), "kafka.ssl.key.password": "not-the-password"},
        KafkaTlsError, ["option 'kafka.ssl.key.password' does not decrypt the private key", "(JKS)"]),
    "a wrong key password (librdkafka's names)": (
        lambda b: {**_login(b, "MTLS-librdkafka"), "kafka.ssl.key.password": "not-the-password"},
        KafkaTlsError, ["option 'kafka.ssl.key.location' could not be used", "a wrong kafka.ssl.key.password"]),
    "a missing trust store": (
        lambda b: {**_login(b, "SSL-JKS"), "kafka.ssl.truststore.location": "/nonexistent/truststore.jks"},
        KafkaTlsError, ["option 'kafka.ssl.truststore.location' ('/nonexistent/truststore.jks'): no such file"]),
    "a missing key store": (
        lambda b: {**_login(b, "MTLS-JKS"), "kafka.ssl.keystore.location": "/nonexistent/keystore.p12"},
        KafkaTlsError, ["option 'kafka.ssl.keystore.location' ('/nonexistent/keystore.p12'): no such file"]),
    "a missing PEM file (librdkafka's names)": (
        lambda b: {**_login(b, "SSL-librdkafka"), "kafka.ssl.ca.location": "/nonexistent/ca.pem"},
        KafkaTlsError, ["option 'kafka.ssl.ca.location' ('/nonexistent/ca.pem'): no such file"]),
    "a wrong SASL password over TLS": (
        lambda b: _login(b, "SASL_SSL-JKS") | _sasl("not-the-password"),
        KafkaAuthenticationError, ["Kafka authentication failed", "for user 'tls-user'",
                                   "security.protocol=SASL_SSL"]),
}


@pytest.mark.parametrize("mistake", list(DRIVER_MISTAKES))
def test_a_tls_mistake_fails_on_the_driver_within_30_s_naming_option_and_cause(tls_broker, mistake):
    from dataflow_kafka.datasource.options import parse_source_options
    from dataflow_kafka.datasource.source import DataflowKafkaStreamReader

    make, error_class, says = DRIVER_MISTAKES[mistake]
    began = time.monotonic()
    reader = None
    with pytest.raises(error_class) as e:
        reader = DataflowKafkaStreamReader(parse_source_options(_source(make(tls_broker)), streaming=True))
        reader.initialOffset()
    took = time.monotonic() - began
    if reader is not None:
        reader.stop()
    msg = str(e.value)
    for text in says:
        assert text in msg, f"{text!r} not in: {msg}"
    assert took < 30, took
    _no_secret_in(tls_broker, msg)
    assert "not-the-password" not in msg


@pytest.mark.parametrize("mistake", [
    "TLS client to a plaintext listener", "SASL_PLAINTEXT client to a SASL_SSL listener", "an expired broker certificate",
    "no client certificate for a listener that requires one"])
def test_a_consumer_request_names_the_tls_cause_without_the_acl_check_first(tls_broker, mistake):
    """The same mistakes met by a consumer's own request (a ``subscribePattern`` query has no topic
    to check ACLs of first): ``list_topics`` fails with the TLS cause, not after its retries."""
    from dataflow_kafka.datasource import kafka_read
    from dataflow_kafka.datasource.options import parse_source_options

    make, error_class, says = DRIVER_MISTAKES[mistake]
    opts = parse_source_options({**make(tls_broker), "subscribePattern": "tls-.*"}, streaming=True)
    c = kafka_read.consumer(opts.kafka)
    began = time.monotonic()
    try:
        with pytest.raises(error_class) as e:
            kafka_read.list_topics(c, None, 30)
    finally:
        c.close()
    assert time.monotonic() - began < 15
    for text in says:
        assert text in str(e.value), f"{text!r} not in: {e.value}"


def test_a_task_reading_over_a_broken_tls_connection_names_the_cause(tls_broker):
    """Executor side (the driver's checks passed, then the broker's certificate changed): a read
    task fails with the TLS cause, not a timeout or 'is the broker up?'."""
    from dataflow_kafka.datasource.options import parse_source_options
    from dataflow_kafka.datasource.source import OffsetRange, _read

    login = {**_login(tls_broker, "SSL-JKS"), "kafka.bootstrap.servers": tls_broker.tls.servers["EXPIRED"]}
    opts = parse_source_options(_source(login), streaming=True)
    began = time.monotonic()
    with pytest.raises(KafkaTlsError, match="has expired"):
        list(_read(opts, OffsetRange(IN, 0, 0, 10, None, now_ms())))
    assert time.monotonic() - began < 30


def test_a_sink_task_over_a_broken_tls_connection_names_the_cause(tls_broker):
    """Executor side of the sink: records that cannot be delivered because the broker's
    certificate is not trusted fail the task with the TLS cause."""
    import pyarrow as pa

    from dataflow_kafka.datasource import sink
    from dataflow_kafka.datasource.options import parse_sink_options

    login = {**_login(tls_broker, "SSL-JKS"),
             "kafka.ssl.truststore.location": str(tls_broker.tls.files.other_truststore)}
    opts = parse_sink_options({**login, "topic": OUT, "kafka.delivery.timeout.ms": "5000"})
    batch = pa.RecordBatch.from_pydict({"value": [b"1", b"2"]}, schema=pa.schema([("value", pa.binary())]))
    began = time.monotonic()
    with pytest.raises(KafkaTlsError, match="is not signed by an authority in kafka.ssl.truststore.location="):
        sink._produce(opts, iter([batch]))
    assert time.monotonic() - began < 30
