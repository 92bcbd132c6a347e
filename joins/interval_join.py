"""Interval joins: Flink's ``intervalJoin(...).between(lower, upper)``, SQL's
``a.ts BETWEEN b.ts - x AND b.ts + y``.

A left row ``l`` and a right row ``r`` of the same key join when
``l.ts + lower_bound_ms <= r.ts <= l.ts + upper_bound_ms`` (both bounds inclusive). The SQL form
``a.ts BETWEEN b.ts - x AND b.ts + y`` (``a`` left, ``b`` right) is ``between(-y, x)``. A joined
row's event time is the later of the two (Flink's rule).

- A pair is emitted once, when the later of its two rows arrives (no trigger, no retraction).
- A row is **late**, and dropped (:class:`~joins.spec.JoinDropped`, reason ``late``), when its event
  time is below the join's watermark minus ``allowed_lateness_ms`` on arrival; the watermark is
  the minimum over both sides, so a slow side holds the join back and nothing is dropped
  because the other side ran ahead.
- State is freed when no row still to come can match: a left row once the watermark minus the
  allowed lateness passes ``l.ts + upper_bound_ms``, a right row once it passes
  ``r.ts - lower_bound_ms``. Outer joins (``"left_outer"``, ``"right_outer"``, ``"full_outer"``)
  emit a freed row that never matched, padded with ``None`` (final: it cannot match any more).

Matching is vectorised per key and batch (numpy ``searchsorted`` over each side's rows kept
sorted by event time): a new left row probes the right rows in ``[ts + lower, ts + upper]``
(older and new ones), a new right row the older left rows in ``[ts - upper, ts - lower]``.

>>> from dataflow_kafka.joins import IntervalJoin, Row, SidePunctuation
>>> engine = IntervalJoin.between(-5, 10, how="left_outer").engine()     # r.ts in [l.ts - 5, l.ts + 10]
>>> engine.process([Row("left", "k", 100, "a"), Row("right", "k", 108, "x"), Row("right", "k", 120, "y")]).rows
[Joined(key='k', left=(100, 'a'), right=(108, 'x'))]
>>> engine.process([Row("left", "k", 115, "b"), Row("left", "k", 150, "c")],
...                [SidePunctuation("left", 200), SidePunctuation("right", 200)]).rows      # 150: freed unmatched
[Joined(key='k', left=(115, 'b'), right=(120, 'y')), Joined(key='k', left=(150, 'c'), right=None)]
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Iterable, NamedTuple

import numpy as np

from dataflow_kafka.joins.spec import JoinDropped, JoinError, Joined, JoinType, SidePunctuation, Row, Side, TwoInputWatermark

__all__ = ["IntervalJoin", "IntervalJoinEngine", "IntervalJoinOutput", "Joined"]


@dataclasses.dataclass(frozen=True)
class IntervalJoin:
    """An interval join (see the module docstring); :meth:`engine` builds its runtime."""

    lower_bound_ms: int
    upper_bound_ms: int
    how: JoinType | str = JoinType.INNER
    allowed_lateness_ms: int = 0

    @classmethod
    def between(cls, lower_bound_ms: int, upper_bound_ms: int, how: JoinType | str = JoinType.INNER,
                allowed_lateness_ms: int = 0) -> "IntervalJoin":
        """Flink's ``between(lower, upper)``: right rows with ``ts`` in ``[l.ts + lower, l.ts + upper]``."""
        return cls(lower_bound_ms, upper_bound_ms, how, allowed_lateness_ms)

    def __post_init__(self) -> None:
        for name in ("lower_bound_ms", "upper_bound_ms", "allowed_lateness_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise JoinError(f"{name}={v!r}: expected an integer (ms)")
        if self.lower_bound_ms > self.upper_bound_ms:
            raise JoinError(f"lower_bound_ms={self.lower_bound_ms} > upper_bound_ms={self.upper_bound_ms}: the "
                            "interval is empty")
        if self.allowed_lateness_ms < 0:
            raise JoinError(f"allowed_lateness_ms={self.allowed_lateness_ms}: expected an integer >= 0 (ms)")
        object.__setattr__(self, "how", JoinType.parse(self.how))

    def engine(self) -> "IntervalJoinEngine":
        return IntervalJoinEngine(self)


class IntervalJoinOutput(NamedTuple):
    """What one call produced: joined rows (keys in order of first appearance, then by probe; the
    same order on a replay) and dropped-row reports."""

    rows: list
    dropped: list


class _Buffer:
    """One key's rows of one side, sorted by event time: times, values, matched flags."""

    __slots__ = ("ts", "values", "matched")

    def __init__(self) -> None:
        self.ts = np.empty(0, np.int64)
        self.values: list = []
        self.matched = np.empty(0, bool)

    def insert(self, ts: np.ndarray, values: list, matched: np.ndarray) -> None:
        if not len(ts):
            return
        all_ts = np.concatenate([self.ts, ts])
        order = np.argsort(all_ts, kind="stable")
        vals = self.values + values
        self.ts, self.values = all_ts[order], [vals[i] for i in order.tolist()]
        self.matched = np.concatenate([self.matched, matched])[order]

    def pop_below(self, bound: int) -> tuple[np.ndarray, list, np.ndarray]:
        """Remove and return the rows with ``ts < bound``."""
        cut = int(np.searchsorted(self.ts, bound, "left"))
        out = (self.ts[:cut], self.values[:cut], self.matched[:cut])
        self.ts, self.values, self.matched = self.ts[cut:], self.values[cut:], self.matched[cut:]
        return out

    def __len__(self) -> int:
        return len(self.ts)


def _ranges(sorted_ts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each probe ``i``, indices ``[a_i, b_i)`` of ``sorted_ts`` within ``[lo_i, hi_i]``."""
    return np.searchsorted(sorted_ts, lo, "left"), np.searchsorted(sorted_ts, hi, "right")


def _expand(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All ``(probe i, match j)`` with ``a_i <= j < b_i``, as two index arrays (no Python loop)."""
    counts = np.maximum(b - a, 0)
    probes = np.repeat(np.arange(len(a)), counts)
    starts = np.repeat(a - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return probes, starts + np.arange(int(counts.sum()))


def _covered(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mask of the ``n`` positions inside any ``[a_i, b_i)`` (a difference array, no loop)."""
    keep = b > a
    marks = np.bincount(a[keep], minlength=n + 1) - np.bincount(b[keep], minlength=n + 1)
    return np.cumsum(marks[:n]) > 0


class IntervalJoinEngine:
    """The runtime of an :class:`IntervalJoin` for the keys of one key group (pure, no Spark)."""

    def __init__(self, spec: IntervalJoin) -> None:
        self.spec = spec
        self.watermark = TwoInputWatermark()
        self._state: dict[Any, tuple[_Buffer, _Buffer]] = {}

    def process(self, rows: Iterable[Row | tuple] = (), punctuations: Iterable[SidePunctuation | tuple] = (),
                processing_time_ms: int | None = None) -> IntervalJoinOutput:
        """``rows`` (judged late against the watermark before this call), then the punctuations
        (the watermark moves to the minimum over both sides; state is freed).
        ``processing_time_ms`` is not used (no triggers): both engines take the same arguments."""
        wm = self.watermark.low_watermark_ms
        bar = None if wm is None else wm - self.spec.allowed_lateness_ms
        out: list[Joined] = []
        dropped: list[JoinDropped] = []
        for key, (lefts, rights) in _by_key(rows).items():
            new = []
            for side, part in ((Side.LEFT, lefts), (Side.RIGHT, rights)):
                ts = np.asarray([t for t, _ in part], np.int64)
                keep = np.ones(len(ts), bool) if bar is None else ts >= bar
                if not keep.all():
                    dropped.append(JoinDropped(side, key, "late", int((~keep).sum())))
                idx = np.flatnonzero(keep)
                idx = idx[np.argsort(ts[idx], kind="stable")]
                new.append((ts[idx], [part[i][1] for i in idx]))
            if len(new[0][0]) or len(new[1][0]):
                out += self._match(key, *new[0], *new[1])
        for p in punctuations:
            self.watermark.update(SidePunctuation(*p))
        wm = self.watermark.low_watermark_ms
        if wm is not None:
            out += self._free(wm - self.spec.allowed_lateness_ms)
        return IntervalJoinOutput(out, dropped)

    def _match(self, key: Any, l_ts: np.ndarray, l_vals: list, r_ts: np.ndarray, r_vals: list) -> list[Joined]:
        """Pairs of the new rows with each other and with the older rows; then buffer the new rows."""
        lower, upper = self.spec.lower_bound_ms, self.spec.upper_bound_ms
        old_l, old_r = self._state.setdefault(key, (_Buffer(), _Buffer()))
        out: list[Joined] = []
        l_matched, r_matched = np.zeros(len(l_ts), bool), np.zeros(len(r_ts), bool)
        # (left probes, right targets): new lefts x old rights, new lefts x new rights
        lefts = list(zip(l_ts.tolist(), l_vals))
        for targets_ts, targets_vals, hit in ((old_r.ts, old_r.values, old_r.matched), (r_ts, r_vals, r_matched)):
            a, b = _ranges(targets_ts, l_ts + lower, l_ts + upper)
            if (b > a).any():
                targets = list(zip(targets_ts.tolist(), targets_vals))
                out += [Joined(key, lefts[i], targets[j]) for i, j in zip(*(x.tolist() for x in _expand(a, b)))]
                l_matched |= b > a
                hit |= _covered(len(targets_ts), a, b)
        # new rights x old lefts
        a, b = _ranges(old_l.ts, r_ts - upper, r_ts - lower)
        if (b > a).any():
            olds, rights = list(zip(old_l.ts.tolist(), old_l.values)), list(zip(r_ts.tolist(), r_vals))
            out += [Joined(key, olds[j], rights[i]) for i, j in zip(*(x.tolist() for x in _expand(a, b)))]
            r_matched |= b > a
            old_l.matched |= _covered(len(old_l), a, b)
        old_l.insert(l_ts, l_vals, l_matched)
        old_r.insert(r_ts, r_vals, r_matched)
        return out

    def _free(self, bar: int) -> list[Joined]:
        """Free rows no future row can match; outer joins emit the unmatched ones padded."""
        how, lower, upper = self.spec.how, self.spec.lower_bound_ms, self.spec.upper_bound_ms
        out: list[Joined] = []
        for key in list(self._state):
            lefts, rights = self._state[key]
            ts, vals, matched = lefts.pop_below(bar - upper)         # l.ts + upper < bar
            if how.keeps_left:
                out += [Joined(key, (int(t), v), None) for t, v, m in zip(ts, vals, matched) if not m]
            ts, vals, matched = rights.pop_below(bar + lower)        # r.ts - lower < bar
            if how.keeps_right:
                out += [Joined(key, None, (int(t), v)) for t, v, m in zip(ts, vals, matched) if not m]
            if not len(lefts) and not len(rights):
                del self._state[key]
        return out

    # -- state ----------------------------------------------------------------------------------------
    def buffered(self) -> dict[Side, int]:
        """Rows held per side (freed as the watermark passes their interval)."""
        return {Side.LEFT: sum(len(lb) for lb, _ in self._state.values()),
                Side.RIGHT: sum(len(rb) for _, rb in self._state.values())}

    def held_rows(self) -> dict[Any, dict[Side, tuple[np.ndarray, list, np.ndarray]]]:
        """The rows held per key and side, ``(event times, values, matched)`` sorted by time (read
        them only)."""
        return {k: {side: (b.ts, b.values, b.matched) for side, b in zip((Side.LEFT, Side.RIGHT), bufs)}
                for k, bufs in self._state.items()}

    def to_bytes(self) -> bytes:
        state = {k: [(b.ts, b.values, b.matched) for b in bufs] for k, bufs in self._state.items()}
        return pickle.dumps((self.watermark.to_bytes(), state), protocol=5)

    @classmethod
    def from_bytes(cls, spec: IntervalJoin, data: bytes) -> "IntervalJoinEngine":
        engine = cls(spec)
        watermark, state = pickle.loads(data)
        engine.watermark = TwoInputWatermark.from_bytes(watermark)
        for key, bufs in state.items():
            pair = (_Buffer(), _Buffer())
            for buf, (ts, values, matched) in zip(pair, bufs):
                buf.ts, buf.values, buf.matched = ts, values, matched
            engine._state[key] = pair
        return engine


def _by_key(rows: Iterable) -> dict[Any, tuple[list, list]]:
    """``{key: (left (ts, value) list, right list)}`` in order of first appearance."""
    out: dict[Any, tuple[list, list]] = {}
    for r in rows:
        side, key, ts, value = r
        if isinstance(ts, bool) or not isinstance(ts, (int, np.integer)):
            raise JoinError(f"row {tuple(r)!r}: ts_ms must be an integer (ms)")
        out.setdefault(key, ([], []))[0 if Side.parse(side) is Side.LEFT else 1].append((int(ts), value))
    return out
