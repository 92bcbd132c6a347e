"""Row schema of the ``dataflow-kafka`` source and the timestampType codes it uses.

The first columns are exactly Spark's Kafka source schema; the rest carry what order-aware
operators need (see docs/ARCHITECTURE.md, "Row contract").
"""

from __future__ import annotations

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


def source_schema(include_headers: bool) -> StructType:
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
    fields += [
        StructField("kind", StringType()),
        StructField("event_time", TimestampType()),
        StructField("punctuation", TimestampType()),
        StructField("modification", StringType()),
        StructField("processing_time", TimestampType()),
        StructField("error", StringType()),
    ]
    return StructType(fields)


_TS = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", _TS),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    fields += [
        ("kind", pa.string()), ("event_time", _TS), ("punctuation", _TS),
        ("modification", pa.string()), ("processing_time", _TS), ("error", pa.string()),
    ]
    return pa.schema(fields)


def spark_timestamp_type(confluent_type: int) -> int:
    """Map confluent-kafka's timestamp type (0 none, 1 create, 2 log-append) to Spark's codes
    (Kafka's ``TimestampType.id``: -1 none, 0 CreateTime, 1 LogAppendTime)."""
    return {0: -1, 1: 0, 2: 1}.get(confluent_type, -1)
