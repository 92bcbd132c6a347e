"""TLS to Kafka: Spark's TLS option names for librdkafka, and errors that say what is wrong.

Options. Spark's Kafka connector takes the Java client's TLS settings; librdkafka, which this
project's clients use, takes PEM. :func:`librdkafka_tls_conf` turns

* ``ssl.truststore.location`` / ``.password`` / ``.type`` (JKS, PKCS12 or PEM), or the PEM text
  of ``ssl.truststore.certificates``, into ``ssl.ca.pem``;
* ``ssl.keystore.location`` / ``.password`` / ``.type`` with ``ssl.key.password`` (mutual TLS),
  or the PEM text of ``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``, into
  ``ssl.certificate.pem``, ``ssl.key.pem`` (still encrypted) and ``ssl.key.password``;
* ``ssl.endpoint.identification.algorithm`` empty (Java's "no host name check") into ``none``.

The stores are read where the options are parsed (the driver) into text that travels with the
options to every task, so executors need neither the files nor a conversion; nothing is written
to disk. librdkafka's own names (``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``, ...) pass through, after a check that their files exist and are PEM (a JKS
file there is named as such, with the option to use instead).

Errors. librdkafka reports a failed handshake as a transport error and retries it like a broker
that is down, with its cause only in its log. :func:`diagnose` reads one of its error or log
lines and, where it shows a TLS failure, asks the listener itself with a TLS handshake of
Python's ``ssl`` module (:func:`probe`): whether it speaks TLS at all (a protocol mismatch either
way), and what is wrong with its certificate (expired, another host name, an authority the trust
store lacks). The result is a :class:`KafkaTlsError` naming the servers, the option to change and
the cause. The clients' callbacks that collect these lines are :class:`kafka_security.ClientErrors`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import ssl
from dataclasses import dataclass
from typing import Mapping

from dataflow_kafka.datasource import keystores
from dataflow_kafka.errors import KafkaTlsError

__all__ = ["librdkafka_tls_conf", "diagnose", "probe", "Probe", "TLS_PROTOCOLS", "public_tls_conf", "client_subject"]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_PLAIN_FOR = {"SSL": "PLAINTEXT", "SASL_SSL": "SASL_PLAINTEXT"}
_TLS_FOR = {"PLAINTEXT": "SSL", "SASL_PLAINTEXT": "SASL_SSL"}
#: librdkafka settings naming files it reads as PEM (``ssl.ca.location`` may also be a folder).
_PEM_FILES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.crl.location")
_PROBE_TIMEOUT_S = 5.0
#: Settings of Kafka's Java client with no librdkafka counterpart, and what to know instead.
_JAVA_ONLY = {
    "ssl.protocol": "librdkafka negotiates the highest TLS version both sides support (1.2 or 1.3)",
    "ssl.enabled.protocols": "librdkafka negotiates the highest TLS version both sides support (1.2 or 1.3)",
    "ssl.keymanager.algorithm": "a choice of the JVM's TLS implementation",
    "ssl.trustmanager.algorithm": "a choice of the JVM's TLS implementation",
    "ssl.secure.random.implementation": "a choice of the JVM's TLS implementation",
    "ssl.provider": "a choice of the JVM's TLS implementation",
    "ssl.engine.factory.class": "a Java class",
}


def _pop(conf: dict, key: str) -> str | None:
    value = conf.pop(key, None)
    return None if value is None else str(value)


def _conflict(conf: dict, spark: str, own: tuple[str, ...]) -> None:
    for key in own:
        if key in conf:
            raise KafkaTlsError(f"options 'kafka.{spark}' and 'kafka.{key}' both set the same thing: give one of them")


def librdkafka_tls_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` (``kafka.*`` options without the prefix) with Spark's TLS option names replaced by
    librdkafka's; raises :class:`KafkaTlsError` naming the option for a store that is missing,
    unreadable, of an unknown type, or not opened by its password."""
    out = dict(conf)
    java = sorted(k for k in out if k in _JAVA_ONLY)
    if java:
        why = "; ".join(sorted({_JAVA_ONLY[k] for k in java}))
        raise KafkaTlsError(f"option(s) {['kafka.' + k for k in java]} are settings of Kafka's Java client that "
                            f"librdkafka, the client of dataflow-kafka, does not have: remove them ({why})")
    trust = _pop(out, "ssl.truststore.location")
    trust_password, trust_type = _pop(out, "ssl.truststore.password"), _pop(out, "ssl.truststore.type")
    trust_text = _pop(out, "ssl.truststore.certificates")
    if trust is not None and trust_text is not None:
        raise KafkaTlsError("options 'kafka.ssl.truststore.location' and 'kafka.ssl.truststore.certificates' both "
                            "say which authorities to trust: give one of them")
    if trust is not None:
        _conflict(out, "ssl.truststore.location", ("ssl.ca.location", "ssl.ca.pem"))
        out["ssl.ca.pem"] = keystores.read_truststore(trust, trust_password, trust_type)
    elif trust_text is not None:
        _conflict(out, "ssl.truststore.certificates", ("ssl.ca.location", "ssl.ca.pem"))
        keystores.pem_certificates(trust_text, "ssl.truststore.certificates")
        out["ssl.ca.pem"] = "dataflow-kafka: from kafka.ssl.truststore.certificates\n" + trust_text
    store = _pop(out, "ssl.keystore.location")
    store_password, store_type = _pop(out, "ssl.keystore.password"), _pop(out, "ssl.keystore.type")
    chain_text, key_text = _pop(out, "ssl.keystore.certificate.chain"), _pop(out, "ssl.keystore.key")
    own_key = ("ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem")
    if store is not None:
        _conflict(out, "ssl.keystore.location", own_key)
        pair = keystores.read_keystore(store, store_password, _pop(out, "ssl.key.password"), store_type)
        out["ssl.certificate.pem"] = f"dataflow-kafka: from kafka.ssl.keystore.location={store!r}\n" + pair.certificates
        out["ssl.key.pem"] = pair.key
        if pair.password is not None:
            out["ssl.key.password"] = pair.password
    elif chain_text is not None or key_text is not None:
        if chain_text is None or key_text is None:
            raise KafkaTlsError("options 'kafka.ssl.keystore.certificate.chain' and 'kafka.ssl.keystore.key' go "
                                "together (a PEM key store): give both")
        _conflict(out, "ssl.keystore.key", own_key)
        keystores.pem_certificates(chain_text, "ssl.keystore.certificate.chain")
        out["ssl.certificate.pem"] = "dataflow-kafka: from kafka.ssl.keystore.certificate.chain\n" + chain_text
        out["ssl.key.pem"] = key_text
    endpoint = out.get("ssl.endpoint.identification.algorithm")
    if endpoint is not None:
        value = str(endpoint).strip().lower()
        if value not in ("", "none", "https"):
            raise KafkaTlsError(f"option 'kafka.ssl.endpoint.identification.algorithm' is {endpoint!r}: 'https' "
                                "(verify the broker's host name, the default) or '' (do not)")
        out["ssl.endpoint.identification.algorithm"] = value or "none"
    for key in _PEM_FILES:
        if key in out:
            _check_pem_file(key, str(out[key]))
    return out


