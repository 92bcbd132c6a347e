"""The ``dataflow-kafka`` sink: ``df.writeStream.format("dataflow-kafka")`` and ``df.write``.

Write schema as Spark's Kafka sink: ``value`` (required, string or binary), ``key`` (optional,
string or binary), ``topic`` (string; or the ``topic`` option, which takes precedence),
``partition`` (optional int; else Kafka's partitioner on the key), ``headers`` (optional
``array<struct<key:string,value:binary>>``, written when present).

Delivery guarantee: **at least once**. Each task produces its rows with an idempotent producer
(``enable.idempotence=true``, ``acks=all``) and returns only after every record is acknowledged;
a failed delivery fails the task, and Spark retries it or re-runs the micro-batch. A retried task
or a replayed micro-batch after a crash writes its rows again, so consumers can see duplicates
(never losses). Deduplicate downstream on a key of the data if needed.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from datasource.options import OptionError, SinkOptions

__all__ = ["DataflowKafkaStreamWriter", "DataflowKafkaBatchWriter", "WriteResult", "validate_write_schema"]


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
    def __init__(self, records: int) -> None:
        self.records = records


def _as_bytes(values: list) -> list:
    return [v.encode() if isinstance(v, str) else v for v in values]


def _produce(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> WriteResult:
    from confluent_kafka import Producer

    conf = {"enable.idempotence": True, "acks": "all", "linger.ms": 5, "log_level": 3}
    conf.update(opts.kafka)
    producer = Producer(conf)
    failures: list[str] = []

    def on_delivery(err, msg):
        if err is not None and len(failures) < 5:
            failures.append(f"{msg.topic()}-{msg.partition()}: {err}")

    count = 0
    for batch in batches:
        cols = batch.schema.names
        values = _as_bytes(batch.column("value").to_pylist())
        n = len(values)
        keys = _as_bytes(batch.column("key").to_pylist()) if "key" in cols else [None] * n
        topics = [opts.topic] * n if opts.topic else batch.column("topic").to_pylist()
        parts = batch.column("partition").to_pylist() if "partition" in cols else [None] * n
        headers = batch.column("headers").to_pylist() if "headers" in cols else [None] * n
        for i in range(n):
            if topics[i] is None:
                raise ValueError(f"row {count + i} has a null topic and no 'topic' option is set")
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
            producer.poll(0)
        count += n
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"dataflow-kafka sink: {remaining} records not acknowledged within 120 s")
    if failures:
        raise RuntimeError(f"dataflow-kafka sink: delivery failed: {'; '.join(failures)}")
    return WriteResult(count)


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
