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

from dataflow_kafka.joins.spec import JoinError, JoinType, Pair
from dataflow_kafka.windowing import Combiner

__all__ = ["CoGroup", "CoGroupCombiner", "incremental_for", "join_pairs", "new_pairs"]

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


def new_pairs(accumulator: list) -> tuple[Pair, ...]:
    """The inner join's pairs of an incremental accumulator (``[left rows, right rows, left rows
    shown, right rows shown]``) that hold a row added since the previous call, which marks every
    row shown: the new left rows with every right row, then the shown left rows with the new right
    rows, in :func:`join_pairs`' order. Over a window's calls these are its pairs, each once."""
    lefts, rights, nl, nr = accumulator
    accumulator[2], accumulator[3] = len(lefts), len(rights)
    if not lefts or not rights or (nl == len(lefts) and nr == len(rights)):
        return ()
    lk = [(0, ts, repr(v)) for ts, v in lefts]          # Pair.sort_key's parts, one repr per row
    rk = [(0, ts, repr(v)) for ts, v in rights]
    keyed = [(lk[i], rk[j], i, j) for i in range(nl, len(lefts)) for j in range(len(rights))]
    keyed += [(lk[i], rk[j], i, j) for i in range(nl) for j in range(nr, len(rights))]
    keyed.sort(key=lambda e: (e[0], e[1]))
    return tuple(Pair(lefts[i], rights[j]) for _, _, i, j in keyed)


class CoGroupCombiner(Combiner):
    """The co-group as a Beam-style combiner; the driver passes ``((side, row id, value), ts_ms)``.

    The accumulator is ``[left rows, right rows]`` (lists of ``(ts_ms, value)``); the output is
    the joined rows (:func:`join_pairs`). While :attr:`taken` is a list, the ids of the rows a
    window took are appended to it: the engine learns which rows no window took (dropped).

    ``incremental=True`` (an inner join's discarding panes in windows that do not merge): the
    accumulator also counts the rows of each side already shown, ``[lefts, rights, left shown,
    right shown]``, and the output is the pairs new since the previous output (:func:`new_pairs`),
    so a pane costs its new pairs, not the window's whole join and a difference with the last.
    """

    holistic = True
    commutative = False
    timestamped = True

    def __init__(self, how: JoinType, incremental: bool = False) -> None:
        self.how = how
        self.incremental = incremental
        self.taken: list | None = None

    def create_accumulator(self) -> list:
        return [[], [], 0, 0] if self.incremental else [[], []]

    def add_input(self, accumulator: list, value: Any) -> list:
        (side, row_id, v), ts = value
        accumulator[side].append((ts, v))
        if self.taken is not None:
            self.taken.append(row_id)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        if self.incremental:
            raise JoinError("an incremental co-group is for windows that do not merge")
        out: list = [[], []]
        for a in accumulators:
            out[_LEFT] += a[_LEFT]
            out[_RIGHT] += a[_RIGHT]
        return out

    def extract_output(self, accumulator: list) -> tuple[Pair, ...]:
        if self.incremental:
            return new_pairs(accumulator)
        return join_pairs(co_group(accumulator), self.how)


def co_group(accumulator: list) -> CoGroup:
    """An accumulator as a :class:`CoGroup` (rows by event time, then value)."""
    def order(rows: list) -> tuple:
        return tuple(sorted(rows, key=lambda r: (r[0], repr(r[1]))))

    return CoGroup(order(accumulator[_LEFT]), order(accumulator[_RIGHT]))


def incremental_for(how: JoinType, discarding: bool, merging: bool) -> bool:
    """Whether a join's co-group can be :class:`CoGroupCombiner`'s incremental form: an inner
    join (no padded row to take back) in discarding mode (a pane holds the new pairs) in windows
    that do not merge (a merge retracts what the merged windows showed)."""
    return how is JoinType.INNER and discarding and not merging
