"""Event-time progress: punctuation tracking and the Dataflow Model (windows, triggers,
accumulation modes). Pure Python, no Spark import; the Spark operator
``apply_windowing`` lives in :mod:`watermarks.spark` and is imported on first access.

Windows and aggregations are the shared vocabulary of :mod:`windowing`, re-exported here under
both names (``FixedWindows`` is ``windowing.TumblingWindow``, ``SumCombiner`` is
``windowing.Sum``, ...); custom window functions subclass :class:`WindowFn`."""

from watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from watermarks.driver import LateDataDropped, TriggerDriver
from watermarks.multi import MultiQueryDriver
from watermarks.triggers import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    AtCount,
    AtPeriod,
    AtWatermark,
    DefaultTrigger,
    OrFinally,
    Repeat,
    Repeatedly,
    RepeatUntil,
    SequenceOf,
    Trigger,
)
from watermarks.windows import GLOBAL_WINDOW, IntervalWindow, WindowFn
from windowing import (
    BEGINNING_OF_TIME_MS,
    END_OF_TIME_MS,
    M4,
    AggregateFunction,
    Combiner,
    Count,
    CountCombiner,
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    Max,
    MaxCombiner,
    Mean,
    MeanCombiner,
    Median,
    Min,
    MinCombiner,
    Quantile,
    SessionWindow,
    Sessions,
    SlidingWindow,
    SlidingWindows,
    Sum,
    SumCombiner,
    ToList,
    ToListCombiner,
    TumblingWindow,
)

__all__ = [
    # Dataflow Model: windows (the windowing vocabulary, Beam's names and the shared ones)
    "WindowFn", "IntervalWindow", "GlobalWindows", "FixedWindows", "SlidingWindows", "Sessions",
    "TumblingWindow", "SlidingWindow", "SessionWindow", "GlobalWindow",
    "GLOBAL_WINDOW", "BEGINNING_OF_TIME_MS", "END_OF_TIME_MS",
    # triggers (Beam names, then the paper's aliases)
    "Trigger", "AfterWatermark", "AfterCount", "AfterProcessingTime", "Repeatedly", "AfterEach",
    "AfterAny", "AfterAll", "OrFinally", "DefaultTrigger",
    "AtWatermark", "AtCount", "AtPeriod", "SequenceOf", "Repeat", "RepeatUntil",
    # panes, accumulation, aggregation, the driver
    "AccumulationMode", "TimestampCombiner", "OnTimeBehavior", "PaneTiming", "Pane",
    "AggregateFunction", "Combiner", "SumCombiner", "CountCombiner", "MeanCombiner", "MinCombiner",
    "MaxCombiner", "ToListCombiner", "Sum", "Count", "Mean", "Min", "Max", "M4", "Quantile", "Median", "ToList",
    "TriggerDriver", "MultiQueryDriver", "LateDataDropped",
]
# The Spark operator: `watermarks.apply_windowing` (or `from watermarks.spark import apply_windowing`)
# imports watermarks.spark, and so pyspark, on first access; it is kept out of __all__ so that
# `from watermarks import *` stays Spark-free.


def __getattr__(name: str):
    if name == "apply_windowing":
        from watermarks.spark import apply_windowing

        return apply_windowing
    raise AttributeError(f"module 'watermarks' has no attribute {name!r}")
