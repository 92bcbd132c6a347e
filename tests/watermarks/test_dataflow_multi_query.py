"""MultiQueryDriver: several window queries in one state, added and removed while running.

The reference is one plain TriggerDriver per query: a query there from the start is fed
everything; a query added at some point is a fresh driver of the documented rule (window
function restricted to windows starting at or after the coverage start C, brought to the
current processing time and watermark, fed the elements seen so far with event time >= C, per
key in arrival order; sessions: panes of sessions starting before C + gap dropped). Panes are
compared per (query, key) in emission order; a round trip through bytes anywhere changes nothing.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataflow_kafka.watermarks import DefaultTrigger, MultiQueryDriver, TriggerDriver
from dataflow_kafka.windowing import END_OF_TIME_MS, SessionWindow, SlidingWindow, TumblingWindow
from dataflow_kafka.watermarks.multi import CoveredWindowFn
from dataflow_kafka.watermarks.windows import compile_window_fn
from dataflow_kafka.windowing import (
    AddWindow, GlobalWindow, RemoveWindow, SessionWindow, Sum, TumblingWindow, parse_command,
)

from tests.watermarks.test_dataflow_properties import OPEN_TRIGGERS, WINDOW_FNS
from tests.suite import examples

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

MODES = ["discarding", "accumulating", "accumulating_and_retracting"]


@st.composite
def scripts(draw):
    """Arrivals (value, event time, key) with processing-time and watermark advances, window
    commands and byte round trips in between; ends with the end of input."""
    steps, now, wm = [], 0, 0
    for i in range(draw(st.integers(1, 25))):
        now += draw(st.integers(0, 10))
        steps += [("processing", now), ("add", [((i, draw(st.integers(1, 9))), draw(st.integers(0, 199)))],
                                        draw(st.sampled_from(["a", "b"])))]
        if draw(st.booleans()):
            wm += draw(st.integers(0, 25))
            steps.append(("watermark", wm))
        r = draw(st.integers(0, 9))
        if r < 2:
            steps.append(("add_window", f"r{i}", draw(st.sampled_from(WINDOW_FNS + [GlobalWindow()]))))
        elif r == 2:
            steps.append(("remove_window", draw(st.integers(0, 5))))
        elif r == 3:
            steps.append(("bytes",))
    return steps + [("watermark", END_OF_TIME_MS)]


def _plain(window, trigger, mode, lateness):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TriggerDriver(window, trigger, mode, lateness)


class ReferenceQueries:
    """One TriggerDriver per query; every element kept (arrival order) to seed added queries."""

    def __init__(self, windows, trigger, mode, lateness):
        self.args = (trigger, mode, lateness)
        self.queries = {str(i): (_plain(w, *self.args), None) for i, w in enumerate(windows)}
        self.seen: list = []               # (key, (value, t)) in arrival order
        self.pending: list = []

    def add_query(self, qid, window, coverage, now, wm):
        fn = compile_window_fn(window)
        report = None
        if coverage is not None:
            report = coverage + (fn.gap_ms if isinstance(window, SessionWindow) else 0)
            fn = CoveredWindowFn(fn, coverage)
        d = _plain(fn, *self.args)
        d.advance_processing_time(now)
        d.advance_watermark(wm)
        for key in dict.fromkeys(k for k, _ in self.seen):
            elems = [e for k, e in self.seen if k == key and (coverage is None or e[1] >= coverage)]
            self.pending += self._label(qid, report, d.add(elems, key=key))
        self.queries[qid] = (d, report)

    @staticmethod
    def _label(qid, report, panes):
        return [(qid, p) for p in panes if report is None or p.start_ms >= report]

    def step(self, fn):
        out, self.pending = self.pending, []
        for qid, (d, report) in self.queries.items():
            out += self._label(qid, report, fn(d))
        return out


def _by_query_and_key(pairs):
    out: dict = {}
    for qid, p in pairs:
        out.setdefault((qid, p.key), []).append(p.brief())
    return out


@settings(max_examples=examples(int(__import__("os").environ.get("MQ_EXAMPLES", "200"))), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(WINDOW_FNS), min_size=1, max_size=3), st.sampled_from(OPEN_TRIGGERS),
       st.sampled_from(MODES), st.sampled_from([0, 25, 10**6]), st.sampled_from([None, 0, 30, 500]), scripts())
def test_added_and_removed_queries_match_fresh_drivers(windows, trigger, mode, lateness, history, steps):
    args = (windows, trigger, mode, lateness)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        multi = MultiQueryDriver(*args, history_ms=history)
    ref = ReferenceQueries(*args)
    for step in steps:
        kind = step[0]
        if kind == "processing":
            got, want = multi.advance_processing_time(step[1]), ref.step(lambda d: d.advance_processing_time(step[1]))
        elif kind == "watermark":
            got, want = multi.advance_watermark(step[1]), ref.step(lambda d: d.advance_watermark(step[1]))
        elif kind == "add":
            got, want = multi.add(step[1], key=step[2]), ref.step(lambda d: d.add(step[1], key=step[2]))
            ref.seen += [(step[2], e) for e in step[1]]
        elif kind == "add_window":
            h = multi.history_ms
            cmd = parse_command(AddWindow(step[1], step[2]).to_json())
            assert multi.apply(cmd)
            c = multi.coverage_start(step[1])
            wm = multi.watermark_ms
            if wm == -(2**53):
                assert c is None
            elif history is not None:      # the history holds watermark - history_ms on
                assert c == wm - history
            else:                          # ... never lowered when a longer query joins
                assert c is not None and wm - h <= c <= wm
            ref.add_query(step[1], step[2], c, multi.processing_time_ms, wm)
            continue
        elif kind == "remove_window":
            ids = multi.query_ids
            if ids:
                qid = ids[step[1] % len(ids)]
                assert multi.apply(RemoveWindow(qid))
                del ref.queries[qid]
            continue
        else:
            multi = MultiQueryDriver.from_bytes(multi.to_bytes(), *args, history_ms=history)
            continue
        assert [p.query_id for p in got] == [q for q, _ in want]
        assert _by_query_and_key([(p.query_id, p) for p in got]) == _by_query_and_key(want)


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.sampled_from(WINDOW_FNS), min_size=1, max_size=3), st.sampled_from(OPEN_TRIGGERS), scripts())
def test_same_commands_same_bytes(windows, trigger, steps):
    """Every key group applies a command at the same point: the same state, byte for byte."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = (MultiQueryDriver(windows, trigger, "accumulating", 25, combiner=Sum()) for _ in range(2))
    for d in (a, b):
        for step in steps:
            if step[0] == "processing":
                d.advance_processing_time(step[1])
            elif step[0] == "watermark":
                d.advance_watermark(step[1])
            elif step[0] == "add":
                d.add([(v, t) for (_, v), t in step[1]], key=step[2])
            elif step[0] == "add_window":
                d.apply(AddWindow(step[1], step[2]))
            elif step[0] == "remove_window" and d.query_ids:
                d.apply(RemoveWindow(d.query_ids[step[1] % len(d.query_ids)]))
    assert a.to_bytes() == b.to_bytes()


