"""The errors of dataflow-kafka: one root, :class:`DataflowKafkaError`, so a user can catch
anything this library raised on bad input or a broken broker with one ``except``.

Every class has a stable ``condition`` (Spark's error-class style, e.g. ``KAFKA_UNAVAILABLE``), the
same on every release, for a user to match without parsing messages; :func:`conditions_table` lists
them (docs/errors.md is generated from it). Each class also derives from the built-in exception a
Python user would expect (``ValueError`` for bad arguments and options, ``ConnectionError`` for an
unreachable broker, ``PermissionError`` for a missing ACL, ``TypeError`` for type errors of typed
pipelines), so code written against those keeps working; a refused login or a TLS mistake is
*not* a ``ConnectionError``: a generic retry-on-``ConnectionError`` loop must not retry a wrong
password. Messages name the option or argument, the value and what is allowed; none quotes a
password.

::

    DataflowKafkaError
    ├── InvalidArgumentError (ValueError)       a window, aggregation, stage or call argument
    │   ├── OptionError                          a format("dataflow-kafka") option
    │   ├── PlanError                            a pipeline that cannot be planned or fused
    │   ├── JoinError                            a join's inputs or settings
    │   ├── ArgumentTypeError (TypeError)        an argument of the wrong kind
    │   └── NotFoundError (KeyError)             a name that refers to nothing
    ├── FusionError (RuntimeError)               a fused stage routed a row to another key group
    ├── CapacityError (OverflowError)            a batch beyond an engine's packed representation
    ├── DataLossError (RuntimeError)             offsets gone from the broker (failOnDataLoss)
    ├── KafkaUnavailableError (ConnectionError)  the broker cannot be reached or keeps failing
    ├── KafkaSecurityError                       the connection's security does not fit the broker
    │   ├── KafkaAuthenticationError             the broker refused the login
    │   └── KafkaTlsError                        a TLS handshake, certificate or key store failed
    ├── KafkaAuthorizationError (PermissionError)   an ACL denies an operation
    ├── KafkaClientError (RuntimeError)          Kafka failed a delivery, transaction or read
    ├── KafkaTimeoutError (TimeoutError)         Kafka did not answer in time
    ├── BrokerError (RuntimeError)               an embedded broker cannot start or stop
    │   └── KafkaSetupError                      Apache Kafka's jars or Java are missing
    ├── ConnectServerError (RuntimeError)        a Spark Connect server could not be started
    ├── TraceError                               typed pipelines (data-trace types)
    │   └── TraceTypeError (TypeError)           a DAG whose stream types do not fit
    └── ModuleNameError (ImportError)            a subpackage imported under its folder name
"""

from __future__ import annotations

__all__ = ["DataflowKafkaError", "InvalidArgumentError", "OptionError", "PlanError", "FusionError", "JoinError",
           "DataLossError", "KafkaUnavailableError", "KafkaSecurityError", "KafkaAuthenticationError", "KafkaTlsError",
           "KafkaAuthorizationError", "BrokerError", "KafkaSetupError", "TraceError", "TraceTypeError",
           "ArgumentTypeError", "NotFoundError", "KafkaClientError", "KafkaTimeoutError", "CapacityError",
           "ConnectServerError", "ModuleNameError", "require_module_name", "conditions_table"]


class DataflowKafkaError(Exception):
    """The root of every error dataflow-kafka raises on purpose."""

    #: The stable name of the error's condition (Spark's style); each class sets its own.
    condition: str = "DATAFLOW_KAFKA_ERROR"


class InvalidArgumentError(DataflowKafkaError, ValueError):
    """An argument that is malformed, out of range or conflicts with another."""

    condition = "INVALID_ARGUMENT"


class OptionError(InvalidArgumentError):
    """A ``dataflow-kafka`` option is unknown, malformed or conflicts with another."""

    condition = "INVALID_OPTION"


class PlanError(InvalidArgumentError):
    """A pipeline that cannot be planned: stages that cannot be fused or composed as asked."""

    condition = "INVALID_PLAN"


class FusionError(DataflowKafkaError, RuntimeError):
    """A fused stage's routing put a row in another key group than the one it runs in: a bug in
    that stage's ``routing()`` / ``output_key_columns()``, found while the query runs."""

    condition = "FUSED_STAGE_ROUTED_ELSEWHERE"


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong kind (a window, trigger or aggregation that is not one)."""

    condition = "INVALID_ARGUMENT.WRONG_TYPE"


class NotFoundError(InvalidArgumentError, KeyError):
    """A name that refers to nothing (e.g. ``remove_window`` of a query that is not there)."""

    condition = "INVALID_ARGUMENT.NOT_FOUND"

    def __str__(self) -> str:          # KeyError quotes its message
        return str(self.args[0]) if self.args else ""


class JoinError(InvalidArgumentError):
    """A join whose inputs or settings do not fit together."""

    condition = "INVALID_JOIN"


class CapacityError(DataflowKafkaError, OverflowError):
    """A batch beyond what an engine's packed representation holds (keys times time span)."""

    condition = "ENGINE_CAPACITY_EXCEEDED"


