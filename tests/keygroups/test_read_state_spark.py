"""``read_state`` on a real checkpoint: a composed query (optimistic per-user runs -> per-page slicer
windows -> Dataflow panes, the last two fused) over Kafka, stopped by AvailableNow with its last
windows still open (no end of input). What Spark's state reader gives for our operators (one row per
key group: the state as bytes) decodes, per stage, to the same items and watermarks as the local run
of the same micro-batches (rebuilt from the topic and the offset log) leaves: after the last batch and
after an earlier one (``batch_id=``)."""

from __future__ import annotations

import random

import pandas as pd

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.state_view import local_state, read_state
from dataflow_kafka.optimistic import StatefulMap
from dataflow_kafka.optimistic.stage import OptimisticStage
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, Max, Sum, SlidingWindow, TumblingWindow
from tests.keygroups.test_composed_spark import PARTITIONS, _click, _clicks, _depth, _depth_columns, _user
from tests.support import BatchCollector, now_ms, source_batches

DELAY_MS = 1_000


def _pipeline() -> Pipeline:
    runs = OptimisticStage(stage=StatefulMap(_depth, key=_user, initial=None), num_key_groups=2, from_row=_click,
                           output=_depth_columns, output_key=("user",), name="runs",
                           output_schema=(("user", "string"), ("page", "string"), ("run", "bigint")))
    pages = SlicerStage(key="page", value="run", windows={"s": SlidingWindow(2_000, 500), "t": TumblingWindow(1_000)},
                        aggregations=[Count(), Max()], allowed_lateness_ms=500, num_key_groups=2, name="pages")
    panes = WindowingStage(key="page", value="count", select={"query_id": "t"}, windows=TumblingWindow(3_000),
                           trigger=AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
                           accumulation_mode="accumulating", allowed_lateness_ms=1_000, aggregations=[Sum()],
                           num_key_groups=2, name="panes")
    return Pipeline([runs, pages, panes])


def _rows(view) -> tuple[list, list]:
    def plain(x):
        return None if x is None or x is pd.NA or (isinstance(x, float) and x != x) else x

    items = sorted((tuple(plain(v) for v in r) for r in view.items.itertuples(index=False)), key=repr)
    marks = sorted((tuple(plain(v) for v in r) for r in view.watermarks.itertuples(index=False)), key=repr)
    return items, marks


def test_read_state_of_a_stopped_composed_query_equals_its_local_run(spark, kafka, tmp_path):
    topic = kafka.topic(PARTITIONS)
    base = (now_ms() - 60_000) // 60_000 * 60_000
    kafka.produce(topic, _clicks(base, 0, 420, random.Random(5)))
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                 "eventTimeField": "ts", "maxOffsetsPerTrigger": "140", "watermarkDelayMs": str(DELAY_MS)}.items():
        reader = reader.option(k, v)
    pipe = _pipeline()
    assert [len(op) for op in pipe.plan()] == [1, 2]
    ck = str(tmp_path / "ck")
    got = BatchCollector()
    q = pipe.apply(reader.load()).writeStream.foreachBatch(got).option("checkpointLocation", ck) \
        .trigger(availableNow=True).start()
    assert q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    batches = sorted(got.batches)
    assert len(batches) >= 3, batches

    raw = spark.read.format("statestore").option("operatorId", 0).option("stateVarName", "operator").load(ck)
    assert [f.name for f in raw.schema] == ["key", "value", "partition_id"]          # Spark's own view: bytes
    assert [f.name for f in raw.schema["key"].dataType] == ["key_group"]
    assert [f.name for f in raw.schema["value"].dataType] == ["blob"]

    frames = source_batches(kafka.consume_all(topic), ck, batches, delay_ms=DELAY_MS, topic=topic)
    view = read_state(ck, pipe, spark)
    assert view.batch_id == batches[-1]
    states: dict = {}
    pipe.run_local(frames, states=states)
    assert _rows(view) == _rows(local_state(pipe, states))

    # the stopped query holds open windows, pane state and records held for replay
    pending = view.table("pages", "window")
    assert (pending["state"] == "pending").any() and (pending["state"] == "emitted").any()
    assert len(view.of("pages", "slice")) and len(view.of("panes", "window")) and len(view.of("runs", "log"))
    assert len(view.of("runs", "held")) > 0                  # the barrier: outputs above its release bound
    assert set(view.watermarks["operator"]) == {"runs", "pages > panes"}

    mid = batches[len(batches) // 2]
    earlier = read_state(ck, pipe, spark, batch_id=mid)
    states = {}
    pipe.run_local(frames[:batches.index(mid) + 1], states=states)
    assert earlier.batch_id == mid
    assert _rows(earlier) == _rows(local_state(pipe, states))
    assert _rows(earlier) != _rows(view)
