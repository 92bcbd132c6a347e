"""``endOfInput=punctuate``: a bounded run's last punctuation closes every window, is in
the offset log, and a replay does the same."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.datasource.kafka_read import MAX_EVENT_MS
from dataflow_kafka.datasource.options import OptionError, parse_source_options
from tests.support import BatchCollector, forget_batches_from, now_ms, offset_log, run_available_now



def _opts(kafka, topic, **extra) -> dict:
    return {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "endOfInput": "punctuate", **extra}


def _ms(ts) -> int | None:
    return None if ts is None else round(ts.timestamp() * 1000)


def _punctuations(rows) -> list[tuple[int, int, int | None]]:
    return sorted((r["batch"], r["partition"], _ms(r["punctuation"])) for r in rows if r["kind"] == "punctuation")


def test_the_last_batch_of_an_available_now_run_punctuates_every_partition_to_the_end(spark, kafka, tmp_path):
    topic = kafka.topic(2)
    t = now_ms() - 60_000
    kafka.produce(topic, [{"value": json.dumps({"ts": t + i}).encode(), "partition": i % 2} for i in range(40)])
    ck, out = str(tmp_path / "ck"), BatchCollector()
    run_available_now(spark, _opts(kafka, topic, maxOffsetsPerTrigger="15"), ck, out)
    last = max(out.batches)
    assert last >= 2, "several batches expected"
    punct = _punctuations(out.rows())
    assert [p for b, _, p in punct if b == last] == [MAX_EVENT_MS, MAX_EVENT_MS]
    assert all(p is not None and p < t + 40 for b, _, p in punct if b < last)       # the others follow the data
    assert offset_log(ck, last).get("eoi") is True and not offset_log(ck, last - 1).get("eoi")
    # A replay of the last batch (a crash before its commit) emits the same rows.
    before = sorted(map(repr, out.batches[last]))
    forget_batches_from(ck, last)
    run_available_now(spark, _opts(kafka, topic, maxOffsetsPerTrigger="15"), ck, out)
    assert sorted(map(repr, out.batches[last])) == before
    # A run with nothing new adds no batch; new records get their own run, ending at the end again.
    run_available_now(spark, _opts(kafka, topic), ck, out)
    assert max(out.batches) == last
    kafka.produce(topic, [{"value": json.dumps({"ts": t + 100}).encode(), "partition": 0}])
    run_available_now(spark, _opts(kafka, topic), ck, out)
    assert max(out.batches) == last + 1
    assert [p for b, _, p in _punctuations(out.rows()) if b == last + 1] == [MAX_EVENT_MS, MAX_EVENT_MS]


def test_data_that_ended_in_an_earlier_batch_gets_a_punctuation_only_batch(spark, kafka, tmp_path):
    topic = kafka.topic(1)
    t = now_ms() - 60_000
    kafka.produce(topic, [{"value": json.dumps({"ts": t}).encode()}])
    ck, out = str(tmp_path / "ck"), BatchCollector()
    run_available_now(spark, _opts(kafka, topic, endOfInput="none"), ck, out)       # an ordinary run first
    assert _punctuations(out.rows()) == [(0, 0, t)]
    run_available_now(spark, _opts(kafka, topic), ck, out)                           # nothing new, but it ends
    assert _punctuations(out.rows())[-1] == (1, 0, MAX_EVENT_MS)
    assert not out.rows("data")[1:]


def test_a_batch_read_punctuates_to_the_end(spark, kafka):
    topic = kafka.topic(2)
    t = now_ms() - 60_000
    kafka.produce(topic, [{"value": json.dumps({"ts": t + i}).encode(), "partition": i % 2} for i in range(6)])
    reader = spark.read.format("dataflow-kafka")
    for k, v in _opts(kafka, topic).items():
        reader = reader.option(k, v)
    rows = [r.asDict() for r in reader.load().collect()]
    assert sorted(_ms(r["punctuation"]) for r in rows if r["kind"] == "punctuation") == [MAX_EVENT_MS] * 2
    assert sum(r["kind"] == "data" for r in rows) == 6


def test_end_of_input_values_are_checked():
    with pytest.raises(OptionError, match="option 'endOfInput' must be 'none' or 'punctuate', got 'yes'"):
        parse_source_options({"kafka.bootstrap.servers": "x", "subscribe": "t", "endOfInput": "yes"}, True)


def test_a_pipeline_with_a_computed_input_reads_to_the_end(spark, kafka, tmp_path):
    """The end-of-input punctuation (9999-12-31) passes the pandas step of a ``Computed`` first
    input (pandas timestamps end in 2262) and closes every window."""
    import pandas as pd

    from dataflow_kafka.keygroups import Computed, Pipeline
    from dataflow_kafka.slicer.stage import SlicerStage
    from dataflow_kafka.windowing import Sum, TumblingWindow
    from dataflow_kafka.windowing.final import current_windows

    topic = kafka.topic(2)
    t = (now_ms() - 60_000) // 1000 * 1000
    kafka.produce(topic, [{"key": f"k{i % 3}".encode(), "value": json.dumps({"ts": t + i * 100, "amount": i}).encode(),
                           "partition": i % 2} for i in range(30)])

    def amount(frame):
        assert frame["event_time"].notna().all()          # data rows see their event time as datetimes
        return [float(json.loads(v)["amount"]) for v in frame["value"]]

    stage = SlicerStage(key="key", value=Computed(amount, "double"), windows={"1s": TumblingWindow(1000)},
                        aggregations=[Sum()])
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in _opts(kafka, topic, maxOffsetsPerTrigger="12").items():
        reader = reader.option(k, v)
    out = BatchCollector()
    q = (Pipeline([stage]).apply(reader.load()).writeStream.foreachBatch(out).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(240) and q.exception() is None
    final = current_windows(pd.DataFrame(out.rows()), stage)
    assert len(final) and final["sum"].sum() == sum(range(30))
