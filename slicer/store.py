"""Aggregate store: the shared slices and their partial aggregates (Scotty sections 3.4, 5.2).

Slices are parallel numpy arrays in event-time order (``starts``; a slice ends where the next
begins, the last one is the open *active slice*), with the metadata of section 5.2
(``tmin``/``tmax``: first and last record time, ``count``) plus ``fixed`` (the start is a
context-free edge, section 7.1.3) and ``dirty`` (changed since the last watermark).

The three slice operations of section 5.2 are bulk operations here: *update*
(:meth:`AggregationStore.add`), *split* and *merge* (:meth:`AggregationStore.reconcile`,
which moves the slice separators to a wanted set). A split recomputes the pieces from
records when records are kept; otherwise it is only legal inside a gap (sessions,
section 6.2) and the whole aggregate moves to the piece that holds the records.

:class:`AggregationStore` is *lazy* (window aggregates combine slice ranges when windows
are emitted); with ``eager=True`` it maintains range indexes after every batch - prefix
aggregates for invertible components, sparse tables for min/max - so emitting a window costs
O(1) (the eager slicing of section 3.4, with a sparse table in place of the tree).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dataflow_kafka.slicer._kernels import I64_MAX, I64_MIN, Kernel

__all__ = ["AggregationStore"]

_META = ("starts", "tmin", "tmax", "count", "fixed", "dirty")


def _gather(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated index ranges [lo_i, hi_i) and the range number of each index."""
    lengths = hi - lo
    seg = np.repeat(np.arange(lo.size), lengths)
    offs = np.repeat(lo - (np.cumsum(lengths) - lengths), lengths)
    return np.arange(int(lengths.sum())) + offs, seg