def _driver(**kw):
    kw.setdefault("allowed_lateness_ms", 10)
    return MultiQueryDriver({"t": TumblingWindow(10)}, DefaultTrigger(), "accumulating", combiner=Sum(), **kw)


def test_history_bounds_what_a_new_query_covers():
    d = _driver()                                     # history: lateness 10 + window 10
    assert d.history_ms == 20
    d.add([(1, 5), (2, 25), (4, 41)], key="k")
    d.advance_watermark(40)                           # keeps elements from 20 on
    assert d.add_window(TumblingWindow(20), "20") == "20" and d.coverage_start("20") == 20
    panes = d.advance_watermark(100)
    assert [(p.query_id, p.start_ms, p.value) for p in panes if p.query_id == "20"] == [("20", 20, 2), ("20", 40, 4)]
    assert d.history_ms == 30                         # the new query's window counts from now on


def test_sessions_are_reported_a_gap_after_the_coverage_start():
    d = _driver(history_ms=10)
    d.add([(1, 5), (2, 27), (4, 36), (8, 60)], key="k")
    d.advance_watermark(30)                           # history from 20: the 27 and 36 session starts at 27 < 20 + 15
    d.add_window(SessionWindow(15), "s")
    panes = d.advance_watermark(200)
    assert [(p.start_ms, p.end_ms, p.value) for p in panes if p.query_id == "s"] == [(60, 75, 8)]


def test_removed_query_emits_nothing_and_unknown_commands_are_counted():
    d = _driver()
    d.add_window(TumblingWindow(5), "five")
    d.add([(1, 3)], key="k")
    d.remove_window("five")
    assert [p.query_id for p in d.advance_watermark(100)] == ["t"]
    with pytest.raises(KeyError, match="remove_window\\('five'\\): no such query \\(queries: \\['t'\\]\\)"):
        d.remove_window("five")
    assert not d.apply(RemoveWindow("five")) and not d.apply(AddWindow("t", TumblingWindow(5)))
    assert d.ignored_commands == 2 and d.query_ids == ["t"]
    with pytest.raises(TypeError, match="expected an AddWindow or RemoveWindow"):
        d.apply({"op": "add_window"})


def test_ids_window_types_and_state():
    d = MultiQueryDriver([TumblingWindow(10), SlidingWindow(20, 10), SessionWindow(5)], DefaultTrigger(), combiner=Sum())
    assert d.query_ids == ["0", "1", "2"] and d.add_window(GlobalWindow()) == "3"
    d.add([(1, 3), (2, 14)], key=None)
    out = d.advance_watermark(END_OF_TIME_MS)
    assert {(p.query_id, p.start_ms, p.end_ms, p.value) for p in out} == {
        ("0", 0, 10, 1), ("0", 10, 20, 2), ("1", -10, 10, 1), ("1", 0, 20, 3), ("1", 10, 30, 2),
        ("2", 3, 8, 1), ("2", 14, 19, 2), ("3", -(2**53), 2**53, 3)}
    with pytest.raises(ValueError, match="history_ms=-1: expected an integer >= 0"):
        _driver(history_ms=-1)
    blob = d.to_bytes()
    with pytest.raises(ValueError, match="different format or configuration"):
        MultiQueryDriver.from_bytes(blob, [TumblingWindow(10)], DefaultTrigger(), combiner=Sum(), history_ms=5)
    assert MultiQueryDriver.from_bytes(blob, [], DefaultTrigger(), combiner=Sum()).query_ids == ["0", "1", "2", "3"]


def test_history_memory_per_element():
    """The documented cost of the history: about 7 bytes per element for small integers."""
    d = MultiQueryDriver([TumblingWindow(1_000)], DefaultTrigger(), combiner=Sum(), history_ms=10**9)
    before = len(d.to_bytes())
    d.add([(i % 7, 1_700_000_000_000 + i) for i in range(1000)], key="k")
    d.advance_watermark(1_700_000_000_000 - 1)        # nothing fires: only the history and one window
    per_element = (len(d.to_bytes()) - before) / 1000
    assert 5 <= per_element <= 9, per_element
