"""The ``dataflow-kafka`` sink: ``df.writeStream.format("dataflow-kafka")`` and ``df.write``.

Write schema as Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (optional,
string or binary), ``topic`` (string; or the ``topic`` option, which takes precedence),
``partition`` (optional int; else Kafka's partitioner on the key), ``headers`` (optional
``array<struct<key:string,value:binary>>``, written when present).

Delivery guarantee: **at least once** by default. Each task produces its rows with an idempotent
producer (``enable.idempotence=true``, ``acks=all``) and returns only after every one of its
records is acknowledged; a failed delivery fails the task, and Spark retries it or re-runs the
micro-batch. A retried task or a replayed micro-batch after a crash writes its rows again, so
consumers can see duplicates (never losses).

**Exactly once** with ``exactlyOnce=true`` (``writeStream`` only), for consumers that read with
``isolation.level=read_committed``: each task writes its rows, and a marker (query id, batch id,
partition id) to the topic ``exactlyOnceCommitTopic`` (default ``dataflow-kafka-sink-commits``, one
partition, created if missing), in one Kafka transaction. The transactional id is
``dataflow-kafka-<query id>-<partition>``, so a retried attempt fences a zombie one and aborts its
open transaction. The marker is also indexed as the committed offset ``batch id + 1`` of the
consumer group ``dataflow-kafka-sink-<query id>-<partition>`` on the commit topic, committed in the
same transaction (``send_offsets_to_transaction``): a task first looks it up (one OffsetFetch, not
a scan) and a replayed or retried task whose batch is already committed writes nothing. Replay
gives a task the same batch id, partition id and rows because the source's offsets come from
Spark's offset log. Cost: one transactional producer per task (``InitProducerId`` and an offset
lookup, a few ms on a local broker) instead of a reused one. Limits: the index lives as long as the
broker keeps the group's offsets (Kafka's ``offsets.retention.minutes``, 7 days by default, after
the group is empty), so a query restarted after a longer stop can write its last batch again; a
batch write (``df.write``) has no batch id and refuses the option.

Delivery timeout: ``kafka.delivery.timeout.ms`` (librdkafka's, default here 30000). A task whose
records are not acknowledged by then fails with an error naming ``kafka.bootstrap.servers``, the
topics and partitions, and the last error the client saw (e.g. ``Connection refused``).

Producers: one per Python worker process and Kafka configuration, kept across tasks and
micro-batches (Spark reuses its Python workers, and a worker runs one task at a time). Creating
an idempotent producer costs a connection, a metadata request and an ``InitProducerId`` round
trip, paid by every task of every micro-batch if each task made its own. Reuse keeps the
guarantee because a task never leaves records behind: it flushes before it returns, so the
producer is empty when the next task takes it, and each task counts the delivery reports of its
own records (the callbacks are bound to the task), so an error of one task cannot fail, or hide
in, another. A producer is dropped, and the next task makes a new one, when it reported a fatal
error (for example ``OUT_OF_ORDER_SEQUENCE_NUMBER`` of the idempotent producer after a broker
lost acknowledged records; the task fails with a message saying so, and Spark's retry writes with
a fresh producer), when a failed task's records timed out (no broker reachable: a dropped producer
stops reconnecting) or when a failed task could not drain it within ``DRAIN_TIMEOUT_S``. At the
exit of a process that runs Python exit hooks, cached producers are flushed for at most
``EXIT_FLUSH_TIMEOUT_S`` each and closed; pyspark's forked workers end with ``os._exit`` and run
no exit hooks, which loses nothing because no task leaves records in a producer.

Every task returns a :class:`WriteResult` (its record count, the worker's pid and how many sink
producers that process has created so far), which the driver's ``commit`` receives: producer
reuse is observable without instrumenting the worker.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import sys
import time
from collections import Counter
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from dataflow_kafka.brokers.admin import admin_conf, create_topics
from dataflow_kafka.datasource import kafka_security
from dataflow_kafka.datasource.options import OptionError, SinkOptions
from dataflow_kafka.errors import (
    InvalidArgumentError, KafkaClientError, KafkaSecurityError, KafkaUnavailableError, PlanError,
)

__all__ = ["DataflowKafkaStreamWriter", "DataflowKafkaBatchWriter", "WriteResult", "validate_write_schema",
           "ProducerCache", "producer_stats", "close_producers", "ensure_topic", "write_exactly_once",
           "committed_batch", "PRODUCER_DEFAULTS", "DELIVERY_TIMEOUT_MS"]

DELIVERY_TIMEOUT_MS = 30_000  # default of kafka.delivery.timeout.ms: a record not acknowledged by then fails
#: Producer settings of the sink; ``kafka.*`` options override them.
PRODUCER_DEFAULTS = {"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                     "delivery.timeout.ms": DELIVERY_TIMEOUT_MS}
FLUSH_MARGIN_S = 5.0         # a task waits the delivery timeout plus this for its acknowledgements
DRAIN_TIMEOUT_S = 10.0       # a failed task waits this long for its other records before it returns
EXIT_FLUSH_TIMEOUT_S = 5.0   # per producer at process exit
_MAX_ERRORS = 5              # distinct (topic, partition, error) quoted in a task's failure message
_MSG_TIMED_OUT = -192        # confluent_kafka.KafkaError._MSG_TIMED_OUT (not imported at module level)
_TOPIC_AUTHORIZATION_FAILED = 29   # KafkaError.TOPIC_AUTHORIZATION_FAILED
_CLUSTER_AUTHORIZATION_FAILED = 31  # KafkaError.CLUSTER_AUTHORIZATION_FAILED


def validate_write_schema(schema: StructType, opts: SinkOptions) -> None:
    """Raise :class:`OptionError` naming the column when the DataFrame cannot be written."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError(f"the dataflow-kafka sink needs a 'value' column (string or binary); got columns {list(types)}")
    for col in ("key", "value"):
        if col in types and not isinstance(types[col], (StringType, BinaryType)):
            raise OptionError(f"column '{col}' must be string or binary, got {types[col].simpleString()}")
    if opts.topic is None:
        if "topic" not in types:
            raise OptionError("no topic: set option 'topic' or provide a 'topic' column")
        if not isinstance(types["topic"], StringType):
            raise OptionError(f"column 'topic' must be string, got {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(f"column 'partition' must be int, got {types['partition'].simpleString()}")


def _delivery_timeout_s(conf: dict) -> float:
    """The delivery timeout of a producer configuration (``kafka.delivery.timeout.ms`` or its alias
    ``kafka.message.timeout.ms``), in seconds."""
    for k in ("delivery.timeout.ms", "message.timeout.ms"):
        if k in conf:
            try:
                return int(conf[k]) / 1000
            except ValueError:
                raise OptionError(f"option 'kafka.{k}' must be a whole number of milliseconds, got {conf[k]!r}") from None
    return DELIVERY_TIMEOUT_MS / 1000


def _servers(conf: dict) -> str:
    return f"kafka.bootstrap.servers={conf.get('bootstrap.servers')!r}"


class WriteResult(WriterCommitMessage):
    """One task's commit message: ``records`` written, and for observability the worker's ``pid``
    and ``producers_created``, the number of sink producers that process has created so far
    (stays at 1 per process and configuration while producers are reused); ``skipped``: an
    exactly-once task that found its batch already committed and wrote nothing."""

    def __init__(self, records: int, pid: int | None = None, producers_created: int | None = None,
                 skipped: bool = False) -> None:
        self.records = records
        self.pid = pid
        self.producers_created = producers_created
        self.skipped = skipped

    def __repr__(self) -> str:
        return (f"WriteResult(records={self.records}, pid={self.pid}, producers_created={self.producers_created}, "
                f"skipped={self.skipped})")


class _Entry:
    """A producer, the fatal error it reported, if any, the last client-level error, and what the
    broker refused (a login, a TLS handshake: librdkafka reports them only to the client's
    callbacks, between "all brokers down" errors; ``refused``)."""

    __slots__ = ("producer", "fatal", "pid", "last_error", "last_error_at", "healthy_at", "refused")

    def __init__(self, conf: dict) -> None:
        self.producer = None
        self.fatal = None
        self.pid = os.getpid()
        self.last_error = None
        self.last_error_at = 0.0
        self.healthy_at = 0.0   # when a task last ended with every record acknowledged
        self.refused = kafka_security.ClientErrors(conf)

    def on_error(self, err) -> None:   # librdkafka's error_cb: client-level errors, fatal ones included
        if err.fatal():
            self.fatal = err
        self.last_error, self.last_error_at = err, time.monotonic()
        self.refused(err)

    def callbacks(self) -> dict:
        """The producer settings that make this entry its ``error_cb`` and ``logger``."""
        return {**kafka_security.client_callbacks(self.refused), "error_cb": self.on_error}


def _close_quietly(client, timeout_s: float = 0.0) -> None:
    """Purge what a discarded producer still holds and close it (its threads stop)."""
    import warnings

    try:
        client.purge()
        client.flush(timeout_s)
        with warnings.catch_warnings():   # "abort_transaction failed during close" of a fenced producer
            warnings.simplefilter("ignore", RuntimeWarning)
            client.close()
    except Exception:  # noqa: BLE001 - a broken client is being thrown away anyway
        pass


class ProducerCache:
    """confluent-kafka producers of one Python process, one per Kafka configuration.

    Producer settings: ``defaults``, then ``conf`` (the ``kafka.*`` options), then ``forced``.
    ``acquire(conf)`` returns the cached producer entry, or a new one when there is none, when the
    cached one reported a fatal error, or when it was created in another process (a fork).
    ``drop(conf)`` discards a producer (queued records are purged: the task that wrote them has
    failed, or is failing, and is re-run). ``close()`` flushes every producer for at most
    ``timeout_s``, closes and discards them (also at process exit)."""

    def __init__(self, defaults: dict, forced: dict | None = None) -> None:
        self.defaults, self.forced = dict(defaults), dict(forced or {})
        self._entries: dict[tuple, _Entry] = {}
        self.created = 0
        self.dropped = 0
        self._exit_hook = False

    def _key(self, conf: dict) -> tuple:
        return tuple(sorted((str(k), str(v)) for k, v in conf.items()))

    def acquire(self, conf: dict) -> _Entry:
        from confluent_kafka import Producer

        key = self._key(conf)
        entry = self._entries.get(key)
        if entry is not None and entry.pid != os.getpid():   # inherited through fork: unusable
            del self._entries[key]
            entry = None
        if entry is not None:
            entry.producer.poll(0)          # serve error callbacks raised since the last task
            if entry.fatal is not None:
                self.drop(conf)
                entry = None
        if entry is None:
            entry = _Entry(conf)
            entry.producer = Producer({**self.defaults, **conf, **self.forced, **entry.callbacks()})
            self._entries[key] = entry
            self.created += 1
            if not self._exit_hook:
                atexit.register(self.close, EXIT_FLUSH_TIMEOUT_S)
                self._exit_hook = True
        return entry

    def drop(self, conf: dict) -> None:
        entry = self._entries.pop(self._key(conf), None)
        if entry is None or entry.pid != os.getpid():
            return
        self.dropped += 1
        _close_quietly(entry.producer, 1.0)   # serve the purged records' delivery reports

    def close(self, timeout_s: float = EXIT_FLUSH_TIMEOUT_S) -> None:
        entries, self._entries = self._entries, {}
        for entry in entries.values():
            if entry.pid != os.getpid():
                continue
            try:
                entry.producer.flush(timeout_s)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
            _close_quietly(entry.producer)

    def __len__(self) -> int:
        return len(self._entries)


_producers = ProducerCache(PRODUCER_DEFAULTS)


def producer_stats() -> dict:
    """This process's sink producers: ``created``, ``dropped`` (after fatal errors or failed
    tasks) and ``cached`` now."""
    return {"created": _producers.created, "dropped": _producers.dropped, "cached": len(_producers)}


def close_producers(timeout_s: float = EXIT_FLUSH_TIMEOUT_S) -> None:
    """Flush (for at most ``timeout_s`` each), close and discard this process's sink producers."""
    _producers.close(timeout_s)


def ensure_topic(kafka_conf: dict, topic: str, partitions: int = 1, timeout_s: float = 30.0) -> None:
    """Create ``topic`` with ``partitions`` partitions unless it exists; raise naming the topic
    and ``kafka.bootstrap.servers`` when it cannot be created or checked."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    refused = kafka_security.ClientErrors(kafka_conf)
    admin = AdminClient({**admin_conf(kafka_conf), **kafka_security.client_callbacks(refused)})
    deadline = time.monotonic() + timeout_s
    try:
        while True:     # in short requests: a refused login or TLS handshake shows in the callbacks
            try:
                md = admin.list_topics(topic, timeout=min(2.0, max(0.5, deadline - time.monotonic()))).topics.get(topic)
                break
            except KafkaException:
                admin.poll(0)
                refused.raise_if_refused()
                if time.monotonic() >= deadline:
                    raise
        if md is not None and md.error is None and md.partitions:
            return
        create_topics(kafka_conf, {topic: partitions}, exist_ok=True, timeout_s=timeout_s)
    except KafkaSecurityError:
        raise
    except Exception as e:  # noqa: BLE001
        code = e.args[0].code() if e.args and hasattr(e.args[0], "code") else None
        if code in (_TOPIC_AUTHORIZATION_FAILED, _CLUSTER_AUTHORIZATION_FAILED):
            raise kafka_security.authorization_error(kafka_conf, "CREATE", f"topic {topic!r}",
                                                     "it does not exist yet; create it, or grant CREATE") from None
        raise KafkaUnavailableError(f"dataflow-kafka: cannot create or check topic {topic!r} at "
                                    f"{_servers(kafka_conf)}: {e}") from e


class _TaskDelivery:
    """Delivery reports of one task's records (the callbacks are bound to this object)."""

    __slots__ = ("entry", "sent", "acked", "failed", "errors", "started", "timed_out", "denied")

    def __init__(self, entry: _Entry) -> None:
        self.entry = entry
        self.sent = self.acked = self.failed = 0
        self.timed_out = False             # a record's delivery timed out (e.g. no broker reachable)
        self.errors: Counter = Counter()   # (topic, partition, error) -> records
        self.denied: set[str] = set()      # topics an ACL keeps this producer from writing
        self.started = time.monotonic()

    def on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked += 1
            return
        self.failed += 1
        if err.fatal():
            self.entry.fatal = err
        if err.code() == _MSG_TIMED_OUT:
            self.timed_out = True
        if err.code() == _TOPIC_AUTHORIZATION_FAILED:
            self.denied.add(msg.topic())
        what = (msg.topic(), msg.partition(), f"{_error_text(err)} ({err.name()})")
        if what in self.errors or len(self.errors) < _MAX_ERRORS:
            self.errors[what] += 1

    @property
    def pending(self) -> int:
        return self.sent - self.acked - self.failed

    def failure(self, conf: dict, timeout_s: float) -> str | None:
        """The task's failure message, or None if every record was acknowledged: what failed
        (topic, partition, error, records), the servers, and the client's last error during the
        task or since the producer's last fully acknowledged task (the cause of a timeout, e.g.
        ``Connection refused``: librdkafka reports a repeated connection error once, so the report
        may predate a task that starts after the broker went away)."""
        fatal = self.entry.fatal
        if fatal is not None:
            return (f"dataflow-kafka sink: the producer hit a fatal error: {fatal.str()} ({fatal.name()}) "
                    f"at {_servers(conf)}; the producer is discarded and Spark's retry of this task writes with a "
                    f"new one ({self.acked} of {self.sent} records were acknowledged before)")
        if not self.failed and not self.pending:
            self.entry.healthy_at = time.monotonic()
            return None
        if self.denied:
            raise kafka_security.authorization_error(conf, "WRITE", f"topic {sorted(self.denied)[0]!r}",
                                                     f"the sink writes to it ({self.failed} of {self.sent} "
                                                     "records refused)")
        self.entry.refused.raise_if_refused()
        last = self.entry.last_error
        if self.failed:
            what = f"delivery failed for {self.failed} of {self.sent} records: " + "; ".join(
                f"topic {t!r} partition {p}: {e}: {n} record{'s' if n > 1 else ''}" for (t, p, e), n in self.errors.items())
        else:
            what = f"{self.pending} of {self.sent} records not acknowledged within {timeout_s:.0f} s"
        cause = (f"; last client error: {last.str()} ({last.name()})"
                 if last is not None and self.entry.last_error_at >= min(self.started, self.entry.healthy_at)
                 else "")
        return (f"dataflow-kafka sink: {what} ({_servers(conf)}, kafka.delivery.timeout.ms="
                f"{_delivery_timeout_s(conf) * 1000:.0f}{cause})")


def _flush(task: _TaskDelivery, conf: dict, timeout_s: float) -> None:
    """Flush the task's producer. confluent-kafka can leave a fatal error set as a pending Python
    exception while it calls the next callback, which then surfaces as ``SystemError`` (seen as
    ``<method '__contains__' of 'dict' objects> returned a result with an exception set`` and as
    ``_PyErr_SetObject``), or as the ``KafkaError`` object itself raised from ``flush()`` (not an
    exception class: only a bare ``except`` catches it; seen once, a fenced transactional
    producer): report the fatal error the callbacks recorded, or that one, instead."""
    try:
        task.entry.producer.flush(timeout_s)
    except SystemError as e:
        _raise_fatal(task, conf, e)
    except BaseException:
        raise
    except:  # noqa: E722 - a raised object that is not an exception (docstring)
        raised = sys.exc_info()[1]
        if task.entry.fatal is None and callable(getattr(raised, "fatal", None)) and raised.fatal():
            task.entry.fatal = raised
        _raise_fatal(task, conf, KafkaClientError(f"dataflow-kafka sink: the producer's flush raised {raised!r} "
                                                  f"at {_servers(conf)}"))


#: the longest one lookup of the exactly-once index waits before it is tried again with a new
#: consumer (the marker index of a task, looked up before its transaction)
INDEX_ATTEMPT_S = 3.0


def _committed(make_index, tp, timeout_s: float):
    """``(index consumer, its committed offset of tp)``: retried while the group coordinator moves
    or loads (``NOT_COORDINATOR``, ``COORDINATOR_LOAD_IN_PROGRESS``, as on a fresh broker) or does
    not answer. A lookup that times out is tried again with a new consumer from ``make_index``:
    librdkafka's consumer keeps asking the coordinator it found, and after that node's SIGKILL
    on a three-node cluster one lookup waited 35 s, failing the task, while a new coordinator
    was elected within 6 s; a new consumer finds the new one."""
    from confluent_kafka import KafkaError, KafkaException

    moving = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
              KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._WAIT_COORD)
    deadline = time.monotonic() + timeout_s
    index = make_index()
    while True:
        try:
            (done,) = index.committed([tp], timeout=max(1.0, min(INDEX_ATTEMPT_S, deadline - time.monotonic())))
            return index, done
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if err is None or not (err.code() in moving or err.retriable()) or time.monotonic() > deadline:
                index.close()
                raise
            index.close()
            time.sleep(0.2)
            index = make_index()


