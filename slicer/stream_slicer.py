"""Stream slicer: fixed slice separators of context-free windows (Scotty section 7).

Algorithm 1 keeps the next window edge and emits a separator whenever a record passes it;
Algorithm 2 advances per-query edge times and fuses tumbling windows whose edges are
covered by another's (section 7.3.2; a sliding window counts as two tumbling ones,
section 7.1.2). Here the same happens per batch: the edges in ``(frontier, max time]`` of
all fused progressions are generated at once with numpy, so the per-record cost is one
comparison in a vectorised ``searchsorted``, independent of the number of queries.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from dataflow_kafka.slicer.windows import ContextFreeWindow, progression_points

__all__ = ["StreamSlicer", "fuse_progressions"]


def fuse_progressions(progs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop every progression ``(period, offset)`` whose edges another one covers (Alg. 2)."""
    uniq = np.array(sorted(set(progs)), np.int64).reshape(-1, 2)
    if uniq.shape[0] < 2:
        return [tuple(map(int, r)) for r in uniq]
    p, o = uniq[:, 0], uniq[:, 1]
    covers = (p[:, None] % p[None, :] == 0) & ((o[:, None] - o[None, :]) % p[None, :] == 0)
    np.fill_diagonal(covers, False)
    return [tuple(map(int, r)) for r in uniq[~covers.any(axis=1)]]


class StreamSlicer:
    """Edges of a set of context-free windows, fused once per query change."""

    def __init__(self) -> None:
        self.windows: list[ContextFreeWindow] = []
        self._rebuild()

    def set_windows(self, windows: Iterable[ContextFreeWindow]) -> None:
        self.windows = list(windows)
        self._rebuild()

    def _rebuild(self) -> None:
        progs, points, other = [], [], []
        for w in self.windows:
            pr = w.progressions()
            if pr is not None:
                progs.extend(pr)
            elif w.points():
                points.extend(w.points())
            else:
                other.append(w)
        fused = fuse_progressions(progs)
        self.periods = np.array([p for p, _ in fused], np.int64)
        self.offsets = np.array([o for _, o in fused], np.int64)
        self.points = np.unique(np.array(points, np.int64))
        self.generic = other

    def next_edge(self, ts: int) -> int | None:
        """The smallest edge strictly after ``ts`` (``None``: none)."""
        cands = [int(x) for x in self.points[self.points > ts][:1]]
        if self.periods.size:
            cands.append(int((ts + 1 + (self.offsets - ts - 1) % self.periods).min()))
        cands += [int(w.next_edge(ts)) for w in self.generic]
        edge = min(cands, default=None)
        return None if edge is None or edge >= np.iinfo(np.int64).max else edge

    def edges_between(self, lo: int, hi: int) -> np.ndarray:
        """Sorted unique edges ``e`` with ``lo < e <= hi``."""
        if hi <= lo:
            return np.zeros(0, np.int64)
        parts = [self.points[(self.points > lo) & (self.points <= hi)]]
        if self.periods.size:
            parts.append(progression_points(self.periods, self.offsets, lo, hi)[1])
        parts.extend(w.edges_between(lo, hi) for w in self.generic)
        return np.unique(np.concatenate(parts))
