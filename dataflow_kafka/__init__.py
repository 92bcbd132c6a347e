"""dataflow-kafka: order-aware stream processing for Spark Structured Streaming on Kafka.

One import for users::

    import dataflow_kafka as dk

    spark = dk.spark_session()                       # or dk.register(spark) on a session of yours
    events = spark.readStream.format("dataflow-kafka").option(...).load()
    per_second = dk.SlicerStage(key="key", value="amount", windows={"1s": dk.TumblingWindow(1_000)},
                                aggregations=[dk.Sum()])
    panes = dk.WindowingStage(key="key", value="sum", windows=dk.TumblingWindow(60_000), aggregations=[dk.Max()],
                              trigger=dk.AfterWatermark(early=dk.AfterCount(1)))
    out = per_second.then(panes).apply(events)
    table = dk.current_results(local_frames, panes)      # the current result per window, any stage

The names below are the public API, one name per concept (docs/ARCHITECTURE.md, "Vocabulary"),
with what a new stage, window or aggregation extends; each lives in one subpackage
(``dataflow_kafka.windowing``, ``dataflow_kafka.slicer``, ...), where the rest of that
subpackage's API is. They are loaded on first use, so ``import dataflow_kafka`` imports neither
pyspark nor an engine. Other systems' names (Beam's ``FixedWindows``, Scotty's ``WindowMeasure``,
the Dataflow paper's ``AtWatermark``) are in :mod:`dataflow_kafka.compat`.
"""

from __future__ import annotations

import importlib

#: public name -> the module that defines it
_EXPORTS = {
    # Spark: the data source and a session with it registered
    "register": "dataflow_kafka.datasource",
    "spark_session": "dataflow_kafka.datasource.session",
    # composing stages, and what a new stage extends
    "Pipeline": "dataflow_kafka.keygroups.pipeline",
    "Stage": "dataflow_kafka.keygroups.pipeline",
    "StageInput": "dataflow_kafka.keygroups.stage",
    "StageOutput": "dataflow_kafka.keygroups.stage",
    "Dropped": "dataflow_kafka.keygroups.stage",
    "Input": "dataflow_kafka.keygroups.stage",
    "PythonRouter": "dataflow_kafka.keygroups.stage",
    "Computed": "dataflow_kafka.keygroups.computed",
    # a stopped query's state: per stage and key its windows, slices, held records, watermarks
    "read_state": "dataflow_kafka.keygroups.state_view",
    # the stage adapters of the engines
    "SlicerStage": "dataflow_kafka.slicer.stage",
    "WindowingStage": "dataflow_kafka.watermarks.stage",
    "OptimisticStage": "dataflow_kafka.optimistic.stage",
    "TraceStage": "dataflow_kafka.traces.stage",
    "WindowJoinStage": "dataflow_kafka.joins.stage",
    "IntervalJoinStage": "dataflow_kafka.joins.stage",
    "JoinInput": "dataflow_kafka.joins.stage",
    # windows, what they count, and what a new window type extends
    "Window": "dataflow_kafka.windowing.windows",
    "WindowShape": "dataflow_kafka.windowing.windows",
    "Measure": "dataflow_kafka.windowing.windows",
    "TumblingWindow": "dataflow_kafka.windowing.windows",
    "SlidingWindow": "dataflow_kafka.windowing.windows",
    "SessionWindow": "dataflow_kafka.windowing.windows",
    "GlobalWindow": "dataflow_kafka.windowing.windows",
    # aggregations, and what a new aggregation extends
    "AggregateFunction": "dataflow_kafka.windowing.aggregations",
    "Combiner": "dataflow_kafka.windowing.aggregations",
    "Vectorised": "dataflow_kafka.windowing.aggregations",
    "Sum": "dataflow_kafka.windowing.aggregations",
    "Count": "dataflow_kafka.windowing.aggregations",
    "Mean": "dataflow_kafka.windowing.aggregations",
    "Min": "dataflow_kafka.windowing.aggregations",
    "Max": "dataflow_kafka.windowing.aggregations",
    "Median": "dataflow_kafka.windowing.aggregations",
    "Quantile": "dataflow_kafka.windowing.aggregations",
    "M4": "dataflow_kafka.windowing.aggregations",
    "ToList": "dataflow_kafka.windowing.aggregations",
    # triggers (the Dataflow Model, Beam's names) and their base
    "Trigger": "dataflow_kafka.watermarks.triggers",
    "AfterWatermark": "dataflow_kafka.watermarks.triggers",
    "AfterCount": "dataflow_kafka.watermarks.triggers",
    "AfterProcessingTime": "dataflow_kafka.watermarks.triggers",
    "Repeatedly": "dataflow_kafka.watermarks.triggers",
    "AfterEach": "dataflow_kafka.watermarks.triggers",
    "AfterAny": "dataflow_kafka.watermarks.triggers",
    "AfterAll": "dataflow_kafka.watermarks.triggers",
    "OrFinally": "dataflow_kafka.watermarks.triggers",
    "DefaultTrigger": "dataflow_kafka.watermarks.triggers",
    # final results, of every stage
    "current_results": "dataflow_kafka.windowing.final",
    # metrics of a running query (StreamingQueryProgress)
    "progress_metrics": "dataflow_kafka.keygroups.metrics",
    "UpsertWindows": "dataflow_kafka.windowing.final",
    # typed pipelines
    "Dag": "dataflow_kafka.traces.dag",
    # brokers
    "kafka_broker": "dataflow_kafka.brokers.launcher",
    "kafka_cluster": "dataflow_kafka.brokers.cluster",
    # the error root (the subclasses: dataflow_kafka.errors)
    "DataflowKafkaError": "dataflow_kafka.errors",
}

#: Names the root exported before, served with a DeprecationWarning from their one home.
_MOVED = {
    "FixedWindows": ("dataflow_kafka.compat.beam", "FixedWindows", "it is Beam's name for TumblingWindow"),
    "SlidingWindows": ("dataflow_kafka.compat.beam", "SlidingWindows", "it is Beam's name for SlidingWindow"),
    "Sessions": ("dataflow_kafka.compat.beam", "Sessions", "it is Beam's name for SessionWindow"),
    "current_windows": ("dataflow_kafka.windowing.final", "current_windows",
                        "dk.current_results is the final-results helper of every stage, joins included"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        if name in _MOVED:
            from dataflow_kafka.deprecation import Moved, moved_names

            return moved_names(__name__, {name: Moved(*_MOVED[name])}, stacklevel=3)(name)
        raise AttributeError(f"module 'dataflow_kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
