"""The barrier at the sink (FlameStream, Algorithm 3): the only stage that waits.

Items and tombstones arrive in any order. The barrier keeps them in total order as a multiset
with signed counts, so a tombstone cancels its item whether it arrives after it, in the same
micro-batch, or before it (then it waits as a negative count for the item). A punctuation
``bound_ms`` promises that no item or tombstone with event time below it is still on its way;
the barrier then releases, in order, every item strictly below the bound that is still valid.

"Single buffer" means one buffering stage per pipeline. The barrier itself may be partitioned
(one :class:`Barrier` per Spark key group): each partition releases its own items in order.

Counters (:class:`BarrierCounters`) give the paper's replay ratio (section VI.B): everything that
arrived at the barrier, items and tombstones, over the valid items it released.

Example
-------
>>> from dataflow_kafka.optimistic.order import Item
>>> b = Barrier()
>>> late = Item.source(5, 0, 1, "x")
>>> b.insert(late.retraction())          # the tombstone overtook its item
>>> b.insert(Item.source(7, 0, 2, "y"))
>>> b.insert(late)
>>> [i.payload for i in b.punctuate(10)]
['y']
"""

from __future__ import annotations

import pickle
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from dataflow_kafka.optimistic.order import Item, Meta, locate
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["Barrier", "BarrierCounters"]

_FORMAT = 1


@dataclass
class BarrierCounters:
    """What a barrier saw. Lags are in the unit of the ``now`` the caller passes."""

    items_in: int = 0
    tombstones_in: int = 0
    released: int = 0
    max_buffer: int = 0
    early_tombstones: int = 0  # tombstones that arrived before their item (overtook it)
    orphan_tombstones: int = 0  # retractions whose item never came before the punctuation
    late_items: int = 0  # arrived below a bound already released: dropped (punctuation broken)
    late_tombstones: int = 0  # cancel an item already released (punctuation broken)
    lag_sum: float = 0
    lag_max: float = 0

    @property
    def replay_ratio(self) -> float:
        """(items + tombstones arriving) / valid items released; 1.0 means no overhead."""
        arrived = self.items_in + self.tombstones_in
        return arrived / self.released if self.released else float("inf") if arrived else 1.0

    @property
    def lag_mean(self) -> float:
        return self.lag_sum / self.released if self.released else 0.0


class _Slot:
    __slots__ = ("meta", "payload", "count", "since")

    def __init__(self, meta: Meta, payload: Any, count: int, since: float) -> None:
        self.meta, self.payload, self.count, self.since = meta, payload, count, since


class Barrier:
    """Buffers items in total order, cancels them by tombstones, releases below punctuations."""

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self.released_below_ms: int | float | None = None
        self.counters = BarrierCounters()

    def __len__(self) -> int:
        return len(self._slots)

    def insert(self, item: Item, now: float = 0) -> None:
        """Add an item or a tombstone; ``now`` (any clock) is kept to measure release lag."""
        c = self.counters
        if item.tombstone:
            c.tombstones_in += 1
        else:
            c.items_in += 1
        if self.released_below_ms is not None and item.meta.time_ms < self.released_below_ms:
            if item.tombstone:
                c.late_tombstones += 1
            else:
                c.late_items += 1
            warnings.warn(
                f"barrier: {'tombstone' if item.tombstone else 'item'} at event time {item.meta.time_ms} "
                f"arrived below the released bound {self.released_below_ms}; dropped (a punctuation "
                "was broken, so the output may be wrong)",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        slots = self._slots
        i, found = locate(slots, item)
        sign = -1 if item.tombstone else 1
        if found:
            slot = slots[i]
            slot.count += sign
            if slot.count == 0:
                del slots[i]
        else:
            if sign < 0:
                c.early_tombstones += 1
            slots.insert(i, _Slot(item.meta, item.payload, sign, now))
            c.max_buffer = max(c.max_buffer, len(slots))

    def insert_all(self, items: Iterable[Item], now: float = 0) -> None:
        for item in items:
            self.insert(item, now)

    def punctuate(self, bound_ms: int | float, now: float = 0) -> list[Item]:
        """Release, in order, the valid items with event time strictly below ``bound_ms``."""
        if self.released_below_ms is not None and bound_ms <= self.released_below_ms:
            return []
        self.released_below_ms = bound_ms
        slots, c = self._slots, self.counters
        k = 0
        out: list[Item] = []
        while k < len(slots) and slots[k].meta.time_ms < bound_ms:
            slot = slots[k]
            if slot.count < 0:
                c.orphan_tombstones -= slot.count
            for _ in range(slot.count):
                out.append(Item(slot.meta, slot.payload, False))
                lag = now - slot.since
                c.lag_sum += lag
                c.lag_max = max(c.lag_max, lag)
            k += 1
        del slots[:k]
        c.released += len(out)
        return out

    def held(self) -> list[tuple[Meta, Any, int]]:
        """What waits for release, in order: ``(meta, payload, count)`` (a negative count: a
        tombstone waiting for its item); read only."""
        return [(s.meta, s.payload, s.count) for s in self._slots]

    def to_bytes(self) -> bytes:
        slots = [(s.meta, s.payload, s.count, s.since) for s in self._slots]
        return pickle.dumps((_FORMAT, self.released_below_ms, asdict(self.counters), slots), protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes) -> "Barrier":
        fmt, bound, counters, slots = pickle.loads(data)
        if fmt != _FORMAT:
            raise InvalidArgumentError(f"Barrier format {fmt!r} is not supported (expected {_FORMAT})")
        b = cls()
        b.released_below_ms = bound
        b.counters = BarrierCounters(**counters)
        b._slots = [_Slot(Meta(*m), p, n, since) for m, p, n, since in slots]
        return b
