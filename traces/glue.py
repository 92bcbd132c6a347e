"""Glue the compiler inserts (data-trace types §4-§5): HASH, MRG, SORT, and the optimistic edge.

- :func:`hash_instance`: HASH's choice of instance for a key (the stage layer's routing function
  on ``repr(key)``, so the local executor and Spark agree); markers go to every instance.
- :class:`Merge` (MRG): aligns its input channels on markers. Marker ``i`` is forwarded only when
  every channel sent it; an item that arrives on a channel after that channel's marker ``i`` (an
  early item of block ``i+1``) is held until marker ``i`` is forwarded, never leaked into block ``i``.
- :class:`Sorted` (SORT fused with the operator after it, as the paper does in Storm): holds each
  block and feeds it to the operator sorted by :func:`~traces.types.order_key` (event time, then
  partition and offset, then position among the parent's outputs) when its marker arrives.
- :class:`Optimistic`: an ``OpKeyedOrdered`` fed at once, in arrival order, through FlameStream's
  replaying per-key logs (:class:`optimistic.KeyedState`: a late item is inserted at its place and
  the key replays, sending tombstones for outputs that changed) and released at one
  :class:`optimistic.Barrier` when the block's marker arrives. Released output equals
  :class:`Sorted`'s (same order within the block), without waiting to start the work.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Hashable

from traces.templates import OpKeyedOrdered, make_emit, marker_pos
from traces.types import Event, Marker, TraceError, order_key

__all__ = ["hash_instance", "Merge", "Direct", "Sorted", "Optimistic", "drive"]


def hash_instance(key: Hashable, n: int) -> int:
    """HASH: the instance (of ``n``) that handles ``key``."""
    if n == 1:
        return 0
    from keygroups.routing import key_group_of

    return key_group_of(repr(key), n)


class Merge:
    """MRG over ``channels`` inputs; :meth:`push` returns what it forwards, in order."""

    def __init__(self, channels: int) -> None:
        if channels < 1:
            raise TraceError(f"MRG needs at least one input channel, got {channels}")
        self.ahead = [False] * channels          # channel sent the marker not yet forwarded
        self.held: list[deque] = [deque() for _ in range(channels)]
        self.pending_marker: Marker | None = None

    def push(self, channel: int, message: Event | Marker) -> list[Event | Marker]:
        if self.ahead[channel]:
            self.held[channel].append(message)
            return []
        if not isinstance(message, Marker):
            return [message]
        if self.pending_marker is not None and message != self.pending_marker:
            raise TraceError(f"MRG: channel {channel} sent {message} while another channel sent "
                             f"{self.pending_marker}; markers must be the same on every input")
        self.ahead[channel], self.pending_marker = True, message
        out: list[Event | Marker] = []
        while all(self.ahead):
            out.append(self.pending_marker)
            self.pending_marker = None
            self.ahead = [False] * len(self.ahead)
            for c, q in enumerate(self.held):
                while q and not self.ahead[c]:
                    m = q.popleft()
                    if isinstance(m, Marker):
                        if self.pending_marker is not None and m != self.pending_marker:
                            raise TraceError(f"MRG: channel {c} sent {m}, another {self.pending_marker}")
                        self.ahead[c], self.pending_marker = True, m
                    else:
                        out.append(m)
        return out


def drive(proc: Any, messages: Any) -> list:
    """Run ``messages`` through a vertex instance; its outputs, each marker after its block."""
    out: list = []
    for msg in messages:
        if isinstance(msg, Marker):
            out.extend(proc.marker(msg))
            out.append(msg)
        else:
            out.extend(proc.item(msg))
    return out


class Direct:
    """No glue: items go to the runtime in arrival order (U inputs, or an O edge kept in order)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def item(self, e: Event) -> list[Event]:
        return self.runtime.item(e)

    def marker(self, m: Marker) -> list[Event]:
        return self.runtime.marker(m)

    def get_state(self) -> Any:
        return self.runtime.get_state()

    def set_state(self, state: Any) -> None:
        self.runtime.set_state(state)

    counters: dict = {}


class Sorted(Direct):
    """SORT fused with the runtime after it: per block, in :func:`order_key` order."""

    def __init__(self, runtime: Any) -> None:
        super().__init__(runtime)
        self.block: list[Event] = []

    def item(self, e: Event) -> list[Event]:
        self.block.append(e)
        return []

    def marker(self, m: Marker) -> list[Event]:
        block, self.block = self.block, []
        block.sort(key=order_key)
        out: list[Event] = []
        for e in block:
            out.extend(self.runtime.item(e))
        out.extend(self.runtime.marker(m))
        return out

    def get_state(self) -> Any:
        return (self.runtime.get_state(), self.block)

    def set_state(self, state: Any) -> None:
        inner, self.block = state
        self.runtime.set_state(inner)


_AFTER_ITEMS = 1 << 62     # a marker's entry sorts after every item of its block


class Optimistic:
    """An :class:`OpKeyedOrdered` run optimistically (FlameStream): see the module docstring.

    Entries are ordered by ``Meta(segment, ts, 0, pos)``: the segment (markers seen so far) first,
    so an item never moves out of its block; a marker is an entry of every key seen so far at the
    end of its segment. The barrier releases segment ``s`` when marker ``s`` arrives (MRG has then
    delivered every item of the block).
    """

    def __init__(self, op: OpKeyedOrdered, vertex: str) -> None:
        from optimistic import Barrier, KeyedState

        if not isinstance(op, OpKeyedOrdered):
            raise TraceError(f"vertex {vertex!r}: the optimistic strategy is for OpKeyedOrdered inputs, "
                             f"got {type(op).__name__}")
        self.op, self.vertex = op, vertex
        self.keyed = KeyedState(op.initial_state())
        self.barrier = Barrier()
        self.segment = 0

    def _step(self, state: Any, payload: Any) -> tuple[Any, list[Event]]:
        out: list[Event] = []
        if isinstance(payload, Event):
            e = payload
            state = self.op.on_item(state, e.key, e.value, make_emit(out, self.vertex, e.ts, e.pos, e.key))
        else:
            key, m = payload
            state = self.op.on_marker(state, key, m, make_emit(out, self.vertex, m.timestamp - 1,
                                                                marker_pos(m, key), key))
        return state, out

    def item(self, e: Event) -> list[Event]:
        from optimistic import Item, Meta

        out: list = []
        self.keyed.apply(e.key, Item(Meta(self.segment, e.ts, 0, tuple(e.pos)), e, False), self._step, out)
        self.barrier.insert_all(out)
        return []

    def marker(self, m: Marker) -> list[Event]:
        from optimistic import Item, Meta

        out: list = []
        for key in self.keyed.keys():
            self.keyed.apply(key, Item(Meta(self.segment, _AFTER_ITEMS, 0, ()), (key, m), False), self._step, out)
        self.barrier.insert_all(out)
        self.segment += 1
        released = [i.payload for i in self.barrier.punctuate(self.segment)]
        self.keyed.collect_garbage(self.segment)
        return released

    @property
    def counters(self) -> dict:
        c = self.barrier.counters
        return {"items_in": c.items_in, "tombstones_in": c.tombstones_in, "released": c.released}

    def get_state(self) -> Any:
        return (self.keyed.to_bytes(), self.barrier.to_bytes(), self.segment)

    def set_state(self, state: Any) -> None:
        from optimistic import Barrier, KeyedState

        k, b, self.segment = state
        self.keyed, self.barrier = KeyedState.from_bytes(k), Barrier.from_bytes(b)
