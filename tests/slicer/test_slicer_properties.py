"""Property tests: the slicing engine against the brute-force reference (slicer_reference.py).

Each runs with both emissions: Scotty's (the engine's default; rows compared in the engine's
order, the streams moved to start at 0 or later) and the compact one (the Spark stage's)."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dataflow_kafka.slicer import FixedBandWindow, PunctuationWindow, SlideByTupleWindow, SlicingWindowOperator, ThresholdFrame
from dataflow_kafka.windowing import M4, Count, Max, Mean, Median, Min, Quantile, SessionWindow, SlidingWindow, Sum, TumblingWindow

from tests.slicer.slicer_reference import row_order, Concat, Reference, is_seven, rows_of, same_rows
from tests.suite import examples

settings.register_profile("slicer-noshrink", phases=[Phase.explicit, Phase.reuse, Phase.generate])
if os.environ.get("SLICER_NO_SHRINK"):  # debugging aid: fail fast without shrinking
    settings.load_profile("slicer-noshrink")
SCALE = int(os.environ.get("SLICER_EXAMPLES_SCALE", "1"))  # raise for a longer hunt
SETTINGS = settings(max_examples=examples(45) * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def time_windows(draw):
    kind = draw(st.sampled_from(["tumbling", "sliding", "band", "session", "punct", "sbt", "frame"]))
    if kind == "tumbling":
        size = draw(st.integers(5, 120))
        return TumblingWindow(size, draw(st.integers(0, size - 1)))
    if kind == "sliding":
        size = draw(st.integers(10, 150))
        return SlidingWindow(size, draw(st.integers(5, size)))
    if kind == "band":
        return FixedBandWindow(draw(st.integers(0, 300)), draw(st.integers(10, 300)))
    if kind == "session":
        return SessionWindow(draw(st.integers(5, 60)))
    if kind == "punct":
        return PunctuationWindow(punctuation=7)
    if kind == "frame":
        return ThresholdFrame(draw(st.integers(2, 7)))
    return SlideByTupleWindow(draw(st.integers(5, 100)), draw(st.integers(1, 4)))


@st.composite
def count_windows(draw):
    kind = draw(st.sampled_from(["tumbling", "sliding", "band"]))
    if kind == "tumbling":
        return TumblingWindow(draw(st.integers(1, 8)), measure="count")
    if kind == "sliding":
        size = draw(st.integers(2, 10))
        return SlidingWindow(size, draw(st.integers(1, size)), measure="count")
    return FixedBandWindow(draw(st.integers(0, 10)), draw(st.integers(1, 10)), measure="count")


EMISSIONS = st.sampled_from(["scotty", "compact"])
AGGS = st.lists(st.sampled_from(["sum", "count", "min", "max", "mean", "m4", "median", "q", "concat"]),
                min_size=1, max_size=4, unique=True)


def make_aggs(names):
    table = {"sum": Sum, "count": Count, "min": Min, "max": Max, "mean": Mean, "m4": M4,
             "median": Median, "q": lambda: Quantile((0.25, 0.9)), "concat": Concat}
    return [table[n]() for n in names]


@st.composite
def streams(draw, in_order=False):
    """A list of ('rec', values, ts) batches and ('wm', t) watermarks, ending with a flush."""
    events, now = [], 0
    for _ in range(draw(st.integers(1, 8))):
        n = draw(st.integers(0, 25))
        ts, vals = [], []
        for _ in range(n):
            now += draw(st.integers(0, 40))
            late = 0 if in_order or draw(st.integers(0, 9)) < 7 else draw(st.integers(0, 150))
            ts.append(now - late)
            vals.append(draw(st.integers(0, 9)))
        if n:
            events.append(("rec", vals, ts))
        if draw(st.booleans()):
            events.append(("wm", now - draw(st.integers(0, 100))))
    events.append(("wm", now + 2000))
    return events


def at_origin(events, emission):
    """``emission="scotty"``: the stream moved 200 ms later (Scotty's time starts at 0; streams()
    reach -150). Other events (window commands) unchanged."""
    if emission != "scotty":
        return events
    return [(ev[0], ev[1], [t + 200 for t in ev[2]]) if ev[0] == "rec" else ("wm", ev[1] + 200) if ev[0] == "wm"
            else ev for ev in events]


def run(op, events, one_by_one=False):
    out = []
    for ev in events:
        if ev[0] == "wm":
            out.append(op.process_watermark(ev[1]))
        elif one_by_one:
            for v, t in zip(ev[1], ev[2]):
                op.process_element(v, t)
        else:
            op.process_elements(np.array(ev[1]), np.array(ev[2]))
    return out


def run_reference(windows, aggs, lateness, events, emission="scotty"):
    ref, out = Reference(windows, aggs, lateness, emission), []
    for ev in events:
        if ev[0] == "wm":
            out.append(ref.watermark(ev[1]))
        else:
            ref.records(ev[1], ev[2])
    return out, ref.dropped


def operator(windows, aggs, lateness, store="lazy", order="out_of_order", emission="scotty"):
    op = SlicingWindowOperator(allowed_lateness_ms=lateness, stream_order=order, store=store, emission=emission)
    ids = [op.add_window(w) for w in windows]
    for a in aggs:
        op.add_aggregation(a)
    return op, ids


def check_against_reference(windows, names, lateness, store, events, emission, order="out_of_order",
                            one_by_one=False):
    """Scotty's emission: rows in the engine's order (per query, then by start); compact: as sets."""
    aggs = make_aggs(names)
    events = at_origin(events, emission)
    op, _ = operator(windows, aggs, lateness, store, order, emission)
    got = run(op, events, one_by_one)
    want, dropped = run_reference(windows, make_aggs(names), lateness, events, emission)
    for i, (g, w) in enumerate(zip(got, want)):
        g = rows_of(g, keep_order=emission == "scotty")
        assert same_rows(g, w), f"watermark #{i}:\n engine {g}\n reference {w}"
    assert op.dropped_late == dropped


@SETTINGS
@given(st.lists(time_windows(), min_size=1, max_size=4), AGGS, st.sampled_from([0, 40, 200]),
       st.sampled_from(["lazy", "eager"]), streams(), EMISSIONS)
def test_time_windows_out_of_order_match_reference(windows, names, lateness, store, events, emission):
    check_against_reference(windows, names, lateness, store, events, emission)


@SETTINGS
@given(st.lists(time_windows(), min_size=1, max_size=3), AGGS, st.sampled_from(["lazy", "eager"]),
       streams(in_order=True), st.booleans(), EMISSIONS)
def test_time_windows_in_order_match_reference(windows, names, store, events, one_by_one, emission):
    check_against_reference(windows, names, 100, store, events, emission, "in_order", one_by_one)


@SETTINGS
@given(st.lists(count_windows(), min_size=1, max_size=3), st.lists(time_windows(), max_size=2), AGGS,
       st.sampled_from([0, 60, 300]), st.sampled_from(["lazy", "eager"]), streams(), EMISSIONS)
def test_count_windows_match_reference(cwindows, twindows, names, lateness, store, events, emission):
    check_against_reference(cwindows + twindows, names, lateness, store, events, emission)


@settings(max_examples=examples(30) * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(time_windows(), count_windows()), min_size=2, max_size=4), AGGS,
       st.sampled_from([0, 100]), streams(), EMISSIONS)
def test_shared_operator_equals_one_operator_per_query(windows, names, lateness, events, emission):
    events = at_origin(events, emission)
    shared, ids = operator(windows, make_aggs(names), lateness, emission=emission)
    got = [rows_of(r) for r in run(shared, events)]
    per_query = []
    for i, w in enumerate(windows):
        single, _ = operator([w], make_aggs(names), lateness, emission=emission)
        per_query.append([rows_of(r, {"0": ids[i]}) for r in run(single, events)])
    for k, rows in enumerate(got):
        merged = sorted((r for p in per_query for r in p[k]), key=row_order)
        assert same_rows(rows, merged)


@settings(max_examples=examples(30) * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(time_windows(), count_windows()), min_size=1, max_size=3), AGGS,
       st.sampled_from([0, 100]), streams(), st.integers(0, 20), st.booleans(), EMISSIONS)
def test_serialisation_round_trip_mid_stream(windows, names, lateness, events, cut, with_config, emission):
    events = at_origin(events, emission)
    op, _ = operator(windows, make_aggs(names), lateness, emission=emission)
    cut = min(cut, len(events))
    run(op, events[:cut])
    blob = op.to_bytes(include_config=with_config)
    template, _ = operator(windows, make_aggs(names), lateness, emission=emission)
    restored = SlicingWindowOperator.from_bytes(blob, like=None if with_config else template)
    a = [rows_of(r) for r in run(op, events[cut:])]
    b = [rows_of(r) for r in run(restored, events[cut:])]
    assert all(same_rows(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    assert restored.dropped_late == op.dropped_late and restored.emission == emission


def test_is_seven_predicate_form_matches_value_form():
    events = [("rec", [1, 7, 2, 3, 7, 4], [0, 10, 20, 30, 40, 50]), ("wm", 1000)]
    a, _ = operator([PunctuationWindow(punctuation=7)], [Sum()], 0)
    b, _ = operator([PunctuationWindow(predicate=is_seven)], [Sum()], 0)
    assert rows_of(run(a, events)[0]) == rows_of(run(b, events)[0]) != []