class DataLossError(DataflowKafkaError, RuntimeError):
    """Records of an offset range are no longer available on the broker."""

    condition = "KAFKA_DATA_LOSS"


class KafkaUnavailableError(DataflowKafkaError, ConnectionError):
    """Kafka could not be reached (or kept failing) while reading: names the servers and what was
    read. ``transient``: the cause is one a later attempt may not meet (a broker down or
    restarting), as opposed to, e.g., a failed authentication."""

    condition = "KAFKA_UNAVAILABLE"

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class KafkaClientError(DataflowKafkaError, RuntimeError):
    """Kafka failed or refused an operation for a reason other than reachability or an ACL: a
    record the sink could not deliver, a transaction that could not start, a read error, a state
    hand-off. The message names the servers, topic and offset."""

    condition = "KAFKA_CLIENT_ERROR"


class KafkaTimeoutError(DataflowKafkaError, TimeoutError):
    """Kafka did not answer within the configured time (records of a range, a topic to appear)."""

    condition = "KAFKA_TIMEOUT"


class KafkaSecurityError(DataflowKafkaError):
    """The client's security settings do not fit the broker's (login, TLS). Never a
    ``ConnectionError``: retrying does not help, and the message says which option to change."""

    condition = "KAFKA_SECURITY"


class KafkaAuthenticationError(KafkaSecurityError):
    """Kafka refused the client's SASL login (wrong user name, password or mechanism)."""

    condition = "KAFKA_SECURITY.AUTHENTICATION_FAILED"


class KafkaTlsError(KafkaSecurityError):
    """A TLS connection could not be set up: a protocol mismatch (TLS to a plaintext listener or
    the reverse), an untrusted or expired certificate, a host name that does not match, a wrong
    key store or trust store password, a missing file. Names the option and the cause."""

    condition = "KAFKA_SECURITY.TLS_FAILED"


class KafkaAuthorizationError(DataflowKafkaError, PermissionError):
    """An ACL denies the client's principal an operation on a topic (or group, transactional id)."""

    condition = "KAFKA_AUTHORIZATION_FAILED"


class BrokerError(DataflowKafkaError, RuntimeError):
    """A broker could not be started, stopped or reached."""

    condition = "EMBEDDED_BROKER_FAILED"


class KafkaSetupError(BrokerError):
    """Apache Kafka's jars are missing and could not be resolved, or Java is missing."""

    condition = "EMBEDDED_BROKER_FAILED.SETUP"


class ConnectServerError(DataflowKafkaError, RuntimeError):
    """A Spark Connect server (:func:`datasource.connect.connect_server`) did not start listening."""

    condition = "SPARK_CONNECT_SERVER_FAILED"


class TraceError(DataflowKafkaError):
    """A typed pipeline (data-trace types) was misused or met a stream that breaks its type."""

    condition = "TRACE_ERROR"


class TraceTypeError(TraceError, TypeError):
    """A DAG whose stream types do not fit: the checker names the edge and the fix."""

    condition = "TRACE_ERROR.TYPE_MISMATCH"


class ModuleNameError(DataflowKafkaError, ImportError):
    """A subpackage imported under its folder name (``import slicer``) instead of its one name
    (``dataflow_kafka.slicer``): two names would load its files twice, as two modules with two
    copies of every class and registry, where ``isinstance`` fails without a word."""

    condition = "WRONG_MODULE_NAME"


def require_module_name(name: str, canonical: str) -> None:
    """Refuse to load a subpackage whose ``__name__`` is not ``canonical``: the first statement of
    every subpackage's ``__init__.py``. The repository's folders (``slicer/``, ``datasource/``, ...)
    install as ``dataflow_kafka.slicer``, ...; with the repository root on ``sys.path`` they would
    also import under their folder names."""
    if name != canonical:
        raise ModuleNameError(f"{name!r} is the folder of the subpackage {canonical!r}: import {canonical} "
                              f"(under a second name its files would load twice, as separate modules)",
                              name=name)


def conditions_table() -> str:
    """The error classes as a Markdown table (class, condition, built-in parents, meaning), in
    ``__all__``'s order: the source of docs/errors.md."""
    rows = ["| class | condition | also a | meaning |", "| --- | --- | --- | --- |"]
    for name in __all__:
        cls = globals()[name]
        if not isinstance(cls, type):
            continue
        builtin = sorted({b.__name__ for c in cls.__mro__ if c.__module__ == __name__ for b in c.__bases__
                          if b.__module__ == "builtins" and b is not Exception})
        meaning = " ".join((cls.__doc__ or "").split("\n\n")[0].split()).replace("``", "`")
        rows.append(f"| `{name}` | `{cls.condition}` | {', '.join(f'`{b}`' for b in builtin) or '-'} | {meaning} |")
    return "\n".join(rows) + "\n"
