"""The worked example stage (keygroups/examples.py): its doctest, what it computes whatever the key
groups and batch splits, and the same rows on Spark over Kafka as in its local run."""

from __future__ import annotations

import doctest
import json
import random

import pandas as pd
import pytest

import dataflow_kafka.keygroups.examples as examples
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.keygroups.examples import RunningCount
from tests.support import BatchCollector, now_ms, source_batches


def test_doctest():
    result = doctest.testmod(examples)
    assert result.attempted > 0 and result.failed == 0


def _batches(records: list[tuple[str | None, int]], cuts: list[int], reset_at: int | None = None) -> list[pd.DataFrame]:
    """``records`` (key, event_time_ms) of one partition, cut into micro-batches before the indices
    ``cuts``; a reset command at the start of micro-batch ``reset_at``."""
    out = []
    bounds = [0, *cuts, len(records)]
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        chunk = records[lo:hi]
        control = [{"kind": "punctuation", "topic": "t", "partition": 0, "offset": hi,
                    "punctuation_ms": max([t for _, t in records[:hi]], default=None), "processing_time_ms": b}]
        if b == reset_at:
            control.insert(0, {"kind": "modification", "topic": "t", "partition": 0, "offset": lo,
                               "modification": json.dumps({"op": "reset"}), "control_offset": 0,
                               "processing_time_ms": b})
        data = pd.DataFrame([{"kind": "data", "topic": "t", "partition": 0, "offset": lo + i, "key": k,
                              "event_time_ms": t, "processing_time_ms": b} for i, (k, t) in enumerate(chunk)])
        out.append(pd.concat([control_frame(control), data], ignore_index=True) if len(data) else control_frame(control))
    return out


def _final_counts(outputs: list[pd.DataFrame]) -> dict:
    final = {}
    for frame in outputs:
        for k, c in zip(frame.loc[frame["kind"] == "data", "key"], frame.loc[frame["kind"] == "data", "count"]):
            final[k] = int(c)
    return final


@pytest.mark.parametrize("seed", range(6))
def test_counts_do_not_depend_on_key_groups_or_batch_splits(seed):
    rnd = random.Random(seed)
    records = [(None if rnd.random() < 0.05 else rnd.choice("abcdefg"), rnd.randint(0, 5_000)) for _ in range(60)]
    reset_at = rnd.choice([None, 1])
    cuts = sorted(rnd.sample(range(1, len(records)), 3))
    start = cuts[0] if reset_at == 1 else 0                  # the reset comes before micro-batch 1
    expected = {}
    for k, _ in records[start:]:
        if k is not None:
            expected[k] = expected.get(k, 0) + 1
    for n in (1, 2, 5):
        for split in (cuts, sorted(set(cuts + [cuts[0] + 1]))):
            outputs = Pipeline([RunningCount(num_key_groups=n)]).run_local(_batches(records, split, reset_at))
            got = _final_counts(outputs[1:] if reset_at == 1 else outputs)
            assert got == expected, (n, split)
            nulls = sum(int(f.loc[f["kind"] == "dropped", "dropped_count"].sum()) for f in outputs)
            assert nulls == sum(1 for k, _ in records if k is None)
            watermark = None
            for frame in outputs:                            # the promise: no row below an earlier watermark
                d = frame[frame["kind"] == "data"]
                assert watermark is None or (d["event_time_ms"] >= watermark).all()
                marks = frame.loc[frame["kind"] == "punctuation", "punctuation_ms"].dropna()
                watermark = int(marks.min()) if len(marks) else watermark


def _rows(frame: pd.DataFrame) -> list:
    out = []
    for r in frame.to_dict("records"):
        if r["kind"] == "data":
            out.append(("data", r["key"], r["count"], r["event_time_ms"]))
        elif r["kind"] == "punctuation":
            out.append(("punctuation", r["topic"], r["partition"], r["punctuation_ms"]))
    return sorted(out, key=repr)


def test_running_count_on_spark_equals_local_run(spark, kafka, tmp_path):
    topic = kafka.topic(2)
    rnd = random.Random(3)
    base = now_ms() - 60_000
    kafka.produce(topic, [{"key": rnd.choice("abcde").encode(), "partition": rnd.randrange(2),
                           "value": json.dumps({"ts": base + i * 10 - rnd.randint(0, 300)}).encode()}
                          for i in range(300)])
    stage = RunningCount(key="CAST(key AS STRING)", num_key_groups=3)
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                 "eventTimeField": "ts", "maxOffsetsPerTrigger": "100"}.items():
        reader = reader.option(k, v)
    ck = str(tmp_path / "ck")
    got = BatchCollector()
    q = (Pipeline([stage]).apply(reader.load()).writeStream.foreachBatch(got).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    assert q.awaitTermination(240)
    assert q.exception() is None
    batches = sorted(got.batches)
    assert len(batches) >= 3

    inputs = source_batches(kafka.consume_all(topic), ck, batches)
    for frame in inputs:                             # the key as Spark's CAST(key AS STRING) gives it
        frame["key"] = [k.decode() if d == "data" else None for k, d in zip(frame["key"], frame["kind"])]
    expected = Pipeline([stage]).run_local(inputs)
    for b, exp in zip(batches, expected):
        assert _rows(pd.DataFrame(got.batches[b])) == _rows(exp), f"batch {b}"
    final = _final_counts([pd.DataFrame(got.batches[b]) for b in batches])
    assert sum(final.values()) == 300
