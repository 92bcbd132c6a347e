"""TLS for the embedded Apache Kafka broker: certificates made per run, and the listeners that
serve them.

:func:`make_certificates` makes, in a folder of the broker's work directory, a certificate
authority, broker certificates for ``localhost`` and ``127.0.0.1`` (a valid one, and for tests of
the clients' errors an expired one and one for another host name), a client certificate for
mutual TLS, and an authority nobody trusts. The client's trust and key stores come in every
format a Spark user meets: PEM files, and Java's JKS and PKCS12 stores written by the JDK's
``keytool`` (the files a Spark user hands to ``kafka.ssl.truststore.location`` /
``kafka.ssl.keystore.location``). Keys are elliptic-curve (P-256): made in microseconds.

:class:`Tls` says which TLS listeners a :class:`brokers.apache_kafka.KafkaNode` gets beside its
plaintext (or SASL_PLAINTEXT) one: by default ``SSL`` and ``MTLS`` (SSL with client certificates
required); a ``SASL_SSL`` listener needs SCRAM users (:class:`brokers.apache_kafka.Scram`).
The broker verifies client certificates against the same authority; its principal for a client
certificate is Kafka's default, the certificate's subject (:data:`CLIENT_PRINCIPAL`).
:class:`TlsEndpoints` (``Broker.tls``) gives the clients' settings per listener, with Spark's
option names or librdkafka's.

Example
-------
>>> from dataflow_kafka.brokers import Tls, kafka_broker      # doctest: +SKIP
>>> with kafka_broker("kafka", tls=Tls()) as b:
...     opts = b.tls.spark_options("SSL", store_type="JKS")
...     # {'kafka.bootstrap.servers': '127.0.0.1:PORT', 'kafka.security.protocol': 'SSL',
...     #  'kafka.ssl.truststore.location': '.../truststore.jks', ...}
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from dataflow_kafka.errors import InvalidArgumentError, KafkaSetupError

__all__ = ["Tls", "TlsListener", "TlsFiles", "TlsEndpoints", "make_certificates", "CLIENT_PRINCIPAL",
           "CERTIFICATE_KINDS"]

_ORGANIZATION = "dataflow-kafka test"
_CLIENT_NAME = "dataflow-kafka-client"
#: The broker's principal for the client certificate: its subject (Kafka's default principal builder).
CLIENT_PRINCIPAL = f"User:CN={_CLIENT_NAME},O={_ORGANIZATION}"
#: Broker certificates :func:`make_certificates` makes: a valid one, and two that clients must reject.
CERTIFICATE_KINDS = ("valid", "expired", "wrong-host")
_PROTOCOLS = ("SSL", "SASL_SSL")
_CLIENT_AUTH = ("none", "requested", "required")


@dataclass(frozen=True)
class TlsListener:
    """One TLS listener of the broker: its ``name`` (Kafka's listener name, upper case),
    ``protocol`` (``SSL`` or ``SASL_SSL``), ``client_auth`` (``none``, ``requested`` or
    ``required``: mutual TLS) and the broker ``certificate`` it presents (one of
    :data:`CERTIFICATE_KINDS`)."""

    name: str
    protocol: str = "SSL"
    client_auth: str = "none"
    certificate: str = "valid"

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.upper() or self.name in ("CONTROLLER", "PLAINTEXT",
                                                                                          "SASL_PLAINTEXT"):
            raise InvalidArgumentError(f"TlsListener name must be an upper-case identifier other than CONTROLLER, "
                                       f"PLAINTEXT and SASL_PLAINTEXT, got {self.name!r}")
        for what, value, allowed in (("protocol", self.protocol, _PROTOCOLS), ("client_auth", self.client_auth,
                                                                              _CLIENT_AUTH),
                                     ("certificate", self.certificate, CERTIFICATE_KINDS)):
            if value not in allowed:
                raise InvalidArgumentError(f"TlsListener {what} must be one of {allowed}, got {value!r}")


@dataclass(frozen=True)
class Tls:
    """The broker's TLS listeners (default: ``SSL``, and ``MTLS``: SSL with client certificates
    required). ``password`` protects every store and key :func:`make_certificates` writes."""

    listeners: tuple[TlsListener, ...] = (TlsListener("SSL"), TlsListener("MTLS", client_auth="required"))
    password: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        if len(self.password) < 6:
            raise InvalidArgumentError("Tls password must have at least 6 characters (keytool's minimum)")
        names = [lst.name for lst in self.listeners]
        if not names or len(set(names)) != len(names):
            raise InvalidArgumentError(f"Tls needs listeners with distinct names, got {names}")

    def server_properties(self, files: "TlsFiles", sasl_jaas: dict[str, str]) -> list[str]:
        """The broker settings of the TLS listeners (their addresses are the node's business):
        per listener its key store (PEM: the broker's key and certificate), trust store (the
        authority's certificate), client authentication and, for ``SASL_SSL``, the JAAS line
        ``sasl_jaas`` holds for that mechanism."""
        lines = []
        for lst in self.listeners:
            prefix = f"listener.name.{lst.name.lower()}."
            lines += [f"{prefix}ssl.keystore.type=PEM",
                      f"{prefix}ssl.keystore.location={files.broker[lst.certificate]}",
                      f"{prefix}ssl.truststore.type=PEM", f"{prefix}ssl.truststore.location={files.ca}",
                      f"{prefix}ssl.client.auth={lst.client_auth}",
                      f"{prefix}ssl.endpoint.identification.algorithm=https"]
            if lst.protocol == "SASL_SSL":
                lines += [f"{prefix}{mech.lower()}.sasl.jaas.config={jaas}" for mech, jaas in sasl_jaas.items()]
        return lines


@dataclass(frozen=True)
class TlsFiles:
    """The files of :func:`make_certificates` (all in ``folder``). ``broker``: certificate kind ->
    PEM file with the broker's key and certificate; ``truststore`` / ``keystore``: store type
    (``JKS``, ``PKCS12``) -> file; ``other_truststore``: a JKS store trusting only an authority
    that signed nothing here."""

    folder: Path
    password: str
    ca: Path
    other_ca: Path
    broker: dict[str, Path]
    client_certificate: Path
    client_key: Path
    truststore: dict[str, Path]
    keystore: dict[str, Path]
    other_truststore: Path


def _keytool() -> str:
    home = os.environ.get("JAVA_HOME")
    tool = Path(home) / "bin" / "keytool" if home else None
    found = str(tool) if tool is not None and tool.exists() else shutil.which("keytool")
    if not found:
        raise KafkaSetupError("the JDK's 'keytool' is needed to write Java key stores: it is not on PATH and "
                              "JAVA_HOME/bin has none")
    return found


_PASSWORD_ENV = "DATAFLOW_KAFKA_STORE_PASSWORD"


def _run_keytool(password: str, *commands: list[str]) -> None:
    """Run ``keytool`` once per argument list, all at once (each is a JVM start of about a second);
    the store password reaches it in the environment (``-storepass:env``), not the command line."""
    tool = _keytool()
    env = {**os.environ, _PASSWORD_ENV: password}
    running = [(args, subprocess.Popen([tool, *args, "-noprompt"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, env=env)) for args in commands]
    failed = []
    for args, p in running:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        if p.returncode != 0:
            target = args[args.index("-keystore" if "-keystore" in args else "-destkeystore") + 1]
            failed.append(f"keytool {args[0]} writing {target} (exit {p.returncode}): {out[-1000:]}")
    if failed:
        raise KafkaSetupError("writing Java key stores failed: " + "; ".join(failed))


def make_certificates(folder: Path, password: str, java_stores: bool = True) -> TlsFiles:
    """Make a certificate authority, the broker's certificates, a client certificate and Java
    stores in ``folder`` (replaced if it exists). Certificates are valid from an hour ago for a
    week (the expired one ended yesterday). ``java_stores=False`` skips ``keytool`` (PEM only)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    now = dt.datetime.now(dt.timezone.utc)
    week = (now - dt.timedelta(hours=1), now + dt.timedelta(days=7))

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORGANIZATION),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def authority(cn: str):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn)).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(week[0]).not_valid_after(week[1])
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                             crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return key, cert

    ca_key, ca_cert = authority("dataflow-kafka test CA")
    _, other_ca_cert = authority("an authority nobody trusts")

    def leaf(cn: str, hosts: list[str], ips: list[str], usage, valid: tuple[dt.datetime, dt.datetime]):
        import ipaddress

        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(valid[0]).not_valid_after(valid[1])
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if hosts or ips:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(h) for h in hosts] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
                critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    def pem(cert) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    def write(path: Path, data: bytes) -> Path:
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    server = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    broker_certs = {
        "valid": leaf("localhost", ["localhost"], ["127.0.0.1"], server, week),
        "expired": leaf("localhost", ["localhost"], ["127.0.0.1"], server,
                        (now - dt.timedelta(days=30), now - dt.timedelta(days=1))),
        "wrong-host": leaf("kafka.invalid", ["kafka.invalid"], [], server, week),
    }
    broker = {}
    for kind, (key, cert) in broker_certs.items():   # Kafka's PEM key store: an unencrypted PKCS#8 key, then the chain
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        broker[kind] = write(folder / f"broker-{kind}.pem", key_pem + pem(cert) + pem(ca_cert))
    client_key, client_cert = leaf(_CLIENT_NAME, [], [], [ExtendedKeyUsageOID.CLIENT_AUTH], week)
    secret = serialization.BestAvailableEncryption(password.encode())
    ca = write(folder / "ca.pem", pem(ca_cert))
    other_ca = write(folder / "other-ca.pem", pem(other_ca_cert))
    client_certificate = write(folder / "client.pem", pem(client_cert))
    client_key_path = write(folder / "client.key", client_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, secret))
    made_p12 = write(folder / "client-made-by-python.p12", pkcs12.serialize_key_and_certificates(
        b"client", client_key, client_cert, [ca_cert], secret))
    truststore: dict[str, Path] = {}
    keystore: dict[str, Path] = {}
    other_truststore = folder / "other-truststore.jks"
    if java_stores:
        commands = []
        for store_type, suffix in (("JKS", "jks"), ("PKCS12", "p12")):
            truststore[store_type] = folder / f"truststore.{suffix}"
            keystore[store_type] = folder / f"keystore.{suffix}"
            commands += [["-importcert", "-alias", "ca", "-file", str(ca), "-keystore", str(truststore[store_type]),
                          "-storetype", store_type, "-storepass:env", _PASSWORD_ENV],
                         ["-importkeystore", "-srckeystore", str(made_p12), "-srcstoretype", "PKCS12",
                          "-srcstorepass:env", _PASSWORD_ENV, "-destkeystore", str(keystore[store_type]),
                          "-deststoretype", store_type, "-deststorepass:env", _PASSWORD_ENV,
                          "-destkeypass:env", _PASSWORD_ENV]]
        commands.append(["-importcert", "-alias", "other", "-file", str(other_ca), "-keystore", str(other_truststore),
                         "-storetype", "JKS", "-storepass:env", _PASSWORD_ENV])
        _run_keytool(password, *commands)
    return TlsFiles(folder, password, ca, other_ca, broker, client_certificate, client_key_path, truststore, keystore,
                    other_truststore)


