"""The slicer stage's state as :func:`keygroups.state_view.local_state` shows it, against a brute-force
reference over the accepted records: the open windows (holding records, end past the watermark
minus the allowed lateness, from the coverage start on: tumbling, sliding, session and count
windows, a query added halfway) with their record counts and sums, and the slices (each one's
count and newest record are the records in its span), for both forms of the state (the keyed
table and one engine per key), over out-of-order batches and any number of key groups."""

from __future__ import annotations

import math
from collections import defaultdict
from unittest.mock import patch

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st
from pandas.testing import assert_frame_equal

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.state_view import local_state
from dataflow_kafka.slicer.keyed_sessions import KeyedSessionOperator
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.windowing import Count, Max, Mean, Min, SessionWindow, SlidingWindow, Sum, TumblingWindow
from tests.slicer.test_slicer_stage import LATENESS, PARTS, _batches
from tests.suite import examples

CONFIGS = {
    "keyed": {"a": SlidingWindow(2_000, 500), "b": TumblingWindow(1_000, 200)},
    "per_key": {"a": SlidingWindow(2_000, 500), "s": SessionWindow(300), "c": TumblingWindow(3, measure="count")},
}


def _stage(config: str, n: int) -> SlicerStage:
    return SlicerStage(key="k", value="v", windows=CONFIGS[config], aggregations=[Sum(), Count()],
                       allowed_lateness_ms=LATENESS, num_key_groups=n, name="w")


def _accepted(batches: list[pd.DataFrame]) -> tuple[dict, int | None]:
    """Per key the records the stage kept (``(ts, value)`` in (event time, arrival) order, arrival
    being (batch, partition, offset): not null, not older than the previous batch's watermark minus
    the lateness), and the last watermark."""
    newest: dict = {}
    wm = None
    kept = defaultdict(list)
    for b, frame in enumerate(batches):
        for r in frame.to_dict("records"):
            if r["kind"] == "data" and r["slicer_value"] is not None and not math.isnan(r["slicer_value"]):
                if wm is None or r["event_time_ms"] >= wm - LATENESS:
                    kept[r["k"]].append((r["event_time_ms"], b, r["partition"], r["offset"], r["slicer_value"]))
            elif r["kind"] == "punctuation":
                newest[r["partition"]] = None if pd.isna(r["punctuation_ms"]) else int(r["punctuation_ms"])
        marks = [newest.get(p) for p in range(PARTS)]
        if None not in marks:
            wm = min(marks) if wm is None else max(wm, min(marks))
    return {k: [(t, v) for t, *_, v in sorted(recs)] for k, recs in kept.items()}, wm


def _periodic(recs, size: int, slide: int, offset: int, wm, coverage) -> set:
    out = set()
    for t, _ in recs:
        s = t - (t - offset) % slide
        while s > t - size:
            if (wm is None or s + size > wm - LATENESS) and (coverage is None or s >= coverage):
                out.add((s, s + size))
            s -= slide
    return out


def _sessions(recs, gap: int, wm) -> set:
    times = sorted(t for t, _ in recs)
    out, first = set(), times[0]
    for a, b in zip(times, times[1:] + [None]):
        if b is None or b - a > gap:
            if wm is None or a + gap >= wm - LATENESS:
                out.add((first, a + gap))
            first = b
    return out


def reference_windows(config: str, kept: dict, wm, coverage: dict, added: bool) -> dict:
    """``{(key, query, start, end, first position, end position): (count, sum, pending)}``: every
    open window with records (``added``: with the query the fifth batch adds)."""
    out = {}
    for key, recs in kept.items():
        windows = dict(CONFIGS[config], **({"late_add": TumblingWindow(500)} if added else {}))
        for qid, w in windows.items():
            if w.measure == "count":
                before = sum(t < wm - LATENESS for t, _ in recs) if wm is not None else 0
                done = sum(t < wm for t, _ in recs) if wm is not None else 0
                for a in range(0, len(recs), w.size_ms):
                    b = a + w.size_ms
                    if b > before:
                        part = recs[a:b]
                        out[(key, qid, None, None, a, b)] = (len(part), sum(v for _, v in part), b > done)
                continue
            if isinstance(w, SessionWindow):
                spans = _sessions(recs, w.gap_ms, wm)
            else:
                size, slide, offset = w.grid
                spans = _periodic(recs, size, slide, offset, wm, coverage.get((qid, key)))
            for s, e in spans:
                part = [v for t, v in recs if s <= t < e]
                pending = wm is None or (e >= wm if isinstance(w, SessionWindow) else e > wm)
                out[(key, qid, s, e, None, None)] = (len(part), sum(part), pending)
    return out


