"""Vectorised partial aggregates ("components"): one registry that both slicer kernels read.

An aggregation that declares a :class:`~windowing.aggregations.Vectorised` form names the
components its result is computed from (Mean: ``sum`` and ``count``); the slicer then keeps those
components as numpy arrays, one value per slice (Scotty §5.4.1: partial aggregates per slice),
instead of running lift / combine / lower per record. Both kernels that do so, the per-key
operator's (``slicer/_kernels.py``, ``ComponentKernel``) and the table of all keys of a key group
(``slicer/keyed.py``, ``KeyedSlicingOperator``), read each component's definition here and have
no branch per component name, so a new component is one :func:`register_component` call.

Three kinds:

* :class:`Reduced`: one number per slice, combined by a numpy ufunc (``sum``, ``count``, ``min``,
  ``max``): ``lift`` maps record values to their partials, ``identity`` is an empty slice's;
  ``inverse`` (``np.subtract`` for sums) lets an eager store answer a window as a prefix
  difference, ``idempotent`` (``min``, ``max``) as two overlapping ranges of a sparse table;
* :class:`Picked`: the value of one record per slice, the first or the last by (event time,
  arrival) (M4's ``first`` and ``last``); commutative, as the pick carries its order key;
* :class:`Holistic`: the slice's values, sorted (``sorted_values``, quantiles): windows merge
  sorted runs; the per-key operator only, and alone in an aggregation.

>>> import numpy as np
>>> sum_of_squares = register_component(Reduced("test_sum_of_squares", np.add, 0.0, lift=np.square,
...                                             inverse=np.subtract))
>>> component("test_sum_of_squares") is sum_of_squares, component("count").lift is None
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError, NotFoundError

__all__ = ["Reduced", "Picked", "Holistic", "Component", "COMPONENTS", "register_component", "component",
           "table_components"]


@dataclass(frozen=True)
class Reduced:
    """A partial of one number per slice, combined by ``ufunc`` (associative and commutative).

    ``lift``: the partials of records from their values (a numpy function of a float64 array;
    ``None``: every record counts 1); ``identity``: the partial of an empty slice, of ``dtype``;
    ``inverse``: ``ufunc(inverse(x, y), y) == x`` (windows as prefix differences); ``idempotent``:
    ``ufunc(x, x) == x`` (windows from two overlapping ranges)."""

    name: str
    ufunc: np.ufunc
    identity: float | int
    dtype: type = np.float64
    lift: Callable[[np.ndarray], np.ndarray] | None = None
    inverse: np.ufunc | None = None
    idempotent: bool = False

    def lifted(self, values: np.ndarray) -> np.ndarray:
        """The records' partials, of :attr:`dtype`."""
        if self.lift is None:
            return np.ones(len(values), self.dtype)
        return np.asarray(self.lift(values), self.dtype)


@dataclass(frozen=True)
class Picked:
    """The value of the record with the smallest (``latest=False``: ``first``) or largest
    (``latest=True``: ``last``) (event time, arrival) of a slice."""

    name: str
    latest: bool


@dataclass(frozen=True)
class Holistic:
    """The slice's values, sorted (quantiles): partials of unbounded size."""

    name: str


Component = Union[Reduced, Picked, Holistic]

#: Every component by name; :func:`register_component` adds one.
COMPONENTS: dict[str, Component] = {}


def register_component(c: Component) -> Component:
    """Add ``c`` to :data:`COMPONENTS` (the same definition again is a no-op); returns it."""
    if not isinstance(c, (Reduced, Picked, Holistic)):
        raise ArgumentTypeError(f"register_component({c!r}): expected a Reduced, Picked or Holistic component")
    old = COMPONENTS.get(c.name)
    if old is not None and old != c:
        raise InvalidArgumentError(f"component {c.name!r} is taken by {old!r}")
    COMPONENTS[c.name] = c
    return c


def component(name: str) -> Component:
    """The registered component ``name``; an unknown name is a ``NotFoundError`` listing them."""
    found = COMPONENTS.get(name)
    if found is None:
        raise NotFoundError(f"component {name!r}: not registered (components: {', '.join(COMPONENTS)})")
    return found


def table_components(aggregations, kinds: tuple[type, ...] = (Reduced, Picked, Holistic)) -> dict[str, Component] | None:
    """The components a table of partial aggregates keeps for ``aggregations``, by name: ``count``
    (how many records a row holds) and those each aggregation's
    :class:`~windowing.aggregations.Vectorised` form names, as registered. ``None`` when an
    aggregation has no vectorised form or a component is of no kind in ``kinds`` (the table then
    cannot run them)."""
    names = ["count"]
    for fn in aggregations:
        form = getattr(fn, "vectorised", None)
        if form is None:
            return None
        names.extend(form.components)
    found = {name: component(name) for name in dict.fromkeys(names)}
    return found if all(isinstance(c, kinds) for c in found.values()) else None


register_component(Reduced("sum", np.add, 0.0, lift=np.asarray, inverse=np.subtract))
register_component(Reduced("count", np.add, 0, np.int64, inverse=np.subtract))
register_component(Reduced("min", np.minimum, np.inf, lift=np.asarray, idempotent=True))
register_component(Reduced("max", np.maximum, -np.inf, lift=np.asarray, idempotent=True))
register_component(Picked("first", latest=False))
register_component(Picked("last", latest=True))
register_component(Holistic("sorted_values"))
