"""Stage specifications: what users write, and the logic every executor runs.

Three stages, all small frozen dataclasses (value semantics, picklable when their functions are):

- :class:`Map` -- stateless, ``fn(payload) -> iterable of payloads``; the ``j``-th output of an
  item gets the child meta ``j`` (section V.A). A tombstone maps to the tombstones of the outputs,
  which is why tombstones carry their payload (section V.D).
- :class:`Grouping` -- windowed grouping (Algorithms 1 and 2): per key, the tuple of the last
  ``window`` payloads up to and including each item.
- :class:`StatefulMap` -- an arbitrary stateful transformation (section V.C): an ordinary
  ``fn(state, payload) -> (state, outputs)`` per key, replayed from the insertion point when a
  late item arrives.

The state of an order-sensitive stage lives outside it, in a :class:`~optimistic.replay.KeyedState`
from :meth:`open_state`. The same calls serve the local runner and a Spark processor::

    state = stage.open_state()                  # or KeyedState.from_bytes(stored)
    out = stage.process(state, items)           # items of one micro-batch, any order
    stage.collect_garbage(state, bound_ms)      # after the barrier released below bound_ms
    stored = state.to_bytes()

User functions must be deterministic: replay and tombstones recompute them and rely on equal
results. To be picklable with the standard library they must be module-level functions (Spark's
cloudpickle also takes lambdas).

Example
-------
>>> from dataflow_kafka.optimistic.order import Item
>>> g = Grouping(window=3, key=_parity)
>>> state = g.open_state()
>>> [i.payload for i in g.process(state, [Item.source(t, 0, t, t) for t in (1, 3, 5)])]
[(1,), (1, 3), (1, 3, 5)]
>>> [(i.payload, i.tombstone) for i in g.process(state, [Item.source(2, 0, 2, 2)])]
[((2,), False)]
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Hashable, Iterable

from dataflow_kafka.optimistic.order import Item
from dataflow_kafka.optimistic.replay import KeyedState, Step
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["Map", "Grouping", "StatefulMap", "Operation"]


_META = operator.attrgetter("meta")


def _parity(x: int) -> int:  # used by the doctest above
    return x % 2


def _check_callable(name: str, value: Any) -> None:
    if not callable(value):
        raise ArgumentTypeError(f"{name} must be callable, got {value!r}")


@dataclass(frozen=True)
class Map:
    """Stateless map: ``fn(payload)`` returns the payloads of the outputs (any number, in order)."""

    fn: Callable[[Any], Iterable[Any]]
    order_sensitive: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _check_callable("Map.fn", self.fn)

    def open_state(self) -> None:
        return None

    def process(self, state: None, items: Iterable[Item]) -> list[Item]:
        return [item.derive(j, payload) for item in items for j, payload in enumerate(self.fn(item.payload))]

    def collect_garbage(self, state: None, bound_ms: int) -> int:
        return 0


class _Replaying:
    """Shared logic of the order-sensitive stages: keyed logs replayed through ``_step``."""

    key: Callable[[Any], Hashable]
    order_sensitive: ClassVar[bool] = True

    @property
    def _step(self) -> Step:
        raise NotImplementedError

    @property
    def _initial(self) -> Any:
        raise NotImplementedError

    def open_state(self) -> KeyedState:
        """A fresh, empty state for the keys of one partition."""
        return KeyedState(self._initial)

    def process(self, state: KeyedState, items: Iterable[Item]) -> list[Item]:
        """Apply one micro-batch (in any order; it is sorted first, which saves replays)."""
        out: list[Item] = []
        step, key = self._step, self.key
        for item in sorted(items, key=_META):
            state.apply(key(item.payload), item, step, out)
        return out

    def collect_garbage(self, state: KeyedState, bound_ms: int) -> int:
        """Drop what no item at or above ``bound_ms`` can change; returns entries dropped."""
        return state.collect_garbage(bound_ms)


def _window_step(window: int, state: tuple, payload: Any) -> tuple[tuple, tuple]:
    group = state + (payload,)
    return (group[-(window - 1):] if window > 1 else ()), (group,)


@dataclass(frozen=True)
class Grouping(_Replaying):
    """Windowed grouping (Algorithm 1): emits, per item, the tuple of the last ``window`` payloads
    of its key's bucket, ending with the item. Late items are inserted in order (Algorithm 2)."""

    window: int
    key: Callable[[Any], Hashable]

    def __post_init__(self) -> None:
        if not isinstance(self.window, int) or self.window < 1:
            raise InvalidArgumentError(f"Grouping.window must be an int >= 1, got {self.window!r}")
        _check_callable("Grouping.key", self.key)

    @property
    def _step(self) -> Step:
        return functools.partial(_window_step, self.window)

    @property
    def _initial(self) -> tuple:
        return ()


@dataclass(frozen=True)
class StatefulMap(_Replaying):
    """A stateful transformation per key: ``fn(state, payload) -> (new_state, outputs)``.

    ``initial`` is every key's state before its first item. Treat states as immutable.
    """

    fn: Callable[[Any, Any], tuple[Any, Iterable[Any]]]
    key: Callable[[Any], Hashable]
    initial: Any = None

    def __post_init__(self) -> None:
        _check_callable("StatefulMap.fn", self.fn)
        _check_callable("StatefulMap.key", self.key)

    @property
    def _step(self) -> Step:
        return self.fn

    @property
    def _initial(self) -> Any:
        return self.initial


#: One operation of an optimistic pipeline (FlameStream's operations).
Operation = Map | Grouping | StatefulMap