def _check_pem_file(key: str, path: str) -> None:
    """A librdkafka file setting: the file must exist and hold PEM (``ssl.ca.location`` may be
    ``probe`` or a folder of certificates)."""
    if key == "ssl.ca.location" and (path == "probe" or os.path.isdir(path)):
        return
    try:
        with open(path, "rb") as f:
            head = f.read(64 * 1024)
    except FileNotFoundError:
        raise KafkaTlsError(f"option 'kafka.{key}' ({path!r}): no such file on {os.uname().nodename}") from None
    except OSError as e:
        raise KafkaTlsError(f"option 'kafka.{key}' ({path!r}): cannot be read: {e.strerror}") from None
    fmt = keystores.store_format(head)
    if fmt in (keystores.StoreFormat.JKS, keystores.StoreFormat.PKCS12, "JCEKS"):
        spark = "ssl.truststore" if key == "ssl.ca.location" else "ssl.keystore"
        raise KafkaTlsError(
            f"option 'kafka.{key}' ({path!r}) is a Java {fmt} store, but librdkafka reads PEM there: give the store as "
            f"'kafka.{spark}.location' (with '.password' and '.type'), which dataflow-kafka converts, or a PEM file")
    if key != "ssl.crl.location" and fmt != keystores.StoreFormat.PEM:
        raise KafkaTlsError(f"option 'kafka.{key}' ({path!r}) holds no PEM text ('-----BEGIN ...')")


