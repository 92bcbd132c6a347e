"""Sliding windows are assigned from a cache of window tuples (``watermarks.windows``): the same
windows as counting down from the last start, for any size, period, offset and time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.watermarks.windows import IntervalWindow, SlidingWindowFn


def _counted_down(fn: SlidingWindowFn, t: int) -> list[IntervalWindow]:
    start = t - (t - fn.offset_ms) % fn.period_ms
    out = []
    while start > t - fn.size_ms:
        out.append(IntervalWindow(start, start + fn.size_ms))
        start -= fn.period_ms
    return out[::-1]


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 100), st.integers(1, 120), st.integers(-50, 50), st.integers(-10**13, 10**13))
def test_cached_assignment_equals_counting_down(size, period, offset, t):
    fn = SlidingWindowFn(size, period, offset)
    assert fn.assign_windows(t) == _counted_down(fn, t)
    assert fn.assign_windows(t) == _counted_down(fn, t)      # from the cache
