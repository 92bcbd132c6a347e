"""The Dataflow Model paper's trigger names (its section 2.4), for code written
after the paper: each is Beam's (dataflow-kafka's) trigger, or builds one.

>>> SequenceOf(RepeatUntil(AtPeriod(60_000), AtWatermark()), Repeat(AtWatermark()))   # Figure 13
AfterEach(OrFinally(Repeatedly(AfterProcessingTime(align_ms=60000)), AfterWatermark()), Repeatedly(AfterWatermark()))
"""

from dataflow_kafka.watermarks.triggers import (
    AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, OrFinally, Repeatedly, Trigger,
)

__all__ = ["AtWatermark", "AtCount", "AtPeriod", "SequenceOf", "Repeat", "RepeatUntil"]

#: ``AtWatermark()``: :class:`~watermarks.AfterWatermark`.
AtWatermark = AfterWatermark
#: ``AtCount(n)``: :class:`~watermarks.AfterCount`.
AtCount = AfterCount
#: ``SequenceOf(t1, t2, ...)``: :class:`~watermarks.AfterEach`.
SequenceOf = AfterEach
#: ``Repeat(t)``: :class:`~watermarks.Repeatedly`.
Repeat = Repeatedly


def AtPeriod(period_ms: int) -> AfterProcessingTime:  # noqa: N802 - the paper's name
    """``AtPeriod(p)``: fire at the next periodic processing-time boundary,
    ``AfterProcessingTime(align_ms=p)``."""
    return AfterProcessingTime(align_ms=period_ms)


def RepeatUntil(trigger: Trigger, until: Trigger) -> OrFinally:  # noqa: N802 - the paper's name
    """``RepeatUntil(t, until)``: ``OrFinally(Repeatedly(t), until)``."""
    return OrFinally(Repeatedly(trigger), until)
