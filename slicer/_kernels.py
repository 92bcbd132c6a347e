"""Vectorised runtime of aggregations over slices (internal).

A *kernel* keeps one partial aggregate per slice as numpy arrays (or Python lists for
holistic and user-defined functions) and implements the incremental aggregation steps of
Scotty section 5.4.1 in bulk: ``partials`` lifts records and combines them per slice,
``combine`` adds partials to slices, ``merge_groups`` fuses adjacent slices (section 5.2,
merge), ``query`` combines slice ranges into window aggregates and lowers them.

Slices are always in event-time order, so "left" partials precede "right" ones; every
combine keeps that order, which is what non-commutative functions need.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from dataflow_kafka.windowing.components import Picked, Reduced, component

__all__ = ["Kernel", "ComponentKernel", "HolisticKernel", "PythonKernel", "segment_bounds", "pick_records",
           "combine_picks", "reduce_partials"]

I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min


def segment_bounds(seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For a non-decreasing segment id array: (start positions, segment ids) of each run."""
    if seg.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cut = np.flatnonzero(seg[1:] != seg[:-1]) + 1
    starts = np.concatenate(([0], cut))
    return starts, seg[starts]


class Kernel:
    """Interface of a kernel; ``state`` is opaque to callers."""

    commutative = True
    invertible = False

    def empty(self, n: int) -> Any: ...
    def partials(self, values, ts, seq, seg, n: int) -> Any: ...
    def combine(self, left, right) -> Any: ...
    def take(self, state, idx: np.ndarray) -> Any: ...
    def put(self, state, idx: np.ndarray, sub) -> Any: ...
    def concat(self, states: Sequence[Any]) -> Any: ...
    def merge_groups(self, state, gstarts: np.ndarray) -> Any: ...
    def query(self, state, lo: np.ndarray, hi: np.ndarray, index) -> Any: ...
    def build_index(self, state, eager: bool) -> Any:
        return None


# --------------------------------------------------------------------------- components
def _sparse_table(a: np.ndarray, ufunc) -> list[np.ndarray]:
    levels = [a]
    k = 1
    while 2 * k <= a.size:
        prev = levels[-1]
        levels.append(ufunc(prev[:-k], prev[k:]))
        k *= 2
    return levels


def _no_pick(c: Picked) -> int:
    """The order key of an empty slice for a pick: never chosen over a record."""
    return I64_MIN if c.latest else I64_MAX


def pick_records(c: Picked, values, ts, seq, seg, n):
    """The picked record of each of ``n`` segments: ``(value, event time, arrival)`` arrays, the
    smallest (first) or largest (last) ``(ts, seq)``; empty segments get NaN and :func:`_no_pick`."""
    ufunc, key = (np.maximum, I64_MIN) if c.latest else (np.minimum, I64_MAX)
    kt = np.full(n, key, np.int64)
    ufunc.at(kt, seg, ts)
    cand = ts == kt[seg]
    ks = np.full(n, key, np.int64)
    ufunc.at(ks, seg[cand], seq[cand])
    pick = cand & (seq == ks[seg])
    kv = np.full(n, np.nan)
    kv[seg[pick]] = values[pick]
    return kv, kt, ks


def combine_picks(c: Picked, left, right):
    """Per position, the pick of ``left`` or ``right`` (each ``(value, ts, seq)``) that ``c`` chooses."""
    (lv, lt, ls), (rv, rt, rs) = left, right
    if c.latest:
        take_r = (rt > lt) | ((rt == lt) & (rs > ls))
    else:
        take_r = (rt < lt) | ((rt == lt) & (rs < ls))
    return tuple(np.where(take_r, r, l) for l, r in ((lv, rv), (lt, rt), (ls, rs)))


def reduce_partials(c: Reduced, values, seg, n) -> np.ndarray:
    """The partial of each of ``n`` segments of records (``seg``: segment ids)."""
    if c.ufunc is np.add:
        weights = None if c.lift is None else c.lifted(values)
        return np.bincount(seg, weights=weights, minlength=n).astype(c.dtype, copy=False)
    a = np.full(n, c.identity, c.dtype)
    c.ufunc.at(a, seg, c.lifted(values))
    return a


