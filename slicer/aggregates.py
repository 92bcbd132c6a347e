"""Aggregation functions: lift, combine, lower (Scotty section 5.4.1, Listing 3).

Built-ins (vectorised, no per-record Python): :class:`Sum`, :class:`Count`, :class:`Min`,
:class:`Max`, :class:`Mean`, :class:`M4` (min, max, first, last; first/last by event time,
ties by arrival), :class:`Median` and :class:`Quantile` (holistic: slices keep their values
sorted). User-defined functions subclass :class:`AggregateFunction` and implement ``lift``,
``combine`` and ``lower``; ``invert`` is optional and ``commutative`` declares the property
the engine's decision tree (section 5.1, Figure 4) uses: a non-commutative function over an
out-of-order stream makes the engine keep records so it can recompute a slice in event-time
order.

Example
-------
>>> class Concat(AggregateFunction):
...     commutative = False
...     def lift(self, v): return str(v)
...     def combine(self, a, b): return a + b
...     def lower(self, a): return a
>>> Concat().name
'concat'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from slicer._kernels import ComponentKernel, HolisticKernel, Kernel, PythonKernel

__all__ = [
    "AggregateFunction", "Sum", "Count", "Min", "Max", "Mean", "M4", "Median", "Quantile",
]


class AggregateFunction:
    """Base of all aggregations. Subclass it for a user-defined function.

    Attributes
    ----------
    commutative : bool
        ``combine(a, b) == combine(b, a)``; ``False`` keeps records on out-of-order streams.
    holistic : bool
        Partial aggregates have unbounded size (set by :class:`Quantile`).
    """

    commutative: bool = True
    holistic: bool = False
    invert = None  # optional ``invert(agg, removed) -> agg`` with (x + y) - y = x

    @property
    def name(self) -> str:
        return type(self).__name__.lower()

    def lift(self, value: Any) -> Any:
        raise NotImplementedError

    def combine(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def lower(self, a: Any) -> Any:
        return a

    def kernel(self) -> Kernel:
        """The runtime that keeps this function's partial aggregates per slice."""
        return PythonKernel(self)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class _Builtin(AggregateFunction):
    """Built-ins keep numeric partials in arrays; lift/combine/lower document the algebra."""

    components: tuple[str, ...] = ()

    def lift(self, value):
        return float(value)

    def kernel(self) -> Kernel:
        return ComponentKernel(self.components, self._lower_arrays)

    def _lower_arrays(self, parts: dict) -> Any:
        return parts[self.components[0]]


class Sum(_Builtin):
    components = ("sum",)
    invert = staticmethod(lambda a, b: a - b)

    def combine(self, a, b):
        return a + b


class Count(_Builtin):
    components = ("count",)
    invert = staticmethod(lambda a, b: a - b)

    def lift(self, value):
        return 1

    def combine(self, a, b):
        return a + b


class Min(_Builtin):
    components = ("min",)

    def combine(self, a, b):
        return min(a, b)


class Max(_Builtin):
    components = ("max",)

    def combine(self, a, b):
        return max(a, b)


class Mean(_Builtin):
    """Algebraic: partial (sum, count), lowered to sum / count."""

    components = ("sum", "count")
    invert = staticmethod(lambda a, b: (a[0] - b[0], a[1] - b[1]))

    def lift(self, value):
        return (float(value), 1)

    def combine(self, a, b):
        return (a[0] + b[0], a[1] + b[1])

    def lower(self, a):
        return a[0] / a[1]

    def _lower_arrays(self, parts):
        return parts["sum"] / parts["count"]


class M4(_Builtin):
    """M4 (Jugel et al.): (min, max, first, last) per window; lowered to an (n, 4) array."""

    components = ("min", "max", "first", "last")

    def _lower_arrays(self, parts):
        return np.column_stack([parts[c] for c in self.components])


class Quantile(AggregateFunction):
    """Holistic quantile(s) with numpy's ``linear`` method; ``q`` a float or a tuple of floats.

    Slices keep their values sorted; windows merge the sorted runs of their slices.
    """

    holistic = True

    def __init__(self, q: float | tuple[float, ...] = 0.5):
        qs = (q,) if np.isscalar(q) else tuple(q)
        bad = [x for x in qs if not 0.0 <= float(x) <= 1.0]
        if not qs or bad:
            raise ValueError(f"Quantile q={q!r}: every q must be in [0, 1]")
        self.q = q

    @property
    def name(self) -> str:
        return f"quantile_{self.q}"

    def lift(self, value):
        return np.array([float(value)])

    def combine(self, a, b):
        return np.sort(np.concatenate((a, b)))

    def lower(self, a):
        return np.quantile(a, self.q)

    def kernel(self) -> Kernel:
        return HolisticKernel(tuple(np.atleast_1d(self.q)), self.lower)


class Median(Quantile):
    def __init__(self):
        super().__init__(0.5)

    @property
    def name(self) -> str:
        return "median"
