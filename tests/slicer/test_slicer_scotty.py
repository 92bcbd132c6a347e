"""Scotty's rules, one small scenario each, the expected windows written from the rule.

Each test states the rule it checks (``docs/semantics.md``, Scotty column); the property tests
(test_slicer_properties.py) check the same rules at random against the brute-force reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataflow_kafka.slicer import ForwardContextFreeWindow, PunctuationWindow, SlideByTupleWindow, SlicingWindowOperator, ThresholdFrame, WindowContext
from dataflow_kafka.windowing import M4, Count, Measure, SessionWindow, SlidingWindow, Sum, TumblingWindow
from dataflow_kafka.slicer.keyed import KeyedSlicingOperator

from tests.slicer.slicer_reference import Reference, same_rows
from tests.slicer.test_slicer_properties import AGGS, make_aggs, streams
from tests.suite import examples


def windows_of(op, values, ts, wm, query=None):
    op.process_elements(np.asarray(values), np.asarray(ts))
    return [(r.start, r.end, r.value) for r in op.process_watermark(wm) if query is None or r.query_id == query]


# ----------------------------------------------------------------------------- punctuations
def test_punctuation_closes_previous_to_p_and_the_first_window_opens_at_the_first_record():
    # punctuations (value 0) at 20 and 40: [5, 20) from the first record, [20, 40); [40, ...) is open
    op = SlicingWindowOperator([PunctuationWindow(0)], [Sum()])
    assert windows_of(op, [1, 2, 0, 3, 0, 4], [5, 10, 20, 30, 40, 50], 100) == [(5, 20, 3), (20, 40, 3)]
    # the next punctuation closes [40, 60): the punctuation at 40 belongs to the window it opens
    assert windows_of(op, [0], [60], 200) == [(40, 60, 4)]


def test_a_late_punctuation_cuts_an_emitted_window_and_a_late_first_record_opens_earlier():
    op = SlicingWindowOperator([PunctuationWindow(0)], [Sum()], allowed_lateness_ms=100)
    assert windows_of(op, [1, 2, 0], [10, 30, 50], 60) == [(10, 50, 3)]
    op.process_elements(np.array([0, 4]), np.array([20, 5]))   # punctuation at 20; a record at 5
    got = [(r.start, r.end, r.value, r.update, r.retraction) for r in op.process_watermark(70)]
    assert got == [(10, 50, 3, True, True),                        # the emitted extent is retracted first
                   (5, 20, 5, True, False), (20, 50, 2, True, False)]   # new extents, emitted as updates


def test_punctuation_on_an_in_order_stream_with_a_record_at_the_same_time():
    # the record at 20 that came before the punctuation at 20 belongs to [20, ...) by time
    op = SlicingWindowOperator([PunctuationWindow(0)], [Sum()], stream_order="in_order")
    op.process_element(1, 10)
    op.process_element(2, 20)
    op.process_element(0, 20)
    op.process_element(5, 30)
    op.process_element(0, 40)
    assert [(r.start, r.end, r.value) for r in op.process_watermark(100)] == [(10, 20, 1), (20, 40, 7)]


def test_scotty_constructor_shapes_and_ours_are_the_same_windows():
    from dataflow_kafka.compat import scotty

    assert PunctuationWindow(0) == PunctuationWindow(punctuation=0)
    assert SlideByTupleWindow(100, 3) == SlideByTupleWindow(size_ms=100, slide=3)
    assert scotty.TumblingWindow(scotty.WindowMeasure.Time, 5000) == TumblingWindow(5000)
    assert scotty.TumblingWindow(scotty.WindowMeasure.Count, 3) == TumblingWindow(3, measure=Measure.COUNT)
    assert scotty.SlidingWindow(scotty.WindowMeasure.Time, 2000, 1000) == SlidingWindow(2000, 1000)
    assert scotty.SessionWindow(scotty.WindowMeasure.Time, 2000) == SessionWindow(2000)
    with pytest.raises(ValueError, match="SessionWindow: measure=.*sessions are time windows only"):
        scotty.SessionWindow(scotty.WindowMeasure.Count, 5)


# ----------------------------------------------------------------------------- sessions
def test_session_a_distance_of_exactly_the_gap_joins():
    op = SlicingWindowOperator([SessionWindow(10)], [Count()])
    # 0 -> 10 (exactly the gap): one session; 10 -> 21 (gap + 1): a new one
    assert windows_of(op, [1, 1, 1], [0, 10, 21], 100) == [(0, 20, 2), (21, 31, 1)]


def test_session_is_final_only_when_its_end_is_strictly_below_the_watermark():
    op = SlicingWindowOperator([SessionWindow(10)], [Sum()], allowed_lateness_ms=0)
    assert windows_of(op, [1], [0], 10) == []          # end 10 == watermark: a record at 10 still joins
    op.process_element(2, 10)                           # accepted (not late) and joins
    assert [(r.start, r.end, r.value) for r in op.process_watermark(20)] == []
    assert [(r.start, r.end, r.value) for r in op.process_watermark(21)] == [(0, 20, 3)]


# ----------------------------------------------------------------------------- slide-by-tuple
def test_slide_by_tuple_windows_start_at_every_slide_th_record():
    # records 0, 2, 4 (of 0..5) start windows of 25 ms
    op = SlicingWindowOperator([SlideByTupleWindow(25, 2)], [Sum()])
    got = windows_of(op, [1, 2, 3, 4, 5, 6], [0, 10, 20, 30, 40, 50], 1000)
    assert got == [(0, 25, 6), (20, 45, 12), (40, 65, 11)]


def test_slide_by_tuple_positions_are_in_event_time_order():
    op = SlicingWindowOperator([SlideByTupleWindow(5, 2)], [Sum()], allowed_lateness_ms=100)
    op.process_elements(np.array([1, 2, 3]), np.array([10, 20, 30]))
    op.process_element(9, 15)          # now 10, 15, 20, 30: records 0 and 2 start windows
    assert [(r.start, r.end, r.value) for r in op.process_watermark(100)] == [(10, 15, 1), (20, 25, 2)]


# ----------------------------------------------------------------------------- threshold frames
def test_threshold_frame_opens_when_the_value_passes_and_closes_when_it_stops():
    op = SlicingWindowOperator([ThresholdFrame(5)], [Sum(), Count()])
    op.process_elements(np.array([1, 6, 8, 2, 9, 3, 7]), np.array([0, 10, 20, 30, 40, 50, 60]))
    got = [(r.start, r.end, r.values) for r in op.process_watermark(100)]
    assert got == [(10, 30, (14, 2)), (40, 50, (9, 1))]             # [60, ...) is still open
    op.process_element(0, 70)
    assert [(r.start, r.end, r.value) for r in op.process_watermark(200)] == [(60, 70, 7)]


def test_threshold_frame_out_of_order_record_splits_a_frame():
    op = SlicingWindowOperator([ThresholdFrame(predicate=_positive)], [Sum()], allowed_lateness_ms=100)
    op.process_elements(np.array([0, 3, 4, 0]), np.array([0, 10, 30, 40]))
    op.process_element(-1, 20)         # late, inside the frame [10, 40): closes it at 20
    assert [(r.start, r.end, r.value) for r in op.process_watermark(100)] == [(10, 20, 3), (30, 40, 4)]


def _positive(values):
    return np.asarray(values) > 0


# ----------------------------------------------------------------------------- lateness
def test_before_the_first_watermark_a_record_older_than_the_lateness_is_dropped_and_counted():
    op = SlicingWindowOperator([TumblingWindow(100)], [Sum()], allowed_lateness_ms=50)
    op.process_elements(np.array([1, 2, 4]), np.array([300, 240, 260]))    # 240 < 300 - 50: dropped
    op.process_element(8, 250)                                               # 250 = 300 - 50: kept
    assert op.dropped_late == 1
    assert [(r.start, r.end, r.value) for r in op.process_watermark(1000)] == [(200, 300, 12), (300, 400, 1)]


def test_drop_before_watermark_false_drops_nothing_before_the_first_watermark():
    # the Spark stage's engines (and the keyed table): as Spark, nothing is late before a watermark
    op = SlicingWindowOperator([TumblingWindow(100)], [Sum()], allowed_lateness_ms=50, drop_before_watermark=False)
    op.process_elements(np.array([1, 2]), np.array([300, 240]))
    assert op.dropped_late == 0
    restored = SlicingWindowOperator.from_bytes(op.to_bytes())
    restored.process_element(4, 100)
    assert restored.dropped_late == 0 and restored.drop_before_watermark is False
    keyed = KeyedSlicingOperator(SlicingWindowOperator([TumblingWindow(100)], [Sum()], allowed_lateness_ms=50))
    codes = keyed.codes_of(["a", "a"])
    assert keyed.process_elements(codes, np.array([1.0, 2.0]), np.array([300, 200])).tolist() == [0]


# ----------------------------------------------------------------------------- Sum of integers
def test_sum_of_integers_is_an_integer_and_of_floats_a_float():
    ints = SlicingWindowOperator([TumblingWindow(10)], [Sum(), Count()])
    ints.process_elements(np.array([1, 2]), np.array([0, 5]))
    ints.process_element(3, 12)
    values = [r.values for r in ints.process_watermark(100)]
    assert values == [(3, 2), (3, 1)] and all(type(v[0]) is int for v in values)
    floats = SlicingWindowOperator([TumblingWindow(10)], [Sum()])
    floats.process_elements(np.array([1, 2]), np.array([0, 5]))
    floats.process_element(0.5, 6)
    assert [type(r.value) for r in floats.process_watermark(100)] == [float]


# ----------------------------------------------------------------------------- emission
def test_scotty_emission_is_the_default_empty_windows_order_and_no_negative_start():
    op = SlicingWindowOperator({"s": SessionWindow(5), "slide": SlidingWindow(20, 10), "tumble": TumblingWindow(10)},
                               [Sum(), M4()])
    assert op.emission == "scotty" and SlicingWindowOperator.from_bytes(op.to_bytes()).emission == "scotty"
    op.process_elements(np.array([1, 2]), np.array([0, 35]))
    got = [(r.query_id, r.start, r.end, r.values[0]) for r in op.process_watermark(100)]
    # context-free queries first in registration order, then the session; each by start; [-10, 10) not
    # emitted (negative start); empty windows between the records, none after the newest record's window
    assert got == [("slide", 0, 20, 1), ("slide", 10, 30, None), ("slide", 20, 40, 2), ("slide", 30, 50, 2),
                   ("tumble", 0, 10, 1), ("tumble", 10, 20, None), ("tumble", 20, 30, None), ("tumble", 30, 40, 2),
                   ("s", 0, 5, 1), ("s", 35, 40, 2)]
    with pytest.raises(ValueError, match="emission='scotty': event time -1 < 0 .*emission='compact' accepts"):
        op.process_element(1, -1)
    with pytest.raises(ValueError, match="emission='x': expected 'scotty' or 'compact'"):
        SlicingWindowOperator(emission="x")


def test_compact_emission_skips_empty_windows_and_keeps_negative_starts():
    op = SlicingWindowOperator([SlidingWindow(20, 10)], [Sum()], emission="compact")
    assert windows_of(op, [1, 2], [0, 35], 100) == [(-10, 10, 1), (0, 20, 1), (20, 40, 2), (30, 50, 2)]
    assert windows_of(op, [4], [-5], 100) == [(-20, 0, 4), (-10, 10, 5)]   # within the lateness: an update
    assert SlicingWindowOperator.from_bytes(op.to_bytes()).emission == "compact"


def test_the_keyed_table_emits_compactly_whatever_the_template_says():
    # the keyed table (the Spark stage's for tumbling / sliding windows) keeps the compact emission:
    # the same rows as one compact engine, no empty windows, a window with a negative start
    keyed = KeyedSlicingOperator(SlicingWindowOperator([SlidingWindow(20, 10)], [Sum()]))   # default: scotty
    single = SlicingWindowOperator([SlidingWindow(20, 10)], [Sum()], emission="compact", drop_before_watermark=False)
    assert keyed.emission == "compact"
    keyed.process_elements(keyed.codes_of(["a", "a"]), np.array([1.0, 2.0]), np.array([0, 35]))
    single.process_elements(np.array([1.0, 2.0]), np.array([0, 35]))
    keys, res = keyed.process_watermark(100)
    got = [(k, r.start, r.end, r.value) for k, r in zip(keys.tolist(), res.rows())]
    assert got == [("a", r.start, r.end, r.value) for r in single.process_watermark(100)]
    assert [g[1:] for g in got] == [(-10, 10, 1.0), (0, 20, 1.0), (20, 40, 2.0), (30, 50, 2.0)]


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([TumblingWindow(30), TumblingWindow(7, 3), SlidingWindow(40, 15), SessionWindow(20),
                                 PunctuationWindow(7), SlidingWindow(3, 2, measure="count")]),
                min_size=1, max_size=3, unique=True), AGGS, st.sampled_from([0, 60]), streams())
def test_scotty_emission_matches_the_reference_in_scotty_order(windows, names, lateness, events):
    op = SlicingWindowOperator(windows, make_aggs(names), allowed_lateness_ms=lateness)   # Scotty's, the default
    ref = Reference(windows, make_aggs(names), lateness, emission="scotty")
    for ev in events:
        if ev[0] == "rec":
            ts = np.array(ev[2]) + 200          # Scotty's time starts at 0
            op.process_elements(np.array(ev[1]), ts)
            ref.records(ev[1], ts.tolist())
        else:
            got = [(r.query_id, r.start, r.end, "retract" if r.retraction else r.update, r.values)
                   for r in op.process_watermark(ev[1] + 200)]
            want = ref.watermark(ev[1] + 200)
            assert same_rows([g[:4] + g[4] for g in got], [w[:4] + w[4] for w in want]), (got, want)
    assert op.dropped_late == ref.dropped


# ----------------------------------------------------------------------------- addWindowFunction
class EveryRecordStarts(ForwardContextFreeWindow):
    """A user-defined context type: a window [t, t + 10) at every record."""

    def create_context(self):
        return _EveryRecord()


class _EveryRecord(WindowContext):
    def update(self, view, values, ts):
        starts = np.unique(np.concatenate((view.tuples.ts, ts)))
        return np.union1d(starts, starts + 10)

    def windows_ending_between(self, view, lo, hi):
        ends = np.unique(view.tuples.ts) + 10
        ends = ends[(ends > lo) & (ends <= hi)]
        return ends - 10, ends

    def earliest_open_start(self, view, horizon):
        return int(horizon - 10)


@pytest.mark.parametrize("window, expected", [
    (TumblingWindow(100), [(0, 100, 3), (100, 200, 13)]),
    (SessionWindow(30), [(10, 60, 3), (120, 200, 13)]),
    (PunctuationWindow(4), [(10, 150, 4)]),                       # [150, ...) is still open
    (SlideByTupleWindow(50, 2), [(10, 60, 3), (120, 170, 13), (160, 210, 8)]),
    (ThresholdFrame(1), [(30, 120, 2), (150, 170, 12)]),
    (EveryRecordStarts(), [(10, 20, 1), (30, 40, 2), (120, 130, 1), (150, 160, 4), (160, 170, 8), (170, 180, 0)]),
])
def test_a_window_added_while_running_reports_windows_starting_before_the_newest_record(window, expected):
    # keep_records=True and nothing evicted yet: the new query covers every record seen (Scotty's
    # addWindowFunction on a running operator), not only windows starting after the newest one.
    # Records (value, time): (1, 10) (2, 30) (1, 120) (4, 150) (8, 160), then (0, 170)
    op = SlicingWindowOperator([TumblingWindow(1000)], [Sum()], keep_records=True, allowed_lateness_ms=1000)
    op.process_elements(np.array([1, 2, 1, 4, 8]), np.array([10, 30, 120, 150, 160]))
    op.add_window(window, "new")
    assert op.coverage_start("new") is None
    op.process_element(0, 170)           # closes the threshold frame open at 150
    assert [(r.start, r.end, r.value) for r in op.process_watermark(500) if r.query_id == "new"] == expected
