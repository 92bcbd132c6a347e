"""The pure part of the smooth split/combine switch (balancing.switch): T, the filters, when to stop."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.balancing.cost_model import COMBINE, SPLIT, Measurement, SplitCombinePolicy
from dataflow_kafka.balancing.switch import (
    NOTHING_READ, SmoothSwitch, SwitchPlan, fold_output_watermark, last_committed_batch, longest_window_ms, newest_event_ms,
    newest_in_offset, read_offset_log, starting_offsets, switch_time,
)
from dataflow_kafka.windowing import SlidingWindow, TumblingWindow

from tests.suite import examples

WINDOWS = {"s": SlidingWindow(2_000, 1_000), "t": TumblingWindow(3_000)}
OFFSET = {"v": 2, "batchTimeMs": 5, "control": {}, "mods": {},
          "partitions": {"ev": {"0": {"o": 40, "s": 20, "p": 9_100}, "1": {"o": 33, "s": 30}}}}


def _windows_of(t: int, windows: dict) -> list[tuple[str, int, int]]:
    """Brute force: every (query, start, end) containing t, by scanning the grid."""
    out = []
    for q, w in windows.items():
        size, slide = w.size_ms, getattr(w, "slide_ms", w.size_ms)
        for s in range((t - size) // slide * slide - slide, t + slide, slide):
            if s <= t < s + size:
                out.append((q, s, s + size))
    return out


def _aggregate(records, windows) -> set:
    """(key, query, start, end, count, sum) of every window with records."""
    acc: dict = {}
    for k, v, t in records:
        for q, s, e in _windows_of(t, windows):
            c, total = acc.get((k, q, s, e), (0, 0))
            acc[(k, q, s, e)] = (c + 1, total + v)
    return {(k, q, s, e, c, total) for (k, q, s, e), (c, total) in acc.items()}


def test_switch_time_is_the_next_pane_boundary():
    assert switch_time(12_345, WINDOWS) == 13_000
    assert switch_time(12_999, WINDOWS) == 13_000
    assert switch_time(13_000, WINDOWS) == 14_000          # strictly above the newest event time
    assert switch_time(-1, WINDOWS) == 0
    assert switch_time(None, WINDOWS) == NOTHING_READ
    assert switch_time(7, [TumblingWindow(600), SlidingWindow(900, 300)]) == 300
    assert longest_window_ms(WINDOWS) == 3_000


@given(st.integers(-10**9, 10**9), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 5]))
def test_no_window_starts_between_the_newest_event_and_t(newest, k, m):
    windows = {"a": SlidingWindow(1_000 * k * m, 1_000 * k), "b": TumblingWindow(1_000 * m)}
    t = switch_time(newest, windows)
    assert t > newest
    for w in windows.values():
        slide = getattr(w, "slide_ms", w.size_ms)
        first_start_above = (newest // slide + 1) * slide
        assert first_start_above >= t                       # every window starting after newest is the new plan's


def test_offsets_and_newest_event_time_from_the_offset_log():
    assert starting_offsets(OFFSET) == {"ev": {"0": 40, "1": 33}}
    assert newest_in_offset(OFFSET) == 9_100
    assert newest_event_ms(OFFSET, 9_050) == 9_100
    assert newest_event_ms(OFFSET, 9_300) == 9_300
    assert newest_event_ms({"partitions": {"ev": {"0": {"o": 0}}}}, None) is None
    with pytest.raises(ValueError, match="not a dataflow-kafka source offset"):
        starting_offsets({"ev": {"0": 3}})


def test_offset_log_files(tmp_path):
    ck = tmp_path / "ck"
    assert last_committed_batch(str(ck)) is None
    (ck / "offsets").mkdir(parents=True)
    (ck / "commits").mkdir()
    (ck / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n' + json.dumps(OFFSET) + "\n")
    for b in (0, 1, 3):
        (ck / "commits" / str(b)).write_text("v1\n{}\n")
    (ck / "commits" / ".3.crc").write_text("")
    assert last_committed_batch(str(ck)) == 3
    assert read_offset_log(str(ck), 3) == OFFSET
    with pytest.raises(ValueError, match="no offset log for batch 4"):
        read_offset_log(str(ck), 4)
    (ck / "offsets" / "5").write_text('v1\n{}\n{"partitions": {}}\n{"partitions": {}}\n')
    with pytest.raises(ValueError, match="2 sources"):
        read_offset_log(str(ck), 5)


def _plan(t_ms=13_000) -> SwitchPlan:
    return SwitchPlan("split", "combine", 4, t_ms, 3_000, {"ev": {"0": 40}})


def test_filters_give_each_window_to_exactly_one_plan_and_pass_other_rows():
    plan = _plan()
    f = pd.DataFrame({"kind": ["data", "data", "data", "punctuation", "dropped", "error"],
                      "window_start_ms": pd.array([12_000, 13_000, 15_000, None, None, None], dtype="Int64")})
    old, new = plan.keeps("split", f), plan.keeps("combine", f)
    assert old.tolist() == [True, False, False, True, True, True]
    assert new.tolist() == [False, True, True, True, True, True]
    assert not plan.keeps("other", f).any()
    assert plan.keep_sql("split") == "kind <> 'data' OR window_start_ms < 13000"
    assert plan.keep_sql("combine") == "kind <> 'data' OR window_start_ms >= 13000"
    assert plan.keep_sql("other") == "false"
    bad = pd.DataFrame({"kind": ["data"], "window_start_ms": pd.array([None], dtype="Int64")})
    with pytest.raises(ValueError, match="without window_start_ms"):
        plan.keeps("split", bad)


def test_when_the_old_query_is_done_and_the_plan_round_trips():
    plan = _plan()
    assert plan.stop_at_ms == 16_000
    assert [plan.old_done(w) for w in (None, 15_999, 16_000, 20_000)] == [False, False, True, True]
    assert SwitchPlan.from_json(plan.to_json()) == plan
    with pytest.raises(ValueError, match="both 'split'"):
        SwitchPlan("split", "split", 0, 0, 1, {})
    with pytest.raises(ValueError, match="longest_ms"):
        SwitchPlan("split", "combine", 0, 0, 0, {})


def test_output_watermark_is_the_minimum_over_senders_once_all_have_one():
    newest: dict = {}

    def batch(rows):
        return pd.DataFrame({"kind": ["punctuation"] * len(rows) + ["data"],
                             "topic": [r[0] for r in rows] + [None], "partition": [r[1] for r in rows] + [None],
                             "punctuation_ms": pd.array([r[2] for r in rows] + [None], dtype="Int64")})

    assert fold_output_watermark(newest, batch([("c", 0, 5_000), ("c", 1, None)])) is None
    assert fold_output_watermark(newest, batch([("c", 1, 4_000)])) == 4_000
    assert fold_output_watermark(newest, batch([("c", 0, 9_000), ("c", 1, 7_000)])) == 7_000
    assert fold_output_watermark(newest, batch([("c", 1, 6_000)])) == 7_000     # never goes back
    assert fold_output_watermark({}, batch([])) is None


records = st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 9), st.integers(0, 20_000)), max_size=60)


@settings(max_examples=examples(150), deadline=None)
@given(records, records, st.integers(0, 3_000))
def test_old_plus_new_equals_one_plan_for_any_disorder(before, after, disorder):
    """The argument of the switch without Spark: the old query reads everything, the new query
    reads from the offsets of the switch on; T lies above every event time read before them. Each
    keeps its windows; together they give the windows of one query over all records. ``after``
    holds records up to ``disorder`` ms older than the newest one read before the switch."""
    newest = max((t for _, _, t in before), default=None)
    shift = 0 if newest is None else newest - disorder
    after = [(k, v, t + shift) for k, v, t in after]
    plan = SwitchPlan("split", "combine", 0, switch_time(newest, WINDOWS), longest_window_ms(WINDOWS), {})
    old = {w for w in _aggregate(before + after, WINDOWS) if w[2] < plan.t_ms}
    new = {w for w in _aggregate(after, WINDOWS) if w[2] >= plan.t_ms}
    assert old | new == _aggregate(before + after, WINDOWS)
    assert not old & new
    # the old query owns no window ending after its stop point
    assert all(w[3] <= plan.stop_at_ms for w in old)


def test_a_mutant_t_at_the_newest_event_time_loses_records():
    """T must lie strictly above the newest event time read before the switch: at a boundary equal
    to it, the new plan misses that record."""
    before, after = [("a", 1, 13_000)], [("a", 2, 13_500)]
    t = 13_000                                              # the mutant: not strictly above
    old = {w for w in _aggregate(before + after, WINDOWS) if w[2] < t}
    new = {w for w in _aggregate(after, WINDOWS) if w[2] >= t}
    assert old | new != _aggregate(before + after, WINDOWS)
    assert ("a", "s", 13_000, 15_000, 1, 2) in new                  # [13000, 15000) lacks the record at 13000
    assert switch_time(13_000, WINDOWS) == 14_000


def test_following_a_decision_without_a_switch_or_without_its_pipeline(tmp_path):
    sw = SmoothSwitch(None, lambda *a: None, WINDOWS, str(tmp_path / "sw"))
    assert sw.plan is None
    pol = SplitCombinePolicy(period_ms=3_000, initial=SPLIT)
    cheap_split = Measurement(10_000, 0.01, 3, 3, 0, 1.0, 0, 8)          # split 124 ms, combine 300 ms
    cheap_combine = Measurement(200, 0.01, 3, 3, 0, 1.0, 0, 8)            # split 26 ms, combine 6 ms
    assert sw.follow(pol.evaluate("op", cheap_split, now_ms=0), {}, checkpoint="x") is None
    d = pol.evaluate("op", cheap_combine, now_ms=3_000)
    assert (d.plan, d.switch) == (COMBINE, True)
    with pytest.raises(ValueError, match="no pipeline is given for it"):
        sw.follow(d, {SPLIT: object()}, checkpoint="x")
