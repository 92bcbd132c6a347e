"""Row schema of the ``dataflow-kafka`` source and the timestampType codes it uses.

The first columns are exactly Spark's Kafka source schema; the rest carry what order-aware
operators need (see docs/ARCHITECTURE.md, "Row contract"). ``control_offset`` (last) is the offset
of a modification row's command in ``controlTopic`` (null on other rows): every Kafka partition's
task emits a copy of each command, and operators deduplicate and order the copies by it.
"""

from __future__ import annotations

import functools

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

__all__ = [
    "KIND_DATA", "KIND_PUNCTUATION", "KIND_MODIFICATION", "KIND_ERROR", "KINDS",
    "PUNCTUATION_HEADER", "source_schema", "arrow_schema", "spark_timestamp_type",
]

KIND_DATA = "data"
KIND_PUNCTUATION = "punctuation"
KIND_MODIFICATION = "modification"
KIND_ERROR = "error"
KINDS = (KIND_DATA, KIND_PUNCTUATION, KIND_MODIFICATION, KIND_ERROR)

#: Header that marks a producer-written timestamp punctuation record. Its value is the
#: punctuation's event time as ASCII decimal epoch milliseconds, e.g. ``b"1700000000000"``.
PUNCTUATION_HEADER = "dataflow.punctuation"

_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool, data_only: bool = False) -> StructType:
    """The source's row schema; ``data_only`` (option ``dataOnly``): Spark's Kafka connector's columns only."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", _HEADERS))
    if data_only:
        return StructType(fields)
    fields += [
        StructField("kind", StringType()),
        StructField("event_time", TimestampType()),
        StructField("punctuation", TimestampType()),
        StructField("modification", StringType()),
        StructField("processing_time", TimestampType()),
        StructField("error", StringType()),
        # Last, so Spark's Kafka columns and the earlier columns keep their positions.
        StructField("control_offset", LongType()),
    ]
    return StructType(fields)


@functools.lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema ``read()`` yields: the Spark schema converted (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(source_schema(include_headers), timezone="UTC")


def spark_timestamp_type(confluent_type: int) -> int:
    """Map confluent-kafka's timestamp type (0 none, 1 create, 2 log-append) to Spark's codes
    (Kafka's ``TimestampType.id``: -1 none, 0 CreateTime, 1 LogAppendTime)."""
    return {0: -1, 1: 0, 2: 1}.get(confluent_type, -1)