class AggregationStore:
    def __init__(self, kernels: Sequence[Kernel], eager: bool = False):
        self.kernels = list(kernels)
        self.eager = eager
        self._set_meta(*self._blank(0, 0))
        self.states = [k.empty(0) for k in self.kernels]
        self._index = None
        self.next_seq = 0   # records with seq >= fresh_seq arrived since the last watermark
        self.fresh_seq = 0

    def clear_dirty(self) -> None:
        self.dirty[:] = False
        self.fresh_seq = self.next_seq

    # ------------------------------------------------------------------ structure
    @staticmethod
    def _blank(n: int, start: int | np.ndarray):
        return (np.asarray(start, np.int64) if np.ndim(start) else np.full(n, start, np.int64),
                np.full(n, I64_MAX, np.int64), np.full(n, I64_MIN, np.int64),
                np.zeros(n, np.int64), np.ones(n, bool), np.zeros(n, bool))

    def _set_meta(self, *arrays) -> None:
        for name, a in zip(_META, arrays):
            setattr(self, name, a)

    def _meta(self) -> list[np.ndarray]:
        return [getattr(self, name) for name in _META]

    @property
    def n(self) -> int:
        return int(self.starts.size)

    def add_empty(self, starts: np.ndarray, front: bool = False) -> None:
        """New empty fixed slices before the first one or after the last one."""
        if starts.size == 0:
            return
        blank = self._blank(starts.size, starts)
        pairs = zip(blank, self._meta()) if front else zip(self._meta(), blank)
        self._set_meta(*(np.concatenate(p) for p in pairs))
        for i, k in enumerate(self.kernels):
            e = k.empty(starts.size)
            self.states[i] = k.concat([e, self.states[i]] if front else [self.states[i], e])
        self._index = None

    def slice_of(self, keys: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, keys, "right") - 1

    # ------------------------------------------------------------------ update
    def add(self, idx: np.ndarray, values, ts, seq, kernels: Sequence[int] | None = None) -> None:
        """Update: add records to the slices ``idx`` (one incremental step per slice)."""
        n = self.n
        for i in range(len(self.kernels)) if kernels is None else kernels:
            k = self.kernels[i]
            self.states[i] = k.combine(self.states[i], k.partials(values, ts, seq, idx, n))
        np.minimum.at(self.tmin, idx, ts)
        np.maximum.at(self.tmax, idx, ts)
        hits = np.bincount(idx, minlength=n)
        self.count += hits
        self.dirty |= hits > 0
        if seq.size:
            self.next_seq = max(self.next_seq, int(seq.max()) + 1)
        self._index = None

    def recompute(self, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray, values, ts, seq,
                  kernels: Sequence[int] | None = None) -> None:
        """Set slices ``ids`` to the aggregate of records ``[lo, hi)`` of the given arrays."""
        if ids.size == 0:
            return
        rec, seg = _gather(lo, hi)
        for i in range(len(self.kernels)) if kernels is None else kernels:
            k = self.kernels[i]
            self.states[i] = k.put(self.states[i], ids, k.partials(values[rec], ts[rec], seq[rec], seg, ids.size))
        has = hi > lo
        newest = np.full(ids.size, -1, np.int64)
        np.maximum.at(newest, seg, seq[rec])
        self.dirty[ids] = newest >= self.fresh_seq
        self.count[ids] = hi - lo
        self.tmin[ids] = np.where(has, ts[np.minimum(lo, ts.size - 1)] if ts.size else 0, I64_MAX)
        self.tmax[ids] = np.where(has, ts[np.maximum(hi - 1, 0)] if ts.size else 0, I64_MIN)
        self._index = None

    # ------------------------------------------------------------------ split / merge
    def reconcile(self, flexible: np.ndarray, buffer=None) -> None:
        """Move separators so slices start exactly at the fixed starts plus ``flexible``."""
        if self.n == 0:
            return
        fixed = self.starts[self.fixed]
        want = np.union1d(np.append(fixed, self.starts[0]), flexible[flexible > self.starts[0]])
        if want.size == self.n and np.array_equal(want, self.starts):
            return
        union = np.union1d(self.starts, want)
        if union.size > self.n:
            self._split(union, buffer)
        if union.size > want.size:
            self._merge(np.flatnonzero(np.isin(union, want, assume_unique=True)))
        self.fixed = np.isin(self.starts, fixed, assume_unique=True)

    def split_at(self, points: np.ndarray, buffer=None) -> np.ndarray:
        """Cut slices at ``points`` and make them fixed separators (the edges of a query added
        while running). With records (``buffer``) every cut is exact: the pieces are recomputed.
        Without, a cut is made only where no slice holds records on both sides of it (the
        aggregate moves to the piece that holds the records, as a session split in a gap,
        section 6.2). Returns the points where a slice's records straddle the cut (not cut)."""
        if self.n == 0 or points.size == 0:
            return np.zeros(0, np.int64)
        points = np.asarray(points, np.int64)
        fixed = np.union1d(self.starts[self.fixed], points)    # flexible separators there become fixed
        pts = np.setdiff1d(points[points > self.starts[0]], self.starts)
        bad = pts[:0]
        if buffer is None and pts.size:
            i = self.slice_of(pts)
            straddle = (self.count[i] > 0) & (self.tmin[i] < pts) & (pts <= self.tmax[i])
            bad, pts = pts[straddle], pts[~straddle]
        if pts.size:
            self._split(np.union1d(self.starts, pts), buffer)
            self._index = None
        self.fixed = np.isin(self.starts, fixed)
        return bad

    def _split(self, union: np.ndarray, buffer) -> None:
        owner = self.slice_of(union)
        new = ~np.isin(union, self.starts, assume_unique=True)
        touched = np.isin(owner, owner[new])
        meta = [a[owner] for a in self._meta()]
        meta[0] = union
        self._set_meta(*meta)
        self.states = [k.take(s, owner) for k, s in zip(self.kernels, self.states)]
        pieces = np.flatnonzero(touched)
        if buffer is not None:
            ends = np.append(union[1:], I64_MAX)
            lo = np.searchsorted(buffer.ts, union[pieces], "left")
            hi = np.searchsorted(buffer.ts, ends[pieces], "left")
            self.recompute(pieces, lo, hi, buffer.values, buffer.ts, buffer.seq)
            return
        # Without records a split is only legal in a gap: the aggregate goes to one piece.
        ends = np.append(union[1:], I64_MAX)
        has = self.count[pieces] > 0
        holds = (self.tmin[pieces] >= union[pieces]) & (self.tmin[pieces] < ends[pieces])
        straddle = holds & (self.tmax[pieces] >= ends[pieces])
        if np.any(straddle & has):
            raise AssertionError("split through records without a record buffer (decision tree bug)")
        clear = pieces[has & ~holds]
        if clear.size:
            for i, k in enumerate(self.kernels):
                self.states[i] = k.put(self.states[i], clear, k.empty(clear.size))
            self.count[clear], self.tmin[clear], self.tmax[clear] = 0, I64_MAX, I64_MIN
            self.dirty[clear] = False

    def _merge(self, gstarts: np.ndarray) -> None:
        self.states = [k.merge_groups(s, gstarts) for k, s in zip(self.kernels, self.states)]
        self.tmin = np.minimum.reduceat(self.tmin, gstarts)
        self.tmax = np.maximum.reduceat(self.tmax, gstarts)
        self.count = np.add.reduceat(self.count, gstarts)
        self.dirty = np.logical_or.reduceat(self.dirty, gstarts)
        self.starts, self.fixed = self.starts[gstarts], self.fixed[gstarts]
        self._index = None

    def drop_first(self, k: int) -> None:
        if k <= 0:
            return
        self._set_meta(*(a[k:] for a in self._meta()))
        idx = np.arange(k, k + self.n)
        self.states = [kern.take(s, idx) for kern, s in zip(self.kernels, self.states)]
        self._index = None

    def truncate_from(self, k: int) -> None:
        """Empty slices ``k..`` (they will be recomputed)."""
        ids = np.arange(k, self.n)
        for i, kern in enumerate(self.kernels):
            self.states[i] = kern.put(self.states[i], ids, kern.empty(ids.size))
        self.count[k:], self.tmin[k:], self.tmax[k:] = 0, I64_MAX, I64_MIN
        self._index = None

    # ------------------------------------------------------------------ windows
    def refresh(self) -> None:
        """Eager store: rebuild range indexes after a batch."""
        if self.eager:
            self._ensure_index()

    def _ensure_index(self):
        if self._index is None:
            self._index = [k.build_index(s, self.eager) for k, s in zip(self.kernels, self.states)]
        return self._index

    def counts(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        cum = np.concatenate(([0], np.cumsum(self.count)))
        return cum[hi] - cum[lo]

    def query(self, lo: np.ndarray, hi: np.ndarray) -> list:
        """Lowered aggregates of the non-empty slice ranges ``[lo, hi)``, one per kernel."""
        index = self._ensure_index()
        nonempty = self.count > 0
        return [k.query(s, lo, hi, ix, nonempty) for k, s, ix in zip(self.kernels, self.states, index)]

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict:
        return {"meta": self._meta(), "states": self.states, "seq": (self.next_seq, self.fresh_seq)}

    def set_state(self, state: dict) -> None:
        self._set_meta(*state["meta"])
        self.next_seq, self.fresh_seq = state["seq"]
        self.states = list(state["states"])
        self._index = None