def shown_windows(view) -> dict:
    out = {}
    for r in view.table("w", "window").to_dict("records"):
        pos = r["positions"] if isinstance(r.get("positions"), tuple) else (None, None)
        start = None if pd.isna(r["start_ms"]) else int(r["start_ms"])
        end = None if pd.isna(r["end_ms"]) else int(r["end_ms"])
        out[(r["key"], r["query_id"], start, end, *pos)] = (int(r["count"]), float(r["sum"]), r["state"] == "pending")
    return out


def coverage_of(view) -> dict:
    """``{(query, key): coverage start}`` of the added query: a key's own, else the query's."""
    q = view.of("w", "query")
    start = q.loc[q["query_id"] == "late_add", "start_ms"]
    base = None if start.empty or pd.isna(start.iloc[0]) else int(start.iloc[0])
    out = defaultdict(lambda: base)
    for r in view.of("w", "coverage").to_dict("records"):
        if r["query_id"] == "late_add" and not pd.isna(r["start_ms"]):
            out[("late_add", r["key"])] = int(r["start_ms"])
    return out


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3), config=st.sampled_from(sorted(CONFIGS)),
       batches=st.integers(2, 8))
def test_open_windows_and_slices_equal_the_brute_force(seed, n, config, batches):
    frames = _batches(seed, batches)
    stage = _stage(config, n)
    assert stage.keyed == (config == "keyed")
    states: dict = {}
    Pipeline([stage]).run_local(frames, states=states)
    view = local_state(Pipeline([stage]), states)
    kept, wm = _accepted(frames)
    marks = view.watermarks
    assert (marks["watermark_in_ms"].isna().all() if wm is None else (marks["watermark_in_ms"] == wm).all())
    want = reference_windows(config, kept, wm, coverage_of(view), added=batches > 4)
    got = shown_windows(view)
    assert got.keys() == want.keys()
    for k, (count, total, pending) in want.items():
        assert got[k][0] == count and math.isclose(got[k][1], total) and got[k][2] == pending, (k, got[k], want[k])
    for r in view.table("w", "slice").to_dict("records"):      # a slice's count and newest: the records in its span
        recs = kept[r["key"]]
        if r.get("measure") == "count":
            lo, hi = r["positions"]
            part = recs[lo:hi]
        else:
            hi = math.inf if pd.isna(r["end_ms"]) else int(r["end_ms"])
            part = [(t, v) for t, v in recs if int(r["start_ms"]) <= t < hi]
        assert int(r["count"]) == len(part) > 0
        newest = int(r["end_ms"]) - 1 if r.get("measure") == "count" else int(r["newest_ms"])
        assert newest == max(t for t, _ in part)
    time_slices = view.table("w", "slice")
    if "measure" in time_slices:
        time_slices = time_slices[time_slices["measure"].isna()]
    for key, rows in time_slices.groupby("key"):                  # held: every kept record from the first slice on
        assert rows["count"].sum() == sum(t >= rows["start_ms"].min() for t, _ in kept[key])


def test_a_long_sliding_window_lists_open_windows_only():
    """A sliding window of 100 instances per record: the description holds the windows still open
    (end past watermark minus lateness), not every window of the key's history."""
    stage = SlicerStage(key="k", value="v", windows={"long": SlidingWindow(10_000, 100)}, aggregations=[Sum()],
                        allowed_lateness_ms=0, num_key_groups=1, name="w")
    frames = []
    for b in range(20):
        rows = [{"kind": "data", "topic": "t", "partition": 0, "offset": b * 10 + i, "k": "k", "v": 1.0,
                 "event_time_ms": b * 1_000 + i * 100, "processing_time_ms": b} for i in range(10)]
        rows.append({"kind": "punctuation", "topic": "t", "partition": 0, "offset": b * 10 + 10,
                     "punctuation_ms": b * 1_000 + 900, "processing_time_ms": b})
        frames.append(pd.DataFrame(rows).astype({"v": float}).rename(columns={"v": "slicer_value"}))
    states: dict = {}
    Pipeline([stage]).run_local(frames, states=states)
    view = local_state(Pipeline([stage]), states)
    windows = view.of("w", "window")
    wm = 19_900
    assert (windows["end_ms"] > wm).all()
    assert len(windows) == 100                            # ends in (19_900, 29_900], not the key's earlier windows
    slices = view.of("w", "slice")
    assert slices["count"].sum() == 100 and slices["start_ms"].min() == wm - 10_000 + 100


