"""Apache Beam's names (``apache_beam.transforms.window``, ``apache_beam.transforms.core``) for
dataflow-kafka's windows and aggregations: the same classes under Beam's names.

Beam's trigger names (``AfterWatermark``, ``AfterCount``, ``AfterProcessingTime``, ``Repeatedly``,
``AfterEach``, ``AfterAny``, ``AfterAll``, ``OrFinally``, ``DefaultTrigger``) are dataflow-kafka's
own: import them from ``dataflow_kafka``. Beam's ``SlidingWindows(size, period)`` keyword
``period_ms`` and the JSON types ``fixed`` and ``sessions`` are accepted by the canonical classes.

>>> import dataflow_kafka as dk
>>> FixedWindows(60_000) == dk.TumblingWindow(60_000), SumCombiner is dk.Sum, CombineFn is dk.Combiner
(True, True, True)
"""

from dataflow_kafka.windowing.aggregations import Combiner, Count, Max, Mean, Min, Sum, ToList
from dataflow_kafka.windowing.windows import GlobalWindow, SessionWindow, SlidingWindow, TumblingWindow

__all__ = ["FixedWindows", "SlidingWindows", "Sessions", "GlobalWindows", "SumCombiner", "CountCombiner",
           "MeanCombiner", "MinCombiner", "MaxCombiner", "ToListCombiner", "CombineFn"]

#: Beam's ``FixedWindows``: :class:`~windowing.TumblingWindow`.
FixedWindows = TumblingWindow
#: Beam's ``SlidingWindows`` (``period_ms`` is Beam's ``period``): :class:`~windowing.SlidingWindow`.
SlidingWindows = SlidingWindow
#: Beam's ``Sessions``: :class:`~windowing.SessionWindow`.
Sessions = SessionWindow
#: Beam's ``GlobalWindows``: :class:`~windowing.GlobalWindow`.
GlobalWindows = GlobalWindow
#: Beam's ``CombineFn``: :class:`~windowing.Combiner` (an aggregation written with Beam's methods).
CombineFn = Combiner
SumCombiner = Sum
CountCombiner = Count
MeanCombiner = Mean
MinCombiner = Min
MaxCombiner = Max
ToListCombiner = ToList
