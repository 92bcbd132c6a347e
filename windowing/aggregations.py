"""Aggregations both engines accept: *what* is computed per window.

One class speaks both engines' protocols:

* Scotty's incremental aggregation (Traub et al., TODS 2021, §5.4.1): ``lift(value)`` a
  record into a partial aggregate, ``combine(a, b)`` two partials, ``lower(a)`` a partial to
  the result, optional ``invert(a, b)`` with ``invert(combine(x, y), y) == x``, and declared
  properties (``commutative``; ``holistic``: partials of unbounded size). The slicer keeps
  partials per slice.
* The Dataflow Combiner (Beam's ``CombineFn``; the Dataflow Model, Akidau et al., VLDB 2015, §2.3):
  ``create_accumulator()``, ``add_input(acc, value)``, ``merge_accumulators(accs)``,
  ``extract_output(acc)`` and, for retractions, ``uncombine(acc, value)`` (``None`` when the
  function cannot take a value back). The Dataflow driver keeps one accumulator per window.

Write either side and get the other: a subclass of :class:`AggregateFunction` implements
lift / combine / lower (+ invert) and derives the Combiner methods (the empty accumulator is
``None``; ``uncombine(acc, v) = invert(acc, lift(v))``); a subclass of :class:`Combiner`
implements Beam's methods and derives lift / combine / lower (no invert). The built-ins define
both sides and also describe themselves to the engines: ``components`` (the
vectorised partials they are computed from, e.g. Mean = sum + count, and ``from_components``),
``spark_type`` / ``spark_columns`` (their result columns): :class:`Sum`, :class:`Count`,
:class:`Mean`, :class:`Min`, :class:`Max`, :class:`M4`, :class:`Quantile`, :class:`Median`,
:class:`ToList`. Beam's combiner names are aliases of the same classes (``SumCombiner`` is
``Sum``, ...). Accumulators live in engine state: keep them made of plain values (numbers,
strings, tuples, lists).

Example
-------
>>> class Concat(AggregateFunction):
...     commutative = False                 # order matters: the slicer keeps records when out of order
...     def lift(self, v): return str(v)
...     def combine(self, a, b): return a + b
>>> c = Concat()
>>> c.extract_output(c.add_input(c.add_input(c.create_accumulator(), 1), 2)), c.name
('12', 'concat')
>>> SumCombiner is Sum, Sum().extract_output(Sum().add_input(Sum().create_accumulator(), 5))
(True, 5)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
from dataflow_kafka.errors import InvalidArgumentError

__all__ = [
    "AggregateFunction", "Combiner", "Sum", "Count", "Mean", "Min", "Max", "M4", "Quantile", "Median",
    "ToList", "SumCombiner", "CountCombiner", "MeanCombiner", "MinCombiner", "MaxCombiner",
    "ToListCombiner", "COMPONENT_NAMES", "declared", "declared_components",
]

#: The partials an engine may keep vectorised per slice: ``sum``, ``count``, ``min``, ``max``,
#: ``first`` and ``last`` (by event time, ties by arrival); ``sorted_values`` (holistic: the
#: slice's values, sorted).
COMPONENT_NAMES = ("sum", "count", "min", "max", "first", "last", "sorted_values")


def declared(fn: "AggregateFunction", attribute: str, default: Any = None) -> Any:
    """``attribute`` as ``fn``'s own class declares it (else ``default``): what a class says about
    its lift / combine / lower (``components``, ``keeps_integers``) does not hold for a subclass
    that may override them, unless the subclass declares it again."""
    return type(fn).__dict__.get(attribute, default)


def declared_components(fn: "AggregateFunction") -> tuple[str, ...]:
    """The ``components`` declared by ``fn``'s own class (see :func:`declared`)."""
    return declared(fn, "components", ())


