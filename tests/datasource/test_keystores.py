"""Java's stores read into librdkafka's PEM settings, without a broker: the files come from
:func:`brokers.tls.make_certificates` (JKS and PKCS12 stores written by the JDK's ``keytool``)."""

from __future__ import annotations

import logging
import pickle
import shutil
import socket
import subprocess

import pytest

from dataflow_kafka.datasource import kafka_security, kafka_tls, keystores
from dataflow_kafka.errors import KafkaTlsError

pytestmark = pytest.mark.jvm     # keytool writes the Java stores

PASSWORD = "store-secret-5a7c"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from dataflow_kafka.brokers.tls import make_certificates

    return make_certificates(tmp_path_factory.mktemp("certs"), PASSWORD)


def _ders(pem: str) -> list[bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return [c.public_bytes(Encoding.DER) for c in x509.load_pem_x509_certificates(pem.encode())]


@pytest.mark.parametrize("store", ["JKS", "PKCS12", "PEM"])
def test_a_trust_store_gives_the_authority_it_trusts(files, store):
    path = files.ca if store == "PEM" else files.truststore[store]
    pem = keystores.read_truststore(str(path), PASSWORD, store)
    assert pem.startswith(f"dataflow-kafka: from kafka.ssl.truststore.location='{path}' ({store})\n")
    assert _ders(pem) == _ders(files.ca.read_text())


@pytest.mark.parametrize("store", ["JKS", "PKCS12"])
def test_a_key_store_gives_the_client_certificate_and_its_key_encrypted_with_its_password(files, store):
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    pair = keystores.read_keystore(str(files.keystore[store]), PASSWORD, PASSWORD, store)
    assert _ders(pair.certificates)[0] == _ders(files.client_certificate.read_text())[0]
    assert pair.key.startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----") and pair.password == PASSWORD
    key = load_pem_private_key(pair.key.encode(), PASSWORD.encode())
    from cryptography import x509

    cert = x509.load_pem_x509_certificates(pair.certificates.encode())[0]
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_the_format_comes_from_the_file_not_the_declared_type(files):
    """Java 9+ loads a JKS store declared PKCS12 and the reverse (keystore.type.compat)."""
    pem = keystores.read_truststore(str(files.truststore["JKS"]), PASSWORD, "PKCS12")
    assert "(JKS)" in pem.splitlines()[0]


def test_a_jks_trust_store_without_password_is_read_unchecked(files):
    """As Java: without a password a JKS store's certificates are read, its digest not checked."""
    assert _ders(keystores.read_truststore(str(files.truststore["JKS"]), None)) == _ders(files.ca.read_text())


@pytest.mark.parametrize("read, store, option", [
    (keystores.read_truststore, "JKS", "kafka.ssl.truststore.password"),
    (keystores.read_truststore, "PKCS12", "kafka.ssl.truststore.password"),
    (keystores.read_keystore, "JKS", "kafka.ssl.keystore.password"),
    (keystores.read_keystore, "PKCS12", "kafka.ssl.keystore.password"),
])
def test_a_wrong_password_names_the_password_option_never_the_password(files, read, store, option):
    path = (files.truststore if read is keystores.read_truststore else files.keystore)[store]
    with pytest.raises(KafkaTlsError) as e:
        read(str(path), "wrong-password-1234")
    assert f"option '{option}' does not open '{path}' ({store})" in str(e.value)
    assert "wrong-password-1234" not in str(e.value) and PASSWORD not in str(e.value)


def test_a_wrong_key_password_of_a_jks_store_names_the_key_password_option(files):
    with pytest.raises(KafkaTlsError, match="option 'kafka.ssl.key.password' does not decrypt the private key"):
        keystores.read_keystore(str(files.keystore["JKS"]), PASSWORD, "wrong-password-1234")


def test_a_damaged_jks_store_is_named(files, tmp_path):
    broken = tmp_path / "broken.jks"
    broken.write_bytes(files.truststore["JKS"].read_bytes()[:60])
    with pytest.raises(KafkaTlsError, match=r"option 'kafka.ssl.truststore.location' \(.*broken.jks', JKS\): a damaged"):
        keystores.read_truststore(str(broken), PASSWORD)


def test_a_jceks_store_and_an_unknown_type_say_how_to_convert(files, tmp_path):
    jceks = tmp_path / "store.jceks"
    subprocess.run([shutil.which("keytool") or "keytool", "-importkeystore", "-srckeystore", str(files.keystore["PKCS12"]),
                    "-srcstoretype", "PKCS12", "-srcstorepass", PASSWORD, "-destkeystore", str(jceks),
                    "-deststoretype", "JCEKS", "-deststorepass", PASSWORD, "-noprompt"],
                   check=True, capture_output=True, timeout=120)
    with pytest.raises(KafkaTlsError, match="JCEKS stores are not supported; convert it: keytool -importkeystore"):
        keystores.read_keystore(str(jceks), PASSWORD)
    with pytest.raises(KafkaTlsError, match="option 'kafka.ssl.truststore.type' is 'BKS': supported store types are"):
        keystores.read_truststore(str(files.truststore["JKS"]), PASSWORD, "BKS")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01junk")
    with pytest.raises(KafkaTlsError, match="not a JKS, PKCS12 or PEM store"):
        keystores.read_truststore(str(junk), PASSWORD)


def _spark(files, **extra) -> dict:
    return {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL",
            "ssl.truststore.location": str(files.truststore["JKS"]), "ssl.truststore.password": PASSWORD,
            "ssl.truststore.type": "JKS", **extra}


def test_spark_option_names_become_librdkafka_ones(files):
    conf = kafka_tls.librdkafka_tls_conf(_spark(
        files, **{"ssl.keystore.location": str(files.keystore["PKCS12"]), "ssl.keystore.password": PASSWORD,
                  "ssl.keystore.type": "PKCS12", "ssl.key.password": PASSWORD,
                  "ssl.endpoint.identification.algorithm": ""}))
    assert not any(k.startswith(("ssl.truststore", "ssl.keystore")) for k in conf), conf.keys()
    assert _ders(conf["ssl.ca.pem"]) == _ders(files.ca.read_text())
    assert conf["ssl.certificate.pem"].startswith("dataflow-kafka: from kafka.ssl.keystore.location=")
    assert conf["ssl.key.pem"].startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    assert pickle.loads(pickle.dumps(conf)) == conf        # travels to the executors with the options


def test_inline_pem_options_become_librdkafka_ones(files):
    key = files.client_key.read_text()
    conf = kafka_tls.librdkafka_tls_conf({
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": files.ca.read_text(),
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": files.client_certificate.read_text(),
        "ssl.keystore.key": key, "ssl.key.password": PASSWORD})
    assert _ders(conf["ssl.ca.pem"]) == _ders(files.ca.read_text())
    assert conf["ssl.key.pem"] == key and conf["ssl.key.password"] == PASSWORD
    with pytest.raises(KafkaTlsError, match="'kafka.ssl.keystore.certificate.chain' and 'kafka.ssl.keystore.key' go"):
        kafka_tls.librdkafka_tls_conf({"ssl.keystore.key": key})


@pytest.mark.parametrize("extra, message", [
    ({"ssl.ca.location": "/x.pem"}, "options 'kafka.ssl.truststore.location' and 'kafka.ssl.ca.location' both"),
    ({"ssl.endpoint.identification.algorithm": "http"}, "'kafka.ssl.endpoint.identification.algorithm' is 'http'"),
])
def test_conflicting_or_malformed_tls_options_are_named(files, extra, message):
    with pytest.raises(KafkaTlsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kafka_tls.librdkafka_tls_conf(_spark(files, **extra))


def test_java_only_tls_settings_are_named_all_at_once():
    with pytest.raises(KafkaTlsError) as e:
        kafka_tls.librdkafka_tls_conf({"ssl.enabled.protocols": "TLSv1.3", "ssl.keymanager.algorithm": "SunX509"})
    assert ("option(s) ['kafka.ssl.enabled.protocols', 'kafka.ssl.keymanager.algorithm'] are settings of Kafka's "
            "Java client that librdkafka") in str(e.value)


def test_librdkafka_file_options_must_exist_and_be_pem(files):
    with pytest.raises(KafkaTlsError, match="'kafka.ssl.ca.location' .* is a Java JKS store, but librdkafka reads PEM "
                                            "there: give the store as 'kafka.ssl.truststore.location'"):
        kafka_tls.librdkafka_tls_conf({"ssl.ca.location": str(files.truststore["JKS"])})
    with pytest.raises(KafkaTlsError, match="'kafka.ssl.certificate.location' .* is a Java PKCS12 store"):
        kafka_tls.librdkafka_tls_conf({"ssl.certificate.location": str(files.keystore["PKCS12"])})
    with pytest.raises(KafkaTlsError, match="'kafka.ssl.key.location' \\('/nonexistent/k.pem'\\): no such file"):
        kafka_tls.librdkafka_tls_conf({"ssl.key.location": "/nonexistent/k.pem"})
    ok = {"ssl.ca.location": str(files.ca), "ssl.certificate.location": str(files.client_certificate),
          "ssl.key.location": str(files.client_key)}
    assert kafka_tls.librdkafka_tls_conf(ok) == ok
    assert kafka_tls.librdkafka_tls_conf({"ssl.ca.location": "probe"}) == {"ssl.ca.location": "probe"}


def test_a_client_that_cannot_load_its_key_names_the_option():
    conf = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL"}
    e = kafka_tls.diagnose(conf, "Failed to create consumer: ssl.key.location failed: "
                                 "error:0A080009:SSL routines::PEM lib")
    assert isinstance(e, KafkaTlsError)
    assert "option 'kafka.ssl.key.location' could not be used" in str(e) and "kafka.ssl.key.password" in str(e)


def test_a_disconnect_from_a_listener_that_does_not_answer_is_no_tls_error():
    """A broker that is down is an outage (retried), not a protocol mismatch: the probe finds no
    listener, so nothing is diagnosed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]           # closed when the block ends: nobody listens there
    line = (f"127.0.0.1:{port}/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN "
            "(after 1ms in state APIVERSION_QUERY)")
    assert kafka_tls.diagnose({"bootstrap.servers": f"127.0.0.1:{port}"}, line) is None
    assert kafka_tls.diagnose({"security.protocol": "SSL"}, "1/1 brokers are down") is None


def test_client_errors_forward_each_distinct_error_line_once(caplog):
    errors = kafka_security.ClientErrors({"bootstrap.servers": "127.0.0.1:9"})
    with caplog.at_level(logging.WARNING, logger="dataflow_kafka.kafka_client"):
        for ms in range(100):
            errors.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
                       f"[thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: "
                       f"Connection refused (after {ms}ms in state CONNECT)")
        errors.log(logging.INFO, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "an informational line")
    assert [r.getMessage() for r in caplog.records] == [
        "librdkafka: 127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused (in state CONNECT)"]
    assert errors.refusal() is None
