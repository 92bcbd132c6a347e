"""The Dataflow Model on Spark: :func:`apply_windowing`, one :class:`~watermarks.stage.WindowingStage`.

A one-stage :class:`keygroups.Pipeline` over a stream read with ``format("dataflow-kafka")``: keys
are hashed into ``num_key_groups`` key groups, each keeps one :class:`~watermarks.MultiQueryDriver`
(all its keys) in Spark state, and every micro-batch applies the batch's window commands,
advances processing time (recorded in the source offset), adds the elements per key in Kafka
order, and advances the watermark (min over Kafka partitions' punctuations). A micro-batch
replayed after a crash sees the same elements, watermark and processing time and fires the same
panes. To chain it with other stages, use :class:`~watermarks.stage.WindowingStage` in a pipeline.

Output: rows of the stage layer's contract (:mod:`keygroups.contract`, ``docs/stages.md``):
``kind = 'data'`` rows are panes (the key column, ``query_id``, ``window_start_ms``,
``window_end_ms``, ``pane_index``, ``timing``, ``is_first``, ``is_last``, ``is_retraction``, a
column per aggregation, ``event_time_ms`` = the pane's output timestamp; ``partition`` is the key
group and ``offset`` the emission order in it: a retraction comes before the pane replacing it);
``dropped`` rows count records not used (``late``, ``closed``, ``null``), per key and batch;
``punctuation`` rows carry each key group's output watermark.

Example::

    from dataflow_kafka.watermarks import AfterCount, AfterWatermark
    from dataflow_kafka.watermarks.spark import apply_windowing
    from dataflow_kafka.windowing import Sum, TumblingWindow

    src = (spark.readStream.format("dataflow-kafka")
           .option("kafka.bootstrap.servers", "localhost:9092").option("subscribe", "scores")
           .option("eventTimeField", "ts").load())
    out = apply_windowing(src, key="CAST(key AS STRING)",
                          value="CAST(get_json_object(CAST(value AS STRING), '$.score') AS LONG)",
                          windows=TumblingWindow(60_000), trigger=AfterWatermark(early=AfterCount(100),
                          late=AfterCount(1)), accumulation_mode="accumulating",
                          allowed_lateness_ms=600_000, aggregations=[Sum()])
    out.where("kind = 'data'").writeStream.format("console").option("checkpointLocation", "/tmp/ck").start()
"""

from __future__ import annotations

from typing import Any

from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, TimestampCombiner
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.watermarks.triggers import DefaultTrigger, Trigger

__all__ = ["apply_windowing"]


def apply_windowing(
    df,
    key: Any,
    value: str,
    windows: Any,
    trigger: Trigger | None = None,
    accumulation_mode: AccumulationMode | str = AccumulationMode.DISCARDING,
    allowed_lateness_ms: int = 0,
    timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW,
    aggregations: Any = None,
    num_key_groups: int = 8,
    on_time_behavior: OnTimeBehavior | str = OnTimeBehavior.FIRE_ALWAYS,
    idle_timeout_ms: int | None = None,
    history_ms: int | None = None,
    output_watermark: str = "complete",
    name: str = "windowing",
    aggregation: Any = None,
):
    """Windows, triggers and accumulation over a ``dataflow-kafka`` stream; rows of the contract.

    Parameters as :class:`~watermarks.stage.WindowingStage` (``key``: column name(s) or SQL
    expression(s); ``value``: SQL expression; ``windows``: a :mod:`windowing` window, a list or a
    dict ``{query id: window}``; ``aggregations``: a list of :mod:`windowing` aggregations, default
    ``[ToList()]``; ``aggregation=``: one, deprecated). ``idle_timeout_ms``: leave Kafka partitions
    idle for this long (batch processing time) out of the low watermark (:class:`keygroups.PunctuationTracker`).
    """
    from dataflow_kafka.keygroups import Pipeline

    stage = WindowingStage(key=key, value=value, windows=windows, trigger=trigger or DefaultTrigger(),
                           accumulation_mode=accumulation_mode, allowed_lateness_ms=allowed_lateness_ms,
                           timestamp_combiner=timestamp_combiner, aggregations=aggregations, aggregation=aggregation,
                           on_time_behavior=on_time_behavior, history_ms=history_ms,
                           num_key_groups=num_key_groups, output_watermark=output_watermark, name=name)
    return Pipeline([stage]).apply(df, idle_timeout_ms=idle_timeout_ms)