def _raise_fatal(task: _TaskDelivery, conf: dict, e: Exception) -> None:
    """Raise the task's failure for a ``SystemError`` whose chain holds a fatal ``KafkaError``
    (confluent-kafka raised it, then called a delivery callback with it still pending), or for
    the fatal error the task recorded, or re-raise ``e`` when there is none."""
    from confluent_kafka import KafkaError, KafkaException

    cause = e.__cause__ or e.__context__
    while cause is not None and task.entry.fatal is None:
        err = cause.args[0] if cause.args and isinstance(cause.args[0], KafkaError) else None
        if err is not None and err.fatal():
            task.entry.fatal = err
        cause = cause.__cause__ or cause.__context__
    if task.entry.fatal is None:
        # the pending exception can also be lost ("returned NULL without setting an exception"):
        # serve the client's callbacks once, so error_cb records the fatal error (on_error)
        deadline = time.monotonic() + 2.0
        while task.entry.fatal is None and time.monotonic() < deadline:
            try:
                task.entry.producer.poll(0.1)
            except Exception:  # noqa: BLE001 - the same pending state again; the recorded error decides
                pass
    if task.entry.fatal is None:
        # error_cb's call can be the one whose exception was lost: a transactional call on a
        # producer in a fatal state raises that error again, whole (a producer without
        # transactions answers with a non-fatal error; the task fails either way)
        try:
            task.entry.producer.abort_transaction(1.0)
        except KafkaException as again:
            err = again.args[0] if again.args and isinstance(again.args[0], KafkaError) else None
            if err is not None and err.fatal():
                task.entry.fatal = err
        except Exception:  # noqa: BLE001 - another pending state: the recorded error decides
            pass
    if task.entry.fatal is None:
        raise e
    raise KafkaClientError(task.failure(conf, 0)) from e


