"""General stream slicing for window aggregation (Traub et al., "Scotty: General and Efficient
Open-Source Window Aggregation for Stream Processing Systems", TODS 2021, §4-9).

Many concurrent window queries over one stream share one set of *slices*: non-overlapping
chunks of the stream with one partial aggregate each. Every record updates exactly one
slice, whatever the number of windows; a window's aggregate combines its slices when it is
emitted. This package is the pure engine (numpy, no Spark):

* :class:`SlicingWindowOperator` - the facade: ``add_window``, ``add_aggregation``,
  ``process_element(s)``, ``process_watermark``, ``set_allowed_lateness``, ``to_bytes``.
* Windows and aggregations are the shared vocabulary of :mod:`dataflow_kafka.windowing` (import them
  from there):
  :class:`TumblingWindow`, :class:`SlidingWindow` (both with ``measure="count"`` for windows of
  records), :class:`SessionWindow`, :class:`GlobalWindow`; :class:`Sum`, :class:`Count`,
  :class:`Min`, :class:`Max`, :class:`Mean`, :class:`M4`, :class:`Median`, :class:`Quantile`,
  :class:`ToList`, user-defined lift / combine / lower (:class:`AggregateFunction`, + invert,
  commutativity) or Beam-style :class:`Combiner`.
* Slicer-only windows (:mod:`slicer.windows`, :mod:`slicer.context_windows`,
  :mod:`slicer.frames`): fixed band, punctuation, slide-by-tuple, threshold frames; user-defined
  types via :class:`ContextFreeWindow`,
  :class:`ForwardContextFreeWindow`, :class:`ForwardContextAwareWindow`.

Conventions: windows are ``[start, end)`` (start inclusive, end exclusive); times are
integer milliseconds; a window is emitted by the first watermark at or after its end, and
emitted again (``update=True``) when records within the allowed lateness change it; an emitted
window whose extent they change (sessions extended or fused, ...) is retracted first
(``retraction=True``; :mod:`slicer.results`). By
default windows come as Scotty reports them (``emission="scotty"``, docs/semantics.md): per
query (context-free ones first, each in registration order), then by start; empty tumbling
and sliding windows without a value, none of them starting before 0. ``emission="compact"`` (the
Spark stage's) reports windows with records only, any start, by end.

Example
-------
>>> import numpy as np
>>> from dataflow_kafka.windowing import M4, SessionWindow, SlidingWindow, Sum
>>> op = SlicingWindowOperator({"sliding": SlidingWindow(1000, 500), "session": SessionWindow(300)},
...                            [Sum(), M4()], allowed_lateness_ms=500)
>>> op.process_elements(np.array([1.0, 2.0, 3.0]), np.array([100, 200, 2100]))
>>> [(r.query_id, r.start, r.end, r.values[0]) for r in op.process_watermark(2500)]  # doctest: +NORMALIZE_WHITESPACE
[('sliding', 0, 1000, 3.0), ('sliding', 500, 1500, None), ('sliding', 1000, 2000, None),
 ('sliding', 1500, 2500, 3.0), ('session', 100, 500, 3.0), ('session', 2100, 2400, 3.0)]
>>> compact = SlicingWindowOperator({"sliding": SlidingWindow(1000, 500)}, [Sum()], emission="compact")
>>> compact.process_elements(np.array([1.0, 2.0, 3.0]), np.array([100, 200, 2100]))
>>> [(r.start, r.end, r.value) for r in compact.process_watermark(2500)]
[(-500, 500, 3.0), (0, 1000, 3.0), (1500, 2500, 3.0)]

On Spark
--------
:class:`slicer.stage.SlicerStage` runs this engine per key group in the stage layer
(``docs/stages.md``); :func:`slicer.spark.slice_windows` (also ``slicer.slice_windows``, imported
lazily: ``import slicer`` does not import pyspark) is the one-stage pipeline.
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.slicer")  # one name per file: never `import slicer`

from dataflow_kafka.slicer.context_windows import (
    ContextAwareWindow, ForwardContextAwareWindow, ForwardContextFreeWindow, PunctuationWindow, SlideByTupleWindow,
    WindowContext,
)
from dataflow_kafka.slicer.frames import ThresholdFrame
from dataflow_kafka.slicer.operator import SlicingWindowOperator, StreamOrder
from dataflow_kafka.slicer.results import WindowResult, WindowResults
from dataflow_kafka.slicer.windows import ContextFreeWindow, FixedBandWindow

__all__ = [
    "SlicingWindowOperator", "StreamOrder", "WindowResult", "WindowResults", "FixedBandWindow",
    "PunctuationWindow", "SlideByTupleWindow", "ThresholdFrame", "ContextFreeWindow", "ContextAwareWindow",
    "ForwardContextFreeWindow", "ForwardContextAwareWindow", "WindowContext",
]


def __getattr__(name):
    # The Spark operator imports pyspark; load it only when asked for (``import slicer`` stays Spark-free).
    if name == "slice_windows":
        from dataflow_kafka.slicer import spark

        return getattr(spark, name)
    raise AttributeError(f"module 'slicer' has no attribute {name!r}")
