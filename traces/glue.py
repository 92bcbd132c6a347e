"""Glue the compiler inserts (data-trace types §4-§5): HASH, MRG, SORT, and the optimistic edge.

- :func:`hash_instance`: HASH's choice of instance for a key (the stage layer's routing function
  on ``repr(key)``, so the local executor and Spark agree); markers go to every instance.
- :class:`Merge` (MRG): aligns its input channels on markers. Marker ``i`` is forwarded only when
  every channel sent it (a channel's first marker stands for every marker below it, so inputs
  whose sources started in different blocks align); an item that arrives on a channel after that
  channel's marker ``i`` (an early item of block ``i+1``) is held until marker ``i`` is forwarded,
  never leaked into block ``i``.
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

from typing import Any, Hashable

from dataflow_kafka.traces.templates import OpKeyedOrdered, make_emit, marker_pos
from dataflow_kafka.traces.types import Event, Marker, TraceError, order_key

__all__ = ["hash_instance", "Merge", "Direct", "Sorted", "Optimistic", "drive"]


def hash_instance(key: Hashable, n: int) -> int:
    """HASH: the instance (of ``n``) that handles ``key``."""
    if n == 1:
        return 0
    from dataflow_kafka.keygroups.routing import key_group_of

    return key_group_of(repr(key), n)


class Merge:
    """MRG over ``channels`` inputs; :meth:`push` returns what it forwards, in order.

    Marker ``i`` means "block ``i`` is complete on this channel"; a channel's markers are
    consecutive from its first one, and its **first marker** ``j`` also stands for every marker
    below ``j`` (a source's first marker closes every block below it at once: :class:`~traces.types.Blocker`).
    So channels whose first markers differ (two sources whose first low watermarks fall in
    different blocks) are aligned, not refused:

    - nothing is forwarded until every channel has sent its first marker; the merged stream then
      starts at the smallest first marker ``m0 = min_c first(c)``;
    - an item belongs to its channel's block: the one after the channel's last marker, or for an
      item before the channel's first marker ``j``, block ``j`` (the block that held it at its
      source); it is forwarded when its block is the open one (after marker ``block - 1``);
    - marker ``i >= m0`` is forwarded when every channel has sent it or a later one.

    Every run of the same inputs gives the same merged blocks, in whatever order the channels
    interleave (the blocks depend only on each channel's own sequence).
    """

    def __init__(self, channels: int) -> None:
        if channels < 1:
            raise TraceError(f"MRG needs at least one input channel, got {channels}")
        self.first: list[int | None] = [None] * channels
        self.last: list[int | None] = [None] * channels
        self.held: list[dict] = [{} for _ in range(channels)]      # block (None: before the first marker) -> items
        self.markers: dict[int, Marker] = {}                       # received, not yet forwarded
        self.forwarded: int | None = None                          # index of the last forwarded marker

    def push(self, channel: int, message: Event | Marker) -> list[Event | Marker]:
        if isinstance(message, Marker):
            return self._marker(channel, message)
        last = self.last[channel]
        block = None if last is None else last + 1
        if block is not None and self.forwarded is not None and block == self.forwarded + 1:
            return [message]                                          # the open block
        self.held[channel].setdefault(block, []).append(message)
        return []

    def _marker(self, channel: int, m: Marker) -> list[Event | Marker]:
        last = self.last[channel]
        if last is not None and m.index != last + 1:
            raise TraceError(f"MRG: channel {channel} sent {m} after marker {last}; a channel's markers must be "
                             "consecutive")
        known = self.markers.get(m.index)
        if known is not None and known != m:
            raise TraceError(f"MRG: channel {channel} sent {m} while another channel sent {known}; markers must be "
                             "the same on every input (fix: give every source of the DAG the same period_ms)")
        if self.forwarded is None or m.index > self.forwarded:
            self.markers[m.index] = m
        if self.first[channel] is None:
            self.first[channel] = m.index
        self.last[channel] = m.index
        if any(f is None for f in self.first):
            return []
        out: list[Event | Marker] = []
        if self.forwarded is None:
            self.forwarded = min(self.first) - 1                     # type: ignore[type-var]
            out.extend(self._release(self.forwarded + 1))
        while min(self.last) > self.forwarded:                      # type: ignore[type-var, operator]
            k = self.forwarded + 1
            out.append(self.markers.pop(k))
            self.forwarded = k
            out.extend(self._release(k + 1))
        return out

    def _release(self, block: int) -> list[Event]:
        out: list[Event] = []
        for c, held in enumerate(self.held):
            if self.first[c] == block:
                out.extend(held.pop(None, []))
            out.extend(held.pop(block, []))
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
        from dataflow_kafka.optimistic import Barrier, KeyedState

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
        from dataflow_kafka.optimistic import Item, Meta

        out: list = []
        self.keyed.apply(e.key, Item(Meta(self.segment, e.ts, 0, tuple(e.pos)), e, False), self._step, out)
        self.barrier.insert_all(out)
        return []

    def marker(self, m: Marker) -> list[Event]:
        from dataflow_kafka.optimistic import Item, Meta

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
        from dataflow_kafka.optimistic import Barrier, KeyedState

        k, b, self.segment = state
        self.keyed, self.barrier = KeyedState.from_bytes(k), Barrier.from_bytes(b)
