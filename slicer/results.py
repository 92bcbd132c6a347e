"""Window results: one row per emitted window, or a columnar batch of them.

``query_id`` is the query's id (a string). ``update`` is ``True`` for a window that ended at or
before the previous watermark and is emitted again because records that arrived since (within the
allowed lateness) changed it, or because context changed its extent, and for a window that
replaces retracted ones. ``retraction`` is ``True`` for a row that takes back a window emitted
earlier whose extent no longer exists (a late record extended or fused sessions, a late
punctuation cut a window: the Dataflow Model's retraction, Akidau et al., VLDB 2015, §2.3); it
carries the values that window was emitted with. Folding the rows in order (the latest row per
``(query_id, start, end)``, a retraction deleting its window) gives the current windows:
:func:`windowing.final.current_windows`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

__all__ = ["WindowResult", "WindowResults", "Slices", "OpenWindows", "object_array", "integral_sum", "with_empty"]


@dataclass(frozen=True)
class WindowResult:
    """One window aggregate: ``[start, end)`` of query ``query_id``, one value per aggregation."""

    query_id: str
    measure: str
    start: int
    end: int
    values: tuple
    update: bool = False
    retraction: bool = False

    @property
    def value(self) -> Any:
        """The value of the first aggregation."""
        return self.values[0]


@dataclass
class WindowResults:
    """Columnar results (what a Spark adapter turns into a pandas frame without a row loop).

    ``values[i]`` holds aggregation ``names[i]`` for all rows: a numpy array (an ``(n, 4)``
    array for M4) or a list (holistic and user-defined functions, and batches with retractions).
    ``query_id`` is an object array of strings; ``rank`` the position of each row's query in the
    operator (construction order, then additions), by which rows are ordered: (end, rank, start),
    or (rank, start, end) under Scotty's emission; ``retraction`` marks retraction rows (module
    docstring), which come first in a batch.
    """

    names: list[str]
    query_id: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    measure: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    update: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    values: list = field(default_factory=list)
    rank: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    retraction: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __post_init__(self) -> None:
        if self.retraction.size != self.start.size:       # built without it: no retraction rows
            self.retraction = np.zeros(self.start.size, bool)

    def __len__(self) -> int:
        return int(self.start.size)

    def rows(self) -> list[WindowResult]:
        cols = [v.tolist() if isinstance(v, np.ndarray) else list(v) for v in self.values]
        cols = [[tuple(x) if isinstance(x, list) else x for x in c] for c in cols]
        return [
            WindowResult(str(q), str(m), int(s), int(e), tuple(c[i] for c in cols), bool(u), bool(r))
            for i, (q, m, s, e, u, r) in enumerate(zip(self.query_id.tolist(), self.measure.tolist(),
                                                       self.start.tolist(), self.end.tolist(),
                                                       self.update.tolist(), self.retraction.tolist()))
        ]

    def row_values(self, i: int) -> tuple:
        """The aggregate values of row ``i`` (M4 as a tuple), as :meth:`rows` gives them."""
        out = []
        for v in self.values:
            x = v[i]
            out.append(tuple(x.tolist()) if isinstance(x, np.ndarray) else x.item() if isinstance(x, np.generic)
                       else tuple(x) if isinstance(x, list) else x)
        return tuple(out)

    @staticmethod
    def concat(names: list[str], parts: list["WindowResults"], by_query: bool = False,
               sort: bool = True) -> "WindowResults":
        """One batch of ``parts``, rows ordered by (end, rank, start), or by (rank, start, end)
        with ``by_query`` (Scotty's order); ``sort=False`` keeps the parts' order."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return WindowResults(names, values=[np.zeros(0) for _ in names])
        out = WindowResults(
            names,
            np.concatenate([p.query_id for p in parts]), np.concatenate([p.measure for p in parts]),
            np.concatenate([p.start for p in parts]), np.concatenate([p.end for p in parts]),
            np.concatenate([p.update for p in parts]), [], np.concatenate([p.rank for p in parts]),
            np.concatenate([p.retraction for p in parts]),
        )
        for i in range(len(names)):
            cols = [p.values[i] for p in parts]
            if all(isinstance(c, np.ndarray) for c in cols):
                out.values.append(np.concatenate(cols))
            else:               # lists (M4 rows as tuples), as with_empty makes them
                out.values.append([tuple(x.tolist()) if isinstance(x, np.ndarray) else x
                                   for c in cols for x in (c if not isinstance(c, np.ndarray) else list(c))])
        if not sort:
            return out
        order = np.lexsort((out.end, out.start, out.rank) if by_query else (out.start, out.rank, out.end))
        return out.take(order)

    def take(self, idx: np.ndarray) -> "WindowResults":
        vals = [v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx.tolist()] for v in self.values]
        return WindowResults(self.names, self.query_id[idx], self.measure[idx], self.start[idx],
                             self.end[idx], self.update[idx], vals, self.rank[idx], self.retraction[idx])


class Slices(NamedTuple):
    """The slices of one measure that hold records (Scotty §5.2's metadata), one entry each:
    ``start``, ``end`` (the next slice's start; ``None`` for the open last slice of the per-key
    operator), record ``count``, ``oldest`` (per-key operator only) and ``newest`` record time;
    ``keys``: the key of each slice (keyed table), else None. Count-measure bounds are record
    positions, times are event times."""

    measure: str
    start: np.ndarray
    end: list
    count: np.ndarray
    oldest: np.ndarray | None
    newest: np.ndarray
    keys: np.ndarray | None = None


class OpenWindows(NamedTuple):
    """Windows that hold records and can still be emitted or updated (``results``, ``update``
    False), with each window's record ``count`` and ``pending``: the watermark has not emitted it
    yet (else it was emitted and records within the allowed lateness may still update it);
    ``keys``: the key of each window (keyed table), else None."""

    results: WindowResults
    count: np.ndarray
    pending: np.ndarray
    keys: np.ndarray | None = None


def object_array(items) -> np.ndarray:
    """A 1-d object array of ``items`` (tuple keys stay elements; ``np.array`` would make rows)."""
    out = np.empty(len(items), object)
    for i, x in enumerate(items):
        out[i] = x
    return out


def integral_sum(values):
    """A ``Sum`` column of integer records as integers: int64 (the float sums are exact integers
    below 2**53), or a list with ``None`` for empty windows left as is."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return np.rint(values).astype(np.int64)
    if isinstance(values, (list, np.ndarray)):
        return [None if v is None else int(round(v)) for v in values]
    return values


def with_empty(values: list, has: np.ndarray) -> list:
    """Aggregate columns of the rows where ``has`` from columns of those rows only: lists with
    ``None`` (no value) for the other rows (M4 rows as tuples)."""
    out = []
    for v in values:
        items = v.tolist() if isinstance(v, np.ndarray) else list(v)
        full: list = [None] * int(has.size)
        for i, x in zip(np.flatnonzero(has).tolist(), items):
            full[i] = tuple(x) if isinstance(x, list) else x
        out.append(full)
    return out
