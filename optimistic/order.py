"""The total order on data items (FlameStream, section V.A) and the item type.

Every item carries a :class:`Meta`: event time in milliseconds, then the source id (the Kafka
partition), then the offset inside that source, then a *child path* for items derived from one
input. Items are compared lexicographically on these four fields, so equal timestamps are
routine and the order is still total, and it is the same on every replay because nothing in it
depends on arrival.

The child path is a tuple of ints: the ``j``-th output of an item with path ``p`` gets path
``p + (j,)``. Tuple comparison then gives exactly the paper's rule (Figure 5): an output follows
the item it came from and precedes the next item, and several outputs keep their order::

    (5, 0, 7, ())  <  (5, 0, 7, (0,))  <  (5, 0, 7, (0, 3))  <  (5, 0, 7, (1,))  <  (5, 0, 8, ())

A :class:`Meta` is a plain named tuple of ints, so it compares, hashes and pickles as a tuple.

Example
-------
>>> m = Meta(1_000, 2, 41, ())
>>> m.child(0) < m.child(1) < Meta(1_000, 2, 42, ())
True
>>> Item.source(1_000, 2, 41, "hello").tombstone
False
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from typing import Any, NamedTuple, Protocol, Sequence

__all__ = ["Meta", "Item"]

_HEAD = struct.Struct(">QIQ")  # time_ms, source, offset
_PART = struct.Struct(">I")  # one child index
_SIGN64, _SIGN32 = 1 << 63, 1 << 31  # time and offset are signed 64-bit, source and path 32-bit


class Meta(NamedTuple):
    """Position of an item in the total order: compared as ``(time_ms, source, offset, path)``."""

    time_ms: int
    source: int
    offset: int
    path: tuple[int, ...] = ()

    def sort_key(self) -> bytes:
        """Bytes whose lexicographic (unsigned) order is this order: a single binary column a
        Spark or Kafka consumer can sort by. Fixed-width big-endian fields offset by half their
        range (so negative values sort first); a path that is a prefix of another sorts first, as in tuple comparison."""
        head = _HEAD.pack(self[0] + _SIGN64, self[1] + _SIGN32, self[2] + _SIGN64)
        return head + b"".join(_PART.pack(i + _SIGN32) for i in self[3])

    @classmethod
    def from_sort_key(cls, key: bytes) -> "Meta":
        """The meta encoded by :meth:`sort_key`."""
        t, s, o = _HEAD.unpack_from(key)
        path = tuple(p - _SIGN32 for (p,) in _PART.iter_unpack(key[_HEAD.size:]))
        return cls(t - _SIGN64, s - _SIGN32, o - _SIGN64, path)

    def child(self, index: int) -> "Meta":
        """The meta of the ``index``-th output derived from this item."""
        return _new_tuple(Meta, (self[0], self[1], self[2], self[3] + (index,)))


_new_tuple = tuple.__new__  # builds a Meta without NamedTuple's argument handling (hot path)


class Item(NamedTuple):
    """A data item or, with ``tombstone=True``, the retraction of an equal item (same meta and
    payload) emitted earlier. Tombstones carry the payload so they travel the same path."""

    meta: Meta
    payload: Any
    tombstone: bool = False

    @classmethod
    def source(cls, time_ms: int, source: int, offset: int, payload: Any) -> "Item":
        """An input item read from ``source`` (a Kafka partition) at ``offset``."""
        return cls(Meta(int(time_ms), int(source), int(offset), ()), payload, False)

    def derive(self, index: int, payload: Any) -> "Item":
        """The ``index``-th output computed from this item; a tombstone derives tombstones."""
        return Item(self.meta.child(index), payload, self.tombstone)

    def retraction(self) -> "Item":
        """The tombstone that cancels this item."""
        return Item(self.meta, self.payload, True)


def same_value(a: Any, b: Any) -> bool:
    """``a == b`` as a bool; values whose equality is not a bool (numpy arrays) count as different."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:
        return False


class _Located(Protocol):
    meta: Meta
    payload: Any


def _meta_of(entry: _Located) -> Meta:
    return entry.meta


def locate(entries: Sequence[_Located], item: Item) -> tuple[int, bool]:
    """In ``entries`` sorted by meta: the index of the entry with ``item``'s meta and payload and
    ``True``, or the index to insert it at (after equal metas) and ``False``."""
    i = bisect_left(entries, item.meta, key=_meta_of)
    while i < len(entries) and entries[i].meta == item.meta:
        if same_value(entries[i].payload, item.payload):
            return i, True
        i += 1
    return i, False
