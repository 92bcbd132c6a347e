"""dataflow-kafka: order-aware stream processing for Spark Structured Streaming on Kafka.

One import for users::

    import dataflow_kafka as dk

    spark = dk.spark_session()                       # or dk.register(spark) on a session of yours
    events = spark.readStream.format("dataflow-kafka").option(...).load()
    per_second = dk.SlicerStage(key="key", value="amount", windows={"1s": dk.TumblingWindow(1_000)},
                                aggregations=[dk.Sum()])
    panes = dk.WindowingStage(key="key", value="sum", windows=dk.FixedWindows(60_000), aggregation=dk.Max(),
                              trigger=dk.AfterWatermark(early=dk.AfterCount(1)))
    out = per_second.then(panes).apply(events)

The names below are the public API; each lives in one subpackage (``dataflow_kafka.windowing``,
``dataflow_kafka.slicer``, ...), where the rest of that subpackage's API is. They are loaded on
first use, so ``import dataflow_kafka`` imports neither pyspark nor an engine.
"""

from __future__ import annotations

import importlib

#: public name -> the module that defines it
_EXPORTS = {
    # Spark: the data source and a session with it registered
    "register": "dataflow_kafka.datasource",
    "spark_session": "dataflow_kafka.datasource.session",
    # composing stages
    "Pipeline": "dataflow_kafka.keygroups.pipeline",
    "Stage": "dataflow_kafka.keygroups.pipeline",
    "Input": "dataflow_kafka.keygroups.stage",
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
    # windows (Beam's names are the same classes)
    "TumblingWindow": "dataflow_kafka.windowing.windows",
    "SlidingWindow": "dataflow_kafka.windowing.windows",
    "SessionWindow": "dataflow_kafka.windowing.windows",
    "GlobalWindow": "dataflow_kafka.windowing.windows",
    "FixedWindows": "dataflow_kafka.windowing.windows",
    "SlidingWindows": "dataflow_kafka.windowing.windows",
    "Sessions": "dataflow_kafka.windowing.windows",
    # aggregations
    "Sum": "dataflow_kafka.windowing.aggregations",
    "Count": "dataflow_kafka.windowing.aggregations",
    "Mean": "dataflow_kafka.windowing.aggregations",
    "Min": "dataflow_kafka.windowing.aggregations",
    "Max": "dataflow_kafka.windowing.aggregations",
    "Median": "dataflow_kafka.windowing.aggregations",
    "Quantile": "dataflow_kafka.windowing.aggregations",
    "M4": "dataflow_kafka.windowing.aggregations",
    "ToList": "dataflow_kafka.windowing.aggregations",
    # triggers (the Dataflow Model, Beam's names)
    "AfterWatermark": "dataflow_kafka.watermarks.triggers",
    "AfterCount": "dataflow_kafka.watermarks.triggers",
    "AfterProcessingTime": "dataflow_kafka.watermarks.triggers",
    "Repeatedly": "dataflow_kafka.watermarks.triggers",
    # metrics of a running query (StreamingQueryProgress)
    "progress_metrics": "dataflow_kafka.keygroups.metrics",
    # final results
    "current_windows": "dataflow_kafka.windowing.final",
    "UpsertWindows": "dataflow_kafka.windowing.final",
    # typed pipelines
    "Dag": "dataflow_kafka.traces.dag",
    # brokers
    "kafka_broker": "dataflow_kafka.brokers.launcher",
    "kafka_cluster": "dataflow_kafka.brokers.cluster",
    # the error root (the subclasses: dataflow_kafka.errors)
    "DataflowKafkaError": "dataflow_kafka.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dataflow_kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
