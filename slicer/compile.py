"""Shared definitions into the slicer's runtime: specs users write, compiled by the engine.

:func:`compile_window` turns a :mod:`windowing` window into the runtime window the operator
slices by (Scotty §5.4.2's window interface), by the window's ``shape`` (:data:`RUNTIMES`, one
entry per :class:`~windowing.windows.WindowShape`), and passes the slicer-only extensions
through; :func:`kernel_for` picks the kernel of an aggregation from its ``vectorised`` form
(§5.4.1): its components' kinds (:mod:`windowing.components`), never its type.

>>> from dataflow_kafka.windowing import SlidingWindow, SessionWindow
>>> compile_window(SlidingWindow(1000, 250))
PeriodicWindow(measure=<Measure.TIME: 'time'>, size=1000, slide=250, offset=0)
>>> compile_window(SessionWindow(300))
SessionGapWindow(gap=300)
"""

from __future__ import annotations

from typing import Any, Callable

from dataflow_kafka.slicer._kernels import ComponentKernel, HolisticKernel, Kernel, PythonKernel
from dataflow_kafka.slicer.context_windows import ContextAwareWindow, SessionGapWindow
from dataflow_kafka.slicer.windows import ContextFreeWindow, FixedBandWindow, PeriodicWindow
from dataflow_kafka.windowing import BEGINNING_OF_TIME_MS, END_OF_TIME_MS, AggregateFunction
from dataflow_kafka.windowing.components import Holistic, component
from dataflow_kafka.windowing.windows import Window, WindowShape, window_type_names
from dataflow_kafka.errors import ArgumentTypeError

__all__ = ["compile_window", "kernel_for", "is_builtin", "RUNTIMES"]

#: The slicer's runtime per window shape.
RUNTIMES: dict[WindowShape, Callable[[Any], ContextFreeWindow | ContextAwareWindow]] = {
    WindowShape.TUMBLING: lambda w: PeriodicWindow(w.measure, *w.grid),
    WindowShape.SLIDING: lambda w: PeriodicWindow(w.measure, *w.grid),
    WindowShape.SESSION: lambda w: SessionGapWindow(w.gap_ms),
    WindowShape.GLOBAL: lambda w: FixedBandWindow(BEGINNING_OF_TIME_MS, END_OF_TIME_MS - BEGINNING_OF_TIME_MS),
}


def compile_window(window: Any) -> ContextFreeWindow | ContextAwareWindow:
    """The runtime of ``window``: a :mod:`windowing` definition or a slicer-only window."""
    if isinstance(window, (ContextFreeWindow, ContextAwareWindow)):
        return window
    build = RUNTIMES.get(getattr(window, "shape", None)) if isinstance(window, Window) else None
    if build is None:
        raise ArgumentTypeError(f"window {window!r}: expected a windowing window ({window_type_names()}) or a "
                                f"slicer window ({', '.join(_slicer_window_names())})")
    return build(window)


def _slicer_window_names() -> list[str]:
    """The slicer's own window classes (public subclasses of the two bases defined in the slicer
    package), then the bases, for messages."""
    found, todo = [], [ContextFreeWindow, ContextAwareWindow]
    while todo:
        cls = todo.pop(0)
        todo += cls.__subclasses__()
        if (cls.__module__.startswith("dataflow_kafka.slicer.") and not cls.__name__.startswith(("_", "Forward"))
                and cls not in (ContextFreeWindow, ContextAwareWindow) and cls.__name__ not in found):
            found.append(cls.__name__)
    return found + ["a ContextFreeWindow or ContextAwareWindow subclass"]


def is_builtin(fn: AggregateFunction) -> bool:
    """Whether ``fn`` runs as a numpy kernel (else lift / combine / lower per record in Python):
    it has a ``vectorised`` form."""
    return fn.vectorised is not None


def kernel_for(fn: AggregateFunction) -> Kernel:
    """The runtime that keeps ``fn``'s partial aggregates per slice."""
    if fn.vectorised is None:
        return PythonKernel(fn)
    comps = fn.vectorised.components
    if isinstance(component(comps[0]), Holistic):
        return HolisticKernel(fn.lower)
    return ComponentKernel(comps, fn.from_components)
