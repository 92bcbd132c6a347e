"""The Dataflow stage's state as :func:`keygroups.state_view.local_state` shows it, against a
brute-force reference: its live windows are exactly the windows with elements whose end plus the
allowed lateness is beyond the watermark (fixed windows, a sliding query added halfway from its
coverage start, sessions simulated interval by interval with their merges, late drops and garbage
collection), each with its element count and sum; the elements held for later queries; what the
trigger waits for; over out-of-order batches and 1-3 key groups."""

from __future__ import annotations

import warnings
from unittest.mock import patch

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.state_view import local_state
from dataflow_kafka.watermarks import AfterCount, AfterWatermark, DefaultTrigger, TriggerDriver
from dataflow_kafka.watermarks.columnar import ColumnarDriver
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, Max, Mean, Min, Sum, TumblingWindow
from tests.watermarks.test_dataflow_stage import _batches, _stage
from tests.suite import examples

pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

LATENESS, GAP = 1000, 400          # _stage's allowed lateness and session gap


def _elements(batches) -> tuple[list[list[tuple]], list]:
    """Per batch its non-null elements ``(key, value, ts)`` and the watermark after it."""
    out, marks, wm = [], [], None
    for frame in batches:
        data = frame[frame["kind"] == "data"]
        out.append([(k, int(v), int(t)) for k, v, t in zip(data["k"], data["v"], data["event_time_ms"])
                    if v is not None and v == v])
        puncts = frame[frame["kind"] == "punctuation"]["punctuation_ms"]
        if puncts.notna().all():
            wm = int(puncts.min()) if wm is None else max(wm, int(puncts.min()))
        marks.append(wm)
    return out, marks


def _grid_windows(elements, size: int, slide: int, wm, coverage) -> dict:
    """``{(key, start, end): [values]}`` of every window with elements still live at ``wm``."""
    out: dict = {}
    for k, v, t in (e for batch in elements for e in batch):
        s = t - t % slide
        while s > t - size:
            if (wm is None or s + size + LATENESS > wm) and (coverage is None or s >= coverage):
                out.setdefault((k, s, s + size), []).append(v)
            s -= slide
    return out


def _sessions(elements, marks) -> dict:
    """Sessions batch by batch as the driver keeps them: an element is late when the watermark before
    its batch minus the lateness is at or past ``t + gap`` or it would merge into a session already
    collected; overlapping sessions merge; a session is collected once the watermark reaches its end
    plus the lateness. ``{(key, start, end): [values]}`` of the live ones."""
    live: dict = {}
    gone: dict = {}
    prev = None
    for batch, wm in zip(elements, marks):
        for k, v, t in batch:
            if (prev is not None and prev - LATENESS >= t + GAP) or t < gone.get(k, t):
                continue
            s, e, vals = t, t + GAP, [v]
            for (k2, s2, e2) in [w for w in live if w[0] == k and w[1] < e and s < w[2]]:
                vals += live.pop((k2, s2, e2))
                s, e = min(s, s2), max(e, e2)
            live[(k, s, e)] = vals
        if wm is not None:
            for w in [w for w in live if w[2] + LATENESS <= wm]:
                del live[w]
                gone[w[0]] = max(gone.get(w[0], w[2]), w[2])
            prev = wm
    return live


@settings(max_examples=examples(15), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3), count=st.integers(1, 6))
def test_live_windows_equal_the_brute_force(seed, n, count):
    batches = _batches(seed, count)
    stage = _stage(n)
    states: dict = {}
    Pipeline([stage]).run_local(batches, states=states)
    view = local_state(Pipeline([stage]), states)
    elements, marks = _elements(batches)
    wm = marks[-1]
    queries = view.of("panes", "query")
    want = {("fixed",) + w: vals for w, vals in _grid_windows(elements, 1000, 1000, wm, None).items()}
    want.update({("session",) + w: vals for w, vals in _sessions(elements, marks).items()})
    if count > 3:                                      # the fourth batch adds the sliding query
        starts = set(queries.loc[queries["query_id"] == "slide", "start_ms"])
        assert len(starts) == 1                       # every key group's driver covers alike
        c = starts.pop()
        want.update({("slide",) + w: vals for w, vals in
                     _grid_windows(elements, 2000, 1000, wm, None if pd.isna(c) else int(c)).items()})
    windows = view.table("panes", "window")
    got = {(r["query_id"], r["key"], int(r["start_ms"]), int(r["end_ms"])): r for r in windows.to_dict("records")}
    assert got.keys() == want.keys()
    for w, vals in want.items():
        r = got[w]
        assert int(r["value"]) == sum(vals), (w, r, vals)
        if w[0] != "session":                         # a session's count: the held elements in its span
            assert r["count"] == len(vals)
        assert int(r["expires_ms"]) == w[3] + LATENESS
        on_time = wm is not None and wm >= w[3]
        assert r["next"].startswith("late: 1 more") if on_time else r["next"].startswith(f"watermark {w[3]} ms (on time)")
    time = view.of("panes", "time")
    assert (time["start_ms"].isna() if wm is None else time["start_ms"] == wm).all()
    held = view.table("panes", "held")
    kept_from = {int(x) for x in held["kept_from_ms"]} if "kept_from_ms" in held else set()
    assert len(kept_from) <= 1                        # one floor per key group's driver (the watermark's)
    floor = kept_from.pop() if kept_from else None
    for r in held.to_dict("records"):
        ts = [t for batch in elements for k, _, t in batch if k == r["key"] and (floor is None or t >= floor)]
        assert (int(r["count"]), int(r["start_ms"]), int(r["end_ms"])) == (len(ts), min(ts), max(ts) + 1)


