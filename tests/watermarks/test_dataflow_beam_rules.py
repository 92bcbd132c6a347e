"""Beam's rules in the Dataflow driver: bundles, output timestamps, the lateness warning.

Expected panes are written from Beam's documented behaviour:

* ``ReduceFnRunner.processElements``: every element of a bundle is added to its (merged) window,
  then each window's trigger is asked once; on Spark a micro-batch is the bundle.
* ``WatermarkHold``: an element holds the output watermark (and so sets the pane's timestamp) only
  if it is not behind the output watermark and its window has not ended at the input watermark;
  every pane releases the hold; a pane without a hold is stamped with the window's last instant.
* Allowed lateness defaults to 0; the driver says once when that drops data.

Rows are ``Pane.brief()``: ``(start, end, value, timing, index, flags)``.
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.watermarks import (
    AfterCount, AfterWatermark, DefaultTrigger, IntervalWindow, LateDataDropped, MultiQueryDriver, Repeatedly,
    TriggerDriver,
)
from dataflow_kafka.windowing import END_OF_TIME_MS, SessionWindow, SlidingWindow, Sum, ToList, TumblingWindow
from dataflow_kafka.watermarks.running_example import EXAMPLES
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.watermarks.transcript import run_transcript
from dataflow_kafka.watermarks.windows import compile_window_fn

from tests.watermarks.test_dataflow_triggers import _per_step as per_step
from tests.watermarks.test_dataflow_triggers import driver  # TumblingWindow(10), sums, warnings at construction off
from tests.suite import examples


def stamps(d, steps):
    return [p.timestamp_ms for _, p in run_transcript(d, steps)]


# -- one add is one bundle ---------------------------------------------------------------------

def test_after_count_2_early_firing_inside_a_bundle_of_three_fires_once_after_the_bundle():
    d = driver(AfterWatermark(early=AfterCount(2)))
    assert per_step(d, [("add", [(1, 1), (2, 2), (3, 3)]), ("watermark", 10)]) == [
        [(0, 10, 6, "EARLY", 0, "F")],              # not 3 after the second element
        [(0, 10, 6, "ON_TIME", 1, "L")],
    ]
    single = driver(AfterWatermark(early=AfterCount(2)))   # the same elements as three bundles
    assert per_step(single, [("add", [(1, 1)]), ("add", [(2, 2)]), ("add", [(3, 3)])]) == [
        [], [(0, 10, 3, "EARLY", 0, "F")], []
    ]


def test_repeatedly_count_fires_at_most_once_per_window_and_bundle():
    d = driver(Repeatedly(AfterCount(2)), "discarding")
    steps = [("add", [(v, v) for v in (1, 2, 3, 4, 5)]), ("add", [(6, 6)]), ("add", [(7, 7)])]
    assert per_step(d, steps) == [[(0, 10, 15, "EARLY", 0, "F")], [], [(0, 10, 13, "EARLY", 1, "")]]


def test_every_window_a_bundle_touched_is_asked_once_by_window_end():
    d = driver(Repeatedly(AfterCount(2)), "discarding")
    # [10, 20) gets data first, but [0, 10) ends first
    assert per_step(d, [("add", [(1, 15), (2, 3), (4, 12), (8, 5), (16, 25)])]) == [
        [(0, 10, 10, "EARLY", 0, "F"), (10, 20, 5, "EARLY", 0, "F")]
    ]


class _Recording(ToList):
    """ToList that records what each ``add_inputs`` call is given."""

    def __init__(self) -> None:
        self.calls: list = []

    def add_inputs(self, accumulator, values):
        self.calls.append(list(values))
        return super().add_inputs(accumulator, values)


def test_a_bundle_folds_each_window_s_values_with_one_add_inputs_call_in_arrival_order():
    rec = _Recording()
    d = TriggerDriver(SlidingWindow(20, 10), DefaultTrigger(), "accumulating", combiner=rec)
    d.add([("a", 5), ("b", 15), ("c", 7), ("d", 12)])
    # [-10, 10) takes a and c; [0, 20) every value; [10, 30) b and d: one call each, values in arrival order
    assert sorted(rec.calls) == [["a", "b", "c", "d"], ["a", "c"], ["b", "d"]]
    one_by_one = TriggerDriver(SlidingWindow(20, 10), DefaultTrigger(), "accumulating", combiner=ToList())
    for v in [("a", 5), ("b", 15), ("c", 7), ("d", 12)]:
        one_by_one.add([v])
    assert d.advance_watermark(40) == one_by_one.advance_watermark(40)
    sessions = _Recording()          # merging windows fold value by value (a merge may come between)
    TriggerDriver(SessionWindow(10), DefaultTrigger(), combiner=sessions).add([("a", 0), ("b", 3)])
    assert sessions.calls == []


def test_sessions_of_a_bundle_merge_before_the_trigger_is_asked():
    # [0,10) and [15,25) are bridged by [8,18) in the same bundle: one session, one pane, nothing
    # to retract (element by element there would be panes of [0,10) and [15,25), then retractions)
    d = driver(Repeatedly(AfterCount(1)), "accumulating_and_retracting", SessionWindow(10))
    assert per_step(d, [("add", [(1, 0), (2, 15), (4, 8)]), ("add", [(8, 40)])]) == [
        [(0, 25, 7, "EARLY", 0, "F")], [(40, 50, 8, "EARLY", 0, "F")]
    ]


def test_multi_query_driver_and_windowing_stage_take_a_micro_batch_as_one_bundle():
    trigger = AfterWatermark(early=AfterCount(2))
    multi = MultiQueryDriver({"a": TumblingWindow(10), "b": TumblingWindow(20)}, trigger, "accumulating", combiner=Sum())
    assert [(p.query_id, p.value, p.timing.name) for p in multi.add([(1, 1), (2, 2), (3, 3)], key="k")] == [
        ("a", 6, "EARLY"), ("b", 6, "EARLY")
    ]
    rows = [{"kind": "data", "topic": "t", "partition": 0, "offset": i, "k": "k", "v": v, "event_time_ms": v,
             "processing_time_ms": 0} for i, v in enumerate((1, 2, 3))]
    rows.append({"kind": "punctuation", "topic": "t", "partition": 0, "offset": 3, "punctuation_ms": 5,
                 "processing_time_ms": 0})
    frame = control_frame(rows).assign(k=[r.get("k") for r in rows], v=[r.get("v") for r in rows])
    stage = WindowingStage(key="k", value="v", windows=TumblingWindow(10), trigger=trigger,
                           accumulation_mode="accumulating", aggregations=[Sum()], num_key_groups=2)
    (out,) = Pipeline([stage]).run_local([frame])
    data = out[out["kind"] == "data"]
    assert list(zip(data["sum"], data["timing"], data["pane_index"])) == [(6.0, "EARLY", 0)]


def _bundle_reference(bundles, size, n):
    """Brute force of the bundle rule for TumblingWindow(size), Repeatedly(AfterCount(n)), discarding,
    then the end of input: after each bundle, every window with >= n new elements fires their sum
    (by window start); at the end every window with new elements fires them, ON_TIME and last."""
    pending, index, out = defaultdict(list), defaultdict(int), []
    for bundle in bundles:
        for v, t in bundle:
            pending[t // size * size].append(v)
        for s in sorted(pending):
            if len(pending[s]) >= n:
                out.append((s, s + size, sum(pending[s]), "EARLY", index[s], "F" if index[s] == 0 else ""))
                index[s] += 1
                pending[s] = []
    for s in sorted(pending):
        if pending[s]:
            out.append((s, s + size, sum(pending[s]), "ON_TIME", index[s], ("F" if index[s] == 0 else "") + "L"))
    return out


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 9), st.integers(0, 59)), min_size=1, max_size=6),
                min_size=1, max_size=8),
       st.integers(1, 3))
def test_count_triggers_follow_the_bundle_rule(bundles, n):
    d = driver(Repeatedly(AfterCount(n)), "discarding", TumblingWindow(20))
    steps = [("add", b) for b in bundles] + [("watermark", END_OF_TIME_MS)]
    assert [p.brief() for _, p in run_transcript(d, steps)] == _bundle_reference(bundles, 20, n)


# -- output timestamps: Beam's watermark holds -------------------------------------------------

def test_a_late_element_does_not_pull_the_pane_timestamp_behind_the_watermark():
    for combiner in ("earliest", "latest"):
        d = driver(DefaultTrigger(), allowed_lateness_ms=20, timestamp_combiner=combiner)
        # on time at 5; the 3 arrives after [0, 10) ended: its late pane is stamped 9, not 3
        assert stamps(d, [("add", [(1, 5)]), ("watermark", 10), ("add", [(2, 3)])]) == [5, 9]


def test_elements_behind_the_output_watermark_are_ignored_in_an_open_window():
    # the watermark is at 5 and nothing holds it: the 3 is behind, the 7 counts
    d = driver(DefaultTrigger(), timestamp_combiner="earliest")
    assert stamps(d, [("watermark", 5), ("add", [(1, 3), (2, 7)]), ("watermark", 10)]) == [7]
    d = driver(DefaultTrigger(), timestamp_combiner="earliest")
    assert stamps(d, [("watermark", 5), ("add", [(1, 3)]), ("watermark", 10)]) == [9]   # no hold: end - 1


def test_a_pending_hold_holds_the_output_watermark_back():
    # the 2 arrived before the watermark moved to 5 and holds the key's output watermark at 2, so
    # the 3 is not behind it and counts (LATEST: 3; with the input watermark as the bar it would be 2)
    steps = [("add", [(1, 2)]), ("watermark", 5), ("add", [(1, 3)]), ("watermark", 10)]
    assert stamps(driver(DefaultTrigger(), timestamp_combiner="earliest"), steps) == [2]
    assert stamps(driver(DefaultTrigger(), timestamp_combiner="latest"), steps) == [3]
    # the output watermark is per key: another key's hold does not hold this one back
    d = driver(DefaultTrigger(), timestamp_combiner="latest")
    run_transcript(d, [("add", [(1, 2)], "a"), ("watermark", 5), ("add", [(1, 3)], "b")])
    assert sorted((p.key, p.timestamp_ms) for p in d.advance_watermark(10)) == [("a", 2), ("b", 9)]


def test_an_element_in_an_ended_window_takes_no_hold_even_when_the_output_watermark_is_held():
    # the 2 holds the key's output watermark at 2; the watermark passes the end of [0, 10) without
    # a firing; the 5 is not behind the output watermark, but its window has ended: no hold
    steps = [("add", [(1, 2)]), ("watermark", 10), ("add", [(1, 5)])]
    d = driver(Repeatedly(AfterCount(2)), allowed_lateness_ms=20, timestamp_combiner="latest")
    assert [(p.value, p.timing.name, p.timestamp_ms) for _, p in run_transcript(d, steps)] == [(2, "ON_TIME", 2)]


def test_every_pane_releases_the_hold_also_when_accumulating():
    steps = [("add", [(1, 2)]), ("add", [(1, 6)]), ("watermark", 10)]
    for combiner in ("earliest", "latest"):
        d = driver(AfterWatermark(early=AfterCount(1)), timestamp_combiner=combiner)
        # the second early pane holds 2 + 1 but only the 6 is new; the on-time pane has nothing new
        assert stamps(d, steps) == [2, 6, 9]
    assert stamps(driver(AfterWatermark(early=AfterCount(1))), steps) == [9, 9, 9]   # END_OF_WINDOW


# -- allowed lateness 0 by default, and a warning when it drops data -------------------------

def test_the_first_late_drop_warns_once_naming_the_window_and_the_lateness():
    d = driver(DefaultTrigger())
    run_transcript(d, [("add", [(1, 5)]), ("watermark", 10)])
    with pytest.warns(LateDataDropped, match=r"window \[0, 10\).*allowed_lateness_ms=0") as caught:
        d.add([(2, 3), (3, 4)], key=None)
    assert len(caught) == 1 and d.dropped_late == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d.add([(4, 6)])                                        # counted, not warned again
        again = TriggerDriver.from_bytes(d.to_bytes(), TumblingWindow(10), DefaultTrigger(), "accumulating",
                                         combiner=Sum())
        again.add([(5, 7)])                                    # the warning survives a restart
    assert (d.dropped_late, again.dropped_late) == (3, 4)


def test_no_warning_without_drops():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = driver(DefaultTrigger(), allowed_lateness_ms=10)
        run_transcript(d, [("add", [(1, 5)]), ("watermark", 10), ("add", [(2, 3)]), ("watermark", 30)])
    assert d.dropped_late == 0


def test_the_running_example_warns_about_its_late_9_with_the_defaults():
    _, make, steps = EXAMPLES["fixed windows, streaming, no allowed lateness"]
    d = make()
    with pytest.warns(LateDataDropped, match=r"window \[0, 120000\), event time 100000 ms.*allowed_lateness_ms=0"):
        run_transcript(d, steps())
    assert d.dropped_late == 1


def test_multi_query_driver_warns_once_for_all_queries_and_across_restarts():
    args = ([TumblingWindow(10), TumblingWindow(20)], DefaultTrigger())
    d = MultiQueryDriver(*args, combiner=Sum())
    d.add([(1, 5)])
    d.advance_watermark(20)
    with pytest.warns(LateDataDropped) as caught:
        d.add([(1, 3)])
    assert len(caught) == 1 and d.dropped_late == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MultiQueryDriver.from_bytes(d.to_bytes(), *args, combiner=Sum()).add([(1, 4)])


# -- sessions: Beam's gap rule and finality ----------------------------------------------------

def test_a_gap_of_exactly_gap_splits_a_session_and_a_session_is_final_at_its_end():
    d = driver(DefaultTrigger(), window_fn=SessionWindow(10))
    # 0 and 10: [0, 10) and [10, 20) touch but do not overlap (Beam merges overlapping windows only)
    assert per_step(d, [("add", [(1, 0), (2, 10)]), ("watermark", 9), ("watermark", 10)]) == [
        [], [], [(0, 10, 1, "ON_TIME", 0, "FL")]      # final when the watermark reaches its end
    ]
    assert d.windows() == [IntervalWindow(10, 20)]
    d = driver(DefaultTrigger(), window_fn=SessionWindow(10))
    assert per_step(d, [("add", [(1, 0), (2, 9)]), ("watermark", 19)]) == [[], [(0, 19, 3, "ON_TIME", 0, "FL")]]


def _expected_stamps(window_fn, combiner, lateness, steps, panes_per_step):
    """Brute force of Beam's hold rule, checked against the panes the driver chose to emit: per
    (key, window) the event times added since its last pane that were eligible (not behind the
    key's output watermark at the bundle's start, window not ended at the input watermark)."""
    pick = min if combiner == "earliest" else max
    pending: dict = defaultdict(list)
    wm, out = -(2**62), []
    for step, panes in zip(steps, panes_per_step):
        if step[0] == "watermark":
            wm = max(wm, step[1])
        elif step[0] == "add":
            key = step[2]
            holds = [pick(ts) for (k, _), ts in pending.items() if k == key and ts]
            out_wm = min([wm, *holds])
            for _, t in step[1]:
                for w in window_fn.assign_windows(t):
                    if wm < w.end_ms + lateness and t >= out_wm and w.end_ms > wm:
                        pending[(key, w)].append(t)
        for p in panes:
            ts = pending.pop((p.key, p.window), [])
            out.append(pick(ts) if ts else p.end_ms - 1)
    return out


@pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")
@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.one_of(
           st.tuples(st.just("add"), st.lists(st.tuples(st.just(1), st.integers(0, 59)), min_size=1, max_size=4),
                     st.sampled_from(["a", "b"])),
           st.tuples(st.just("watermark"), st.integers(0, 70))), min_size=1, max_size=14),
       st.sampled_from(["earliest", "latest"]), st.sampled_from([0, 15]),
       st.sampled_from([DefaultTrigger(), AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
                        Repeatedly(AfterCount(2))]),
       st.sampled_from(["discarding", "accumulating"]), st.sampled_from([TumblingWindow(10), SlidingWindow(20, 10)]))
def test_pane_timestamps_follow_beams_holds(steps, combiner, lateness, trigger, mode, window_fn):
    steps = [s if s[0] == "add" else ("watermark", s[1]) for s in steps] + [("watermark", END_OF_TIME_MS)]
    d = driver(trigger, mode, window_fn, allowed_lateness_ms=lateness, timestamp_combiner=combiner)
    panes_per_step = [[p for _, p in run_transcript(d, [s])] for s in steps]
    got = [p.timestamp_ms for ps in panes_per_step for p in ps]
    fn = compile_window_fn(window_fn)
    assert got == _expected_stamps(fn, combiner, lateness, steps, panes_per_step)
