"""The errors of dataflow-kafka: one root, :class:`DataflowKafkaError`, so a user can catch
anything this library raised on bad input or a broken broker with one ``except``.

Each class also derives from the built-in exception a Python user would expect
(``ValueError`` for bad arguments and options, ``ConnectionError`` for an unreachable broker,
``PermissionError`` for a missing ACL, ``TypeError`` for type errors of typed pipelines), so code
written against those keeps working. Messages name the option or argument, the value and what is
allowed; none quotes a password.

::

    DataflowKafkaError
    ├── InvalidArgumentError (ValueError)       a window, aggregation, stage or call argument
    │   ├── OptionError                          a format("dataflow-kafka") option
    │   ├── PlanError                            a pipeline that cannot be planned or fused
    │   │   └── FusionError (RuntimeError)       a fused stage routed a row to another key group
    │   └── JoinError                            a join's inputs or settings
    ├── DataLossError (RuntimeError)             offsets gone from the broker (failOnDataLoss)
    ├── KafkaUnavailableError (ConnectionError)  the broker cannot be reached or keeps failing
    ├── KafkaAuthenticationError (ConnectionError)  the broker refused the login
    ├── KafkaAuthorizationError (PermissionError)   an ACL denies an operation
    ├── BrokerError (RuntimeError)               an embedded broker cannot start or stop
    │   └── KafkaSetupError                      Apache Kafka's jars or Java are missing
    └── TraceError                               typed pipelines (data-trace types)
        └── TraceTypeError (TypeError)           a DAG whose stream types do not fit
"""

from __future__ import annotations

__all__ = ["DataflowKafkaError", "InvalidArgumentError", "OptionError", "PlanError", "FusionError", "JoinError", "DataLossError",
           "KafkaUnavailableError", "KafkaAuthenticationError", "KafkaAuthorizationError", "BrokerError",
           "KafkaSetupError", "TraceError", "TraceTypeError", "ArgumentTypeError", "NotFoundError",
           "KafkaClientError", "KafkaTimeoutError", "CapacityError"]


class DataflowKafkaError(Exception):
    """The root of every error dataflow-kafka raises on purpose."""


class InvalidArgumentError(DataflowKafkaError, ValueError):
    """An argument that is malformed, out of range or conflicts with another."""


class OptionError(InvalidArgumentError):
    """A ``dataflow-kafka`` option is unknown, malformed or conflicts with another."""


class PlanError(InvalidArgumentError):
    """A pipeline that cannot be planned: stages that cannot be fused or composed as asked."""


class FusionError(PlanError, RuntimeError):
    """A fused stage's routing put a row in another key group than the one it runs in."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong kind (a window, trigger or aggregation that is not one)."""


class NotFoundError(InvalidArgumentError, KeyError):
    """A name that refers to nothing (e.g. ``remove_window`` of a query that is not there)."""

    def __str__(self) -> str:          # KeyError quotes its message
        return str(self.args[0]) if self.args else ""


class JoinError(InvalidArgumentError):
    """A join whose inputs or settings do not fit together."""


class CapacityError(DataflowKafkaError, OverflowError):
    """A batch beyond what an engine's packed representation holds (keys times time span)."""


class DataLossError(DataflowKafkaError, RuntimeError):
    """Records of an offset range are no longer available on the broker."""


class KafkaUnavailableError(DataflowKafkaError, ConnectionError):
    """Kafka could not be reached (or kept failing) while reading: names the servers and what was
    read. ``transient``: the cause is one a later attempt may not meet (a broker down or
    restarting), as opposed to, e.g., a failed authentication."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class KafkaClientError(DataflowKafkaError, RuntimeError):
    """Kafka failed or refused an operation for a reason other than reachability or an ACL: a
    record the sink could not deliver, a transaction that could not start, a read error, a state
    hand-off. The message names the servers, topic and offset."""


class KafkaTimeoutError(DataflowKafkaError, TimeoutError):
    """Kafka did not answer within the configured time (records of a range, a topic to appear)."""


class KafkaAuthenticationError(DataflowKafkaError, ConnectionError):
    """Kafka refused the client's SASL login (wrong user name, password or mechanism)."""


class KafkaAuthorizationError(DataflowKafkaError, PermissionError):
    """An ACL denies the client's principal an operation on a topic (or group, transactional id)."""


class BrokerError(DataflowKafkaError, RuntimeError):
    """A broker could not be started, stopped or reached."""


class KafkaSetupError(BrokerError):
    """Apache Kafka's jars are missing and could not be resolved, or Java is missing."""


class TraceError(DataflowKafkaError):
    """A typed pipeline (data-trace types) was misused or met a stream that breaks its type."""


class TraceTypeError(TraceError, TypeError):
    """A DAG whose stream types do not fit: the checker names the edge and the fix."""
