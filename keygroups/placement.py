"""Where key groups run: grouping values that put key group ``i`` on shuffle partition ``i % N``.

A stage operator is a ``transformWithStateInPandas`` grouped by one int per key group, and Spark
places a grouping value ``v`` on shuffle partition ``pmod(murmur3(v), N)`` (its hash partitioning,
Murmur3 x86_32, seed 42). Grouped by the key-group numbers themselves, key groups 0, 1 and 3 of 4
land on partition 1 of 2 and key group 2 on partition 0, so one task runs three quarters of every
stateful stage (docs/nexmark.md, "The key groups sit unevenly"). :func:`placement_ids` picks, per
key group, the grouping value that lands where an even spread puts it (the balancer's slots,
:mod:`balancing.routing_table`, use the same values), Enorm §4.4.2's key groups spread over the
operator's instances.

>>> placement_ids(4, 2)
(2, 0, 4, 1)
>>> [murmur3_int(v) % 2 for v in placement_ids(4, 2)]
[0, 1, 0, 1]
"""

from __future__ import annotations

import numpy as np

from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["murmur3_int", "placement_ids", "SPARK_HASH_SEED", "PLACEMENTS", "PLACED_COLUMN", "PLACED_STATE",
           "BY_NUMBER_STATE"]

SPARK_HASH_SEED = 42
#: ``Pipeline.apply(placement=...)``: ``"even"`` (key group ``i`` on shuffle partition ``i % N``, the
#: default) or ``"by_number"`` (grouped by the key-group number: the layout of checkpoints written
#: before 2026-11-29).
PLACEMENTS = ("even", "by_number")
PLACED_COLUMN = "placed_key_group"    # the grouping column of an evenly placed operator
PLACED_STATE = "key_group_state"      # its value state: (key_group int, blob binary)
BY_NUMBER_STATE = "operator"          # the value state of an operator grouped by key-group number: (blob binary)
_M32 = 0xFFFFFFFF


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


def placement_ids(count: int, num_partitions: int) -> tuple[int, ...]:
    """Grouping values of ``count`` groups, group ``i`` on shuffle partition ``i % num_partitions``:
    the ``i // N``-th smallest non-negative int that Spark's hash sends there."""
    _positive("count", count)
    _positive("num_partitions", num_partitions)
    per_partition: dict[int, list[int]] = {p: [] for p in range(num_partitions)}
    need = -(-count // num_partitions)
    v = 0
    while any(len(ids) < need for ids in per_partition.values()):
        p = murmur3_int(v) % num_partitions
        if len(per_partition[p]) < need:
            per_partition[p].append(v)
        v += 1
    return tuple(per_partition[i % num_partitions][i // num_partitions] for i in range(count))


def _positive(name: str, v) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise InvalidArgumentError(f"{name} must be a positive int, got {v!r}")
    return int(v)
