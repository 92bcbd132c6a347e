"""Data-trace types U(K, V) and O(K, V), markers, events and blocks (data-trace types §3-§4).

A stream between two vertices is a sequence of :class:`Event` items and :class:`Marker` s. Its
*type* says which reorderings do not change its meaning (the dependence relation of §3.1):

- ``U(K, V)``: between two markers, a bag of key-value items (only markers are ordered);
- ``O(K, V)``: between two markers, per key a sequence (items of one key are ordered, keys are
  independent).

Markers are totally ordered: marker ``i`` carries the timestamp ``P * i`` for the source's period
``P``, and the items between marker ``i - 1`` and marker ``i`` form **block i**. At the source,
block ``i`` holds exactly the records with event time in ``[P*(i-1), P*i)`` (:class:`Blocker`),
so both sides of the marker property of Example 4.1 hold by construction: everything before
marker ``i`` is below ``P*i``, everything after it is at or above. Downstream, the block of an
item is the segment it travels in (an operator may give its outputs any event time).

Every event carries a position ``pos`` (a tuple of ints: the source record's partition and offset,
then the index of each derived output among its parent's outputs); ``(ts, pos)`` is the total
order SORT uses (:func:`order_key`), the same on every replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, NamedTuple
from dataflow_kafka.errors import TraceError

__all__ = ["StreamType", "U", "O", "Marker", "Event", "Record", "Punctuation", "Blocker", "order_key"]


@dataclass(frozen=True)
class StreamType:
    """``U(K, V)`` (``ordered=False``) or ``O(K, V)``; ``K``/``V`` are names or Python types,
    ``None`` for "any"."""

    ordered: bool
    key: Any = None
    value: Any = None

    def __repr__(self) -> str:
        def name(t: Any) -> str:
            return "*" if t is None else getattr(t, "__name__", str(t))
        return f"{'O' if self.ordered else 'U'}({name(self.key)}, {name(self.value)})"

    def accepts(self, other: "StreamType") -> bool:
        """Whether items of ``other`` fit this type's key and value (ordering aside)."""
        return all(a is None or b is None or a == b for a, b in ((self.key, other.key), (self.value, other.value)))

    def unordered(self) -> "StreamType":
        return StreamType(False, self.key, self.value)


def U(key: Any = None, value: Any = None) -> StreamType:
    """Unordered type: a bag of (key, value) items between markers."""
    return StreamType(False, key, value)


def O(key: Any = None, value: Any = None) -> StreamType:  # noqa: E743 - the paper's name
    """Ordered type: per key, a sequence of values between markers."""
    return StreamType(True, key, value)


class Marker(NamedTuple):
    """Synchronization marker ``index``: closes block ``index``; ``timestamp`` = ``P * index``."""

    index: int
    timestamp: int


class Event(NamedTuple):
    """A key-value item with its event time (ms) and position (see the module docstring)."""

    key: Hashable
    value: Any
    ts: int
    pos: tuple


def order_key(e: Event) -> tuple:
    """SORT's total order: event time, then partition and offset, then position among outputs."""
    return (e.ts, e.pos)


class Record(NamedTuple):
    """A source record: Kafka ``partition``/``offset``, event time ``ts`` (ms), key and value."""

    partition: int
    offset: int
    ts: int
    key: Hashable
    value: Any


class Punctuation(NamedTuple):
    """"No more records of ``partition`` below ``ts``" (the dataflow-kafka source's punctuation)."""

    partition: int
    ts: int


class Blocker:
    """The source side of the marker discipline: records to blocks of ``period_ms``, markers when
    the low watermark passes a block's end, late records to a side output (data-trace types §4,
    Example 4.1: "the i-th marker can be thought of as a watermark with timestamp P*i").

    - Block ``i`` = event time in ``[P*(i-1), P*i)``; it closes (marker ``i``) when the low
      watermark (min over ``partitions`` of their newest punctuation; ``None`` until each has sent
      one) reaches ``P*i``. The first marker is that of the first low watermark ``w0``: block
      ``w0 // P`` then holds every record below ``P * (w0 // P)`` that arrived before it.
    - A record of the open block passes at once; a record of a later block is held until the
      blocks before it close (MRG's rule: early items of block ``i+1`` never leak into block ``i``).
    - A record of a closed block is late: returned in :attr:`late` (and counted), never merged.

    :meth:`push` returns what the source emits, in order. Events get ``pos = (partition, offset)``.
    """

    def __init__(self, period_ms: int, partitions: int | list[int] | None = None) -> None:
        if not isinstance(period_ms, int) or period_ms <= 0:
            raise TraceError(f"period_ms must be a positive int (ms), got {period_ms!r}")
        self.period_ms = period_ms
        self.partitions = list(range(partitions)) if isinstance(partitions, int) else partitions
        self.punctuations: dict[int, int] = {}
        self.closed: int | None = None          # index of the last marker emitted
        self.pending: dict[int, list[Event]] = {}
        self.late: list[Record] = []

    def block_of(self, ts: int) -> int:
        return ts // self.period_ms + 1

    def push(self, message: Record | Punctuation) -> list[Event | Marker]:
        """Emitted events and markers after ``message``."""
        if isinstance(message, Punctuation):
            old = self.punctuations.get(message.partition)
            if old is None or message.ts > old:
                self.punctuations[message.partition] = message.ts
            return self.advance(self._low_watermark())
        r = message
        e = Event(r.key, r.value, int(r.ts), (int(r.partition), int(r.offset)))
        return self.add(e, self.block_of(e.ts), r)

    def add(self, e: Event, block: int, origin: Any = None) -> list[Event | Marker]:
        """Add an event of ``block``: emitted now, held, or late (``origin`` goes to :attr:`late`)."""
        if self.closed is not None and block <= self.closed:
            self.late.append(origin if origin is not None else e)
            return []
        if self.closed is not None and block == self.closed + 1:
            return [e]
        self.pending.setdefault(block, []).append(e)
        return []

    def _low_watermark(self) -> int | None:
        names = self.partitions if self.partitions is not None else list(self.punctuations)
        if not names or any(p not in self.punctuations for p in names):
            return None
        return min(self.punctuations[p] for p in names)

    def advance(self, watermark_ms: int | None) -> list[Event | Marker]:
        """Markers (and released held events) for the blocks ``watermark_ms`` closes."""
        if watermark_ms is None:
            return []
        target = watermark_ms // self.period_ms
        out: list[Event | Marker] = []
        if self.closed is None:
            for b in sorted(b for b in self.pending if b <= target):
                out.extend(self.pending.pop(b))
            self.closed = target
            out.append(Marker(target, target * self.period_ms))
            out.extend(self.pending.pop(target + 1, []))
        while self.closed < target:
            self.closed += 1
            out.append(Marker(self.closed, self.closed * self.period_ms))
            out.extend(self.pending.pop(self.closed + 1, []))
        return out

    def next_block(self) -> int | None:
        """The open block (items emitted now belong to it), or None before the first marker."""
        return None if self.closed is None else self.closed + 1
