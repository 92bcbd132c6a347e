"""Event-time progress: punctuation tracking and the Dataflow Model (windows, triggers,
accumulation modes). Pure Python, no Spark import; the Spark operator
``apply_windowing`` lives in :mod:`watermarks.spark` and is imported on first access.

Windows and aggregations are the shared vocabulary of :mod:`dataflow_kafka.windowing`, under both
names (``FixedWindows`` is ``TumblingWindow``, ``SumCombiner`` is ``Sum``, ...): import them from
there; custom window functions subclass :class:`WindowFn`."""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.watermarks")  # one name per file: never `import watermarks`

from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from dataflow_kafka.watermarks.driver import LateDataDropped, TriggerDriver
from dataflow_kafka.watermarks.multi import MultiQueryDriver
from dataflow_kafka.watermarks.triggers import (
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
from dataflow_kafka.watermarks.windows import GLOBAL_WINDOW, IntervalWindow, WindowFn

__all__ = [
    "WindowFn", "IntervalWindow", "GLOBAL_WINDOW", "Trigger", "AfterWatermark", "AfterCount",
    "AfterProcessingTime", "Repeatedly", "AfterEach", "AfterAny", "AfterAll", "OrFinally", "DefaultTrigger",
    "AtWatermark", "AtCount", "AtPeriod", "SequenceOf", "Repeat", "RepeatUntil", "AccumulationMode",
    "TimestampCombiner", "OnTimeBehavior", "PaneTiming", "Pane", "TriggerDriver", "MultiQueryDriver",
    "LateDataDropped",
]
# The Spark operator: `watermarks.apply_windowing` (or `from watermarks.spark import apply_windowing`)
# imports watermarks.spark, and so pyspark, on first access; it is kept out of __all__ so that
# `from watermarks import *` stays Spark-free.


def __getattr__(name: str):
    if name == "apply_windowing":
        from dataflow_kafka.watermarks.spark import apply_windowing

        return apply_windowing
    raise AttributeError(f"module 'watermarks' has no attribute {name!r}")