class AggregateFunction:
    """Base of all aggregations (lift / combine / lower); subclass it for a user-defined one.

    Attributes
    ----------
    commutative : bool
        ``combine(a, b) == combine(b, a)``; ``False`` makes the slicer keep records on
        out-of-order streams so it can combine in event-time order (§5.1, Figure 4).
    holistic : bool
        Partial aggregates have unbounded size (quantiles, lists).
    invert : callable or None
        ``invert(agg, removed) -> agg`` with ``invert(combine(x, y), y) == x``.
    timestamped : bool
        The Dataflow driver passes ``(value, event_time_ms)`` to ``add_input`` (M4 needs the
        order of event time).
    components : tuple of str
        The partials (names in :data:`COMPONENT_NAMES`) the result is computed from by
        :meth:`from_components`; engines keep them as numpy arrays instead of running lift /
        combine / lower per record. Empty (the default): only lift / combine / lower. Counts
        for the class that declares it only (:func:`declared_components`).
    spark_type : str
        Spark DDL type of the result column (default ``"string"``: the result as JSON text);
        :meth:`spark_columns` gives the columns.
    keeps_integers : bool
        The result of integer records is an integer (a sum): engines that compute in doubles
        return integers when every record was one. Counts for the declaring class only.
    """

    commutative: bool = True
    holistic: bool = False
    invert: Any = None
    timestamped: bool = False
    components: ClassVar[tuple[str, ...]] = ()
    spark_type: str = "string"
    keeps_integers: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """Output name (the slicer's result column)."""
        return type(self).__name__.lower()

    # -- Scotty: lift / combine / lower --------------------------------------------------------
    def lift(self, value: Any) -> Any:
        raise NotImplementedError

    def combine(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def lower(self, a: Any) -> Any:
        return a

    # -- declared for the engines -----------------------------------------------------------------
    def from_components(self, parts: Mapping[str, np.ndarray]) -> np.ndarray:
        """The results of a batch of windows from their ``components`` (one array per name)."""
        return parts[self.components[0]]

    def spark_columns(self, name: str) -> list[tuple[str, str]]:
        """``(column, Spark DDL type)`` of the result, the column(s) named after ``name``."""
        return [(name, self.spark_type)]

    # -- Beam's CombineFn, derived (None is the empty accumulator) ------------------------------
    def create_accumulator(self) -> Any:
        return None

    def add_input(self, accumulator: Any, value: Any) -> Any:
        x = self.lift(value)
        return x if accumulator is None else self.combine(accumulator, x)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        out = None
        for a in accumulators:
            if a is not None:
                out = a if out is None else self.combine(out, a)
        return out

    def extract_output(self, accumulator: Any) -> Any:
        return None if accumulator is None else self.lower(accumulator)

    @property
    def uncombine(self) -> Any:
        """``uncombine(acc, value)``, derived from ``invert``; ``None`` when not invertible."""
        if self.invert is None:
            return None
        return lambda acc, value: self.invert(acc, self.lift(value))

    # -- values ---------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted((k, repr(v)) for k, v in vars(self).items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Combiner(AggregateFunction):
    """Beam-style combiner base: implement ``create_accumulator``, ``add_input``,
    ``merge_accumulators``, ``extract_output`` (and optionally a method ``uncombine``);
    lift / combine / lower are derived, so the slicer runs it too."""

    uncombine: Any = None  # a subclass may define ``uncombine(self, acc, value)``

    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add_input(self, accumulator: Any, value: Any) -> Any:
        raise NotImplementedError

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        raise NotImplementedError

    def extract_output(self, accumulator: Any) -> Any:
        return accumulator

    def lift(self, value: Any) -> Any:
        return self.add_input(self.create_accumulator(), value)

    def combine(self, a: Any, b: Any) -> Any:
        return self.merge_accumulators([a, b])

    def lower(self, a: Any) -> Any:
        return self.extract_output(a)


def _minus(a: Any, b: Any) -> Any:
    return a - b


class _Additive(Combiner):
    """Sum-like: the accumulator is a number, merged by adding, inverted by subtracting."""

    invert = staticmethod(_minus)

    def create_accumulator(self) -> Any:
        return 0

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return sum(accumulators)


class Sum(_Additive):
    """Sum; a sum of integers is an integer in both engines (the slicer sums doubles and returns
    an int when every record's value was an integer: exact below 2**53; its Spark stage reads
    values as doubles)."""

    components = ("sum",)
    spark_type = "double"
    keeps_integers = True

    def add_input(self, accumulator: Any, value: Any) -> Any:
        return accumulator + value

    def uncombine(self, accumulator: Any, value: Any) -> Any:  # type: ignore[override]
        return accumulator - value


class Count(_Additive):
    """Number of records."""

    components = ("count",)
    spark_type = "bigint"

    def add_input(self, accumulator: int, value: Any) -> int:
        return accumulator + 1

    def uncombine(self, accumulator: int, value: Any) -> int:  # type: ignore[override]
        return accumulator - 1


class Mean(Combiner):
    """Arithmetic mean (algebraic: ``(sum, count)``); ``None`` for an empty window."""

    invert = staticmethod(lambda a, b: (a[0] - b[0], a[1] - b[1]))
    components = ("sum", "count")
    spark_type = "double"

    def from_components(self, parts: Mapping[str, np.ndarray]) -> np.ndarray:
        return parts["sum"] / parts["count"]

    def create_accumulator(self) -> tuple:
        return (0, 0)

    def add_input(self, accumulator: tuple, value: Any) -> tuple:
        return (accumulator[0] + value, accumulator[1] + 1)

    def merge_accumulators(self, accumulators: Iterable[tuple]) -> tuple:
        total, count = 0, 0
        for s, c in accumulators:
            total += s
            count += c
        return (total, count)

    def extract_output(self, accumulator: tuple) -> Any:
        return accumulator[0] / accumulator[1] if accumulator[1] else None

    def uncombine(self, accumulator: tuple, value: Any) -> tuple:  # type: ignore[override]
        return (accumulator[0] - value, accumulator[1] - 1)


class _Extremum(Combiner):
    _pick: Any = None
    spark_type = "double"

    def create_accumulator(self) -> Any:
        return None

    def add_input(self, accumulator: Any, value: Any) -> Any:
        return value if accumulator is None else type(self)._pick(accumulator, value)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        present = [a for a in accumulators if a is not None]
        return type(self)._pick(present) if present else None


class Min(_Extremum):
    """Smallest value; ``None`` for an empty window. Not invertible."""

    _pick = min
    components = ("min",)


class Max(_Extremum):
    """Largest value; ``None`` for an empty window. Not invertible."""

    _pick = max
    components = ("max",)


class M4(Combiner):
    """M4 (Jugel et al.): ``(min, max, first, last)`` of a window, first and last by event time
    (ties by arrival). The Dataflow driver passes ``(value, event_time_ms)`` to it."""

    timestamped = True
    components = ("min", "max", "first", "last")
    spark_type = "double"

    def from_components(self, parts: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.column_stack([parts[c] for c in M4.components])

    def spark_columns(self, name: str) -> list[tuple[str, str]]:
        """One double column per part: ``<name>_min``, ``_max``, ``_first``, ``_last``."""
        return [(f"{name}_{c}", self.spark_type) for c in M4.components]

    def create_accumulator(self) -> Any:
        return None  # else [min, max, t_first, first, t_last, last]

    def add_input(self, accumulator: Any, value: Any) -> Any:
        v, t = value
        if accumulator is None:
            return [v, v, t, v, t, v]
        a = accumulator
        a[0], a[1] = min(a[0], v), max(a[1], v)
        if t < a[2]:
            a[2], a[3] = t, v
        if t >= a[4]:
            a[4], a[5] = t, v
        return a

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        out = None
        for a in accumulators:
            if a is None:
                continue
            if out is None:
                out = list(a)
                continue
            out[0], out[1] = min(out[0], a[0]), max(out[1], a[1])
            if a[2] < out[2]:
                out[2], out[3] = a[2], a[3]
            if a[4] >= out[4]:
                out[4], out[5] = a[4], a[5]
        return out

    def extract_output(self, accumulator: Any) -> Any:
        if accumulator is None:
            return None
        a = accumulator
        return (a[0], a[1], a[3], a[5])


class _Values(Combiner):
    """Holistic: the accumulator is the list of the values (arrival order)."""

    holistic = True

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, value: Any) -> list:
        accumulator.append(value)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        return [x for a in accumulators for x in a]

    def uncombine(self, accumulator: list, value: Any) -> list:  # type: ignore[override]
        accumulator.remove(value)
        return accumulator


class Quantile(_Values):
    """Quantile(s) with numpy's ``linear`` method; ``q`` a float or a tuple of floats (then the
    result is a tuple). Holistic: partials keep the values (the slicer keeps them sorted)."""

    components = ("sorted_values",)

    def __init__(self, q: float | tuple[float, ...] = 0.5) -> None:
        qs = (q,) if np.isscalar(q) else tuple(q)
        bad = [x for x in qs if not 0.0 <= float(x) <= 1.0]
        if not qs or bad:
            raise InvalidArgumentError(f"Quantile: q={q!r}: every q must be in [0, 1]")
        self.q = q if np.isscalar(q) else tuple(float(x) for x in qs)

    @property
    def name(self) -> str:
        return f"quantile_{self.q}"

    def extract_output(self, accumulator: Any) -> Any:
        if accumulator is None or len(accumulator) == 0:
            return None
        r = np.quantile(np.asarray(accumulator, np.float64), self.q)
        return float(r) if np.ndim(r) == 0 else tuple(float(x) for x in r)

    @property
    def spark_type(self) -> str:  # type: ignore[override]
        return "double" if np.isscalar(self.q) else "array<double>"


class Median(Quantile):
    """The median (``Quantile(0.5)``)."""

    components = ("sorted_values",)

    def __init__(self) -> None:
        super().__init__(0.5)

    @property
    def name(self) -> str:
        return "median"


class ToList(_Values):
    """The window's values: in the slicer in event-time order (ties by arrival; not commutative,
    so the slicer keeps records on out-of-order streams), in the Dataflow driver in arrival order
    (a merged session: the lists of the merged windows one after the other)."""

    commutative = False
    spark_type = "array<double>"

    @property
    def name(self) -> str:
        return "to_list"

    def extract_output(self, accumulator: Any) -> list:
        return [] if accumulator is None else list(accumulator)


#: Beam's combiner names: the same classes.
SumCombiner = Sum
CountCombiner = Count
MeanCombiner = Mean
MinCombiner = Min
MaxCombiner = Max
ToListCombiner = ToList
