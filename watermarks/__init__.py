"""Event-time progress: punctuation tracking and the Dataflow Model (windows, triggers,
accumulation modes). Pure Python, no Spark import."""

from watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from watermarks.combiners import (
    Combiner,
    CountCombiner,
    MaxCombiner,
    MeanCombiner,
    MinCombiner,
    SumCombiner,
    ToListCombiner,
)
from watermarks.driver import TriggerDriver
from watermarks.punctuation import PunctuationTracker
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
from watermarks.windows import (
    BEGINNING_OF_TIME_MS,
    END_OF_TIME_MS,
    GLOBAL_WINDOW,
    FixedWindows,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    WindowFn,
)

__all__ = [
    "PunctuationTracker",
    # Dataflow Model: windows
    "WindowFn", "IntervalWindow", "GlobalWindows", "FixedWindows", "SlidingWindows", "Sessions",
    "GLOBAL_WINDOW", "BEGINNING_OF_TIME_MS", "END_OF_TIME_MS",
    # triggers (Beam names, then the paper's aliases)
    "Trigger", "AfterWatermark", "AfterCount", "AfterProcessingTime", "Repeatedly", "AfterEach",
    "AfterAny", "AfterAll", "OrFinally", "DefaultTrigger",
    "AtWatermark", "AtCount", "AtPeriod", "SequenceOf", "Repeat", "RepeatUntil",
    # panes, accumulation, aggregation, the driver
    "AccumulationMode", "TimestampCombiner", "OnTimeBehavior", "PaneTiming", "Pane",
    "Combiner", "SumCombiner", "CountCombiner", "MeanCombiner", "MinCombiner", "MaxCombiner",
    "ToListCombiner", "TriggerDriver",
]
