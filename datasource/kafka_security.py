"""Secured Kafka: Spark's security option names for librdkafka, and errors that say who may not
do what.

Spark's Kafka connector takes the Java client's settings (``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``, ...);
librdkafka, which this project's clients use, takes the same protocol and mechanism names but no
JAAS and no Java stores: :func:`librdkafka_conf` turns a ``ScramLoginModule`` or
``PlainLoginModule`` JAAS line into ``sasl.username`` and ``sasl.password``, and the TLS stores
into PEM (:mod:`datasource.kafka_tls`). The librdkafka names may be given directly instead.

Errors: a failed SASL login is :class:`KafkaAuthenticationError` and a TLS failure
:class:`KafkaTlsError` (never retried: a wrong password or certificate does not get right by
waiting), a missing ACL is :class:`KafkaAuthorizationError` naming the principal, the topic and
the operation. librdkafka reports the first two only to a client's callbacks, while its requests
fail as if the broker were down: :class:`ClientErrors` is those callbacks. No message quotes a
password, a JAAS line or a key.
"""

from __future__ import annotations

import collections
import logging
import re
from typing import Iterable, Mapping

from dataflow_kafka.datasource import kafka_tls
from dataflow_kafka.errors import (
    InvalidArgumentError, KafkaAuthenticationError, KafkaAuthorizationError, KafkaSecurityError,
)

__all__ = ["librdkafka_conf", "principal", "require_topic_operations", "SECRET_KEYS", "ClientErrors",
           "client_callbacks", "authentication_error", "authorization_error"]

#: librdkafka / Java client settings whose values are secrets (never shown).
SECRET_KEYS = ("sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password",
               "ssl.truststore.password", "sasl.oauthbearer.client.secret", "ssl.key.pem", "ssl.keystore.key")