class ComponentKernel(Kernel):
    """Distributive / algebraic aggregation built from components (:mod:`windowing.components`),
    by kind, never by name: :class:`~windowing.components.Reduced` ones as one array per slice
    (eager store: prefix sums for invertible ones, sparse tables for idempotent ones),
    :class:`~windowing.components.Picked` ones (``first``, ``last``) as the value, event time and
    arrival of the picked record per slice (commutative: the pick carries its order key, so no
    records are needed).
    """

    def __init__(self, components: tuple[str, ...], lower: Callable[[dict], Any]):
        self.components = components
        self.defs = {name: component(name) for name in components}
        self.lower = lower
        self.invertible = all(isinstance(c, Reduced) and c.inverse is not None for c in self.defs.values())

    # state: dict name -> array (Reduced) or (value, ts, seq) arrays (Picked)
    def empty(self, n):
        st = {}
        for name, c in self.defs.items():
            if isinstance(c, Reduced):
                st[name] = np.full(n, c.identity, c.dtype)
            else:
                st[name] = (np.full(n, np.nan), np.full(n, _no_pick(c), np.int64), np.full(n, _no_pick(c), np.int64))
        return st

    def partials(self, values, ts, seq, seg, n):
        values = np.asarray(values, np.float64)
        return {name: reduce_partials(c, values, seg, n) if isinstance(c, Reduced)
                else pick_records(c, values, ts, seq, seg, n) for name, c in self.defs.items()}

    def combine(self, left, right):
        return {name: c.ufunc(left[name], right[name]) if isinstance(c, Reduced)
                else combine_picks(c, left[name], right[name]) for name, c in self.defs.items()}

    def take(self, state, idx):
        return {c: (tuple(a[idx] for a in v) if isinstance(v, tuple) else v[idx]) for c, v in state.items()}

    def put(self, state, idx, sub):
        for c, v in state.items():
            if isinstance(v, tuple):
                for a, b in zip(v, sub[c]):
                    a[idx] = b
            else:
                v[idx] = sub[c]
        return state

    def concat(self, states):
        out = {}
        for c in self.components:
            parts = [s[c] for s in states]
            if isinstance(parts[0], tuple):
                out[c] = tuple(np.concatenate([p[i] for p in parts]) for i in range(3))
            else:
                out[c] = np.concatenate(parts)
        return out

    def merge_groups(self, state, gstarts):
        out = {}
        for name, v in state.items():
            c = self.defs[name]
            if isinstance(c, Reduced):
                out[name] = c.ufunc.reduceat(v, gstarts)
            else:  # fold adjacent slices: pick again among the slices' picks, per group
                vals, ts, seq = v
                grp = np.repeat(np.arange(gstarts.size), np.diff(np.append(gstarts, ts.size)))
                out[name] = pick_records(c, vals, ts, seq, grp, gstarts.size)
                out[name][0][out[name][1] == _no_pick(c)] = np.nan
        return out

    def build_index(self, state, eager):
        if not eager:
            return None
        idx = {}
        for name, v in state.items():
            c = self.defs[name]
            if isinstance(c, Reduced) and c.inverse is not None:
                idx[name] = np.concatenate(([c.identity], c.ufunc.accumulate(v))).astype(c.dtype, copy=False)
            elif isinstance(c, Reduced) and c.idempotent:
                idx[name] = _sparse_table(v, c.ufunc)
        return idx

    def query(self, state, lo, hi, index, nonempty=None):
        res = {}
        for name, v in state.items():
            c = self.defs[name]
            if isinstance(c, Reduced):
                res[name] = self._range(c, v, lo, hi, None if index is None else index.get(name))
            elif c.latest:
                prv = _prev_nonempty(nonempty)
                res[name] = v[0][np.maximum(prv[hi - 1], 0)]
            else:
                nxt = _next_nonempty(nonempty)
                res[name] = v[0][np.minimum(nxt[lo], v[0].size - 1)]
        return self.lower(res)

    @staticmethod
    def _range(c: Reduced, v, lo, hi, index):
        if lo.size == 0:
            return np.zeros(0, v.dtype)
        if index is not None and c.inverse is not None:
            return c.inverse(index[hi], index[lo])        # invert: prefix difference
        if index is not None:  # sparse table lookup (idempotent)
            length = np.maximum(hi - lo, 1)
            k = np.floor(np.log2(length)).astype(np.int64)
            out = np.empty(lo.size, v.dtype)
            for lvl in np.unique(k):
                m = k == lvl
                t = index[lvl]
                out[m] = c.ufunc(t[lo[m]], t[hi[m] - (1 << lvl)])
            return out
        padded = np.append(v, np.array([c.identity], v.dtype))
        inter = np.empty(2 * lo.size, np.int64)
        inter[0::2], inter[1::2] = lo, hi
        out = c.ufunc.reduceat(padded, inter)[0::2]
        return np.where(hi > lo, out, c.identity)


