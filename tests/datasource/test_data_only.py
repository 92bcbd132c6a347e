"""Option ``dataOnly``: the source's data records in the rows and columns of Spark's Kafka
connector, for queries of Spark's own operators; what concerns markers is refused with it."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.datasource import PUNCTUATION_HEADER
from dataflow_kafka.datasource.options import OptionError, parse_source_options
from tests.support import BatchCollector, now_ms, run_available_now

#: Spark's Kafka source schema (``format("kafka")``), without headers
SPARK_KAFKA = [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
               ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]


@pytest.mark.parametrize("option, value", [("controlTopic", "c"), ("eventTimeField", "ts"), ("watermarkDelayMs", "5"),
                                           ("heartbeatIntervalMs", "1000"), ("endOfInput", "punctuate")])
def test_options_about_markers_are_refused_naming_them(option, value):
    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t", "dataOnly": "true"}
    with pytest.raises(OptionError, match=f"'dataOnly'.*'{option}'"):
        parse_source_options({**base, option: value}, streaming=True)
    assert parse_source_options({**base, "dataOnly": "false", option: value}, streaming=True).data_only is False


def test_the_data_records_in_sparks_columns_streamed_and_read(spark, kafka, tmp_path):
    """Every data record once, in Spark's columns and values, a record half an hour ahead among them
    (``maxEventTimeAheadMs``, here a minute, concerns event times, which this option leaves out); a
    producer's punctuation record left out; the batch read gives the same rows."""
    topic = kafka.topic(2)
    now = now_ms()
    records = [{"value": json.dumps({"i": i}).encode(), "key": str(i).encode(), "partition": i % 2,
                "timestamp": now - 1_000 + i} for i in range(40)]
    records.append({"value": b"ahead", "partition": 0, "timestamp": now + 1_800_000})
    records.append({"value": None, "partition": 1, "timestamp": now, "headers": [(PUNCTUATION_HEADER, str(now).encode())]})
    kafka.produce(topic, records)
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "dataOnly": "true", "maxOffsetsPerTrigger": "15", "maxEventTimeAheadMs": "60000"}
    out = BatchCollector()
    run_available_now(spark, opts, str(tmp_path / "ck"), out)
    rows = [r for b in sorted(out.batches) for r in out.batches[b]]
    assert len(out.batches) >= 2 and all(set(r) == {n for n, _ in SPARK_KAFKA} for r in rows)
    expected = sorted((r["value"], r["partition"]) for r in records[:-1])
    assert sorted((bytes(r["value"]), r["partition"]) for r in rows) == expected
    assert sorted(r["offset"] for r in rows if r["partition"] == 0) == list(range(21))     # 20 records and "ahead"
    batch = spark.read.format("dataflow-kafka").options(**{k: v for k, v in opts.items() if k != "maxOffsetsPerTrigger"}
                                                        ).load()
    assert [(f.name, f.dataType.simpleString()) for f in batch.schema.fields] == SPARK_KAFKA
    key = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
    assert sorted(repr(tuple(r[k] for k in key)) for r in batch.collect()) == sorted(repr(tuple(r[k] for k in key))
                                                                                    for r in rows)
