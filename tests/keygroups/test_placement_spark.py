"""Key groups placed evenly on the shuffle partitions (``keygroups.placement``) on real checkpoints:
a query refuses, at its first batch, a checkpoint written with the other layout (grouped by
key-group number, before 2026-11-29) or with another number of shuffle partitions, instead of
reading a key group's state as another's or starting from none; the layout a checkpoint was
written with restarts it."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import StreamingQueryException

from dataflow_kafka.keygroups import Pipeline, json_field
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.windowing import Count, TumblingWindow
from tests.support import now_ms

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _produce(kafka, topic: str, start: int, n: int) -> None:
    base = (now_ms() - 600_000) // 60_000 * 60_000
    kafka.produce(topic, [{"value": json.dumps({"user": f"u{i % 9}", "ts": base + i * 50}).encode(), "partition": i % 2}
                          for i in range(start, start + n)])


def _run(spark, kafka, topic: str, ck: str, **apply_kw):
    """One AvailableNow run of a 4-key-group count per user over ``topic``; the query's exception."""
    src = (spark.readStream.format("dataflow-kafka")
           .options(**{"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                       "eventTimeField": "ts"}).load())
    counts = SlicerStage(key={"user": json_field("user")}, value="offset", windows={"t": TumblingWindow(1_000)},
                         aggregations=[Count()], num_key_groups=4, name="counts")
    q = (Pipeline([counts]).apply(src, **apply_kw).writeStream.format("noop").option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(300)
    except StreamingQueryException:
        pass                                        # a failed query raises here; its exception is returned
    return q.exception()


def test_a_checkpoint_grouped_by_key_group_number_restarts_with_that_layout_only(spark, kafka, tmp_path):
    topic, ck = kafka.topic(2), str(tmp_path / "ck")
    _produce(kafka, topic, 0, 200)
    assert _run(spark, kafka, topic, ck, placement="by_number") is None
    _produce(kafka, topic, 200, 100)
    err = _run(spark, kafka, topic, ck)            # the default, even placement
    assert err is not None and "placement='by_number'" in str(err), err
    assert _run(spark, kafka, topic, ck, placement="by_number") is None


def test_a_checkpoint_refuses_another_number_of_shuffle_partitions(spark, kafka, tmp_path):
    topic, ck = kafka.topic(2), str(tmp_path / "ck")
    _produce(kafka, topic, 0, 200)
    before = spark.conf.get("spark.sql.shuffle.partitions")
    assert _run(spark, kafka, topic, ck) is None
    _produce(kafka, topic, 200, 100)
    spark.conf.set("spark.sql.shuffle.partitions", str(int(before) + 1))
    try:
        err = _run(spark, kafka, topic, ck)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    assert err is not None and "another number of shuffle partitions" in str(err), err
    assert _run(spark, kafka, topic, ck) is None


def test_an_unknown_placement_is_refused(spark, kafka):
    src = (spark.readStream.format("dataflow-kafka")
           .options(**{"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": "any"}).load())
    counts = SlicerStage(key="user", value="offset", windows={"t": TumblingWindow(1_000)}, aggregations=[Count()])
    with pytest.raises(ValueError, match="placement must be one of"):
        Pipeline([counts]).apply(src, placement="round_robin")