def test_empty_and_commands_only_state():
    stage = _stage("per_key", 2)
    states: dict = {}
    Pipeline([stage]).run_local([f[f["kind"] != "data"] for f in _batches(1, 3)], states=states)
    view = local_state(Pipeline([stage]), states)
    assert set(view.items["item"]) <= {"query"}
    assert np.array_equal(view.items.loc[view.items["item"] == "query", "query_id"].unique(), ["a", "s", "c"])


GAP = 300


def _session_views(frames: list[pd.DataFrame], n: int, aggregations: list) -> tuple:
    """The described state of the keyed session table and of one engine per key (the table
    refused while the stage is built), both fed ``frames`` through ``run_local``."""
    def run(stage: SlicerStage):
        states: dict = {}
        Pipeline([stage]).run_local(frames, states=states)
        return local_state(Pipeline([stage]), states)

    def build() -> SlicerStage:
        return SlicerStage(key="k", value="v", windows={"s": SessionWindow(GAP)}, aggregations=aggregations,
                           allowed_lateness_ms=LATENESS, num_key_groups=n, name="w")

    table = build()
    with patch.object(KeyedSessionOperator, "supports", staticmethod(lambda template: False)):
        per_key = build()
    assert (table.state_kind, per_key.state_kind) == (b"S", b"E")
    return run(table), run(per_key)


def _sorted_items(view, item: str) -> pd.DataFrame:
    t = view.table("w", item)
    keys = [c for c in ("key_group", "key", "query_id", "start_ms", "end_ms") if c in t]
    return t.sort_values(keys, key=lambda c: c.map(repr) if c.dtype == object else c).reset_index(drop=True)


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3), batches=st.integers(1, 8),
       aggregations=st.lists(st.sampled_from([Sum, Count, Mean, Min, Max]), min_size=1, max_size=3, unique=True))
def test_keyed_session_table_describes_as_one_engine_per_key(seed, n, batches, aggregations):
    """Sessions run by the keyed session table and by one engine per key: the same query and
    window rows for the same batches, whatever the number of key groups; the same slice rows (one
    per session) except that the per-key engine may still hold the slices of final sessions (ending
    before the watermark minus the lateness: no window needs them), which the table drops at the
    watermark."""
    frames = [f[f["kind"] != "modification"] for f in _batches(seed, batches)]   # the table takes no add_window
    table, per_key = _session_views(frames, n, [a() for a in aggregations])
    assert_frame_equal(table.watermarks, per_key.watermarks)
    for item in ("query", "window"):
        assert_frame_equal(_sorted_items(table, item), _sorted_items(per_key, item), check_exact=False, rtol=1e-9)
    held = _sorted_items(per_key, "slice")
    if held.empty:                                   # no records: nothing held either way
        assert table.table("w", "slice").empty and table.table("w", "window").empty
        return
    wm = per_key.watermarks.set_index("key_group")["watermark_in_ms"]
    horizon = held["key_group"].map(wm) - LATENESS
    needed = held[horizon.isna() | (held["newest_ms"] + GAP >= horizon)].reset_index(drop=True)
    assert_frame_equal(_sorted_items(table, "slice"), needed)
    windows, slices = _sorted_items(table, "window"), _sorted_items(table, "slice")   # a slice per session
    assert slices[["key", "start_ms", "count"]].equals(windows[["key", "start_ms", "count"]])
    assert (slices["newest_ms"] + GAP == windows["end_ms"]).all()
    assert set(table.rows["item"]) <= {"query", "window", "slice"}
