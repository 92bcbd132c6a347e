"""CoGroupByKey per window (Beam; the Dataflow Model, Akidau et al., VLDB 2015, §2.2: GroupByKey
generalised to several inputs) and the join types built on it.

A windowed join is a CoGroupByKey followed by an expansion, as in Beam's join library: per key
and window, the co-group holds the left rows and the right rows (:class:`CoGroup`, Beam's
``CoGbkResult``); the inner join is every pair of them; a left outer join also keeps each left
row padded with ``None`` when the window has no right row (every left row of a key and window
meets every right row of it, so a left row is unmatched exactly when the right side is empty);
right and full outer joins likewise (:func:`join_pairs`).

:class:`CoGroupCombiner` is the co-group as a :mod:`windowing` aggregation, so the Dataflow
trigger driver (:class:`watermarks.TriggerDriver`) keeps it per window: windows, merging
sessions across both sides, triggers, lateness and garbage collection are the driver's.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from dataflow_kafka.joins.spec import JoinType, Pair
from dataflow_kafka.windowing import Combiner

__all__ = ["CoGroup", "CoGroupCombiner", "join_pairs"]

_LEFT, _RIGHT = 0, 1


class CoGroup(NamedTuple):
    """One key's rows in one window: ``(ts_ms, value)`` per side, in event-time order."""

    left: tuple
    right: tuple


def join_pairs(group: CoGroup, how: JoinType) -> tuple[Pair, ...]:
    """The joined rows of a co-group, in a deterministic order (by left, then right row)."""
    lefts, rights = group
    if lefts and rights:
        pairs = [Pair(lt, rt) for lt in lefts for rt in rights]
    elif lefts and how.keeps_left:
        pairs = [Pair(lt, None) for lt in lefts]
    elif rights and how.keeps_right:
        pairs = [Pair(None, rt) for rt in rights]
    else:
        return ()
    return tuple(sorted(pairs, key=Pair.sort_key))


class CoGroupCombiner(Combiner):
    """The co-group as a Beam-style combiner; the driver passes ``((side, row id, value), ts_ms)``.

    The accumulator is ``[left rows, right rows]`` (lists of ``(ts_ms, value)``); the output is
    the joined rows (:func:`join_pairs`). While :attr:`taken` is a list, the ids of the rows a
    window took are appended to it: the engine learns which rows no window took (dropped).
    """

    holistic = True
    commutative = False
    timestamped = True

    def __init__(self, how: JoinType) -> None:
        self.how = how
        self.taken: list | None = None

    def create_accumulator(self) -> list:
        return [[], []]

    def add_input(self, accumulator: list, value: Any) -> list:
        (side, row_id, v), ts = value
        accumulator[side].append((ts, v))
        if self.taken is not None:
            self.taken.append(row_id)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        out: list = [[], []]
        for a in accumulators:
            out[_LEFT] += a[_LEFT]
            out[_RIGHT] += a[_RIGHT]
        return out

    def extract_output(self, accumulator: list) -> tuple[Pair, ...]:
        return join_pairs(co_group(accumulator), self.how)


def co_group(accumulator: list) -> CoGroup:
    """An accumulator as a :class:`CoGroup` (rows by event time, then value)."""
    def order(rows: list) -> tuple:
        return tuple(sorted(rows, key=lambda r: (r[0], repr(r[1]))))

    return CoGroup(order(accumulator[_LEFT]), order(accumulator[_RIGHT]))
