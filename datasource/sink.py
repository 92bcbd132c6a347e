"""The ``dataflow-kafka`` sink: ``df.writeStream.format("dataflow-kafka")`` and ``df.write``.

Write schema as Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (optional,
string or binary), ``topic`` (string; or the ``topic`` option, which takes precedence),
``partition`` (optional int; else Kafka's partitioner on the key), ``headers`` (optional
``array<struct<key:string,value:binary>>``, written when present).

Delivery guarantee: **at least once**. Each task produces its rows with an idempotent producer
(``enable.idempotence=true``, ``acks=all``) and returns only after every one of its records is
acknowledged; a failed delivery fails the task, and Spark retries it or re-runs the micro-batch. A
retried task or a replayed micro-batch after a crash writes its rows again, so consumers can see
duplicates (never losses). Deduplicate downstream on a key of the data if needed.

Producers: one per Python worker process and Kafka configuration, kept across tasks and
micro-batches (Spark reuses its Python workers, and a worker runs one task at a time). Creating
an idempotent producer costs a connection, a metadata request and an ``InitProducerId`` round
trip, paid by every task of every micro-batch if each task made its own. Reuse keeps the
guarantee because a task never leaves records behind: it flushes before it returns, so the
producer is empty when the next task takes it, and each task counts the delivery reports of its
own records (the callbacks are bound to the task), so an error of one task cannot fail, or hide
in, another. A producer is dropped, and the next task makes a new one, when it reported a fatal
error (for example ``OUT_OF_ORDER_SEQUENCE_NUMBER`` of the idempotent producer after a broker
lost acknowledged records) or when a failed task could not drain it within
``DRAIN_TIMEOUT_S``. At the exit of a process that runs Python exit hooks, cached producers are
flushed for at most ``EXIT_FLUSH_TIMEOUT_S`` each; pyspark's forked workers end with
``os._exit`` and run no exit hooks, which loses nothing because no task leaves records in a
producer.

Every task returns a :class:`WriteResult` (its record count, the worker's pid and how many sink
producers that process has created so far), which the driver's ``commit`` receives: producer
reuse is observable without instrumenting the worker.
"""

from __future__ import annotations

import atexit
import os
from collections import Counter
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from datasource.options import OptionError, SinkOptions

__all__ = ["DataflowKafkaStreamWriter", "DataflowKafkaBatchWriter", "WriteResult", "validate_write_schema",
           "ProducerCache", "producer_stats", "close_producers", "PRODUCER_DEFAULTS"]

