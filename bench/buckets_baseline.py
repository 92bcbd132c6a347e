"""Baseline for the benchmark: "Buckets", one aggregate bucket per window (Scotty section 3.3).

Li et al.'s Window-ID approach as Flink implements it: every record is added to the bucket
of every window that contains it (``size / slide`` buckets for a sliding window), sessions
are merging buckets. Vectorised with numpy per query and per overlap, so the comparison
with slicing measures the algorithm (W aggregation steps per record instead of one), not
Python against numpy. Sum only; time measure only. Reports windows with records only, any
start: compare it with the slicer's ``emission="compact"``, not its Scotty default (which adds
empty windows and none before 0).
"""

from __future__ import annotations

import numpy as np

from dataflow_kafka.slicer.compile import compile_window
from dataflow_kafka.slicer.context_windows import SessionGapWindow
from dataflow_kafka.slicer.windows import PeriodicWindow

__all__ = ["BucketsOperator"]


class BucketsOperator:
    def __init__(self, allowed_lateness_ms: int = 1000):
        self.allowed_lateness_ms = allowed_lateness_ms
        self.windows: list = []
        self.buckets: list[dict] = []  # per query: start -> [end, sum, changed]
        self.watermark: int | None = None
        self.dropped_late = 0

    def add_window(self, window) -> int:
        window = compile_window(window)
        if not isinstance(window, (PeriodicWindow, SessionGapWindow)):
            raise TypeError(f"BucketsOperator: unsupported window {window!r}")
        self.windows.append(window)
        self.buckets.append({})
        return len(self.windows) - 1

    def process_elements(self, values: np.ndarray, ts: np.ndarray) -> None:
        ts = np.asarray(ts, np.int64)
        values = np.asarray(values, np.float64)
        if self.watermark is not None:
            ok = ts >= self.watermark - self.allowed_lateness_ms
            self.dropped_late += int(ts.size - ok.sum())
            ts, values = ts[ok], values[ok]
        if ts.size == 0:
            return
        for w, b in zip(self.windows, self.buckets):
            if isinstance(w, SessionGapWindow):
                self._sessions(w.gap, b, values, ts)
                continue
            base = (ts - w.offset) // w.slide
            for j in range(-(-w.size // w.slide)):  # every window that contains the record
                k = base - j
                start = k * w.slide + w.offset
                inside = ts < start + w.size
                kk = k if inside.all() else k[inside]
                vv = values if inside.all() else values[inside]
                lo = int(kk.min())
                sums = np.bincount(kk - lo, weights=vv)
                hit = np.bincount(kk - lo)
                for i in np.flatnonzero(hit).tolist():
                    s = (lo + i) * w.slide + w.offset
                    cell = b.get(s)
                    if cell is None:
                        b[s] = [s + w.size, sums[i], True]
                    else:
                        cell[1] += sums[i]
                        cell[2] = True

    @staticmethod
    def _sessions(gap: int, b: dict, values: np.ndarray, ts: np.ndarray) -> None:
        order = np.argsort(ts, kind="stable")
        t, v = ts[order], values[order]
        cut = np.concatenate(([0], np.flatnonzero(np.diff(t) >= gap) + 1))
        sums = np.add.reduceat(v, cut)
        last = np.append(t[cut[1:] - 1], t[-1])
        spans = [(int(a), int(z), float(x), True) for a, z, x in zip(t[cut], last, sums)]
        spans += [(s, cell[0] - gap, cell[1], cell[2]) for s, cell in b.items()]
        spans.sort()
        b.clear()
        cur = None
        for s, z, x, changed in spans:  # merge overlapping sessions (Flink's merging windows)
            if cur is not None and s - cur[1] < gap:
                cur[1], cur[2], cur[3] = max(cur[1], z), cur[2] + x, cur[3] or changed
            else:
                cur = [s, z, x, changed]
                b[s] = cur
        for s, (_, z, x, changed) in list(b.items()):
            b[s] = [z + gap, x, changed]

    def process_watermark(self, wm: int) -> list[tuple[int, int, int, float]]:
        """(query, start, end, sum) for windows ended by ``wm`` that are new or changed."""
        self.watermark = wm if self.watermark is None else max(self.watermark, wm)
        out = []
        for qi, b in enumerate(self.buckets):
            for s, cell in list(b.items()):
                if cell[0] <= self.watermark:
                    if cell[2]:
                        out.append((qi, s, cell[0], cell[1]))
                        cell[2] = False
                    if cell[0] <= self.watermark - self.allowed_lateness_ms:
                        del b[s]
        return out