@dataclass(frozen=True)
class TlsEndpoints:
    """A running broker's TLS listeners: ``servers`` maps a listener name to its bootstrap
    address; :meth:`client_conf` and :meth:`spark_options` give a client's settings."""

    tls: Tls
    files: TlsFiles
    servers: dict[str, str]

    def listener(self, name: str) -> TlsListener:
        for lst in self.tls.listeners:
            if lst.name == name:
                return lst
        raise InvalidArgumentError(f"the broker has no TLS listener {name!r}; it has {sorted(self.servers)}")

    def client_conf(self, listener: str = "SSL", certificate: bool | None = None) -> dict[str, str]:
        """librdkafka settings (PEM files) of a client of ``listener``; with a client certificate
        when ``certificate`` (default: when the listener requires one). No SASL login."""
        lst = self.listener(listener)
        conf = {"bootstrap.servers": self.servers[listener], "security.protocol": lst.protocol,
                "ssl.ca.location": str(self.files.ca)}
        if certificate if certificate is not None else lst.client_auth == "required":
            conf.update({"ssl.certificate.location": str(self.files.client_certificate),
                         "ssl.key.location": str(self.files.client_key), "ssl.key.password": self.files.password})
        return conf

    def spark_options(self, listener: str = "SSL", store_type: str = "JKS", certificate: bool | None = None
                      ) -> dict[str, str]:
        """Spark's option names of a client of ``listener`` with Java stores of ``store_type``
        (``JKS`` or ``PKCS12``): ``kafka.ssl.truststore.*`` and, with a client certificate (default:
        when the listener requires one), ``kafka.ssl.keystore.*`` and ``kafka.ssl.key.password``."""
        lst = self.listener(listener)
        if store_type not in self.files.truststore:
            raise InvalidArgumentError(f"no {store_type!r} stores were made; made: {sorted(self.files.truststore)}")
        opts = {"kafka.bootstrap.servers": self.servers[listener], "kafka.security.protocol": lst.protocol,
                "kafka.ssl.truststore.location": str(self.files.truststore[store_type]),
                "kafka.ssl.truststore.password": self.files.password, "kafka.ssl.truststore.type": store_type}
        if certificate if certificate is not None else lst.client_auth == "required":
            opts.update({"kafka.ssl.keystore.location": str(self.files.keystore[store_type]),
                         "kafka.ssl.keystore.password": self.files.password, "kafka.ssl.keystore.type": store_type,
                         "kafka.ssl.key.password": self.files.password})
        return opts
