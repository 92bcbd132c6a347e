"""The join stages' state as :func:`keygroups.state_view.local_state` shows it, against brute force over
random out-of-order inputs (late rows included), 1-3 key groups, one source split by topic: each
input's watermark; the windowed join's live windows (rows whose window's end plus the allowed
lateness is beyond the join's watermark) with their rows per input; the interval join's held rows
per key and input (accepted, not yet freed) and how many of them matched."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from dataflow_kafka.joins import LEFT, RIGHT
from dataflow_kafka.joins.stage import IntervalJoinStage, WindowJoinStage
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.state_view import local_state
from dataflow_kafka.windowing import TumblingWindow
from tests.joins.reference import random_batches
from tests.joins.test_join_stage import KEYS, sides, source_frames
from tests.suite import examples

NAMES = {LEFT: "persons", RIGHT: "auctions"}
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")      # late rows are the point here


def _watermarks(batches) -> list[tuple]:
    """Per batch ``(left, right, join)`` after it: each input's watermark (its punctuations'
    running maximum) and the join's (their minimum, never lowered)."""
    side, join, out = {LEFT: None, RIGHT: None}, None, []
    for _, puncts, _ in batches:
        for p in puncts:
            side[p.side] = p.ts_ms if side[p.side] is None else max(side[p.side], p.ts_ms)
        if None not in side.values():
            low = min(side.values())
            join = low if join is None else max(join, low)
        out.append((side[LEFT], side[RIGHT], join))
    return out


def _run(stage, batches, seed):
    states: dict = {}
    Pipeline([stage]).run_local(source_frames(batches, random.Random(seed)), states=states)
    return local_state(Pipeline([stage]), states)


def _input_marks(view, name: str) -> dict:
    rows = view.table(name, "watermark")
    return {r["input"]: None if pd.isna(r["start_ms"]) else int(r["start_ms"]) for r in rows.to_dict("records")}


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 10 ** 6), groups=st.integers(1, 3), size=st.sampled_from([5, 10, 25]),
       lateness=st.sampled_from([0, 5, 30]))
def test_window_join_live_windows_equal_the_brute_force(seed, groups, size, lateness):
    batches = random_batches(random.Random(seed), keys=KEYS)
    stage = WindowJoinStage(*sides(True), window=TumblingWindow(size), allowed_lateness_ms=lateness,
                            num_key_groups=groups, name="wj")
    view = _run(stage, batches, seed)
    left, right, wm = _watermarks(batches)[-1]
    assert _input_marks(view, "wj") == {"persons": left, "auctions": right}
    want: dict = {}
    for rows, _, _ in batches:
        for r in rows:
            s = r.ts_ms - r.ts_ms % size
            if wm is None or s + size + lateness > wm:
                want.setdefault((r.key, s, s + size), Counter())[NAMES[r.side]] += 1
    got = {(r["key"], int(r["start_ms"]), int(r["end_ms"])): Counter(persons=int(r["persons"]), auctions=int(r["auctions"]))
           for r in view.table("wj", "window").to_dict("records")}
    assert got == {w: Counter(persons=c["persons"], auctions=c["auctions"]) for w, c in want.items()}
    for r in view.table("wj", "window").to_dict("records"):
        assert int(r["count"]) == int(r["persons"]) + int(r["auctions"])
        assert int(r["expires_ms"]) == int(r["end_ms"]) + lateness


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 10 ** 6), groups=st.integers(1, 3), lateness=st.sampled_from([0, 5, 30]),
       bounds=st.tuples(st.integers(-15, 5), st.integers(0, 20)))
def test_interval_join_held_rows_equal_the_brute_force(seed, groups, lateness, bounds):
    lower, upper = bounds[0], bounds[0] + bounds[1]
    batches = random_batches(random.Random(seed), keys=KEYS)
    stage = IntervalJoinStage.between(*sides(True), lower, upper, how="left_outer", allowed_lateness_ms=lateness,
                                      num_key_groups=groups, name="ij")
    view = _run(stage, batches, seed)
    marks = _watermarks(batches)
    accepted = []                                   # rows not late on arrival: the join's watermark before their batch
    for (rows, _, _), before in zip(batches, [None] + [m[2] for m in marks[:-1]]):
        accepted += [r for r in rows if before is None or r.ts_ms >= before - lateness]
    wm = marks[-1][2]
    bar = None if wm is None else wm - lateness
    want: dict = {}
    for r in accepted:
        other = RIGHT if r.side == LEFT else LEFT
        lo, hi = (r.ts_ms + lower, r.ts_ms + upper) if r.side == LEFT else (r.ts_ms - upper, r.ts_ms - lower)
        freed = bar is not None and (r.ts_ms + upper < bar if r.side == LEFT else r.ts_ms - lower < bar)
        if not freed:
            matched = any(o.side == other and o.key == r.key and lo <= o.ts_ms <= hi for o in accepted)
            want.setdefault((r.key, NAMES[r.side]), []).append((r.ts_ms, matched))
    got = {(r["key"], r["input"]): r for r in view.table("ij", "held").to_dict("records")}
    assert got.keys() == want.keys()
    for k, held in want.items():
        r, times = got[k], [t for t, _ in held]
        assert (int(r["count"]), int(r["start_ms"]), int(r["end_ms"])) == (len(held), min(times), max(times) + 1)
        assert int(r["matched"]) == sum(m for _, m in held)
        reach = upper if k[1] == "persons" else -lower
        assert int(r["expires_ms"]) == min(times) + reach + lateness + 1
