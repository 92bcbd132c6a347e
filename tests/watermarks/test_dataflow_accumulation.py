"""Accumulation modes, retractions on merge, lateness and garbage collection, output timestamps,
combiners, keys, warnings and state bytes, as hand-derived transcripts."""

from __future__ import annotations

import warnings

import pytest

from dataflow_kafka.watermarks import (
    AccumulationMode, AfterCount, AfterWatermark, DefaultTrigger, IntervalWindow, Repeatedly, TimestampCombiner,
    TriggerDriver,
)
from dataflow_kafka.windowing import Max, Mean, SessionWindow, SlidingWindow, Sum, ToList, TumblingWindow
from dataflow_kafka.watermarks.transcript import run_transcript

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

EARLY_LATE = AfterWatermark(early=AfterCount(1), late=AfterCount(1))


def rows(d, steps):
    return [p.brief() for _, p in run_transcript(d, steps)]


def make(trigger=EARLY_LATE, mode="accumulating", window_fn=None, **kw):
    kw.setdefault("combiner", Sum())
    return TriggerDriver(window_fn or TumblingWindow(10), trigger, mode, **kw)


STEPS = [("add", [(1, 1)]), ("add", [(2, 2)]), ("watermark", 10), ("add", [(4, 3)]), ("watermark", 20)]


def test_discarding_panes_are_deltas():
    assert rows(make(mode="discarding", allowed_lateness_ms=10), STEPS) == [
        (0, 10, 1, "EARLY", 0, "F"), (0, 10, 2, "EARLY", 1, ""),
        (0, 10, 0, "ON_TIME", 2, ""),  # on-time pane always fires; nothing new since the last
        (0, 10, 4, "LATE", 3, ""),
    ]


def test_accumulating_panes_refine():
    assert rows(make(allowed_lateness_ms=10), STEPS) == [
        (0, 10, 1, "EARLY", 0, "F"), (0, 10, 3, "EARLY", 1, ""), (0, 10, 3, "ON_TIME", 2, ""),
        (0, 10, 7, "LATE", 3, ""),
    ]


def test_retracting_retracts_the_previous_pane_before_its_replacement():
    assert rows(make(mode="accumulating_and_retracting", allowed_lateness_ms=10), STEPS) == [
        (0, 10, 1, "EARLY", 0, "F"),
        (0, 10, 1, "EARLY", 0, "FR"), (0, 10, 3, "EARLY", 1, ""),
        (0, 10, 3, "EARLY", 1, "R"), (0, 10, 3, "ON_TIME", 2, ""),
        (0, 10, 3, "ON_TIME", 2, "R"), (0, 10, 7, "LATE", 3, ""),
    ]


def test_session_merge_retracts_every_merged_windows_last_pane():
    steps = [("add", [(1, 0)]), ("add", [(2, 20)]), ("add", [(4, 8)]), ("add", [(8, 16)])]
    d = make(Repeatedly(AfterCount(1)), "accumulating_and_retracting", SessionWindow(10))
    assert rows(d, steps) == [
        (0, 10, 1, "EARLY", 0, "F"),
        (20, 30, 2, "EARLY", 0, "F"),
        (0, 10, 1, "EARLY", 0, "FR"), (0, 18, 5, "EARLY", 1, ""),  # [8,18) grew [0,10)
        (0, 18, 5, "EARLY", 1, "R"), (20, 30, 2, "EARLY", 0, "FR"), (0, 30, 15, "EARLY", 2, ""),
    ]
    # the other modes retract a merged-away window's last pane too (discarding: with the
    # window's total), and a discarding pane of a window that changed extent holds all of it.
    for mode in ("accumulating", "discarding"):
        d = make(Repeatedly(AfterCount(1)), mode, SessionWindow(10))
        assert rows(d, steps) == [
            (0, 10, 1, "EARLY", 0, "F"), (20, 30, 2, "EARLY", 0, "F"),
            (0, 10, 1, "EARLY", 0, "FR"), (0, 18, 5, "EARLY", 1, ""),
            (0, 18, 5, "EARLY", 1, "R"), (20, 30, 2, "EARLY", 0, "FR"), (0, 30, 15, "EARLY", 2, ""),
        ], mode
    # a window that keeps its extent: discarding panes stay deltas, nothing is retracted
    d = make(Repeatedly(AfterCount(1)), "discarding", SessionWindow(10))
    assert rows(d, [("add", [(1, 0)]), ("add", [(2, 20)]), ("add", [(4, 2)]), ("add", [(1, 25)])]) == [
        (0, 10, 1, "EARLY", 0, "F"), (20, 30, 2, "EARLY", 0, "F"),
        (0, 10, 1, "EARLY", 0, "FR"), (0, 12, 5, "EARLY", 1, ""),        # [2,12) grew it: all of it
        (20, 30, 2, "EARLY", 0, "FR"), (20, 35, 3, "EARLY", 1, "")]


