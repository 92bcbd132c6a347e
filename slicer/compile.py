"""Shared definitions into the slicer's runtime (STYLE habit 1: specs compiled by the engine).

:func:`compile_window` turns a :mod:`windowing` window into the runtime window the operator
slices by (Scotty §5.4.2's window interface), and passes the slicer-only extensions through;
:func:`kernel_for` picks the vectorised kernel of an aggregation (§5.4.1).

>>> from dataflow_kafka.windowing import SlidingWindow, SessionWindow
>>> compile_window(SlidingWindow(1000, 250))
PeriodicWindow(measure=<Measure.TIME: 'time'>, size=1000, slide=250, offset=0)
>>> compile_window(SessionWindow(300))
SessionGapWindow(gap=300)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dataflow_kafka.slicer._kernels import ComponentKernel, HolisticKernel, Kernel, PythonKernel
from dataflow_kafka.slicer.context_windows import ContextAwareWindow, SessionGapWindow
from dataflow_kafka.slicer.windows import ContextFreeWindow, FixedBandWindow, PeriodicWindow
from dataflow_kafka.windowing import (
    BEGINNING_OF_TIME_MS, END_OF_TIME_MS, M4, AggregateFunction, Count, GlobalWindow, Max, Mean, Median, Min,
    Quantile, SessionWindow, SlidingWindow, Sum, TumblingWindow,
)

__all__ = ["compile_window", "kernel_for", "is_builtin", "COMPONENTS"]

#: Built-ins computed from numpy components per slice (exact types: a subclass runs as Python).
COMPONENTS: dict[type, tuple[str, ...]] = {
    Sum: ("sum",), Count: ("count",), Min: ("min",), Max: ("max",), Mean: ("sum", "count"),
    M4: ("min", "max", "first", "last"),
}


def compile_window(window: Any) -> ContextFreeWindow | ContextAwareWindow:
    """The runtime of ``window``: a :mod:`windowing` definition or a slicer-only window."""
    if isinstance(window, TumblingWindow):
        return PeriodicWindow(window.measure, window.size_ms, window.size_ms, window.offset_ms)
    if isinstance(window, SlidingWindow):
        return PeriodicWindow(window.measure, window.size_ms, window.slide_ms, window.offset_ms)
    if isinstance(window, SessionWindow):
        return SessionGapWindow(window.gap_ms)
    if isinstance(window, GlobalWindow):
        return FixedBandWindow(BEGINNING_OF_TIME_MS, END_OF_TIME_MS - BEGINNING_OF_TIME_MS)
    if isinstance(window, (ContextFreeWindow, ContextAwareWindow)):
        return window
    raise TypeError(f"window {window!r}: expected a windowing window (TumblingWindow, SlidingWindow, "
                    "SessionWindow, GlobalWindow) or a slicer window (FixedBandWindow, PunctuationWindow, "
                    "SlideByTupleWindow, ThresholdFrame, a ContextFreeWindow or ContextAwareWindow subclass)")


def is_builtin(fn: AggregateFunction) -> bool:
    """Whether ``fn`` runs as a numpy kernel (else lift / combine / lower per record in Python)."""
    return type(fn) in COMPONENTS or type(fn) in (Quantile, Median)


def kernel_for(fn: AggregateFunction) -> Kernel:
    """The runtime that keeps ``fn``'s partial aggregates per slice."""
    comps = COMPONENTS.get(type(fn))
    if comps is not None:
        return ComponentKernel(comps, _LOWER.get(type(fn), _first_component(comps[0])))
    if type(fn) in (Quantile, Median):
        return HolisticKernel(tuple(np.atleast_1d(fn.q)), fn.lower)
    return PythonKernel(fn)


def _first_component(name: str):
    return lambda parts: parts[name]


def _m4(parts: dict) -> np.ndarray:
    return np.column_stack([parts[c] for c in COMPONENTS[M4]])


_LOWER = {Mean: lambda parts: parts["sum"] / parts["count"], M4: _m4}
