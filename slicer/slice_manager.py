"""Slice managers: records into slices, splits and merges (Scotty sections 5.3 and 8).

:class:`SliceManager` serves the time measure. Per batch it (1) lets the stream slicer add
fixed separators up to the batch's latest record (Algorithm 1), (2) asks context-aware
windows for their flexible separators and reconciles the slices with them - the update,
split, fuse and extend cases of Algorithms 3 to 6 all reduce to adding or removing
separators, and a split happens only where the paper needs one - and (3) adds every record
to the slice that covers its time in one vectorised step (in-order records to the active
slice, out-of-order ones to a past slice, Algorithm 3 lines 8-11). A non-commutative
function on a slice that received an out-of-order record is recomputed from records
(section 5.3, step 2).

:class:`CountSliceManager` serves the count measure: an out-of-order record shifts the
position of every later record (section 4.3), so it keeps records and recomputes the slices
from the first shifted position on, in one vectorised pass (section 5.2, Figure 6).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dataflow_kafka.slicer._kernels import Kernel
from dataflow_kafka.slicer._tuples import TupleBuffer
from dataflow_kafka.slicer.context_windows import WindowContext
from dataflow_kafka.slicer.results import Slices
from dataflow_kafka.slicer.store import AggregationStore
from dataflow_kafka.slicer.stream_slicer import StreamSlicer

__all__ = ["SliceManager", "CountSliceManager"]


class _Manager:
    def __init__(self, kernels: Sequence[Kernel], eager: bool, keep_tuples: bool, value_dtype):
        self.store = AggregationStore(kernels, eager)
        self.tuples = TupleBuffer(value_dtype) if keep_tuples else None
        self.slicer = StreamSlicer()
        self.frontier: int | None = None
        #: Every accepted record at or after this is held (the first slice start once slices
        #: were evicted; the minimum int64 before).
        self.held_from = int(np.iinfo(np.int64).min)

    # read-only view used by window contexts
    @property
    def starts(self) -> np.ndarray:
        return self.store.starts

    @property
    def tmin(self) -> np.ndarray:
        return self.store.tmin

    @property
    def tmax(self) -> np.ndarray:
        return self.store.tmax

    @property
    def count(self) -> np.ndarray:
        return self.store.count

    def slices(self, measure: str, last_end: int | None) -> Slices:
        """The slices that hold records (read only); the last slice ends at ``last_end``
        (``None``: open)."""
        st = self.store
        ends = [int(x) for x in st.starts[1:]] + [last_end]
        has = np.flatnonzero(st.count > 0)
        return Slices(measure, st.starts[has].copy(), [ends[i] for i in has.tolist()], st.count[has].copy(),
                      st.tmin[has].copy(), st.tmax[has].copy())

    def get_state(self) -> dict:
        return {"store": self.store.get_state(), "frontier": self.frontier, "held": self.held_from,
                "tuples": None if self.tuples is None else self.tuples.get_state()}

    def set_state(self, state: dict) -> None:
        self.store.set_state(state["store"])
        self.frontier, self.held_from = state["frontier"], state["held"]
        if self.tuples is not None and state["tuples"] is not None:
            self.tuples.set_state(state["tuples"])


class SliceManager(_Manager):
    """Time-measure slices shared by all time queries."""

    def __init__(self, kernels, eager, keep_tuples, value_dtype):
        super().__init__(kernels, eager, keep_tuples, value_dtype)
        self.contexts: list[WindowContext] = []
        self.reorder = [i for i, k in enumerate(kernels) if not k.commutative] if keep_tuples else []

    def process(self, values: np.ndarray, ts: np.ndarray, seq: np.ndarray) -> None:
        st = self.store
        bmin, bmax = int(ts.min()), int(ts.max())
        if st.n == 0:
            st.add_empty(np.concatenate(([bmin], self.slicer.edges_between(bmin, bmax))))
            self.frontier = bmax
        else:
            if bmin < st.starts[0]:
                first = int(st.starts[0])
                front = np.concatenate(([bmin], self.slicer.edges_between(bmin, first - 1)))
                if self.held_from == np.iinfo(np.int64).min and not self.slicer.edges_between(first - 1, first).size:
                    # the first start is the oldest record so far, not an edge: its slice reaches back to
                    # the last new separator, so slices do not depend on the records' arrival order
                    st.starts[0], front = front[-1], front[:-1]
                st.add_empty(front, front=True)
            if bmax > self.frontier:
                edges = self.slicer.edges_between(self.frontier, bmax)
                if edges.size and st.starts[-1] >= edges[0]:
                    st.split_at(edges)    # a context's separator already lies past the frontier
                else:
                    st.add_empty(edges)
                self.frontier = bmax
        if self.contexts:
            flex = [c.update(self, values, ts) for c in self.contexts]
            st.reconcile(np.unique(np.concatenate(flex)), self.tuples)
        idx = st.slice_of(ts)
        late = None
        if self.reorder:
            first = np.full(st.n, np.iinfo(np.int64).max)
            np.minimum.at(first, idx, ts)
            late = np.flatnonzero(first < st.tmax)
        st.add(idx, values, ts, seq)
        if self.tuples is not None:
            self.tuples.insert(values, ts, seq)
        if late is not None and late.size:
            self._recompute(late, self.reorder)
        st.refresh()

    def refresh_contexts(self, extra: np.ndarray | None = None) -> None:
        """Reconcile the slices with the contexts' flexible edges (and ``extra`` ones) now: a
        context-aware query was added while running; as a batch without records would."""
        if self.contexts and self.store.n:
            dtype = self.tuples.values.dtype if self.tuples is not None else np.float64
            flex = [c.update(self, np.zeros(0, dtype), np.zeros(0, np.int64)) for c in self.contexts]
            if extra is not None:
                flex.append(np.asarray(extra, np.int64))
            self.store.reconcile(np.unique(np.concatenate(flex)), self.tuples)
            self.store.refresh()

    def _recompute(self, ids: np.ndarray, kernels: Sequence[int] | None = None) -> None:
        st, buf = self.store, self.tuples
        ends = np.append(st.starts[1:], np.iinfo(np.int64).max)
        lo = np.searchsorted(buf.ts, st.starts[ids], "left")
        hi = np.searchsorted(buf.ts, ends[ids], "left")
        st.recompute(ids, lo, hi, buf.values, buf.ts, buf.seq, kernels)

    def evict_before(self, cutoff: int) -> None:
        st = self.store
        if st.n == 0:
            return
        k = int(np.searchsorted(st.starts, cutoff, "right")) - 1
        st.drop_first(k)
        st.fixed[0] = True
        first = int(st.starts[0])
        if k > 0:
            self.held_from = first
        if self.tuples is not None:
            for c in self.contexts:
                c.evict_records(self, first)
            self.tuples.drop_first(int(np.searchsorted(self.tuples.ts, first, "left")))
        for c in self.contexts:     # the first slice may start above the cutoff: forget only what is final
            c.evict(min(first, cutoff))


class CountSliceManager(_Manager):
    """Count-measure slices; keys are global record positions in event-time order."""

    def __init__(self, kernels, eager, value_dtype):
        super().__init__(kernels, eager, True, value_dtype)
        self.first_change: int | None = None  # smallest shifted position since the last watermark

    @property
    def total(self) -> int:
        return self.tuples.base + len(self.tuples)

    def process(self, values: np.ndarray, ts: np.ndarray, seq: np.ndarray) -> None:
        st, buf = self.store, self.tuples
        pos = buf.base + buf.insert(values, ts, seq)
        self.first_change = pos if self.first_change is None else min(self.first_change, pos)
        last = self.total - 1
        if st.n == 0:
            st.add_empty(np.concatenate(([buf.base], self.slicer.edges_between(buf.base, last))))
            self.frontier = last
        elif last > self.frontier:
            st.add_empty(self.slicer.edges_between(self.frontier, last))
            self.frontier = last
        k0 = max(int(st.slice_of(np.array([pos]))[0]), 0)
        ids = np.arange(k0, st.n)
        ends = np.append(st.starts[1:], self.total)
        lo = np.clip(st.starts[ids] - buf.base, 0, None)
        hi = np.clip(ends[ids] - buf.base, 0, len(buf))
        st.truncate_from(k0)
        st.recompute(ids, lo, hi, buf.values, buf.ts, buf.seq)
        st.refresh()

    def recut(self, edges: np.ndarray) -> None:
        """Cut the held slices at ``edges`` too (a count query added while running); every
        slice is recomputed from the records, which the count measure always keeps."""
        st, buf = self.store, self.tuples
        if st.n == 0:
            return
        edges = np.asarray(edges, np.int64)
        new = np.setdiff1d(edges[(edges > st.starts[0]) & (edges <= self.frontier)], st.starts)
        if new.size == 0:
            return
        starts = np.union1d(st.starts, new)
        fresh = AggregationStore(st.kernels, st.eager)
        fresh.next_seq, fresh.fresh_seq = st.next_seq, st.fresh_seq
        fresh.add_empty(starts)
        ends = np.append(starts[1:], self.total)
        fresh.recompute(np.arange(starts.size), np.clip(starts - buf.base, 0, None),
                        np.clip(ends - buf.base, 0, len(buf)), buf.values, buf.ts, buf.seq)
        fresh.refresh()
        self.store = fresh

    def position_of_time(self, t: int) -> int:
        """Number of records with event time below ``t``."""
        return self.tuples.base + int(np.searchsorted(self.tuples.ts, t, "left"))

    def evict_before(self, cutoff: int) -> None:
        st = self.store
        if st.n == 0:
            return
        st.drop_first(int(np.searchsorted(st.starts, cutoff, "right")) - 1)
        self.tuples.drop_first(int(st.starts[0]) - self.tuples.base)

    def get_state(self) -> dict:
        return {**super().get_state(), "first_change": self.first_change}

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self.first_change = state["first_change"]