def test_a_merge_into_a_closed_session_drops_the_element():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = make(AfterCount(2), window_fn=SessionWindow(10))
    steps = [("add", [(1, 0), (2, 5)]), ("add", [(4, 12)]), ("add", [(8, 40)])]
    assert rows(d, steps) == [(0, 15, 3, "EARLY", 0, "FL")]
    assert d.dropped_closed == 1 and d.windows() == [IntervalWindow(0, 15), IntervalWindow(40, 50)]


def test_lateness_bounds_state_and_drops_are_counted_per_window_copy():
    d = make(DefaultTrigger(), window_fn=SlidingWindow(10, 5), allowed_lateness_ms=0)
    assert rows(d, [("add", [(1, 7)]), ("watermark", 10), ("add", [(2, 7)]), ("watermark", 15)]) == [
        (0, 10, 1, "ON_TIME", 0, "FL"),
        (5, 15, 3, "ON_TIME", 0, "FL"),  # the second 7 was too late for [0,10) only
    ]
    assert d.dropped_late == 1 and d.windows() == []


def test_garbage_collection_emits_pending_data_as_the_last_pane():
    d = make(Repeatedly(AfterCount(2)), "discarding", allowed_lateness_ms=5)
    steps = [("add", [(1, 1), (2, 2)]), ("add", [(3, 3)]), ("watermark", 10), ("watermark", 14)]
    assert rows(d, steps) == [(0, 10, 3, "EARLY", 0, "F")]
    assert d.windows() == [IntervalWindow(0, 10)]
    assert rows(d, [("watermark", 15)]) == [(0, 10, 3, "ON_TIME", 1, "L")]
    assert d.windows() == []


@pytest.mark.parametrize(
    "combiner, mode, expected",
    [
        (TimestampCombiner.END_OF_WINDOW, "accumulating", [9, 9]),
        (TimestampCombiner.EARLIEST, "accumulating", [4, 2]),
        (TimestampCombiner.LATEST, "accumulating", [6, 5]),  # the hold restarts with every pane, as Beam
        (TimestampCombiner.EARLIEST, "discarding", [4, 2]),
        (TimestampCombiner.LATEST, "discarding", [6, 5]),
    ],
)
def test_output_timestamps(combiner, mode, expected):
    d = make(Repeatedly(AfterCount(2)), mode, timestamp_combiner=combiner)
    panes = [p for _, p in run_transcript(d, [("add", [(1, 6), (1, 4)]), ("add", [(1, 2), (1, 5)])])]
    assert [p.timestamp_ms for p in panes] == expected


def test_merged_sessions_keep_the_earliest_timestamp():
    d = make(DefaultTrigger(), window_fn=SessionWindow(10), timestamp_combiner="earliest")
    (pane,) = [p for _, p in run_transcript(d, [("add", [(1, 9), (1, 3)]), ("watermark", 100)])]
    assert (pane.window, pane.timestamp_ms, pane.value) == (IntervalWindow(3, 19), 3, 2)


