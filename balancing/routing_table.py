"""The routing table: key group -> slot, versioned by modification punctuations (Enorm §4.4.2, §6.2).

A Spark stateful operator cannot move state between shuffle partitions: the partition of a
grouping value is ``pmod(murmur3(value), N)`` for the life of the checkpoint. Enorm's unit of
state and of load balancing is the **key group** (many per instance, §4.4.2), so we add one level
of indirection: the operator groups by a **slot**, a small int whose shuffle partition we choose,
and a table maps every key group (``pmod(xxhash64(key), n_key_groups)``, :mod:`keygroups.routing`)
to a slot. Moving a key group is changing one table entry.

Slot ``i`` lands on shuffle partition ``i % N``: its grouping value (:attr:`RoutingTable.slot_ids`)
is precomputed with Spark's own partitioning hash (Murmur3 x86_32, seed 42, of an int column;
:func:`murmur3_int`), so ``pmod(murmur3(slot_ids[i]), N) == i % N``.

The table changes only through **move commands** on the control topic, which the source puts in
its offset log and delivers as modification rows before the batch's data (§6.2)::

    {"op": "move", "key_group": 17, "to": 3}          # optional: "stage": <router stage name>

A command takes effect for every key group at the start of the batch it arrives in, and a replay
of that batch meets it at the same point, so routing is a pure function of the offset log.

>>> t = RoutingTable.uniform(num_key_groups=8, num_slots=4, num_partitions=2)
>>> [t.slot_of(kg) for kg in range(8)]
[0, 1, 2, 3, 0, 1, 2, 3]
>>> [murmur3_int(s) % 2 for s in t.slot_ids]
[0, 1, 0, 1]
>>> t.moved(5, 2).slot_of(5)
2
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["RoutingTable", "Move", "murmur3_int", "slot_ids_for", "parse_move", "move_command", "MOVE_OP"]

MOVE_OP = "move"
_M32 = 0xFFFFFFFF
SPARK_HASH_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def murmur3_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``hash(CAST(value AS INT))`` (``Murmur3_x86_32.hashInt``), a signed 32-bit int.
    Spark's hash partitioning puts a row with grouping value ``v`` on ``pmod(murmur3_int(v), N)``."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl(k1, 15) * 0x1B873593 & _M32
    h1 = _rotl((seed & _M32) ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def slot_ids_for(num_slots: int, num_partitions: int) -> tuple[int, ...]:
    """Grouping values of ``num_slots`` slots, slot ``i`` on shuffle partition ``i % num_partitions``:
    the ``i // N``-th smallest non-negative int that Spark's hash sends there."""
    _positive("num_slots", num_slots)
    _positive("num_partitions", num_partitions)
    per_partition: dict[int, list[int]] = {p: [] for p in range(num_partitions)}
    need = -(-num_slots // num_partitions)
    v = 0
    while any(len(ids) < need for ids in per_partition.values()):
        p = murmur3_int(v) % num_partitions
        if len(per_partition[p]) < need:
            per_partition[p].append(v)
        v += 1
    return tuple(per_partition[i % num_partitions][i // num_partitions] for i in range(num_slots))


def _positive(name: str, v) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise InvalidArgumentError(f"{name} must be a positive int, got {v!r}")
    return int(v)


@dataclass(frozen=True)
class Move:
    """A parsed move command: key group ``key_group`` goes to slot ``to``."""

    key_group: int
    to: int
    stage: str | None = None


def parse_move(text: str, control_offset: int | None, num_key_groups: int, num_slots: int) -> Move | None:
    """The move in a command's JSON text; ``None`` for other commands. Raises ``ValueError`` naming
    the command (control offset and text) when a move is malformed or out of range."""
    where = f"control command @{control_offset} {text!r}"
    try:
        cmd = json.loads(text)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{where}: not JSON ({e})") from None
    if not isinstance(cmd, dict) or cmd.get("op") != MOVE_OP:
        return None
    kg, to = cmd.get("key_group"), cmd.get("to")
    for name, v, n in (("key_group", kg, num_key_groups), ("to", to, num_slots)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n:
            raise InvalidArgumentError(f"{where}: {name!r} must be an int in [0, {n}), got {v!r}")
    stage = cmd.get("stage")
    if stage is not None and not isinstance(stage, str):
        raise InvalidArgumentError(f"{where}: 'stage' must be a string, got {stage!r}")
    return Move(kg, to, stage)


@dataclass(frozen=True)
class RoutingTable:
    """Key group -> slot (``assignment[kg]``), the slots' grouping values, and the control offset of
    the last move applied (``version``). Immutable: :meth:`moved` and :meth:`apply` return new tables."""

    num_partitions: int
    slot_ids: tuple[int, ...]
    assignment: tuple[int, ...]
    version: int | None = None
    _lookup: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _positive("num_partitions", self.num_partitions)
        if not self.assignment:
            raise InvalidArgumentError("a routing table needs at least one key group")
        bad = [s for s in self.assignment if not 0 <= s < len(self.slot_ids)]
        if bad:
            raise InvalidArgumentError(f"assignment names slot {bad[0]}, there are {len(self.slot_ids)} slots")
        ids = np.asarray(self.slot_ids, np.int64)
        object.__setattr__(self, "_lookup", ids[np.asarray(self.assignment, np.int64)])

    @classmethod
    def uniform(cls, num_key_groups: int, num_slots: int, num_partitions: int) -> "RoutingTable":
        """Key group ``kg`` on slot ``kg % num_slots``; slots spread over ``num_partitions``."""
        _positive("num_key_groups", num_key_groups)
        return cls(num_partitions, slot_ids_for(num_slots, num_partitions),
                   tuple(kg % num_slots for kg in range(num_key_groups)))

    @property
    def num_key_groups(self) -> int:
        return len(self.assignment)

    @property
    def num_slots(self) -> int:
        return len(self.slot_ids)

    def slot_of(self, key_group: int) -> int:
        """The slot (index) of ``key_group``."""
        return self.assignment[key_group]

    def slot_ids_of(self, key_groups: np.ndarray) -> np.ndarray:
        """Grouping values (slot ids) of an array of key groups (vectorised)."""
        return self._lookup[np.asarray(key_groups, np.int64)]

    def key_groups_of_slot(self, slot: int) -> list[int]:
        return [kg for kg, s in enumerate(self.assignment) if s == slot]

    def moved(self, key_group: int, to: int, version: int | None = None) -> "RoutingTable":
        a = list(self.assignment)
        a[key_group] = to
        return RoutingTable(self.num_partitions, self.slot_ids, tuple(a), self.version if version is None else version)

    def apply(self, modifications: Iterable, stage: str | None = None) -> tuple["RoutingTable", list[Move], list[str]]:
        """Apply the move commands among ``modifications`` (:class:`keygroups.Modification`, in
        control-topic order) not already applied (``control_offset <= version``) and addressed to
        ``stage`` or to no stage: ``(new table, moves applied, error messages)``."""
        table, applied, errors = self, [], []
        for m in modifications:
            if m.control_offset is not None and table.version is not None and m.control_offset <= table.version:
                continue
            try:
                move = parse_move(m.text, m.control_offset, self.num_key_groups, self.num_slots)
            except ValueError as e:
                errors.append(str(e))
                continue
            if move is None or (move.stage is not None and move.stage != stage):
                continue
            table = table.moved(move.key_group, move.to, m.control_offset)
            applied.append(move)
        return table, applied, errors

    def to_json(self) -> str:
        return json.dumps({"n": self.num_partitions, "ids": list(self.slot_ids), "a": list(self.assignment),
                           "v": self.version})

    @classmethod
    def from_json(cls, text: str) -> "RoutingTable":
        d = json.loads(text)
        return cls(d["n"], tuple(d["ids"]), tuple(d["a"]), d["v"])


def move_command(key_group: int, to: int, stage: str | None = None) -> dict:
    """The control-topic command moving ``key_group`` to slot ``to``."""
    cmd = {"op": MOVE_OP, "key_group": int(key_group), "to": int(to)}
    if stage is not None:
        cmd["stage"] = stage
    return cmd