_JAAS_MODULES = {"org.apache.kafka.common.security.scram.ScramLoginModule",
                 "org.apache.kafka.common.security.plain.PlainLoginModule"}
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<opts>.*?);?\s*$",
                   re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def librdkafka_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` (the ``kafka.*`` options without the prefix) with Spark's ``sasl.jaas.config``
    replaced by librdkafka's ``sasl.username`` / ``sasl.password`` and Spark's TLS stores by PEM
    (:func:`kafka_tls.librdkafka_tls_conf`). Raises ``ValueError`` naming the option (never its
    value) for a JAAS line it cannot use, :class:`KafkaTlsError` for a store it cannot read."""
    out = kafka_tls.librdkafka_tls_conf(conf)
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is None:
        return out
    m = _JAAS.match(jaas)
    if m is None:
        raise InvalidArgumentError("option 'kafka.sasl.jaas.config' is not a JAAS line like 'org.apache.kafka.common.security."
                         "scram.ScramLoginModule required username=\"u\" password=\"p\";'")
    if m.group("module") not in _JAAS_MODULES:
        raise InvalidArgumentError(f"option 'kafka.sasl.jaas.config': login module {m.group('module')!r} is not supported; "
                         f"supported: {sorted(_JAAS_MODULES)} (for other mechanisms give librdkafka's settings, "
                         "e.g. kafka.sasl.oauthbearer.*, kafka.sasl.kerberos.*)")
    values = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _JAAS_OPTION.findall(m.group("opts"))}
    missing = [k for k in ("username", "password") if k not in values]
    if missing:
        raise InvalidArgumentError(f"option 'kafka.sasl.jaas.config' has no {' and no '.join(missing)} (\"...\")")
    for k, v in (("sasl.username", values["username"]), ("sasl.password", values["password"])):
        if k in out and out[k] != v:
            raise InvalidArgumentError(f"options 'kafka.sasl.jaas.config' and 'kafka.{k}' disagree: give one of them")
        out[k] = v
    return out


def principal(conf: Mapping[str, str]) -> str:
    """The principal Kafka sees, as far as the client settings tell: ``User:<sasl.username>``, for
    TLS with a client certificate its subject (Kafka's default, unless the broker's
    ``ssl.principal.mapping.rules`` map it), ``User:ANONYMOUS`` for PLAINTEXT and TLS without one."""
    user = conf.get("sasl.username")
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if user:
        return f"User:{user}"
    if protocol in ("PLAINTEXT", "SSL"):
        subject = kafka_tls.client_subject(conf) if protocol == "SSL" else None
        return f"User:{subject}" if subject else "User:ANONYMOUS"
    return "the client's principal"


# "(after 12ms in state CONNECT, 3 identical error(s) suppressed)" -> "(in state CONNECT)": the state stays (a
# disconnect in APIVERSION_QUERY is what a plaintext client sees of a TLS listener), repeats become one line
_TIMING = re.compile(r"\(after \d+ms in state (\w+)[^()]*(?:\([^()]*\)[^()]*)*\)")


class ClientErrors:
    """A librdkafka client's ``error_cb`` and ``logger``: what the broker refused.

    librdkafka retries a refused login or a failed TLS handshake as if the broker were down; the
    cause reaches only these callbacks (and, without a logger, hundreds of lines on stderr). Give
    the object as both (``{"error_cb": errors, "logger": errors, "log_level": 6}``): it keeps a
    refused login and the last lines that may show a TLS failure, forwards each distinct error
    line once to the ``dataflow_kafka.kafka_client`` logger, and :meth:`refusal` turns what it saw
    into a :class:`KafkaAuthenticationError` or :class:`KafkaTlsError` (probing the listener once
    where the lines leave the cause open, :func:`kafka_tls.diagnose`). It keeps no secret."""

    _MAX_LINES = 200          # distinct lines remembered (forwarded, diagnosed)

    def __init__(self, conf: Mapping[str, str]) -> None:
        self.conf = {**{k: v for k, v in conf.items() if k in ("sasl.mechanism", "sasl.mechanisms", "sasl.username")},
                     **kafka_tls.public_tls_conf(conf)}
        self.authentication: str | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=8)
        self._read: set[str] = set()          # lines diagnosed already
        self._probes: dict = {}
        self._refusal: KafkaSecurityError | None = None
        self._forwarded: set[str] = set()

    def __call__(self, err) -> None:
        """librdkafka's ``error_cb``."""
        from confluent_kafka import KafkaError

        if err.code() == KafkaError._AUTHENTICATION:
            self.authentication = err.str()
        elif err.code() in (KafkaError._SSL, KafkaError._TRANSPORT):
            self._keep(err.str())

    def log(self, level: int, fmt: str, *args) -> None:
        """confluent-kafka's ``logger`` protocol (``log(level, "%s [%s] %s", facility, client, line)``)."""
        line = self._keep(str(args[-1]) if args else fmt)
        if level >= logging.ERROR and line not in self._forwarded and len(self._forwarded) < self._MAX_LINES:
            self._forwarded.add(line)
            logging.getLogger("dataflow_kafka.kafka_client").warning("librdkafka: %s", line)

    def _keep(self, line: str) -> str:
        """Keep a line that may show a TLS failure; returns it without its thread and timing
        (``[thrd:...]: ``, ``after 12ms``), so repeats are one line."""
        line = _TIMING.sub(r"(in state \1)", re.sub(r"^\[thrd:[^\]]*\]: ", "", line))
        if any(word in line for word in ("SSL", "ssl", "alert", "Disconnected", "certificate")):
            if len(self._read) >= self._MAX_LINES:
                self._read.clear()
            if line not in self._read and line not in self._lines:
                self._lines.append(line)
        return line

    def refusal(self) -> KafkaSecurityError | None:
        """What the broker refused, as an error to raise, or None."""
        if self.authentication is not None:
            return authentication_error(self.conf, self.authentication)
        if self._refusal is None:
            for line in reversed(self._lines):
                if line in self._read:
                    continue
                self._read.add(line)
                self._refusal = kafka_tls.diagnose(self.conf, line, self._probes)
                if self._refusal is not None:
                    break
        return self._refusal

    def raise_if_refused(self) -> None:
        refused = self.refusal()
        if refused is not None:
            raise refused


def client_callbacks(errors: ClientErrors) -> dict:
    """The settings that make ``errors`` a client's ``error_cb`` and ``logger``."""
    return {"error_cb": errors, "logger": errors, "log_level": 6}


def _servers(conf: Mapping[str, str]) -> str:
    return f"kafka.bootstrap.servers={conf.get('bootstrap.servers')!r}"


def authentication_error(conf: Mapping[str, str], cause: str) -> KafkaAuthenticationError:
    mech = conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "?"
    return KafkaAuthenticationError(
        f"Kafka authentication failed at {_servers(conf)} for user {conf.get('sasl.username')!r} "
        f"(security.protocol={conf.get('security.protocol')}, sasl.mechanism={mech}): {cause}; check the "
        "user name and password (kafka.sasl.jaas.config, or kafka.sasl.username / kafka.sasl.password)")


def authorization_error(conf: Mapping[str, str], operation: str, resource: str, what: str = "") -> KafkaAuthorizationError:
    return KafkaAuthorizationError(
        f"{principal(conf)} is not authorized to {operation} {resource} at {_servers(conf)}"
        f"{': ' + what if what else ''} (grant it with an ACL, e.g. kafka-acls --add --allow-principal "
        f"{principal(conf)} --operation {operation.title()} ...)")


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def require_topic_operations(conf: Mapping[str, str], needs: Mapping[str, Iterable[str]], why: Mapping[str, str],
                             timeout_s: float = 30.0) -> None:
    """Check on the driver, before any task runs, that the principal may do ``needs[topic]``
    (ACL operation names such as ``"READ"``, ``"WRITE"``) on each topic; raise
    :class:`KafkaAuthorizationError` naming the first missing one and ``why[topic]`` (its role,
    e.g. "the control topic"), or :class:`KafkaAuthenticationError` if the login is refused. A
    broker without authorizer allows everything; a topic that does not exist, or a broker that
    does not answer, is left to the caller (it meets them when it uses the topic)."""
    import concurrent.futures as cf

    from confluent_kafka import KafkaError, KafkaException, TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    if not needs:
        return
    errors = ClientErrors(conf)
    down: list = []

    def on_error(e) -> None:
        errors(e)
        if e.code() == KafkaError._ALL_BROKERS_DOWN:
            down.append(e.str())

    admin = AdminClient({**conf, **client_callbacks(errors), "error_cb": on_error})
    futures = admin.describe_topics(TopicCollection(list(needs)), request_timeout=timeout_s,
                                    include_authorized_operations=True)
    pending = set(futures.values())
    while pending:      # serve the callbacks while waiting: a refused login or TLS failure shows only there
        _, pending = cf.wait(pending, timeout=0.25)
        admin.poll(0)
        errors.raise_if_refused()
        if down:        # no broker answers: the caller's own requests retry and report it, unless the
            admin.poll(0.2)     # lines of the failures, served after the error, show a refusal
            errors.raise_if_refused()
            return
    for topic in needs:                      # in the caller's order: the first missing need is reported
        try:
            described = futures[topic].result()
        except KafkaException as e:
            if e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                first = next(iter(needs[topic]))
                raise authorization_error(conf, first, f"topic {topic!r}",
                                          _join(why.get(topic, ""), "it may not even DESCRIBE the topic")) from None
            continue
        allowed = {op.name for op in described.authorized_operations or ()}
        if not allowed or AclOperation.ALL.name in allowed:
            continue     # the broker did not say: nothing to check
        for op in needs[topic]:
            if op not in allowed:
                raise authorization_error(conf, op, f"topic {topic!r}", why.get(topic, ""))
