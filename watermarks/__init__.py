"""Event-time progress: punctuation tracking and the Dataflow Model (windows, triggers,
accumulation modes). Pure Python, no Spark import; the Spark operator
``apply_windowing`` lives in :mod:`watermarks.spark` and is imported on first access.

Windows and aggregations are the shared vocabulary of :mod:`dataflow_kafka.windowing`: import them
from there; custom window functions subclass :class:`WindowFn`. Triggers have Beam's names; the
Dataflow paper's (``AtWatermark``, ``SequenceOf``, ...) live in
:mod:`dataflow_kafka.compat.dataflow_model` (importing them from here still works, with a
``DeprecationWarning``)."""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.watermarks")  # one name per file: never `import watermarks`

from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from dataflow_kafka.watermarks.driver import LateDataDropped, TriggerDriver
from dataflow_kafka.watermarks.multi import MultiQueryDriver
from dataflow_kafka.deprecation import moved_names
from dataflow_kafka.watermarks.triggers import (
    MOVED,
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    DefaultTrigger,
    OrFinally,
    Repeatedly,
    Trigger,
)
from dataflow_kafka.watermarks.windows import GLOBAL_WINDOW, IntervalWindow, WindowFn

__all__ = [
    "WindowFn", "IntervalWindow", "GLOBAL_WINDOW", "Trigger", "AfterWatermark", "AfterCount",
    "AfterProcessingTime", "Repeatedly", "AfterEach", "AfterAny", "AfterAll", "OrFinally", "DefaultTrigger",
    "AccumulationMode",
    "TimestampCombiner", "OnTimeBehavior", "PaneTiming", "Pane", "TriggerDriver", "MultiQueryDriver",
    "LateDataDropped",
]
# The Spark operator: `watermarks.apply_windowing` (or `from watermarks.spark import apply_windowing`)
# imports watermarks.spark, and so pyspark, on first access; it is kept out of __all__ so that
# `from watermarks import *` stays Spark-free.


_moved = moved_names(__name__, MOVED, stacklevel=3)


def __getattr__(name: str):
    if name == "apply_windowing":
        from dataflow_kafka.watermarks.spark import apply_windowing

        return apply_windowing
    return _moved(name)