def test_combiners_and_retracted_inputs():
    d = make(DefaultTrigger(), combiner=Mean(), allowed_lateness_ms=100)
    assert rows(d, [("add", [(2, 1), (4, 2), (9, 3)]), ("retract", [(9, 3)]), ("watermark", 10)]) == [
        (0, 10, 3.0, "ON_TIME", 0, "F")
    ]
    d = make(DefaultTrigger(), combiner=ToList())
    assert rows(d, [("add", [("a", 1), ("b", 2)]), ("retract", [("a", 1)]), ("watermark", 10)]) == [
        (0, 10, ["b"], "ON_TIME", 0, "FL")
    ]
    with pytest.raises(TypeError, match="has no uncombine"):
        make(DefaultTrigger(), combiner=Max()).add_retractions([(1, 1)])


def test_keys_are_independent_and_panes_carry_them():
    d = make(DefaultTrigger())
    d.add([(1, 1)], key="a")
    d.add([(5, 2)], key=("b", 2))
    assert d.add([(2, 15)], key="a") == []
    assert d.keys() == ["a", ("b", 2)]
    panes = d.advance_watermark(10)
    assert [(p.key, p.value) for p in panes] == [("a", 1), (("b", 2), 5)]
    assert d.keys() == ["a"]  # state of ("b", 2) garbage collected


def test_lossy_configurations_warn_and_safe_ones_do_not():
    with pytest.warns(UserWarning, match="can finish before the watermark"):
        make(AfterCount(1))
    with pytest.warns(UserWarning, match="allowed_lateness_ms=60000 is never used"):
        make(AfterWatermark(), allowed_lateness_ms=60_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(AfterWatermark())
        make(EARLY_LATE, allowed_lateness_ms=60_000)
        make(DefaultTrigger(), allowed_lateness_ms=60_000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"allowed_lateness_ms": -1}, "allowed_lateness_ms=-1: expected an integer >= 0 (milliseconds)"),
        ({"accumulation_mode": "sometimes"},
         "accumulation_mode must be one of DISCARDING, ACCUMULATING, ACCUMULATING_AND_RETRACTING, got 'sometimes'"),
        ({"timestamp_combiner": "middle"}, "timestamp_combiner must be one of END_OF_WINDOW, EARLIEST, LATEST"),
    ],
)
def test_bad_driver_options_name_the_option_and_value(kwargs, message):
    args = {"window_fn": TumblingWindow(10), "trigger": DefaultTrigger(), **kwargs}
    with pytest.raises(ValueError) as err:
        TriggerDriver(**args)
    assert message in str(err.value)


def test_state_bytes_round_trip_and_reject_another_configuration():
    d = make(EARLY_LATE, "accumulating_and_retracting", SessionWindow(10), allowed_lateness_ms=50)
    run_transcript(d, [("add", [(1, 0), (2, 4)], "k"), ("add", [(3, 30)], 7), ("watermark", 12)])
    data = d.to_bytes()
    assert len(data) < 200
    twin = TriggerDriver.from_bytes(data, SessionWindow(10), EARLY_LATE, AccumulationMode.ACCUMULATING_AND_RETRACTING,
                                    allowed_lateness_ms=50, combiner=Sum())
    assert twin.to_bytes() == data
    assert (twin.watermark_ms, twin.keys(), twin.windows("k")) == (12, ["k", 7], [IntervalWindow(0, 14)])
    steps = [("add", [(4, 9)], "k"), ("watermark", 100)]
    assert run_transcript(twin, steps) == run_transcript(d, steps)
    with pytest.raises(ValueError, match="different format or configuration"):
        make(EARLY_LATE, "accumulating", SessionWindow(10), allowed_lateness_ms=50).load_bytes(data)


def test_a_wrong_expectation_fails():
    """Negative transcript: the late 9 of the running example is not in a lateness-0 window."""
    d = make(DefaultTrigger(), window_fn=TumblingWindow(120))
    got = rows(d, [("add", [(5, 70)]), ("watermark", 120), ("add", [(9, 100)])])
    assert got != [(0, 120, 5, "ON_TIME", 0, "FL"), (0, 120, 14, "LATE", 1, "")]
    assert got == [(0, 120, 5, "ON_TIME", 0, "FL")]
