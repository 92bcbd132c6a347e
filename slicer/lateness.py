"""Which records are too late (Scotty's allowed lateness, section 2 and 9.1).

After watermark ``w`` a record with time below ``w - allowed_lateness_ms`` is dropped and
counted. Before the first watermark Scotty measures against the newest event time seen: a
record older than the newest earlier record of its key by more than the allowed lateness is
dropped and counted too ("earlier": in arrival order, so one batch gives the same drops as its
records one by one).

>>> import numpy as np
>>> too_late(np.array([100, 40, 61, 300, 150]), 50, None, np.array([I64_MIN]))[0].tolist()
[False, True, False, False, True]
"""

from __future__ import annotations

import numpy as np

from slicer._kernels import I64_MIN

__all__ = ["too_late", "I64_MIN"]


def too_late(ts: np.ndarray, lateness: int, watermark: int | None, newest: np.ndarray,
             codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(drop mask, newest time per key after the batch: unchanged once a watermark is given) for
    records ``ts`` of keys ``codes``
    (``None``: one key) in arrival order; ``newest[c]`` is key ``c``'s newest accepted time so
    far (``I64_MIN``: none). Vectorised: a grouped running maximum, no loop over records."""
    if watermark is not None:                   # the newest times matter no more
        return ts < watermark - lateness, newest
    if codes is None:
        before = np.maximum.accumulate(np.concatenate((newest[:1], ts[:-1]))) if ts.size else ts
        late = ts < _bound(before, lateness)
    else:
        order = np.argsort(codes, kind="stable")
        late = np.empty(ts.size, bool)
        late[order] = _grouped_late(codes[order], ts[order], lateness, newest)
    keep = ~late
    out = newest.copy()
    if keep.any():
        np.maximum.at(out, np.zeros(int(keep.sum()), np.int64) if codes is None else codes[keep], ts[keep])
    return late, out


def _bound(before: np.ndarray, lateness: int) -> np.ndarray:
    """``before - lateness`` (``I64_MIN`` where nothing came before, without wrapping)."""
    return np.maximum(before, I64_MIN + lateness) - lateness


def _grouped_late(c: np.ndarray, t: np.ndarray, lateness: int, newest: np.ndarray) -> np.ndarray:
    """The drop mask of records sorted by key (stably: arrival order within a key)."""
    first = np.ones(c.size, bool)
    first[1:] = c[1:] != c[:-1]
    prior = newest[c]
    # running maximum per key: shift each key's times into its own band, accumulate, shift back
    lo = int(t.min()) if t.size else 0
    span = (int(t.max()) - lo + 1) if t.size else 1
    group = np.cumsum(first) - 1
    if (int(group[-1]) + 1 if t.size else 0) * span < (1 << 62):
        band = group * span
        run = np.maximum.accumulate(t - lo + band) - band + lo
    else:                                           # huge spans: one accumulate per key
        bounds = np.append(np.flatnonzero(first), t.size)
        run = np.concatenate([np.maximum.accumulate(t[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    before = np.maximum(np.where(first, I64_MIN, np.roll(run, 1)), prior)
    return t < _bound(before, lateness)