_REFUSED_PREFIX = "Unable to produce message: "


def _error_text(err) -> str:
    """An error's text without the prefix confluent-kafka puts on a record ``produce()`` refused at
    once, so a record refused at once and one whose delivery failed for the same reason (which of
    the two depends on the producer's metadata at the time) are counted as one error."""
    text = err.str()
    return text[len(_REFUSED_PREFIX):] if text.startswith(_REFUSED_PREFIX) else text


class _Refused:
    """The topic and partition of a record ``produce()`` refused, shaped like a delivered message."""

    __slots__ = ("_topic", "_partition")

    def __init__(self, topic: str, partition: int | None) -> None:
        self._topic, self._partition = topic, partition

    def topic(self) -> str:
        return self._topic

    def partition(self):
        return self._partition


def _as_bytes(values: list) -> list:
    return [v.encode() if isinstance(v, str) else v for v in values]


def _send(opts: SinkOptions, task: _TaskDelivery, batch: pa.RecordBatch, first_row: int) -> None:
    """Produce one batch's rows (``first_row``: the task's row number of its first row, for errors)."""
    from confluent_kafka import KafkaError, KafkaException

    n = batch.num_rows
    producer, on_delivery = task.entry.producer, task.on_delivery
    cols = batch.schema.names
    values = _as_bytes(batch.column("value").to_pylist())
    keys = _as_bytes(batch.column("key").to_pylist()) if "key" in cols else [None] * n
    topics = [opts.topic] * n if opts.topic else batch.column("topic").to_pylist()
    parts = batch.column("partition").to_pylist() if "partition" in cols else [None] * n
    headers = batch.column("headers").to_pylist() if "headers" in cols else [None] * n
    for i in range(n):
        if topics[i] is None:
            raise InvalidArgumentError(f"dataflow-kafka sink: row {first_row + i} has a null topic and no 'topic' "
                             "option is set")
        kwargs = {}
        if parts[i] is not None:
            kwargs["partition"] = parts[i]
        if headers[i]:
            kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
        while True:
            try:
                producer.produce(topics[i], value=values[i], key=keys[i], on_delivery=on_delivery, **kwargs)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.1)
            except KafkaException as e:  # refused at once (e.g. a partition the producer knows is missing)
                err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                if err is None:
                    raise
                task.on_delivery(err, _Refused(topics[i], parts[i]))
                if err.fatal():
                    raise KafkaClientError(task.failure(dict(opts.kafka), 0)) from e
                break   # counted as a failed delivery; the task fails after the others are flushed
            except SystemError as e:  # a fatal error left pending by a callback (see _flush)
                _raise_fatal(task, dict(opts.kafka), e)
        task.sent += 1
    try:
        producer.poll(0)
    except SystemError as e:
        _raise_fatal(task, dict(opts.kafka), e)


