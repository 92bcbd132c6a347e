"""Per-key ordered logs that replay from the insertion point (FlameStream, sections V.B to V.D).

The paper builds every order-sensitive operator from windowed grouping and a map: a stateful
transformation is grouping with window 2 whose output goes through a "combined map" that sends
its new state back into the grouping through a cycle (section V.C, Figure 6). Without a physical
cycle the same thing is a log per key of the inputs in total order, each with the state after it
and the outputs it produced:

    entry = (meta, payload, count, state_after, outputs)

When an item arrives out of order it is inserted where the order puts it (Algorithm 2's
``lowerBound``) and the entries from there on are replayed through the user's step
``(state, payload) -> (state, outputs)``. Replay stops as soon as the state entering an entry is
equal to the state that entered it before, because everything after is then unchanged. For each
replayed entry the operator emits tombstones for outputs that changed and the new outputs, and
nothing for outputs that stayed equal.

Windowed grouping (Algorithm 1) is the step whose state is the last ``window - 1`` payloads of
the bucket: a late insertion changes the states of the next ``window - 1`` entries only, so the
replay stops after exactly the groups that contain the insertion position, which are the groups
Algorithm 2 sends tombstones for and emits again.

Tombstones are retractions, not deletes: each entry has a signed count, an entry is present when
the count is positive, and a tombstone that arrives before its item leaves a negative entry that
the item cancels later. Links may therefore reorder anything.

Garbage collection (:meth:`KeyedState.collect_garbage`) drops entries below the release bound
and keeps the state after the last of them as the key's base state; for grouping that base state
is exactly the ``window - 1`` predecessors the paper says to keep.

States and payloads must be treated as immutable (return a new state, do not mutate the old one):
old states are kept for replay. They are compared with ``==``; an equality that says "different"
too often only makes replay longer, never wrong.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Hashable, Iterable

from dataflow_kafka.optimistic.order import Item, Meta, locate, same_value
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["KeyedState", "Step"]

Step = Callable[[Any, Any], "tuple[Any, Iterable[Any]]"]
"""A user step ``(state, payload) -> (new_state, outputs)``."""

_FORMAT = 1
_MISSING = object()


class _Entry:
    __slots__ = ("meta", "payload", "count", "state", "outputs")

    def __init__(self, meta: Meta, payload: Any, count: int, state: Any, outputs: tuple) -> None:
        self.meta, self.payload, self.count, self.state, self.outputs = meta, payload, count, state, outputs


class _KeyLog:
    """The ordered log of one key."""

    __slots__ = ("base_state", "entries")

    def __init__(self, base_state: Any, entries: list[_Entry] | None = None) -> None:
        self.base_state = base_state
        self.entries: list[_Entry] = entries if entries is not None else []

    def _state_before(self, i: int) -> Any:
        return self.entries[i - 1].state if i else self.base_state

    def apply(self, item: Item, step: Step, out: list[Item]) -> None:
        """Add ``item`` (or retract it, for a tombstone) and append what changes to ``out``."""
        entries = self.entries
        i, found = locate(entries, item)
        sign = -1 if item.tombstone else 1
        if found:
            entry = entries[i]
            was_present = entry.count > 0
            entry.count += sign
            if was_present != (entry.count > 0):
                self._replay(i, step, out)
        else:
            entry = _Entry(item.meta, item.payload, sign, self._state_before(i), ())
            entries.insert(i, entry)
            if sign > 0:
                self._replay(i, step, out)
        if entry.count == 0:
            del entries[i]  # absent and passing its state through: nothing depends on it

    def _replay(self, i: int, step: Step, out: list[Item]) -> None:
        entries = self.entries
        state = self._state_before(i)
        old_in = state
        for j in range(i, len(entries)):
            if j > i and same_value(state, old_in):
                return
            entry = entries[j]
            old_in = entry.state
            if entry.count > 0:
                state, outputs = step(state, entry.payload)
                outputs = tuple(outputs)
            else:
                outputs = ()
            _emit_changes(entry.meta, entry.outputs, outputs, out)
            entry.state, entry.outputs = state, outputs

    def collect_garbage(self, bound_ms: int) -> int:
        entries = self.entries
        k = 0
        while k < len(entries) and entries[k].meta.time_ms < bound_ms:
            k += 1
        if k:
            self.base_state = entries[k - 1].state
            del entries[:k]
        return k


def _emit_changes(meta: Meta, old: tuple, new: tuple, out: list[Item]) -> None:
    for j in range(max(len(old), len(new))):
        before = old[j] if j < len(old) else _MISSING
        after = new[j] if j < len(new) else _MISSING
        if before is not _MISSING and after is not _MISSING and same_value(before, after):
            continue
        if before is not _MISSING:
            out.append(Item(meta.child(j), before, True))
        if after is not _MISSING:
            out.append(Item(meta.child(j), after, False))


class KeyedState:
    """The state of one replaying stage for the keys of one partition (a Spark key group).

    A Spark processor reads it once per key group and micro-batch with :meth:`from_bytes`, lets
    the stage process the batch, and writes :meth:`to_bytes` back.
    """

    def __init__(self, initial_state: Any) -> None:
        self.initial_state = initial_state
        self._logs: dict[Hashable, _KeyLog] = {}
        self._busy: set[Hashable] = set()  # keys whose log has entries: what GC has to visit

    def apply(self, key: Hashable, item: Item, step: Step, out: list[Item]) -> None:
        """Insert or retract ``item`` in the log of ``key``; append emitted items to ``out``."""
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = _KeyLog(self.initial_state)
        log.apply(item, step, out)
        if log.entries:
            self._busy.add(key)

    def collect_garbage(self, bound_ms: int) -> int:
        """Forget entries with event time below ``bound_ms``; returns how many were dropped."""
        dropped = 0
        for key in list(self._busy):
            log = self._logs[key]
            dropped += log.collect_garbage(bound_ms)
            if not log.entries:
                self._busy.discard(key)
        return dropped

    def keys(self) -> list[Hashable]:
        return list(self._logs)

    def entry_count(self) -> int:
        """Entries held over all keys (present ones and pending retractions)."""
        return sum(len(self._logs[key].entries) for key in self._busy)

    def base_state(self, key: Hashable) -> Any:
        """The state of ``key`` after all entries collected so far."""
        log = self._logs.get(key)
        return self.initial_state if log is None else log.base_state

    def log(self, key: Hashable) -> list[tuple[Meta, Any, int]]:
        """The entries ``key``'s log holds (``(meta, payload, count)``, in order; a negative
        count: a tombstone waiting for its item); read only."""
        log = self._logs.get(key)
        return [] if log is None else [(e.meta, e.payload, e.count) for e in log.entries]

    def last_state(self, key: Hashable) -> Any:
        """The state of ``key`` after every entry held (what its next item starts from)."""
        log = self._logs.get(key)
        if log is None:
            return self.initial_state
        return log.entries[-1].state if log.entries else log.base_state

    def to_bytes(self) -> bytes:
        logs = {
            key: (log.base_state, [(e.meta, e.payload, e.count, e.state, e.outputs) for e in log.entries])
            for key, log in self._logs.items()
        }
        return pickle.dumps((_FORMAT, self.initial_state, logs), protocol=5)

    @classmethod
    def from_bytes(cls, data: bytes) -> "KeyedState":
        fmt, initial, logs = pickle.loads(data)
        if fmt != _FORMAT:
            raise InvalidArgumentError(f"KeyedState format {fmt!r} is not supported (expected {_FORMAT})")
        state = cls(initial)
        state._logs = {
            key: _KeyLog(base, [_Entry(Meta(*m), p, c, s, o) for m, p, c, s, o in entries])
            for key, (base, entries) in logs.items()
        }
        state._busy = {key for key, log in state._logs.items() if log.entries}
        return state
