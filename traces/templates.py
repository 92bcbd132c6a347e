"""The three operator templates of data-trace types Table 1, and their sequential runtimes.

Users subclass a template and fill in its functions; ``emit(key, value, ts=None)`` sends an output
item (``ts`` defaults to the input item's event time, or ``marker.timestamp - 1`` in ``on_marker``:
the last instant of the block the marker closes). ``emit.event_time`` is the input item's time.

- :class:`OpStateless` ``U(K, V) -> U(L, W)``: ``on_item(key, value, emit)``,
  ``on_marker(marker, emit)``. Any split parallelises it (Theorem 4.3). An ``on_marker`` that
  emits is refused at parallelism > 1 (every instance would emit it: the output would depend on
  the parallelism).
- :class:`OpKeyedOrdered` ``O(K, V) -> O(K, W)``: ``initial_state()``,
  ``on_item(state, key, value, emit) -> state``, ``on_marker(state, key, marker, emit) -> state``.
  State per key across blocks. Every emit must keep the input key (checked at run time:
  :class:`~traces.types.TraceError`). ``on_marker`` runs, at every marker, for every key seen so
  far (in any earlier block or in the block the marker closes); a key first seen in block ``j``
  starts from ``initial_state()`` and gets ``on_marker`` from marker ``j`` on.
- :class:`OpKeyedUnordered` ``U(K, V) -> U(L, W)``: ``in_``, ``id``, ``combine`` (associative and
  commutative), ``initial_state``, ``update_state`` (all pure), ``on_item(last_state, key, value,
  emit)`` (sees the state as of the last marker), ``on_marker(new_state, key, marker, emit)``.
  Runs Table 3 literally: at a marker every key seen so far (including keys with an empty block)
  gets ``update_state(state, agg)`` then ``on_marker``, and the start state of keys not yet seen
  becomes ``update_state(start, id())``.

Positions of outputs (for SORT's total order downstream): an item's ``j``-th output gets
``pos + (j,)``; the ``j``-th output of ``on_marker`` for key ``k`` at marker ``i`` gets
``(-1, i, code(k), j)`` with ``code`` a stable 32-bit hash of ``repr(k)``.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Hashable

from dataflow_kafka.traces.types import Event, Marker, StreamType, TraceError, U, O

__all__ = ["OpStateless", "OpKeyedOrdered", "OpKeyedUnordered", "Template", "runtime_for",
           "StatelessRuntime", "KeyedOrderedRuntime", "KeyedUnorderedRuntime", "key_code"]

_ANY = object()
_MISSING = object()


class Template:
    """Common base: ``input``/``output`` stream types (class attributes, or set per instance)."""

    input: StreamType = U()
    output: StreamType = U()
    name: str | None = None


class OpStateless(Template):
    """Stateless transduction ``U(K, V) -> U(L, W)`` (Table 1)."""

    def on_item(self, key: Hashable, value: Any, emit: Callable) -> None:
        pass

    def on_marker(self, marker: Marker, emit: Callable) -> None:
        pass


class OpKeyedOrdered(Template):
    """Per-key, order-dependent transduction ``O(K, V) -> O(K, W)`` (Table 1); keeps keys."""

    input = O()
    output = O()

    def initial_state(self) -> Any:
        return None

    def on_item(self, state: Any, key: Hashable, value: Any, emit: Callable) -> Any:
        return state

    def on_marker(self, state: Any, key: Hashable, marker: Marker, emit: Callable) -> Any:
        return state


class OpKeyedUnordered(Template):
    """Per-key transduction of unordered blocks ``U(K, V) -> U(L, W)`` (Table 1, Table 3)."""

    def in_(self, key: Hashable, value: Any) -> Any:
        raise NotImplementedError

    def id(self) -> Any:
        raise NotImplementedError

    def combine(self, x: Any, y: Any) -> Any:
        raise NotImplementedError

    def initial_state(self) -> Any:
        return None

    def update_state(self, old_state: Any, agg: Any) -> Any:
        return old_state

    def on_item(self, last_state: Any, key: Hashable, value: Any, emit: Callable) -> None:
        pass

    def on_marker(self, new_state: Any, key: Hashable, marker: Marker, emit: Callable) -> None:
        pass


def key_code(key: Hashable) -> int:
    """A stable 32-bit code of a key (its ``repr``), for the positions of marker outputs."""
    return zlib.crc32(repr(key).encode())


def make_emit(out: list, vertex: str, ts: int, pos: tuple, keep_key: Any = _ANY) -> Callable:
    """An ``emit(key, value, ts=None)`` appending :class:`Event` s to ``out``."""
    count = [0]

    def emit(key: Hashable, value: Any, ts_: int | None = None) -> None:
        if keep_key is not _ANY and key != keep_key:
            raise TraceError(f"vertex {vertex!r}: OpKeyedOrdered emitted key {key!r} while processing key "
                             f"{keep_key!r}; its output is O(K, W) only if every emit keeps the input key "
                             "(fix: emit the input key, or use OpKeyedUnordered / OpStateless to re-key)")
        out.append(Event(key, value, ts if ts_ is None else int(ts_), pos + (count[0],)))
        count[0] += 1

    emit.event_time = ts  # type: ignore[attr-defined]
    return emit


def marker_pos(marker: Marker, key: Hashable = None) -> tuple:
    return (-1, marker.index, key_code(key) if key is not None else 0)


class StatelessRuntime:
    """One instance of an :class:`OpStateless` (``parallel``: one of several instances)."""

    def __init__(self, op: OpStateless, vertex: str, parallel: bool = False) -> None:
        self.op, self.vertex, self.parallel = op, vertex, parallel

    def item(self, e: Event) -> list[Event]:
        out: list[Event] = []
        self.op.on_item(e.key, e.value, make_emit(out, self.vertex, e.ts, e.pos))
        return out

    def marker(self, m: Marker) -> list[Event]:
        out: list[Event] = []
        self.op.on_marker(m, make_emit(out, self.vertex, m.timestamp - 1, marker_pos(m)))
        if out and self.parallel:
            raise TraceError(f"vertex {self.vertex!r}: OpStateless.on_marker emitted at parallelism > 1, so "
                             "every instance would emit it and the output would depend on the parallelism "
                             "(fix: give this vertex par=1, or emit from a keyed template's on_marker)")
        return out

    def get_state(self) -> Any:
        return None

    def set_state(self, state: Any) -> None:
        pass


class KeyedOrderedRuntime:
    """One instance of an :class:`OpKeyedOrdered`, fed in order per key (after SORT)."""

    def __init__(self, op: OpKeyedOrdered, vertex: str) -> None:
        self.op, self.vertex = op, vertex
        self.states: dict[Hashable, Any] = {}

    def item(self, e: Event) -> list[Event]:
        out: list[Event] = []
        state = self.states.get(e.key, _MISSING)
        if state is _MISSING:
            state = self.op.initial_state()
        self.states[e.key] = self.op.on_item(state, e.key, e.value, make_emit(out, self.vertex, e.ts, e.pos, e.key))
        return out

    def marker(self, m: Marker) -> list[Event]:
        out: list[Event] = []
        for k, state in self.states.items():
            self.states[k] = self.op.on_marker(state, k, m, make_emit(out, self.vertex, m.timestamp - 1,
                                                                      marker_pos(m, k), k))
        return out

    def get_state(self) -> Any:
        return self.states

    def set_state(self, state: Any) -> None:
        self.states = state


class KeyedUnorderedRuntime:
    """One instance of an :class:`OpKeyedUnordered`: Table 3 (``stateMap``, ``startS``)."""

    def __init__(self, op: OpKeyedUnordered, vertex: str) -> None:
        self.op, self.vertex = op, vertex
        self.state_map: dict[Hashable, list] = {}      # key -> [agg, state]
        self.start = op.initial_state()

    def item(self, e: Event) -> list[Event]:
        op, out = self.op, []
        r = self.state_map.get(e.key)
        if r is None:
            r = [op.id(), self.start]
        op.on_item(r[1], e.key, e.value, make_emit(out, self.vertex, e.ts, e.pos))
        r[0] = op.combine(r[0], op.in_(e.key, e.value))
        self.state_map[e.key] = r
        return out

    def marker(self, m: Marker) -> list[Event]:
        op, out = self.op, []
        for k, r in self.state_map.items():
            r[1] = op.update_state(r[1], r[0])
            r[0] = op.id()
            op.on_marker(r[1], k, m, make_emit(out, self.vertex, m.timestamp - 1, marker_pos(m, k)))
        self.start = op.update_state(self.start, op.id())
        return out

    def get_state(self) -> Any:
        return (self.state_map, self.start)

    def set_state(self, state: Any) -> None:
        self.state_map, self.start = state


def runtime_for(op: Template, vertex: str, parallel: bool = False):
    """The sequential runtime of ``op`` (input assumed in the order its type needs)."""
    if isinstance(op, OpStateless):
        return StatelessRuntime(op, vertex, parallel)
    if isinstance(op, OpKeyedOrdered):
        return KeyedOrderedRuntime(op, vertex)
    if isinstance(op, OpKeyedUnordered):
        return KeyedUnorderedRuntime(op, vertex)
    raise TraceError(f"vertex {vertex!r}: {type(op).__name__} is not a template (subclass OpStateless, "
                     "OpKeyedOrdered or OpKeyedUnordered)")
