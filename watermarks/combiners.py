"""Combiners: *what* is computed per window, as lift / combine / lower (Dataflow §2.3).

A combiner is the Dataflow *Combiner* (Beam's ``CombineFn``)::

    create_accumulator()            -> A          empty aggregate
    add_input(A, value)             -> A          fold one element in
    merge_accumulators([A, ...])    -> A          combine partial aggregates (window merging)
    extract_output(A)               -> output     the pane's value
    uncombine(A, value)             -> A          optional: take an element back out

``uncombine`` is the inverse of ``add_input`` for reversible functions (sum, count, mean,
lists). The paper (§2.3) names it as what lets retractions be applied efficiently: a downstream
driver that receives a retracted pane calls :meth:`TriggerDriver.add_retractions`, which uses
``uncombine``. Combiners without an inverse (min, max) set ``uncombine = None``.

Accumulators live in driver state, which serialises to bytes: keep them made of ``None``,
``bool``, ``int``, ``float``, ``str``, ``bytes``, tuples and lists (anything else is pickled).

Example
-------
>>> c = SumCombiner()
>>> c.extract_output(c.add_input(c.add_input(c.create_accumulator(), 5), 9))
14
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "Combiner",
    "SumCombiner",
    "CountCombiner",
    "MeanCombiner",
    "MinCombiner",
    "MaxCombiner",
    "ToListCombiner",
]


class Combiner:
    """Base class; subclasses are stateless values (equal when of the same type)."""

    def create_accumulator(self) -> Any:
        raise NotImplementedError

    def add_input(self, accumulator: Any, value: Any) -> Any:
        raise NotImplementedError

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        raise NotImplementedError

    def extract_output(self, accumulator: Any) -> Any:
        return accumulator

    #: ``uncombine(accumulator, value) -> accumulator`` or None when not invertible.
    uncombine: Any = None

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SumCombiner(Combiner):
    """Sum of numbers (the paper's ``Sum.integersPerKey``)."""

    def create_accumulator(self) -> Any:
        return 0

    def add_input(self, accumulator: Any, value: Any) -> Any:
        return accumulator + value

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return sum(accumulators)

    def uncombine(self, accumulator: Any, value: Any) -> Any:  # type: ignore[override]
        return accumulator - value


class CountCombiner(Combiner):
    """Number of elements."""

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, accumulator: int, value: Any) -> int:
        return accumulator + 1

    def merge_accumulators(self, accumulators: Iterable[int]) -> int:
        return sum(accumulators)

    def uncombine(self, accumulator: int, value: Any) -> int:  # type: ignore[override]
        return accumulator - 1


class MeanCombiner(Combiner):
    """Arithmetic mean; ``None`` for an empty pane. Accumulator: ``(sum, count)``."""

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

    def create_accumulator(self) -> Any:
        return None

    def add_input(self, accumulator: Any, value: Any) -> Any:
        return value if accumulator is None else type(self)._pick(accumulator, value)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        present = [a for a in accumulators if a is not None]
        return type(self)._pick(present) if present else None


class MinCombiner(_Extremum):
    """Smallest value; ``None`` for an empty pane. Not invertible (no ``uncombine``)."""

    _pick = min


class MaxCombiner(_Extremum):
    """Largest value; ``None`` for an empty pane. Not invertible (no ``uncombine``)."""

    _pick = max


class ToListCombiner(Combiner):
    """The pane's values in arrival order (the driver's default: panes show their elements)."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, value: Any) -> list:
        accumulator.append(value)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        out: list = []
        for a in accumulators:
            out.extend(a)
        return out

    def extract_output(self, accumulator: list) -> list:
        return list(accumulator)

    def uncombine(self, accumulator: list, value: Any) -> list:  # type: ignore[override]
        accumulator.remove(value)
        return accumulator
