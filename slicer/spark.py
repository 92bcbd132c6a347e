"""General stream slicing on Spark: :func:`slice_windows`, one :class:`~slicer.stage.SlicerStage`.

A one-stage :class:`keygroups.Pipeline` over a stream read with ``format("dataflow-kafka")``
(Scotty §4-9 on Spark): many concurrent window queries per key at the cost of one slice update
per record. Keys are hashed into ``num_key_groups`` key groups; each group's keys live in one
state value (a table of (key, slice) partial aggregates when the windows are tumbling or sliding
time windows and the aggregations distributive or algebraic, else one engine per key); event
time is the source's punctuations (min over Kafka partitions); window queries can be added and
removed while the query runs (control-topic commands, ``docs/stages.md``). To chain it with other
stages, use :class:`~slicer.stage.SlicerStage` in a pipeline::

    from dataflow_kafka.slicer.spark import slice_windows
    from dataflow_kafka.windowing import M4, SlidingWindow, Sum, TumblingWindow

    src = spark.readStream.format("dataflow-kafka").option("subscribe", "sensors") ... .load()
    out = slice_windows(src, key="CAST(key AS STRING)",
                        windows={"minute": SlidingWindow(60_000, 10_000), "5s": TumblingWindow(5_000)},
                        aggregations=[Sum(), M4()],
                        value="get_json_object(CAST(value AS STRING), '$.amount')",
                        allowed_lateness_ms=30_000)

Output: rows of the stage layer's contract (``docs/stages.md``): ``kind = 'data'`` rows are
window results (the key column(s), ``query_id``, ``window_start_ms``, ``window_end_ms``,
``update``, ``measure``, one column per aggregation; see :mod:`slicer.stage`; windows with records
only: the engine's ``emission="compact"``, not its Scotty default), ``dropped`` rows
count late and null records per key and batch, ``punctuation`` rows carry each key group's
output watermark.

Why not Spark's watermark (``withWatermark``)? It is one global value (max event time seen minus
a delay, applied a batch late), and in ``timeMode="EventTime"`` Spark drops rows behind it
before a processor sees them, so late records would only show in an aggregate metric and the
result would depend on how partitions interleave in a micro-batch. The punctuations are per
partition, recorded in the offsets, and give the same result on replay; "max event time minus a
delay" is the source option ``watermarkDelayMs``.
"""

from __future__ import annotations

from typing import Any, Iterable

from dataflow_kafka.slicer.stage import SlicerStage

__all__ = ["slice_windows"]


def slice_windows(df, key: Any, windows: Any, aggregations: Iterable, value="try_cast(CAST(value AS STRING) AS DOUBLE)",
                  num_key_groups: int = 8, allowed_lateness_ms: int = 1000, stream_order: str = "out_of_order",
                  store: str = "lazy", idle_timeout_ms: int | None = None, output_watermark: str = "complete",
                  name: str = "windows", pack_source: bool = True):
    """Window aggregates per key of a ``format("dataflow-kafka")`` stream (see module docstring).

    Parameters as :class:`~slicer.stage.SlicerStage`; ``idle_timeout_ms``: the idle-partition
    policy of the punctuation tracker (``None``: an idle partition holds the watermark);
    ``pack_source``: pack each task's rows of a key group into one Arrow blob before the shuffle.
    """
    from dataflow_kafka.keygroups import Pipeline

    stage = SlicerStage(key=key, value=value, windows=windows, aggregations=list(aggregations),
                        allowed_lateness_ms=allowed_lateness_ms, num_key_groups=num_key_groups,
                        stream_order=stream_order, store=store, output_watermark=output_watermark, name=name)
    return Pipeline([stage]).apply(df, idle_timeout_ms=idle_timeout_ms, pack_source=pack_source)
