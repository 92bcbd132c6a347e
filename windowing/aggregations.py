"""Aggregations both engines accept: *what* is computed per window.

An aggregation is an :class:`AggregateFunction`: Scotty's incremental aggregation
(Scotty, Traub et al., TODS 2021, §5.4.1), ``lift(value)`` a record into a partial aggregate,
``combine(a, b)`` two partials (left before right in event time), ``lower(a)`` a partial to the
result (identity by default); ``lift`` and ``combine`` are abstract, so a class missing one fails
when it is built. The slicer keeps partials per slice; the Dataflow driver one accumulator per
window, through Beam's ``CombineFn`` view of the aggregation (:func:`combine_fn`: the empty
accumulator is ``None``, ``add_input(acc, v) = combine(acc, lift(v))``).

Beam's side is an adapter: a :class:`Combiner` is written with Beam's methods
(``create_accumulator``, ``add_input``, ``merge_accumulators``, ``extract_output``, optional
``uncombine``; the Dataflow Model, Akidau et al., VLDB 2015, §2.3) and derives lift / combine / lower, so the slicer
runs it too; the built-ins are combiners (their ``add_input`` is the Dataflow driver's per-record
step).

Optional capabilities are values on the class, inherited like any attribute:

* ``commutative`` (default ``True``): ``combine(a, b) == combine(b, a)``; ``False`` makes the
  slicer keep records on out-of-order streams so it combines in event-time order (§5.1);
* ``invert``: ``invert(agg, removed)`` with ``invert(combine(x, y), y) == x`` (``None``: not
  invertible); a combiner's ``uncombine`` is derived from it;
* ``timestamped``: the Dataflow driver passes ``(value, event_time_ms)`` (M4);
* ``vectorised`` (:class:`Vectorised`): the components (:mod:`windowing.components`) the result
  is computed from by :meth:`AggregateFunction.from_components`; the slicer then keeps numpy
  arrays per slice instead of running lift / combine per record. A subclass that redefines how
  values combine (``lift``, ``combine``, ``lower``, ``add_input``, ...) without declaring
  ``vectorised`` again runs its own methods (its class's ``vectorised`` is ``None``); one that
  only renames or retypes the result keeps the kernel;
* ``spark_type`` / :meth:`AggregateFunction.spark_columns`: the result column(s) (default
  ``string``: the result as JSON text);
* :meth:`AggregateFunction.selection`: the values a result depends on are those at the highest
  (or lowest) of one value column, so a Dataflow stage may keep only those before the shuffle
  (``WindowingStage(select_before_shuffle=True)``; ``Min``, ``Max``); like ``vectorised``, a
  subclass redefining how values combine does not inherit it.

Built-ins: :class:`Sum`, :class:`Count`, :class:`Mean`, :class:`Min`, :class:`Max`, :class:`M4`,
:class:`Quantile`, :class:`Median`, :class:`ToList`. Beam's names for them (``SumCombiner``, ...)
live in :mod:`dataflow_kafka.compat.beam`. Accumulators live in engine state: keep them made of
plain values (numbers, strings, tuples, lists).

Example
-------
>>> class Concat(AggregateFunction):
...     commutative = False                 # order matters: the slicer keeps records when out of order
...     def lift(self, v): return str(v)
...     def combine(self, a, b): return a + b
>>> beam = combine_fn(Concat())
>>> beam.extract_output(beam.add_input(beam.add_input(beam.create_accumulator(), 1), 2)), Concat().name
('12', 'concat')
>>> Sum().vectorised, Sum().extract_output(Sum().add_input(Sum().create_accumulator(), 5))
(Vectorised(components=('sum',), keeps_integers=True), 5)
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dataflow_kafka.deprecation import Moved, moved_names
from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.windowing.components import Holistic, component

__all__ = [
    "AggregateFunction", "Combiner", "Vectorised", "combine_fn", "Combined", "Sum", "Count", "Mean", "Min", "Max", "M4",
    "Quantile", "Median", "ToList",
]

#: Hooks that say how values combine: a subclass redefining one runs it (module docstring).
_SEMANTICS = ("lift", "combine", "lower", "invert", "create_accumulator", "add_input", "merge_accumulators",
              "extract_output", "uncombine")


@dataclass(frozen=True)
class Vectorised:
    """An aggregation computed from vectorised components: ``components``, registered names
    (:mod:`windowing.components`; a holistic one alone), which the slicer keeps per slice as
    numpy arrays; ``keeps_integers``: the result of integer records is an integer (a sum; the
    kernels compute in doubles and give integers back when every record was one)."""

    components: tuple[str, ...]
    keeps_integers: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", tuple(self.components))
        if not self.components:
            raise InvalidArgumentError("Vectorised: components=(): name at least one component")
        kinds = [component(c) for c in self.components]          # unknown names: NotFoundError
        if any(isinstance(k, Holistic) for k in kinds) and len(kinds) > 1:
            raise InvalidArgumentError(f"Vectorised{self.components}: a holistic component comes alone")


class AggregateFunction(abc.ABC):
    """Base of all aggregations: lift / combine / lower; subclass it for a user-defined one.

    Attributes (capabilities, see the module docstring)
    ----------------------------------------------------
    commutative : bool
        ``combine(a, b) == combine(b, a)`` (default ``True``).
    invert : callable or None
        ``invert(agg, removed) -> agg`` with ``invert(combine(x, y), y) == x``.
    timestamped : bool
        The Dataflow driver passes ``(value, event_time_ms)`` to ``add_input``.
    vectorised : Vectorised or None
        The components the result is computed from (:meth:`from_components`).
    spark_type : str
        Spark DDL type of the result column (default ``"string"``: JSON text).
    """

    commutative: bool = True
    invert: Any = None
    timestamped: bool = False
    vectorised: ClassVar[Vectorised | None] = None
    spark_type: str = "string"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if "components" in own:          # the declaration before Vectorised, kept working for a while
            warnings.warn(f"{cls.__qualname__}: 'components = ...' is deprecated; declare "
                          f"'vectorised = Vectorised({tuple(own['components'])!r})'", DeprecationWarning, stacklevel=2)
            comps = tuple(own["components"])
            cls.vectorised = Vectorised(comps, bool(own.get("keeps_integers", False))) if comps else None
        elif "vectorised" not in own and any(h in own for h in _SEMANTICS):
            cls.vectorised = None        # the inherited kernel computes the parent's values, not these
        if "selection" not in own and any(h in own for h in _SEMANTICS):
            cls.selection = AggregateFunction.selection     # the parent's selection is of its values

    @property
    def name(self) -> str:
        """Output name (the slicer's result column)."""
        return type(self).__name__.lower()

    @abc.abstractmethod
    def lift(self, value: Any) -> Any:
        """A record's value as a partial aggregate."""

    @abc.abstractmethod
    def combine(self, a: Any, b: Any) -> Any:
        """Two partials (``a`` before ``b`` in event time) as one."""

    def lower(self, a: Any) -> Any:
        """A partial as the result."""
        return a

    def from_components(self, parts: Mapping[str, np.ndarray]) -> np.ndarray:
        """The results of a batch of windows from their :attr:`vectorised` components (one array
        per name); by default the first component's."""
        return parts[self.vectorised.components[0]]

    def spark_columns(self, name: str) -> list[tuple[str, str]]:
        """``(column, Spark DDL type)`` of the result, the column(s) named after ``name``."""
        return [(name, self.spark_type)]

    def selection(self, value_columns: int) -> tuple[str, int] | None:
        """Which values decide the result, for a stage keeping only those before its shuffle
        (``WindowingStage(select_before_shuffle=True)``): ``("max", i)`` (``("min", i)``): the
        result over any set of values equals the result over those whose column ``i`` is the set's
        highest (lowest), ties all kept, so it equals the result over any subset holding those.
        ``value_columns``: the columns of the stage's value (1: a plain value; more: a tuple).
        None (the default): any value may change the result."""
        return None

    # -- values ---------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted((k, repr(v)) for k, v in vars(self).items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Combiner(AggregateFunction):
    """Beam's ``CombineFn`` as an aggregation (an adapter): implement ``create_accumulator``,
    ``add_input``, ``merge_accumulators``, optionally ``extract_output`` and a method
    ``uncombine(acc, value)``; lift / combine / lower are derived, so the slicer runs it too."""

    uncombine: Any = None  # a subclass may define ``uncombine(self, acc, value)``

    @abc.abstractmethod
    def create_accumulator(self) -> Any:
        """The empty accumulator."""

    @abc.abstractmethod
    def add_input(self, accumulator: Any, value: Any) -> Any:
        """``accumulator`` with one more value."""

    @abc.abstractmethod
    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        """One accumulator of several."""

    def add_inputs(self, accumulator: Any, values: Sequence[Any]) -> Any:
        """``accumulator`` with ``values`` added in order (Beam's ``CombineFn.add_inputs``): the
        Dataflow driver folds a window's values of one bundle with one call. By default one
        ``add_input`` per value; override it where a batch is cheaper (one parse, one pass)."""
        for v in values:
            accumulator = self.add_input(accumulator, v)
        return accumulator

    def extract_output(self, accumulator: Any) -> Any:
        return accumulator

    def lift(self, value: Any) -> Any:
        return self.add_input(self.create_accumulator(), value)

    def combine(self, a: Any, b: Any) -> Any:
        return self.merge_accumulators([a, b])

    def lower(self, a: Any) -> Any:
        return self.extract_output(a)


class _LiftCombineLower(Combiner):
    """Beam's view of a lift / combine / lower aggregation (``None`` is the empty accumulator)."""

    def __init__(self, fn: AggregateFunction) -> None:
        self.fn = fn
        self.timestamped = fn.timestamped
        self.commutative = fn.commutative

    def create_accumulator(self) -> Any:
        return None

    def add_input(self, accumulator: Any, value: Any) -> Any:
        x = self.fn.lift(value)
        return x if accumulator is None else self.fn.combine(accumulator, x)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        out = None
        for a in accumulators:
            if a is not None:
                out = a if out is None else self.fn.combine(out, a)
        return out

    def extract_output(self, accumulator: Any) -> Any:
        return None if accumulator is None else self.fn.lower(accumulator)

    @property
    def uncombine(self) -> Any:  # type: ignore[override]
        """``uncombine(acc, value) = invert(acc, lift(value))``; ``None`` when not invertible."""
        invert, lift = self.fn.invert, self.fn.lift
        return None if invert is None else (lambda acc, value: invert(acc, lift(value)))


def combine_fn(fn: AggregateFunction) -> Combiner:
    """Beam's ``CombineFn`` view of ``fn``, which the Dataflow driver runs: ``fn`` itself when it is
    a :class:`Combiner`, else an adapter of its lift / combine / lower."""
    return fn if isinstance(fn, Combiner) else _LiftCombineLower(fn)


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

    vectorised = Vectorised(("sum",), keeps_integers=True)
    spark_type = "double"

    def add_input(self, accumulator: Any, value: Any) -> Any:
        return accumulator + value

    def uncombine(self, accumulator: Any, value: Any) -> Any:  # type: ignore[override]
        return accumulator - value


class Count(_Additive):
    """Number of records."""

    vectorised = Vectorised(("count",))
    spark_type = "bigint"

    def add_input(self, accumulator: int, value: Any) -> int:
        return accumulator + 1

    def uncombine(self, accumulator: int, value: Any) -> int:  # type: ignore[override]
        return accumulator - 1


class Mean(Combiner):
    """Arithmetic mean (algebraic: ``(sum, count)``); ``None`` for an empty window."""

    invert = staticmethod(lambda a, b: (a[0] - b[0], a[1] - b[1]))
    vectorised = Vectorised(("sum", "count"))
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
    vectorised = Vectorised(("min",))

    def selection(self, value_columns: int) -> tuple[str, int] | None:
        return ("min", 0) if value_columns == 1 else None


class Max(_Extremum):
    """Largest value; ``None`` for an empty window. Not invertible."""

    _pick = max
    vectorised = Vectorised(("max",))

    def selection(self, value_columns: int) -> tuple[str, int] | None:
        return ("max", 0) if value_columns == 1 else None


class M4(Combiner):
    """M4 (Jugel et al.): ``(min, max, first, last)`` of a window, first and last by event time
    (ties by arrival). The Dataflow driver passes ``(value, event_time_ms)`` to it."""

    timestamped = True
    vectorised = Vectorised(("min", "max", "first", "last"))
    spark_type = "double"

    def from_components(self, parts: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.column_stack([parts[c] for c in M4.vectorised.components])

    def spark_columns(self, name: str) -> list[tuple[str, str]]:
        """One double column per part: ``<name>_min``, ``_max``, ``_first``, ``_last``."""
        return [(f"{name}_{c}", self.spark_type) for c in M4.vectorised.components]

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

    vectorised = Vectorised(("sorted_values",))

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


class Combined(Combiner):
    """Several aggregations computed together (the Dataflow driver keeps one accumulator per
    window): the result is the tuple of their results, in order. Timestamped when one of them is
    (each gets what it asks for); ``uncombine`` when every one has it."""

    def __init__(self, aggregations: Iterable[AggregateFunction]) -> None:
        self.aggregations = tuple(aggregations)
        self._beam = tuple(combine_fn(a) for a in self.aggregations)
        self.timestamped = any(a.timestamped for a in self.aggregations)
        self.commutative = all(a.commutative for a in self.aggregations)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.aggregations == other.aggregations  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.aggregations)

    def __repr__(self) -> str:
        return f"Combined({list(self.aggregations)!r})"

    def _inputs(self, value: Any) -> list:
        if not self.timestamped:
            return [value] * len(self._beam)
        return [value if b.timestamped else value[0] for b in self._beam]

    def create_accumulator(self) -> tuple:
        return tuple(b.create_accumulator() for b in self._beam)

    def add_input(self, accumulator: tuple, value: Any) -> tuple:
        return tuple(b.add_input(a, v) for b, a, v in zip(self._beam, accumulator, self._inputs(value)))

    def add_inputs(self, accumulator: tuple, values: Sequence[Any]) -> tuple:
        if not self.timestamped:
            return tuple(b.add_inputs(a, values) for b, a in zip(self._beam, accumulator))
        return tuple(b.add_inputs(a, values if b.timestamped else [v[0] for v in values])
                     for b, a in zip(self._beam, accumulator))

    def merge_accumulators(self, accumulators: Iterable[tuple]) -> tuple:
        accs = list(accumulators)
        return tuple(b.merge_accumulators([a[i] for a in accs]) for i, b in enumerate(self._beam))

    def extract_output(self, accumulator: tuple) -> tuple:
        return tuple(b.extract_output(a) for b, a in zip(self._beam, accumulator))

    @property
    def uncombine(self) -> Any:  # type: ignore[override]
        """Every aggregation's ``uncombine``; ``None`` unless each has one."""
        takes = [b.uncombine for b in self._beam]
        if any(t is None for t in takes):
            return None
        return lambda acc, value: tuple(t(a, v) for t, a, v in zip(takes, acc, self._inputs(value)))


#: Beam's names for the built-ins: their one home is dataflow_kafka.compat.beam.
MOVED = {f"{cls.__name__}Combiner": Moved("dataflow_kafka.compat.beam", f"{cls.__name__}Combiner",
                                          f"it is Beam's name for {cls.__name__}")
         for cls in (Sum, Count, Mean, Min, Max, ToList)}
__getattr__ = moved_names(__name__, MOVED)
