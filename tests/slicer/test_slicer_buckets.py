"""The benchmark's Buckets baseline computes the same final window sums as the engine."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow_kafka.slicer import SlicingWindowOperator
from dataflow_kafka.windowing import SessionWindow, SlidingWindow, Sum, TumblingWindow
from bench.buckets_baseline import BucketsOperator


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_buckets_agree_with_slicing_on_final_sums(seed):
    rng = np.random.default_rng(seed)
    n = 5000
    ts = np.cumsum(rng.integers(0, 3, n)) + (np.arange(n) // 1500) * 400
    ts = ts - np.where(rng.random(n) < 0.2, rng.integers(0, 200, n), 0)
    vals = rng.integers(0, 10, n).astype(float)
    windows = [TumblingWindow(100), SlidingWindow(300, 50), SessionWindow(150)]
    # the baseline emits windows with records only: the engine's compact emission, like for like
    op = SlicingWindowOperator(allowed_lateness_ms=10_000, emission="compact")
    bk = BucketsOperator(allowed_lateness_ms=10_000)
    for w in windows:
        op.add_window(w)
        bk.add_window(w)
    op.add_aggregation(Sum())
    for i in range(0, n, 700):
        op.process_elements(vals[i:i + 700], ts[i:i + 700])
        bk.process_elements(vals[i:i + 700], ts[i:i + 700])
    final = {}
    for r in op.process_watermark(int(ts.max()) + 1000):
        final[(int(r.query_id), r.start, r.end)] = r.value
    got = {(q, s, e): v for q, s, e, v in bk.process_watermark(int(ts.max()) + 1000)}
    assert got.keys() == final.keys() and len(got) > 50
    assert all(np.isclose(got[k], final[k]) for k in got)
