"""Which records are too late (Scotty's allowed lateness, section 2 and 9.1).

After watermark ``w`` a record with time below ``w - allowed_lateness_ms`` is dropped and
counted. Before the first watermark Scotty measures against the newest event time seen: a
record older than the newest earlier record of its key by more than the allowed lateness is
dropped and counted too ("earlier": in arrival order, so one batch gives the same drops as its
records one by one). ``SlicingWindowOperator(drop_before_watermark=False)`` turns that off (the
Spark stage does: Spark drops nothing before its first watermark).

>>> import numpy as np
>>> too_late(np.array([100, 40, 61, 300, 150]), 50, None, None).tolist()
[False, True, False, False, True]
"""

from __future__ import annotations

import numpy as np

from dataflow_kafka.slicer._kernels import I64_MIN

__all__ = ["too_late"]


def too_late(ts: np.ndarray, lateness: int, watermark: int | None, newest: int | None) -> np.ndarray:
    """Drop mask of records ``ts`` (in arrival order): against ``watermark``, or, before the
    first one (``None``), against the newest earlier time (``newest``: the newest accepted time
    before the batch, ``None`` if none). Vectorised: a running maximum, no loop over records."""
    if watermark is not None:
        return ts < watermark - lateness
    if ts.size == 0:
        return np.zeros(0, bool)
    before = np.maximum.accumulate(np.concatenate(([I64_MIN if newest is None else newest], ts[:-1])))
    return ts < np.maximum(before, I64_MIN + lateness) - lateness   # nothing before: keep
