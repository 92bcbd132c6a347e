"""AssignWindows and MergeWindows (§2.2), and a custom window function through the driver."""

from __future__ import annotations

import pytest

from dataflow_kafka.watermarks import GLOBAL_WINDOW, DefaultTrigger, IntervalWindow, TriggerDriver, WindowFn
from dataflow_kafka.windowing import GlobalWindow, SessionWindow, SlidingWindow, Sum, TumblingWindow
from dataflow_kafka.watermarks.transcript import run_transcript
from dataflow_kafka.watermarks.windows import compile_window_fn, windows_of

W = IntervalWindow


def fn(window):
    """The window function the driver runs for a windowing definition."""
    return compile_window_fn(window)


def test_global_windows():
    assert fn(GlobalWindow()).assign_windows(-5) == [GLOBAL_WINDOW]
    assert GlobalWindow() == GlobalWindow()


@pytest.mark.parametrize(
    "t, expected", [(0, W(0, 10)), (9, W(0, 10)), (10, W(10, 20)), (-1, W(-10, 0))]
)
def test_fixed_windows(t, expected):
    assert fn(TumblingWindow(10)).assign_windows(t) == [expected]


def test_fixed_windows_offset():
    assert fn(TumblingWindow(10, 3)).assign_windows(2) == [W(-7, 3)]
    assert fn(TumblingWindow(10, 3)).assign_windows(3) == [W(3, 13)]


def test_sliding_windows_copy_each_element_into_every_overlapping_window():
    # Figure 3: two-minute windows every minute; an element at 12:01:30 is in two windows
    assert fn(SlidingWindow(120, 60)).assign_windows(90) == [W(0, 120), W(60, 180)]
    assert fn(SlidingWindow(10, 5, 2)).assign_windows(7) == [W(2, 12), W(7, 17)]
    assert fn(SlidingWindow(3, 5)).assign_windows(4) == []  # in the gap between windows
    assert fn(SlidingWindow(3, 5)).assign_windows(6) == [W(5, 8)]


def test_sessions_merge_overlapping_not_touching():
    s = fn(SessionWindow(10))
    assert s.assign_windows(5) == [W(5, 15)]
    assert s.merge_windows([W(0, 10), W(10, 20)]) == []
    assert s.merge_windows([W(20, 30), W(0, 10), W(9, 19), W(40, 50)]) == [
        ([W(0, 10), W(9, 19)], W(0, 19))
    ]
    assert s.merge_windows([W(0, 10), W(5, 15), W(14, 24), W(30, 40), W(35, 45)]) == [
        ([W(0, 10), W(5, 15), W(14, 24)], W(0, 24)),
        ([W(30, 40), W(35, 45)], W(30, 45)),
    ]


def test_windows_of_is_the_batch_reference():
    assert windows_of(SessionWindow(60), [70, 130, 100]) == [W(70, 190)]
    assert windows_of(TumblingWindow(10), [1, 2, 15]) == [W(0, 10), W(10, 20)]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: TumblingWindow(0), "TumblingWindow: size_ms=0: expected a positive integer"),
        (lambda: TumblingWindow(10, 10), "TumblingWindow: offset_ms=10: expected an integer in [0, 10)"),
        (lambda: SlidingWindow(10, period_ms=-5), "SlidingWindow: period_ms=-5: expected a positive integer"),
        (lambda: SessionWindow(1.5), "SessionWindow: gap_ms=1.5: expected a positive integer"),
        (lambda: TriggerDriver(TumblingWindow(10, measure="count"), DefaultTrigger()),
         "TumblingWindow(size_ms=10, offset_ms=0, measure='count'): the Dataflow driver supports "
         "measure='time' only (windows of records: use the slicer)"),
    ],
)
def test_bad_window_specs_name_the_value(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == message


def test_window_functions_are_values():
    assert TumblingWindow(10, 2) == TumblingWindow(10, 2) != TumblingWindow(10, 3)
    assert hash(SessionWindow(5)) == hash(SessionWindow(5))
    assert repr(SlidingWindow(10, 5)) == "SlidingWindow(size_ms=10, slide_ms=5, offset_ms=0)"
    assert SlidingWindow(10, period_ms=5) == SlidingWindow(10, 5)


class HourActivity(WindowFn):
    """Custom merging windows: each element is [t, t+1); all windows within one 100 ms 'hour'
    merge into their span (unlike sessions, regardless of gaps)."""

    is_merging = True

    def assign_windows(self, timestamp_ms):
        return [W(timestamp_ms, timestamp_ms + 1)]

    def merge_windows(self, windows):
        by_hour = {}
        for w in windows:
            by_hour.setdefault(w.start_ms // 100, []).append(w)
        return [
            (ws, W(min(w.start_ms for w in ws), max(w.end_ms for w in ws)))
            for ws in by_hour.values() if len(ws) > 1
        ]


def test_custom_merging_window_function_through_the_driver():
    d = TriggerDriver(HourActivity(), DefaultTrigger(), "accumulating", combiner=Sum())
    out = run_transcript(d, [("add", [(1, 10), (2, 90), (4, 150), (8, 40)]), ("watermark", 1000)])
    assert [p.brief() for _, p in out] == [(10, 91, 11, "ON_TIME", 0, "FL"), (150, 151, 4, "ON_TIME", 0, "FL")]
