"""Record buffer kept when the decision tree of Scotty section 5.1 (Figure 4) needs records.

Records are sorted by (event time, arrival sequence). ``base`` counts records evicted from
the front, so ``base + i`` is the global event-time position of record ``i`` (the count
measure of section 4.3).
"""

from __future__ import annotations

import numpy as np

__all__ = ["TupleBuffer"]


class TupleBuffer:
    def __init__(self, value_dtype: type | np.dtype = np.float64):
        self.ts = np.zeros(0, np.int64)
        self.seq = np.zeros(0, np.int64)
        self.values = np.zeros(0, value_dtype)
        self.base = 0

    def __len__(self) -> int:
        return int(self.ts.size)

    def insert(self, values: np.ndarray, ts: np.ndarray, seq: np.ndarray) -> int:
        """Insert a batch (``seq`` larger than any buffered one); return the first position."""
        order = np.argsort(ts, kind="stable")
        bts, bseq, bval = ts[order], seq[order], values[order]
        pos = np.searchsorted(self.ts, bts, "right")
        if pos.size and pos[0] == self.ts.size:  # in-order batch: append
            self.ts = np.concatenate((self.ts, bts))
            self.seq = np.concatenate((self.seq, bseq))
            self.values = np.concatenate((self.values, bval.astype(self.values.dtype, copy=False)))
        else:
            self.ts = np.insert(self.ts, pos, bts)
            self.seq = np.insert(self.seq, pos, bseq)
            self.values = np.insert(self.values, pos, bval)
        return int(pos[0]) if pos.size else self.ts.size

    def between(self, lo: int, hi: int) -> tuple[int, int]:
        """Index range of records with ``lo <= ts < hi``."""
        return int(np.searchsorted(self.ts, lo, "left")), int(np.searchsorted(self.ts, hi, "left"))

    def drop_first(self, k: int) -> None:
        if k > 0:
            self.ts, self.seq, self.values = self.ts[k:], self.seq[k:], self.values[k:]
            self.base += k

    def get_state(self) -> tuple:
        return (self.ts, self.seq, self.values, self.base)

    def set_state(self, state: tuple) -> None:
        self.ts, self.seq, self.values, self.base = state
