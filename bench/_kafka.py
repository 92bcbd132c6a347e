"""Kafka helpers shared by the benchmarks: topics, a produce loop, the dataflow-kafka source."""

from __future__ import annotations

import json
import random
from typing import Callable

__all__ = ["create_topics", "produce_json", "dataflow_kafka_source", "stream_source"]

from dataflow_kafka.brokers.admin import create_topics  # noqa: E402 - the one topic helper, re-exported for the benchmarks


def produce_json(bootstrap: str, topic: str, n: int, partitions: int,
                 record: Callable[[int, random.Random], tuple[bytes | None, dict]], seed: int = 1,
                 timestamp: Callable[[int], int] | None = None) -> None:
    """Produce ``n`` JSON values, record ``i`` to partition ``i % partitions``;
    ``record(i, rng) -> (key, value_dict)``; ``timestamp(i)``: Kafka timestamp (default: now)."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "enable.idempotence": True})   # a retry can neither reorder a partition nor duplicate
    for i in range(n):
        key, value = record(i, rng)
        kw = {} if timestamp is None else {"timestamp": timestamp(i)}
        v = json.dumps(value).encode()
        while True:
            try:
                p.produce(topic, value=v, key=key, partition=i % partitions, **kw)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def dataflow_kafka_source(spark, bootstrap: str, topic: str, max_offsets: int | None = None, **options: str):
    """``readStream.format("dataflow-kafka")`` from the earliest offset (``options``: e.g.
    ``eventTimeField="ts"``)."""
    return stream_source(spark, "dataflow-kafka", bootstrap, topic, max_offsets, **options)


def stream_source(spark, fmt: str, bootstrap: str, topic: str, max_offsets: int | None = None, **options: str):
    """``readStream.format(fmt)`` (``"dataflow-kafka"`` or Spark's ``"kafka"``) of ``topic`` from
    the earliest offset, ``maxOffsetsPerTrigger`` and further ``options``."""
    reader = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()