def client_subject(conf: Mapping[str, str]) -> str | None:
    """The subject of the client certificate (``ssl.certificate.pem`` or
    ``ssl.certificate.location``) as Kafka writes a principal (``CN=...,O=...``), or None."""
    from cryptography import x509

    text = conf.get("ssl.certificate.pem")
    try:
        if text is None and conf.get("ssl.certificate.location"):
            with open(conf["ssl.certificate.location"], "rb") as f:
                text = f.read().decode("ascii", "replace")
        if not text:
            return None
        return x509.load_pem_x509_certificates(str(text).encode())[0].subject.rfc4514_string()
    except (OSError, ValueError, IndexError):
        return None


def public_tls_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings :func:`diagnose` reads, none of them secret: the servers, the protocol, the
    trusted authorities, the host name check, and where the client certificate came from."""
    keep = ("bootstrap.servers", "security.protocol", "ssl.ca.pem", "ssl.ca.location",
            "ssl.endpoint.identification.algorithm", "ssl.certificate.location")
    out = {k: str(conf[k]) for k in keep if k in conf}
    if "ssl.certificate.pem" in conf:
        out["ssl.certificate.pem"] = str(conf["ssl.certificate.pem"])
    return out


# -- what went wrong --------------------------------------------------------------------------------

_ADDRESS = re.compile(r"(?:(?:sasl_)?(?:ssl|plaintext)://)?\[?(?P<host>[\w.\-:]+?)\]?:(?P<port>\d+)/\w+:")
_DISCONNECT = re.compile(r"Disconnected.*(APIVERSION_QUERY|while requesting ApiVersion)|connecting to a SSL listener",
                         re.I)
_ALERT = re.compile(r"alert (?P<alert>bad certificate|certificate required|unknown ca|certificate unknown|"
                    r"handshake failure|certificate expired|certificate revoked|access denied)", re.I)
_CLIENT_SETUP = re.compile(r"(?P<option>ssl\.[a-z.]+)(?: [\w#]+ file: [^:]*)?:? (?:failed: )?(?P<cause>.*)")


@dataclass(frozen=True)
class Probe:
    """What a TLS handshake to a listener showed: ``tls`` (None: no connection; False: it does not
    speak TLS), the broker's ``certificate`` (DER) and ``problem`` (why verifying it with the
    client's trust settings failed, or None)."""

    tls: bool | None
    certificate: bytes | None = None
    problem: str | None = None
    detail: str = ""


def probe(host: str, port: int, conf: Mapping[str, str], timeout_s: float = _PROBE_TIMEOUT_S) -> Probe:
    """A TLS handshake to ``host:port`` (loopback or a broker the client was given): first without
    verification (does it speak TLS? its certificate), then as the client verifies (``ssl.ca.pem``
    or ``ssl.ca.location``, the host name check of ``ssl.endpoint.identification.algorithm``)."""
    loose = ssl.create_default_context()
    loose.check_hostname, loose.verify_mode = False, ssl.CERT_NONE
    try:
        der = _handshake(loose, host, port, timeout_s)
    except OSError as e:
        if isinstance(e, ssl.SSLError) and _ALERT.search(str(e)):
            return Probe(True, detail=str(e))      # a TLS alert: it speaks TLS (and wants a client certificate)
        if isinstance(e, (ssl.SSLError, ConnectionResetError, BrokenPipeError)) or "EOF" in str(e):
            return Probe(False, detail=str(e))
        return Probe(None, detail=str(e))
    strict = ssl.create_default_context()
    try:
        if conf.get("ssl.ca.pem"):
            strict = ssl.create_default_context(cadata=_certificate_blocks(conf["ssl.ca.pem"]))
        elif conf.get("ssl.ca.location") and conf["ssl.ca.location"] != "probe":
            location = conf["ssl.ca.location"]
            strict = ssl.create_default_context(cafile=None if os.path.isdir(location) else location,
                                                capath=location if os.path.isdir(location) else None)
    except (ssl.SSLError, OSError, ValueError) as e:
        return Probe(True, der, f"the trusted certificates could not be loaded: {e}")
    strict.check_hostname = conf.get("ssl.endpoint.identification.algorithm", "https") != "none"
    try:
        _handshake(strict, host, port, timeout_s)
    except ssl.SSLCertVerificationError as e:
        return Probe(True, der, e.verify_message or str(e))
    except OSError as e:
        return Probe(True, der, None, str(e))
    return Probe(True, der, None)