#: Producer settings of the sink; ``kafka.*`` options override them.
PRODUCER_DEFAULTS = {"enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3}
FLUSH_TIMEOUT_S = 120.0      # a task waits this long for its acknowledgements, then fails
DRAIN_TIMEOUT_S = 10.0       # a failed task waits this long for its other records before it returns
EXIT_FLUSH_TIMEOUT_S = 5.0   # per producer at process exit
_MAX_ERRORS = 5              # distinct (topic, partition, error) quoted in a task's failure message


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


class WriteResult(WriterCommitMessage):
    """One task's commit message: ``records`` written, and for observability the worker's ``pid``
    and ``producers_created``, the number of sink producers that process has created so far
    (stays at 1 per process and configuration while producers are reused)."""

    def __init__(self, records: int, pid: int | None = None, producers_created: int | None = None) -> None:
        self.records = records
        self.pid = pid
        self.producers_created = producers_created

    def __repr__(self) -> str:
        return f"WriteResult(records={self.records}, pid={self.pid}, producers_created={self.producers_created})"


class _Entry:
    """A cached producer and the fatal error it reported, if any."""

    __slots__ = ("producer", "fatal", "pid")

    def __init__(self) -> None:
        self.producer = None
        self.fatal = None
        self.pid = os.getpid()

    def on_error(self, err) -> None:   # librdkafka's error_cb: client-level errors, fatal ones included
        if err.fatal():
            self.fatal = err


class ProducerCache:
    """confluent-kafka producers of one Python process, one per Kafka configuration.

    Producer settings: ``defaults``, then ``conf`` (the ``kafka.*`` options), then ``forced``.
    ``acquire(conf)`` returns the cached producer entry, or a new one when there is none, when the
    cached one reported a fatal error, or when it was created in another process (a fork).
    ``drop(conf)`` discards a producer (queued records are purged: the task that wrote them has
    failed, or is failing, and is re-run). ``close()`` flushes every producer for at most
    ``timeout_s`` and discards them."""

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
            entry = _Entry()
            entry.producer = Producer({**self.defaults, **conf, **self.forced, "error_cb": entry.on_error})
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
        try:
            entry.producer.purge()
            entry.producer.flush(1)   # serve the purged records' delivery reports
        except Exception:  # noqa: BLE001 - a broken producer is being thrown away anyway
            pass

    def close(self, timeout_s: float = EXIT_FLUSH_TIMEOUT_S) -> None:
        entries, self._entries = self._entries, {}
        for entry in entries.values():
            if entry.pid != os.getpid():
                continue
            try:
                if entry.producer.flush(timeout_s):
                    entry.producer.purge()
                    entry.producer.flush(0)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass

    def __len__(self) -> int:
        return len(self._entries)


_producers = ProducerCache(PRODUCER_DEFAULTS)


def producer_stats() -> dict:
    """This process's sink producers: ``created``, ``dropped`` (after fatal errors or failed
    tasks) and ``cached`` now."""
    return {"created": _producers.created, "dropped": _producers.dropped, "cached": len(_producers)}


def close_producers(timeout_s: float = EXIT_FLUSH_TIMEOUT_S) -> None:
    """Flush (for at most ``timeout_s`` each) and discard this process's sink producers."""
    _producers.close(timeout_s)


class _TaskDelivery:
    """Delivery reports of one task's records (the callbacks are bound to this object)."""

    __slots__ = ("entry", "sent", "acked", "failed", "errors")

    def __init__(self, entry: _Entry) -> None:
        self.entry = entry
        self.sent = self.acked = self.failed = 0
        self.errors: Counter = Counter()   # (topic, partition, error) -> records

    def on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked += 1
            return
        self.failed += 1
        if err.fatal():
            self.entry.fatal = err
        what = (msg.topic(), msg.partition(), f"{err.str()} ({err.name()})")
        if what in self.errors or len(self.errors) < _MAX_ERRORS:
            self.errors[what] += 1

    def describe_errors(self) -> str:
        return "; ".join(f"topic {t!r} partition {p}: {e}: {n} record{'s' if n > 1 else ''}"
                         for (t, p, e), n in self.errors.items())

    @property
    def pending(self) -> int:
        return self.sent - self.acked - self.failed


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


def _produce(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    from confluent_kafka import KafkaError, KafkaException

    conf = dict(opts.kafka)
    task: _TaskDelivery | None = None
    count = 0
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            if task is None:   # no producer for a task without rows
                task = _TaskDelivery(_producers.acquire(conf))
            producer, on_delivery = task.entry.producer, task.on_delivery
            cols = batch.schema.names
            values = _as_bytes(batch.column("value").to_pylist())
            keys = _as_bytes(batch.column("key").to_pylist()) if "key" in cols else [None] * n
            topics = [opts.topic] * n if opts.topic else batch.column("topic").to_pylist()
            parts = batch.column("partition").to_pylist() if "partition" in cols else [None] * n
            headers = batch.column("headers").to_pylist() if "headers" in cols else [None] * n
            for i in range(n):
                if topics[i] is None:
                    raise ValueError(f"dataflow-kafka sink: row {count + i} has a null topic and no 'topic' "
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
                            raise RuntimeError(f"dataflow-kafka sink: fatal producer error on topic {topics[i]!r} "
                                               f"partition {parts[i]}: {err.str()} ({err.name()})") from e
                        break   # counted as a failed delivery; the task fails after the others are flushed
                task.sent += 1
            producer.poll(0)
            count += n
        if task is not None:
            task.entry.producer.flush(FLUSH_TIMEOUT_S)
            if task.failed:
                raise RuntimeError(f"dataflow-kafka sink: delivery failed for {task.failed} of {task.sent} records: "
                                   f"{task.describe_errors()}")
            if task.pending:
                raise RuntimeError(f"dataflow-kafka sink: {task.pending} of {task.sent} records not acknowledged "
                                   f"within {FLUSH_TIMEOUT_S:.0f} s")
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
        if task.entry.fatal is not None or task.pending or len(task.entry.producer):
            _producers.drop(conf)
    except Exception:  # noqa: BLE001 - do not hide the task's own error
        _producers.drop(conf)


class DataflowKafkaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_write_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _produce(self.opts, iterator)

    def commit(self, messages, batchId: int) -> None:
        """Records are acknowledged by Kafka before a task succeeds: nothing left to do."""

    def abort(self, messages, batchId: int) -> None:
        """Records of successful tasks stay in Kafka (at-least-once); the batch is re-run."""


class DataflowKafkaBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema: StructType) -> None:
        validate_write_schema(schema, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        return _produce(self.opts, iterator)
