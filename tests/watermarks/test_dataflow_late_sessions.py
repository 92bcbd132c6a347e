"""A late element that would change an emitted session.

It is applied with the retraction of the session(s) it replaces and the merged session as the
next pane, in every accumulation mode, or dropped and counted as late when the session's state is
gone (garbage collected: emitted and past its allowed lateness), whatever the allowed lateness;
never a changed session without a signal. Checked on the driver against a brute-force reference
(the sessions of the accepted elements) and on the stage (a ``dropped`` row, reason ``late``).
"""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.watermarks import AfterCount, AfterWatermark, DefaultTrigger, TriggerDriver
from dataflow_kafka.windowing import SessionWindow, ToList
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.watermarks.windows import windows_of
from dataflow_kafka.windowing import Count
from dataflow_kafka.windowing.final import current_windows

from tests.suite import examples

pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

MODES = ["discarding", "accumulating", "accumulating_and_retracting"]
TRIGGERS = [DefaultTrigger(), AfterWatermark(late=AfterCount(1)), AfterWatermark(early=AfterCount(1),
                                                                                  late=AfterCount(1))]


def _driver(mode, lateness, trigger=AfterWatermark(late=AfterCount(1)), combiner=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TriggerDriver(SessionWindow(10_000), trigger, mode, allowed_lateness_ms=lateness,
                             combiner=combiner if combiner is not None else Count())


@pytest.mark.parametrize("mode", MODES)
def test_the_issue_case_without_lateness_drops_and_counts_the_late_bid(mode):
    d = _driver(mode, 0)
    out = d.add([(1, 1000)], key="a") + d.advance_watermark(12_000)
    assert [(p.start_ms, p.end_ms, p.value, p.is_retraction) for p in out] == [(1000, 11_000, 1, False)]
    assert d.add([(1, 5000)], key="a") == [] and d.dropped_late == 1      # would merge into [1000, 11000)
    assert d.advance_watermark(100_000) == []
    assert d.add([(1, 12_000)], key="a") == [] and d.dropped_late == 2   # late anyway (window ends by 22000)


@pytest.mark.parametrize("mode", MODES)
def test_the_issue_case_within_lateness_retracts_and_updates(mode):
    d = _driver(mode, 20_000)
    out = d.add([(1, 1000)], key="a") + d.advance_watermark(12_000) + d.add([(1, 5000)], key="a")
    out += d.advance_watermark(100_000)
    assert [(p.start_ms, p.end_ms, p.value, p.is_retraction) for p in out] == [
        (1000, 11_000, 1, False), (1000, 11_000, 1, True), (1000, 15_000, 2, False)]
    assert d.dropped_late == 0


def test_a_session_not_yet_collected_still_merges_and_one_behind_it_is_new():
    d = _driver("accumulating", 5_000)
    d.add([(1, 1000)], key="a")
    d.advance_watermark(12_000)                      # [1000, 11000) emitted, kept until 16000
    d.advance_watermark(17_000)                      # collected
    assert d.add([(1, 9_000)], key="a") == [] and d.dropped_late == 1    # [9000, 19000) overlaps it
    d.add([(1, 11_000)], key="b")                    # another key: nothing gone there
    assert d.dropped_late == 1 and len(d.windows("b")) == 1


def test_the_gone_sessions_survive_a_state_round_trip_and_are_forgotten_later():
    d = _driver("accumulating", 0)
    d.add([(1, 1000)], key="a")
    d.advance_watermark(12_000)
    restored = _driver("accumulating", 0)
    restored.load_bytes(d.to_bytes())
    restored.add([(1, 5000)], key="a")
    assert restored.dropped_late == 1
    restored.advance_watermark(21_001)               # no accepted element can reach 11000 any more
    assert restored._gone == {}


@st.composite
def late_streams(draw):
    """Bundles of ``((id, value), t)`` per key with watermarks between them; elements arrive up to
    60 ms behind the newest (often behind the watermark)."""
    steps, now, wm, i = [], 0, 0, 0
    for _ in range(draw(st.integers(1, 12))):
        key = draw(st.sampled_from("ab"))
        elems = []
        for _ in range(draw(st.integers(1, 4))):
            now += draw(st.integers(0, 12))
            elems.append(((i, 1), now - draw(st.sampled_from([0, 0, 5, 20, 60]))))
            i += 1
        steps.append(("add", elems, key))
        if draw(st.booleans()):
            wm = max(wm, now - draw(st.integers(0, 15)))
            steps.append(("watermark", wm))
    return steps + [("watermark", now + 10_000)]


@settings(max_examples=examples(300), deadline=None)
@given(late_streams(), st.sampled_from(MODES), st.sampled_from([0, 10, 40]), st.sampled_from(TRIGGERS))
def test_folded_panes_are_the_sessions_of_the_accepted_elements(steps, mode, lateness, trigger):
    """The fold of the panes (latest per window, retractions deleting; discarding: summed) equals
    the sessions (gap 8) of the elements that were not dropped, and every element is either in a
    final pane or counted as dropped."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = TriggerDriver(SessionWindow(8), trigger, mode, allowed_lateness_ms=lateness, combiner=ToList())
    panes = []
    for step in steps:
        panes += d.add(step[1], key=step[2]) if step[0] == "add" else d.advance_watermark(step[1])
    current: dict = {}
    for p in panes:
        k = (p.key, p.start_ms, p.end_ms)
        if p.is_retraction:
            assert sorted(current.pop(k)) == sorted(p.value)
        else:
            current[k] = current.get(k, []) + p.value if mode == "discarding" else list(p.value)
    accepted = {i for v in current.values() for i, _ in v}
    total = sum(len(s[1]) for s in steps if s[0] == "add")
    assert len(accepted) + d.dropped_late + d.dropped_closed == total
    assert all(len(v) == len({i for i, _ in v}) for v in current.values())    # no element twice
    times = {i: t for s in steps if s[0] == "add" for (i, _), t in s[1]}
    keys = {i: s[2] for s in steps if s[0] == "add" for (i, _), _t in s[1]}
    want = {}
    for key in "ab":
        mine = sorted(i for i in accepted if keys[i] == key)
        for w in windows_of(SessionWindow(8), [times[i] for i in mine]):
            want[(key, w.start_ms, w.end_ms)] = sorted(i for i in mine if w.start_ms <= times[i] < w.end_ms)
    assert {k: sorted(i for i, _ in v) for k, v in current.items()} == want


# ----------------------------------------------------------------------------- the stage
def _batch(records, watermark) -> pd.DataFrame:
    rows = [{"kind": "data", "topic": "t", "partition": 0, "offset": o, "event_time_ms": t, "processing_time_ms": 0}
            for o, (_, t) in enumerate(records)]
    rows.append({"kind": "punctuation", "topic": "t", "partition": 0, "offset": 99, "punctuation_ms": watermark,
                 "processing_time_ms": 0})
    return control_frame(rows).assign(k=[k for k, _ in records] + [None], v=[1] * len(records) + [None])


@pytest.mark.parametrize("lateness", [0, 20_000])
def test_the_issue_case_on_the_stage(lateness):
    stage = WindowingStage(key="k", value="v", windows=SessionWindow(10_000), aggregations=[Count()],
                           trigger=AfterWatermark(late=AfterCount(1)), accumulation_mode="accumulating",
                           allowed_lateness_ms=lateness)
    out = Pipeline([stage]).run_local([_batch([("a", 1000)], 12_000), _batch([("a", 5000)], 12_000),
                                       _batch([], 100_000)])
    drops = [r for o in out for r in o[o["kind"] == "dropped"][["dropped_key", "dropped_reason",
                                                                 "dropped_count"]].values.tolist()]
    final = current_windows(out, stage)[["k", "window_start_ms", "window_end_ms", "count"]].values.tolist()
    if lateness == 0:
        assert drops == [["a", "late", 1]] and final == [["a", 1000, 11_000, 1]]
    else:
        assert drops == [] and final == [["a", 1000, 15_000, 2]]
        rows = [r for o in out for r in o[o["kind"] == "data"][["window_start_ms", "window_end_ms", "count",
                                                                 "is_retraction"]].values.tolist()]
        assert rows == [[1000, 11_000, 1, False], [1000, 11_000, 1, True], [1000, 15_000, 2, False]]