def _certificate_blocks(pem: str) -> str:
    return "".join(re.findall(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", pem, re.S))


def _handshake(context: ssl.SSLContext, host: str, port: int, timeout_s: float) -> bytes | None:
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return tls.getpeercert(binary_form=True)


def _describe_certificate(der: bytes | None) -> str:
    if der is None:
        return "the broker's certificate"
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)

    def cn(name) -> str:
        values = [a.value for a in name if a.oid == x509.NameOID.COMMON_NAME]
        return f"CN={values[0]}" if values else name.rfc4514_string()

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [f"DNS:{n}" for n in san.get_values_for_type(x509.DNSName)] + [
            f"IP:{ip}" for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = []
    return (f"the broker's certificate ({cn(cert.subject)}, for {', '.join(names) or 'no alternative names'}; "
            f"issued by {cn(cert.issuer)}; valid {_iso(cert.not_valid_before_utc)} to "
            f"{_iso(cert.not_valid_after_utc)})")


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _origin(conf: Mapping[str, str], pem_key: str, location_key: str) -> str | None:
    """The option the user gave for a PEM setting: the first line :func:`librdkafka_tls_conf`
    wrote (``dataflow-kafka: from kafka.ssl.truststore.location='...' (JKS)``), or librdkafka's
    own file setting."""
    text = conf.get(pem_key)
    if text:
        first = text.split("\n", 1)[0]
        return first.removeprefix("dataflow-kafka: from ") if first.startswith("dataflow-kafka: from ") \
            else f"kafka.{pem_key}"
    if conf.get(location_key):
        return f"kafka.{location_key}={conf[location_key]!r}"
    return None


def _head(conf: Mapping[str, str]) -> str:
    return (f"Kafka TLS failed at kafka.bootstrap.servers={conf.get('bootstrap.servers')!r} "
            f"(security.protocol={str(conf.get('security.protocol', 'PLAINTEXT')).upper()})")


def diagnose(conf: Mapping[str, str], text: str, probes: dict | None = None) -> KafkaTlsError | None:
    """The TLS failure one librdkafka error or log line shows, as a :class:`KafkaTlsError`, or
    None. ``conf``: the client's settings (:func:`public_tls_conf` suffices); ``probes``: the
    results of earlier probes, by address (a listener is asked once)."""
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if text.startswith("Failed to create") or "Failed to parse ssl." in text:
        return _setup_failure(conf, text)
    where = _ADDRESS.search(text)
    if where is None:
        return None
    host, port = where.group("host"), int(where.group("port"))
    address = f"{host}:{port}"
    cause = text[where.end():].strip()
    cause = re.sub(r"\s*\((?:after \d+ms )?in state \w+[^)]*\)\s*$", "", cause)

    def asked() -> Probe:
        if probes is None:
            return probe(host, port, conf)
        if address not in probes:
            probes[address] = probe(host, port, conf)
        return probes[address]

    if protocol not in TLS_PROTOCOLS:
        if not _DISCONNECT.search(text) or asked().tls is not True:
            return None
        hint = (" (kafka.ssl.* options are set, but they apply only with SSL or SASL_SSL)"
                if any(k.startswith("ssl.") for k in conf) else "")
        return KafkaTlsError(
            f"{_head(conf)}: the listener at {address} speaks TLS, but the client does not{hint}: set "
            f"kafka.security.protocol={_TLS_FOR.get(protocol, 'SSL')} and the authorities to trust "
            f"(kafka.ssl.truststore.location, or kafka.ssl.ca.location), or use the broker's {protocol} listener's "
            f"address in kafka.bootstrap.servers")
    if "SSL handshake failed" not in text and not _ALERT.search(text) and "certificate verify failed" not in text:
        return None
    alert = _ALERT.search(text)
    if alert is not None:
        return _refused_client(conf, address, alert.group("alert"), cause)
    if "certificate verify failed" in text:
        return _untrusted_broker(conf, address, asked(), cause)
    found = asked()
    if found.tls is False or "PLAINTEXT broker listener" in text:
        return KafkaTlsError(
            f"{_head(conf)}: the listener at {address} does not speak TLS (a PLAINTEXT or SASL_PLAINTEXT listener): "
            f"set kafka.security.protocol={_PLAIN_FOR[protocol]} for it, or put the broker's {protocol} listener's "
            f"address in kafka.bootstrap.servers (librdkafka: {cause})")
    return KafkaTlsError(f"{_head(conf)}: the TLS handshake with {address} failed: {cause}")


def _untrusted_broker(conf: Mapping[str, str], address: str, found: Probe, cause: str) -> KafkaTlsError:
    trust = _origin(conf, "ssl.ca.pem", "ssl.ca.location") or "the system's default authorities (no trust store set)"
    cert = _describe_certificate(found.certificate)
    problem = (found.problem or "").rstrip(".")
    low = problem.lower()
    if "expired" in low:
        why = (f"{cert} has expired (the client's clock says {_iso(dt.datetime.now(dt.timezone.utc))}): the broker "
               "needs a new certificate; no client option can fix this")
    elif "not yet valid" in low:
        why = f"{cert} is not valid yet: check the clocks of the client and the broker"
    elif "mismatch" in low:
        why = (f"{cert} does not name the host the client connected to ({problem}): use a host name the certificate "
               "names in kafka.bootstrap.servers (and in the broker's advertised listeners), or turn the host name "
               "check off with kafka.ssl.endpoint.identification.algorithm= (empty; not recommended)")
    elif problem:
        why = (f"{cert} is not signed by an authority in {trust} ({problem}): add the broker's certificate "
               "authority to it")
    else:
        why = f"{cert} could not be verified with {trust} (librdkafka: {cause})"
    return KafkaTlsError(f"{_head(conf)}: the broker at {address} is not trusted: {why}")


def _refused_client(conf: Mapping[str, str], address: str, alert: str, cause: str) -> KafkaTlsError:
    mine = _origin(conf, "ssl.certificate.pem", "ssl.certificate.location")
    if mine is None:
        why = ("the listener requires a client certificate (mutual TLS) and the client has none: set "
               "kafka.ssl.keystore.location (with kafka.ssl.keystore.password, kafka.ssl.keystore.type and "
               "kafka.ssl.key.password), or kafka.ssl.certificate.location and kafka.ssl.key.location")
    else:
        why = (f"the broker does not accept the client certificate of {mine}: it must be signed by an authority the "
               "broker's listener trusts (its ssl.truststore) and still be valid")
    return KafkaTlsError(f"{_head(conf)}: the broker at {address} refused the TLS connection (TLS alert '{alert}'): "
                         f"{why} (librdkafka: {cause})")


def _setup_failure(conf: Mapping[str, str], text: str) -> KafkaTlsError | None:
    """A client that could not be created because of a TLS setting (``Failed to create consumer:
    ssl.key.location failed: ...``)."""
    at = text.find("ssl.")
    if at < 0:
        return None
    m = _CLIENT_SETUP.match(text[at:])
    option, cause = (m.group("option"), m.group("cause")) if m else ("ssl.*", text)
    hint = ""
    if "PEM lib" in cause or "bad decrypt" in cause or "mac verify" in cause:
        hint = " (a wrong kafka.ssl.key.password or kafka.ssl.keystore.password?)"
    elif "No such file" in cause or "BIO lib" in cause or "system library" in cause:
        hint = " (a missing or unreadable file?)"
    elif "no certificate or crl found" in cause or "Java TrustStores" in cause:
        hint = " (not PEM? a Java store goes in kafka.ssl.truststore.location / kafka.ssl.keystore.location)"
    return KafkaTlsError(f"{_head(conf)}: option 'kafka.{option}' could not be used: {cause}{hint}")