def test_trigger_states_read_as_text():
    """Early firings counted down, a processing-time deadline, finished triggers of closed windows."""
    from dataflow_kafka.watermarks import AfterCount, AfterProcessingTime, AfterWatermark, Repeatedly
    from dataflow_kafka.watermarks.driver import TriggerDriver
    from dataflow_kafka.windowing import Sum, TumblingWindow

    d = TriggerDriver(TumblingWindow(100), AfterWatermark(early=AfterCount(3), late=AfterProcessingTime(50)),
                      "accumulating", allowed_lateness_ms=500, combiner=Sum())
    d.add([(1, 10), (2, 20)], key="a")
    d.advance_processing_time(1_000)
    d.add([(5, 110)], key="a")
    d.advance_watermark(150)
    d.add([(7, 30)], key="a")                                 # late: starts the late trigger's deadline
    states = {(w.window.start_ms, w.window.end_ms): w for w in d.window_states()}
    assert states[(100, 200)].waiting == "watermark 200 ms (on time); early: 2 more element(s) (AfterCount(3))"
    assert states[(0, 100)].waiting == "late: processing time 1050 ms"
    assert (states[(0, 100)].panes, states[(0, 100)].new_data, states[(0, 100)].accumulator) == (1, True, 10)
    with pytest.warns(UserWarning, match="can finish"):
        once = TriggerDriver(TumblingWindow(100), AfterCount(2), "discarding", combiner=Sum())
    once.add([(1, 10), (1, 11)], key="b")
    (w,) = once.window_states()
    assert w.closed and w.waiting == "finished" and w.accumulator is None and w.panes == 1
    every = TriggerDriver(TumblingWindow(100), Repeatedly(AfterCount(2)), "discarding", combiner=Sum())
    every.add([(1, 10), (1, 11)], key="c")                  # one bundle: fires once
    every.add([(1, 12)], key="c")
    (w,) = every.window_states()
    assert (w.closed, w.waiting, w.panes, w.accumulator) == (False, "1 more element(s) (AfterCount(2))", 1, 1)


_TRIGGERS = [DefaultTrigger(), AfterWatermark(), AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
             AfterWatermark(late=AfterCount(2))]


def _described(view, item: str) -> pd.DataFrame:
    t = view.table("panes", item)
    keys = [c for c in ("key_group", "key", "query_id", "start_ms", "end_ms") if c in t]
    return t.sort_values(keys, key=lambda c: c.map(repr) if c.dtype == object else c).reset_index(drop=True)


@pytest.mark.parametrize("mode", ["discarding", "accumulating"])
@pytest.mark.parametrize("aggregation", [Count, Sum, Mean, Min, Max])
@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3), count=st.integers(1, 6), trigger=st.sampled_from(_TRIGGERS))
def test_vectorised_driver_describes_as_the_per_element_driver(seed, n, count, trigger, mode, aggregation):
    """The stage's queries on the vectorised driver (ColumnarDriver) and on the per-element one
    (the vectorised one refused while the stage runs) fed the same batches: the same described
    state (clock, queries, held elements, every live window with its panes, flags, expiry, what
    its trigger waits for and value, pending panes), also for the sliding query added halfway."""
    # integer values (bound as bigint, as the stage is built: a state view decodes with the unbound stage)
    batches = [b.assign(v=b["v"].astype("Int64")) for b in _batches(seed, count)]

    def view():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")            # AfterWatermark() finishes: warned at construction
            stage = WindowingStage(key="k", value="v", windows={"fixed": TumblingWindow(1000)}, trigger=trigger,
                                   accumulation_mode=mode, allowed_lateness_ms=LATENESS, aggregations=[aggregation()],
                                   num_key_groups=n, name="panes", integral_values=True)
        states: dict = {}
        Pipeline([stage]).run_local(batches, states=states)
        return local_state(Pipeline([stage]), states), type(stage.new_state().driver("fixed"))

    vectorised, kind = view()
    with patch.object(ColumnarDriver, "supports", staticmethod(lambda *args, **kwargs: False)):
        per_element, reference_kind = view()
    assert (kind, reference_kind) == (ColumnarDriver, TriggerDriver)
    assert_frame_equal(vectorised.watermarks, per_element.watermarks)
    for item in ("time", "query", "held", "window", "pane"):
        assert_frame_equal(_described(vectorised, item), _described(per_element, item))