def _next_nonempty(nonempty: np.ndarray) -> np.ndarray:
    n = nonempty.size
    pos = np.where(nonempty, np.arange(n), n)
    return np.minimum.accumulate(pos[::-1])[::-1]


def _prev_nonempty(nonempty: np.ndarray) -> np.ndarray:
    pos = np.where(nonempty, np.arange(nonempty.size), -1)
    return np.maximum.accumulate(pos)


# --------------------------------------------------------------------------- list-backed kernels
class _ListKernel(Kernel):
    """Shared list plumbing; ``None`` is the empty partial."""

    def empty(self, n):
        return [None] * n

    def _join(self, a, b):
        raise NotImplementedError

    def combine(self, left, right):
        return [a if b is None else b if a is None else self._join(a, b) for a, b in zip(left, right)]

    def take(self, state, idx):
        return [state[i] for i in idx.tolist()]

    def put(self, state, idx, sub):
        for i, s in zip(idx.tolist(), sub):
            state[i] = s
        return state

    def concat(self, states):
        return [x for s in states for x in s]

    def merge_groups(self, state, gstarts):
        bounds = np.append(gstarts, len(state)).tolist()
        return [self._fold(state[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]

    def _fold(self, parts):
        parts = [p for p in parts if p is not None]
        return functools.reduce(self._join, parts) if parts else None

    def _ordered_groups(self, values, ts, seq, seg):
        order = np.lexsort((seq, ts, seg))
        s = seg[order]
        starts, ids = segment_bounds(s)
        ends = np.append(starts[1:], s.size)
        return order, starts, ends, ids


class HolisticKernel(_ListKernel):
    """Quantiles: a slice keeps its values sorted (section 5.4.1), windows merge sorted runs;
    ``lower`` maps a window's sorted values to its result."""

    def __init__(self, lower: Callable[[np.ndarray], Any]):
        self.lower = lower

    def _join(self, a, b):
        return np.sort(np.concatenate((a, b)), kind="stable")

    def partials(self, values, ts, seq, seg, n):
        out = [None] * n
        values = np.asarray(values, np.float64)
        order = np.lexsort((values, seg))
        s, v = seg[order], values[order]
        starts, ids = segment_bounds(s)
        for i, a, b in zip(ids.tolist(), starts.tolist(), np.append(starts[1:], s.size).tolist()):
            out[i] = np.ascontiguousarray(v[a:b], dtype=np.float64)
        return out

    def query(self, state, lo, hi, index, nonempty=None):
        res = []
        for a, b in zip(lo.tolist(), hi.tolist()):
            parts = [p for p in state[a:b] if p is not None]
            res.append(self.lower(np.concatenate(parts)) if parts else None)
        return res


class PythonKernel(_ListKernel):
    """User-defined lift / combine / lower; records are combined in (event time, arrival) order."""

    def __init__(self, fn):
        self.fn = fn
        self.commutative = fn.commutative
        self.invertible = fn.invert is not None

    def _join(self, a, b):
        return self.fn.combine(a, b)

    def partials(self, values, ts, seq, seg, n):
        out = [None] * n
        order, starts, ends, ids = self._ordered_groups(values, ts, seq, seg)
        vals = values[order]
        lift, join = self.fn.lift, self.fn.combine
        for i, a, b in zip(ids.tolist(), starts.tolist(), ends.tolist()):
            acc = lift(vals[a])
            for x in vals[a + 1:b]:
                acc = join(acc, lift(x))
            out[i] = acc
        return out

    def build_index(self, state, eager):
        if not (eager and self.invertible and self.commutative):
            return None
        prefix, acc = [None], None
        for p in state:
            acc = p if acc is None else acc if p is None else self.fn.combine(acc, p)
            prefix.append(acc)
        return prefix

    def query(self, state, lo, hi, index, nonempty=None):
        res = []
        for a, b in zip(lo.tolist(), hi.tolist()):
            if index is not None and index[b] is not None:
                agg = index[b] if index[a] is None else self.fn.invert(index[b], index[a])
            else:
                agg = self._fold(state[a:b])
            res.append(None if agg is None else self.fn.lower(agg))
        return res
