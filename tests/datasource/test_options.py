"""The options written once: one descriptor per option, from which the options objects, the
parsing and the docs table come (no broker, no Spark)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dataflow_kafka.datasource import options
from dataflow_kafka.datasource.options import (
    SINK_OPTIONS, SOURCE_OPTIONS, SinkOptions, SourceOptions, options_table, parse_sink_options, parse_source_options,
)
from dataflow_kafka.errors import OptionError

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "source.md"


def test_the_docs_table_is_the_descriptors_table():
    page = DOCS.read_text()
    start = page.index("<!-- generated from datasource/options.py: options_table(); do not edit by hand -->\n")
    end = page.index("<!-- end of the generated options table -->")
    assert page[page.index("\n", start) + 1:end] == options_table(), \
        "regenerate docs/source.md's options table from datasource.options.options_table()"


@pytest.mark.parametrize("cls, table", [(SourceOptions, SOURCE_OPTIONS), (SinkOptions, SINK_OPTIONS)])
def test_every_field_is_filled_by_one_descriptor_and_has_no_second_default(cls, table):
    filled = [o.field for o in table if o.field]
    assert sorted(filled) == sorted(f.name for f in dataclasses.fields(cls) if f.name != "kafka")
    assert len(set(filled)) == len(filled)
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(cls))   # defaults: the descriptors'


def test_names_are_unique_per_side_and_case_insensitive_keys():
    for table in (SOURCE_OPTIONS, SINK_OPTIONS):
        keys = [o.key for o in table]
        assert len(set(keys)) == len(keys)
    opts = parse_source_options({**BOOT, "SUBSCRIBE": "a", "maxoffsetspertrigger": "7"}, streaming=True)
    assert opts.subscribe == ("a",) and opts.max_offsets_per_trigger == 7


def test_defaults_come_from_the_descriptors():
    src = parse_source_options({**BOOT, "subscribe": "a"}, streaming=True)
    for o in SOURCE_OPTIONS:
        if o.field and o.name != "subscribe":
            assert getattr(src, o.field) == o.default_for(True), o.name
    assert parse_source_options({**BOOT, "subscribe": "a"}, streaming=False).starting == "earliest"
    sink = parse_sink_options(BOOT)
    assert (sink.topic, sink.include_headers, sink.exactly_once, sink.commit_topic) == (
        None, False, False, "dataflow-kafka-sink-commits")
    assert parse_sink_options({**BOOT, "exactlyOnceCommitTopic": " "}).commit_topic == "dataflow-kafka-sink-commits"


def test_a_descriptor_refuses_the_wrong_query_naming_the_option():
    streaming_only = [o for o in SOURCE_OPTIONS if o.mode == options.STREAM]
    batch_only = [o for o in SOURCE_OPTIONS if o.mode == options.BATCH]
    assert {o.name for o in streaming_only} == {"maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"}
    for o in streaming_only:
        with pytest.raises(OptionError, match=f"option '{o.name}' is for streaming queries only"):
            parse_source_options({**BOOT, "subscribe": "a", o.name: "5"}, streaming=False)
    for o in batch_only:
        with pytest.raises(OptionError, match=rf"option '{o.name}' is for batch queries \(spark.read\) only"):
            parse_source_options({**BOOT, "subscribe": "a", o.name: "latest"}, streaming=True)
    # load() (streaming=None) checks only what both queries share
    assert parse_source_options({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "5"}, None).max_offsets_per_trigger == 5


@pytest.mark.parametrize("name, value, message", [
    ("endingTimestamp", "5", "option 'endingTimestamp' is not supported by dataflow-kafka yet"),
    ("kafka.enable.auto.commit", "true", "option 'kafka.enable.auto.commit' is not supported: offsets live"),
    ("startingOffsetsByTimestampStrategy", "Never", "must be 'error' or 'latest', got 'Never'"),
    ("startingOffsetsByTimestamp", '{"a": {"0": -3}}', "offset -3 for a-0 is invalid"),
    ("heartbeatIntervalMs", "0", "option 'heartbeatIntervalMs' must be >= 1, got 0"),
])
def test_every_error_names_the_option_and_the_value(name, value, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_source_options({**BOOT, "subscribe": "a", name: value}, streaming=True)


def test_the_sink_refuses_serializers_and_takes_what_spark_passes():
    with pytest.raises(OptionError, match="option 'kafka.value.serializer' is not supported: key and value"):
        parse_sink_options({**BOOT, "kafka.value.serializer": "x"})
    with pytest.raises(OptionError, match=r"unknown option\(s\) \['eventtimefield'\] for the 'dataflow-kafka' sink"):
        parse_sink_options({**BOOT, "eventTimeField": "ts"})
