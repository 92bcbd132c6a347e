"""One vocabulary of windows and aggregations for both engines (no Spark import).

The slicer (:mod:`slicer`, Scotty) and the Dataflow driver (:mod:`watermarks`) accept the same
definitions everywhere they take windows or aggregations; each compiles them into its own
runtime. Windows (:mod:`windowing.windows`): :class:`TumblingWindow`, :class:`SlidingWindow`,
:class:`SessionWindow`, :class:`GlobalWindow`, what their bounds count (:class:`Measure`), and a
JSON form (:func:`window_from_json`; every window class registers its ``type`` name,
:func:`window_types`, and declares the :class:`WindowShape` the engines compile it by).
Aggregations (:mod:`windowing.aggregations`): :class:`Sum`, :class:`Count`, :class:`Mean`,
:class:`Min`, :class:`Max`, :class:`M4`, :class:`Quantile`, :class:`Median`, :class:`ToList`,
user-defined ones as lift / combine / lower (:class:`AggregateFunction`) or as a Beam-style
:class:`Combiner` (an adapter to lift / combine / lower). Other systems' names (Beam's
``FixedWindows``, ``SumCombiner``, ...; Scotty's ``WindowMeasure``) live in
:mod:`dataflow_kafka.compat`; importing them from here still works, with a ``DeprecationWarning``.

Window queries added and removed at runtime (:mod:`windowing.commands`): the control-topic
commands ``{"op": "add_window", "id": ..., "window": {...}}`` and ``{"op": "remove_window",
"id": ...}`` parse into :class:`AddWindow` / :class:`RemoveWindow` (:func:`parse_command`),
which every engine applies with ``apply(command)``; query ids are strings.

Engine-specific extensions stay with their engine: the slicer's punctuation, slide-by-tuple,
fixed-band and user-defined context-free / context-aware windows, the Dataflow driver's custom
``WindowFn``.

Example
-------
>>> from dataflow_kafka.windowing import SlidingWindow, TumblingWindow, Sum, Mean
>>> windows = {"minute": SlidingWindow(60_000, 10_000), "5s": TumblingWindow(5_000)}
>>> [w.to_json()["type"] for w in windows.values()], [a.name for a in (Sum(), Mean())]
(['sliding', 'tumbling'], ['sum', 'mean'])
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.windowing")  # one name per file: never `import windowing`

from dataflow_kafka.deprecation import moved_names
from dataflow_kafka.windowing.aggregations import (
    M4, AggregateFunction, Combiner, Count, Max, Mean, Median, Min, Quantile, Sum, ToList, Vectorised,
)
from dataflow_kafka.windowing.aggregations import MOVED as _MOVED_AGGREGATIONS
from dataflow_kafka.windowing.commands import AddWindow, RemoveWindow, WindowCommand, parse_command
from dataflow_kafka.windowing.windows import (
    BEGINNING_OF_TIME_MS, END_OF_TIME_MS, GlobalWindow, Measure, SessionWindow, SlidingWindow, TumblingWindow, Window,
    WindowShape, window_from_json, window_types,
)
from dataflow_kafka.windowing.windows import MOVED as _MOVED_WINDOWS

__all__ = [
    "Window", "TumblingWindow", "SlidingWindow", "SessionWindow", "GlobalWindow", "window_from_json", "Measure",
    "WindowShape", "window_types",
    "BEGINNING_OF_TIME_MS", "END_OF_TIME_MS",
    "AggregateFunction", "Combiner", "Vectorised", "Sum", "Count", "Mean", "Min", "Max", "M4", "Quantile", "Median",
    "ToList",
    "AddWindow", "RemoveWindow", "WindowCommand", "parse_command",
]

__getattr__ = moved_names(__name__, {**_MOVED_WINDOWS, **_MOVED_AGGREGATIONS})