def _produce(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    conf = dict(opts.kafka)
    timeout_s = _delivery_timeout_s(conf) + FLUSH_MARGIN_S
    task: _TaskDelivery | None = None
    count = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if task is None:   # no producer for a task without rows
                task = _TaskDelivery(_producers.acquire(conf))
            _send(opts, task, batch, count)
            count += batch.num_rows
        if task is not None:
            _flush(task, conf, timeout_s)
            message = task.failure(conf, timeout_s)
            if message:
                raise KafkaClientError(message)
    except BaseException:
        if task is not None:
            _after_failure(conf, task)
        raise
    return WriteResult(count, os.getpid(), _producers.created)


def _after_failure(conf: dict, task: _TaskDelivery) -> None:
    """A failing task leaves the producer empty for the next one, or drops it."""
    try:
        if task.entry.fatal is None:
            task.entry.producer.flush(DRAIN_TIMEOUT_S)
        if task.entry.fatal is not None or task.pending or task.timed_out or len(task.entry.producer):
            _producers.drop(conf)
    except Exception:  # noqa: BLE001 - do not hide the task's own error
        _producers.drop(conf)


# -- exactly once ------------------------------------------------------------------------------------

def _group(query_id: str, partition: int) -> str:
    return f"dataflow-kafka-sink-{query_id}-{partition}"


def _index_consumer(conf: dict, query_id: str, partition: int):
    from confluent_kafka import Consumer

    return Consumer({**conf, "group.id": _group(query_id, partition), "isolation.level": "read_committed",
                     "enable.auto.commit": False, "log_level": 3})


def committed_batch(kafka_conf: dict, commit_topic: str, query_id: str, partition: int,
                    timeout_s: float = 30.0) -> int | None:
    """The last batch id whose task ``partition`` of query ``query_id`` committed, or None."""
    from confluent_kafka import TopicPartition

    c = _index_consumer(kafka_conf, query_id, partition)
    try:
        (tp,) = c.committed([TopicPartition(commit_topic, 0)], timeout=timeout_s)
        return tp.offset - 1 if tp.offset >= 1 else None
    finally:
        c.close()


def write_exactly_once(opts: SinkOptions, batches: Iterator[pa.RecordBatch], query_id: str, batch_id: int,
                       partition: int) -> WriteResult:
    """Write one task's rows and its marker in one Kafka transaction, unless the marker of
    (``query_id``, ``batch_id``, ``partition``) is already committed (then write nothing)."""
    from confluent_kafka import Producer, TopicPartition

    conf = dict(opts.kafka)
    timeout_s = _delivery_timeout_s(conf) + FLUSH_MARGIN_S
    it = iter(batches)
    first = next((b for b in it if b.num_rows), None)
    if first is None:
        return WriteResult(0, os.getpid())
    entry = _Entry(conf)
    entry.producer = producer = Producer({**PRODUCER_DEFAULTS, **conf, **entry.callbacks(),
                                          "transactional.id": f"dataflow-kafka-{query_id}-{partition}"})
    index = None
    task = _TaskDelivery(entry)
    began = False
    try:
        try:   # fences an older attempt of this task and completes or aborts its transaction
            producer.init_transactions(timeout_s)
            index, done = _committed(lambda: _index_consumer(conf, query_id, partition),
                                     TopicPartition(opts.commit_topic, 0), timeout_s)
        except Exception as e:  # noqa: BLE001
            last = entry.last_error
            raise KafkaClientError(f"dataflow-kafka sink (exactlyOnce): cannot start a transaction at {_servers(conf)}: "
                               f"{e}" + (f"; last client error: {last.str()} ({last.name()})" if last else "")) from e
        if done.offset > batch_id:
            return WriteResult(0, os.getpid(), skipped=True)
        producer.begin_transaction()
        began = True
        count = 0
        for batch in itertools.chain([first], it):
            if batch.num_rows:
                _send(opts, task, batch, count)
                count += batch.num_rows
        marker = {"query": query_id, "batch": batch_id, "partition": partition, "records": count}
        producer.produce(opts.commit_topic, value=json.dumps(marker).encode(), partition=0,
                         key=f"{query_id}/{batch_id}/{partition}".encode(), on_delivery=task.on_delivery)
        task.sent += 1
        _flush(task, conf, timeout_s)
        message = task.failure(conf, timeout_s)
        if message:
            raise KafkaClientError(message)
        producer.send_offsets_to_transaction([TopicPartition(opts.commit_topic, 0, batch_id + 1)],
                                             index.consumer_group_metadata(), timeout_s)
        producer.commit_transaction(timeout_s)
        began = False
        return WriteResult(count, os.getpid())
    finally:
        if began:
            try:
                producer.abort_transaction(DRAIN_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the task's own error is the one to report
                pass
        if index is not None:
            index.close()
        _close_quietly(producer)


def _task_identity() -> tuple[str, int, int]:
    """(query id, batch id, partition id) of the running streaming task (Spark's local properties)."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    query_id = tc.getLocalProperty("sql.streaming.queryId") if tc else None
    batch_id = tc.getLocalProperty("streaming.sql.batchId") if tc else None
    if not query_id or batch_id is None:
        raise PlanError("dataflow-kafka sink (exactlyOnce): the task has no streaming query id or batch id "
                           "(sql.streaming.queryId / streaming.sql.batchId): exactlyOnce needs writeStream")
    return query_id, int(batch_id), tc.partitionId()


#: Sink configurations this process has prepared: (Kafka configuration, topic option, commit topic)
_writes_prepared: set[tuple] = set()


def _prepare_writes(opts: SinkOptions) -> None:
    """On the driver, before any task writes: with exactlyOnce, create the commit topic unless it
    exists; then may the principal WRITE the ``topic`` option's topic (and WRITE and READ the
    commit topic)?

    Spark's commit runner creates the writer again for every micro-batch's commit, after the
    tasks have written: a configuration prepared once is not prepared again in the same process
    (it cost admin clients and metadata round trips per micro-batch, about 7 ms at a trickle for
    the ACL check alone). A permission revoked or a commit topic deleted later still fails the
    next task, naming the principal and topic (:meth:`_TaskDelivery.failure`)."""
    key = (tuple(sorted(opts.kafka.items())), opts.topic, opts.commit_topic if opts.exactly_once else None)
    if key in _writes_prepared:
        return
    needs, why = {}, {}
    if opts.topic:
        needs[opts.topic], why[opts.topic] = ["WRITE"], "the sink writes to it (option 'topic')"
    if opts.exactly_once:
        ensure_topic(opts.kafka, opts.commit_topic)
        needs[opts.commit_topic] = ["WRITE", "READ"]
        why[opts.commit_topic] = "the exactly-once sink's commit topic (option 'exactlyOnceCommitTopic')"
    kafka_security.require_topic_operations(opts.kafka, needs, why)
    _writes_prepared.add(key)


class DataflowKafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_write_schema(schema, opts)
        _delivery_timeout_s(opts.kafka)
        self.opts = opts
        _prepare_writes(opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        if self.opts.exactly_once:
            return write_exactly_once(self.opts, iterator, *_task_identity())
        return _produce(self.opts, iterator)

    def commit(self, messages, batchId: int) -> None:
        """Records are acknowledged (or committed) by Kafka before a task succeeds: nothing left to do."""

    def abort(self, messages, batchId: int) -> None:
        """Records of successful tasks stay in Kafka (at-least-once; with exactlyOnce their
        transactions are committed and a replay of their tasks writes nothing); the batch is re-run."""


class DataflowKafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_write_schema(schema, opts)
        _delivery_timeout_s(opts.kafka)
        if opts.exactly_once:
            raise OptionError("option 'exactlyOnce' applies to writeStream only: a batch write (df.write) has no "
                              "batch id to mark its transactions with")
        self.opts = opts
        _prepare_writes(opts)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _produce(self.opts, iterator)
