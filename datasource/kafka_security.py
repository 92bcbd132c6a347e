"""Secured Kafka: Spark's security option names for librdkafka, and errors that say who may not
do what.

Spark's Kafka connector takes the Java client's settings (``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``); librdkafka, which this project's clients
use, takes the same protocol and mechanism names but no JAAS: :func:`librdkafka_conf` turns a
``ScramLoginModule`` or ``PlainLoginModule`` JAAS line into ``sasl.username`` and
``sasl.password``. The librdkafka names may be given directly instead.

Errors: a failed SASL login is :class:`KafkaAuthenticationError` (never retried: a wrong
password does not get right by waiting), a missing ACL is :class:`KafkaAuthorizationError`
naming the principal, the topic and the operation. No message quotes a password or a JAAS line.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping
from dataflow_kafka.errors import InvalidArgumentError, KafkaAuthenticationError, KafkaAuthorizationError

__all__ = ["librdkafka_conf", "principal", "require_topic_operations", "SECRET_KEYS"]

#: librdkafka / Java client settings whose values are secrets (never shown).
SECRET_KEYS = ("sasl.password", "sasl.jaas.config", "ssl.key.password", "ssl.keystore.password",
               "ssl.truststore.password", "sasl.oauthbearer.client.secret")

_JAAS_MODULES = {"org.apache.kafka.common.security.scram.ScramLoginModule",
                 "org.apache.kafka.common.security.plain.PlainLoginModule"}
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<opts>.*?);?\s*$",
                   re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def librdkafka_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` (the ``kafka.*`` options without the prefix) with Spark's ``sasl.jaas.config``
    replaced by librdkafka's ``sasl.username`` / ``sasl.password``. Raises ``ValueError`` naming
    the option (never its value) for a JAAS line it cannot use."""
    out = dict(conf)
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
    """The principal Kafka sees, as far as the client settings tell (``User:<sasl.username>``)."""
    user = conf.get("sasl.username")
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if user:
        return f"User:{user}"
    return "User:ANONYMOUS" if protocol == "PLAINTEXT" else "the client's principal"


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
    refused: list = []
    down: list = []

    def on_error(e) -> None:
        if e.code() == KafkaError._AUTHENTICATION:
            refused.append(e.str())
        elif e.code() == KafkaError._ALL_BROKERS_DOWN:
            down.append(e.str())

    admin = AdminClient({**conf, "log_level": 0, "error_cb": on_error})
    futures = admin.describe_topics(TopicCollection(list(needs)), request_timeout=timeout_s,
                                    include_authorized_operations=True)
    pending = set(futures.values())
    while pending:      # serve the error callback while waiting: a refused login shows only there
        _, pending = cf.wait(pending, timeout=0.25)
        admin.poll(0)
        if refused:
            raise authentication_error(conf, refused[-1])
        if down:
            return      # no broker answers: the caller's own requests retry and report it
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
