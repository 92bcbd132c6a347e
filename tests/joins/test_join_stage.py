"""Join stages on the stage layer without Spark (``Pipeline.run_local``): two inputs from one source
split by topic or from two sources, per-input watermarks, a stalled input, and hypothesis
properties against the brute-force joins of ``tests/joins/reference.py`` over random
out-of-order inputs, 1-4 key groups, batch splits, fusion and a replayed batch."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from dataflow_kafka.joins import LEFT, JoinError, SidePunctuation
from dataflow_kafka.joins.stage import IntervalJoinStage, JoinInput, WindowJoinStage, current_joins
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.keygroups.operator import run_key_group
from dataflow_kafka.keygroups.plan import frame_types
from tests.joins.reference import flush, interval_join, random_batches, window_join
from tests.joins.test_window_join import HOWS, MODES, TRIGGERS, _late_rows, _window
from tests.keygroups.toy_stages import TumblingCount
from tests.suite import examples
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.windowing import END_OF_TIME_MS, SessionWindow, TumblingWindow

KEYS = ["k0", "k1", "k2", "k3"]
TOPIC = {LEFT: "persons"}
EARLY_LATE = AfterWatermark(early=AfterCount(1), late=AfterCount(1))


def _topic(side) -> str:
    return "persons" if side == LEFT else "auctions"


def source_frames(batches: list, rng: random.Random, partitions: int = 2) -> list[pd.DataFrame]:
    """Engine batches ``(rows, punctuations, pt)`` as source micro-batches of one source reading
    two topics (``persons`` = left, ``auctions`` = right), ``partitions`` each: a row goes to a
    random partition of its side's topic; a side's punctuation becomes one punctuation row per
    partition of its topic (so the input's watermark is the side's punctuation)."""
    offsets: Counter = Counter()
    frames = []
    for rows, puncts, pt in batches:
        data = []
        for r in rows:
            tp = (_topic(r.side), rng.randrange(partitions))
            data.append({"kind": "data", "topic": tp[0], "partition": tp[1], "offset": offsets[tp], "k": r.key,
                         "v": r.value, "event_time_ms": r.ts_ms, "processing_time_ms": pt})
            offsets[tp] += 1
        marks = [{"kind": "punctuation", "topic": _topic(p.side), "partition": part, "offset": offsets[(_topic(p.side),
                  part)], "punctuation_ms": p.ts_ms, "processing_time_ms": pt} for p in puncts for part in range(partitions)]
        frame = pd.DataFrame(data, columns=["kind", "topic", "partition", "offset", "k", "v", "event_time_ms",
                                            "processing_time_ms"]).astype({"k": object, "v": object})
        frames.append(pd.concat([frame, control_frame(marks)], ignore_index=True))
    return frames


def by_topic(frames: list[pd.DataFrame]) -> dict[str, list[pd.DataFrame]]:
    """The same micro-batches as two sources, one per topic (``apply({input: source})``)."""
    return {t: [f[f["topic"] == t].reset_index(drop=True) for f in frames] for t in ("persons", "auctions")}


def sides(split: bool, **key) -> tuple[JoinInput, JoinInput]:
    sel = (lambda t: {"topic": t}) if split else (lambda t: None)
    return (JoinInput("persons", key="k", columns={"lv": "v"}, select=sel("persons")),
            JoinInput("auctions", key="k", columns={"rv": "v"}, select=sel("auctions")))


def run(stage, frames, split: bool, **options) -> list[pd.DataFrame]:
    return Pipeline([stage]).run_local(frames if split else by_topic(frames), **options)


def as_reference(folded: dict) -> dict:
    """``current_joins`` in the reference's form: ``{(repr(key), window): Counter((left, right))}``."""
    def row(x):
        return None if x is None else (x[0], x[1][0])

    return {(repr(k), w): Counter({(row(lt), row(rt)): n for (lt, rt), n in c.items()}) for (k, w), c in folded.items()}


def data_rows(outs) -> list:
    return sorted(repr(sorted((k, v) for k, v in r.items() if k not in ("partition", "offset") and not pd.isna(v)))
                  for o in outs for r in o[o["kind"] == "data"].to_dict("records"))


def late_dropped(outs) -> int:
    return int(sum(o.loc[(o["kind"] == "dropped") & (o["dropped_reason"] == "late"), "dropped_count"].sum()
                   for o in outs))


# -- transcripts ----------------------------------------------------------------------------------
def _frame(rows=(), marks=(), pt=0) -> pd.DataFrame:
    data = pd.DataFrame([{"kind": "data", "topic": t, "partition": 0, "offset": o, "k": k, "v": v, "event_time_ms": ts,
                          "processing_time_ms": pt} for t, o, k, v, ts in rows],
                        columns=["kind", "topic", "partition", "offset", "k", "v", "event_time_ms",
                                 "processing_time_ms"]).astype({"v": object})
    ctl = control_frame([{"kind": "punctuation", "topic": t, "partition": 0, "offset": 9, "punctuation_ms": w,
                          "processing_time_ms": pt} for t, w in marks])
    return pd.concat([data, ctl], ignore_index=True)


def test_early_outer_pane_is_retracted_and_corrected_on_the_stage_layer():
    stage = WindowJoinStage(*sides(True), window=TumblingWindow(10), how="left_outer", trigger=EARLY_LATE,
                            accumulation_mode="accumulating_and_retracting", allowed_lateness_ms=20, num_key_groups=2)
    out = run(stage, [_frame([("persons", 0, "a", "alice", 3)], [("persons", 5)]),
                      _frame([], [("persons", 30), ("auctions", 12)]),
                      _frame([("auctions", 0, "a", "x", 7)], [("persons", 40), ("auctions", 40)])], True)
    brief = [[(r["pane_index"], r["timing"], r["is_retraction"], r["lv"], r["rv"]) for r in o[o.kind == "data"].to_dict(
        "records")] for o in out]
    assert brief == [[(0, "EARLY", False, "alice", None)],
                     [(0, "EARLY", True, "alice", None), (1, "ON_TIME", False, "alice", None)],
                     [(1, "ON_TIME", True, "alice", None), (2, "LATE", False, "alice", "x")]]
    marks = [sorted(set(o.loc[o.kind == "punctuation", "punctuation_ms"].tolist()), key=str) for o in out]
    assert marks[0] == [pd.NA] and marks[1:] == [[12 - 20], [40 - 20]]   # held by auctions until it punctuates
    assert current_joins(out, stage) == {("a", (0, 10)): Counter({((3, ("alice",)), (7, ("x",))): 1})}
    metrics = [m for o in out for m in o.loc[o.kind == "metrics", "metrics"]]
    assert '"watermarks": {"persons": 30, "auctions": 12}' in metrics[2]


@pytest.mark.parametrize("split", [True, False], ids=["one-source", "two-sources"])
def test_a_stalled_input_holds_the_join_back_and_loses_nothing(split):
    """``auctions`` sends one row, then nothing (no rows, no punctuations) for 6 batches while
    ``persons`` runs 60 ms ahead; the join's output watermark stays at auctions', and its rows,
    far behind the persons' punctuations when they come, are joined, not dropped."""
    stage = WindowJoinStage(*sides(split), window=TumblingWindow(10), how="inner", num_key_groups=3)
    frames = [_frame([("persons", 0, "a", "p0", 1), ("auctions", 0, "a", "x", 2)], [("persons", 5), ("auctions", 5)])]
    frames += [_frame([("persons", i, "a", f"p{i}", 10 * i + 1)], [("persons", 10 * i + 5)], pt=i) for i in range(1, 7)]
    frames += [_frame([("auctions", i, "a", f"a{i}", 10 * i + 2) for i in range(1, 7)], [("auctions", 75)], pt=7),
               _frame([], [("persons", END_OF_TIME_MS), ("auctions", END_OF_TIME_MS)], pt=8)]
    out = run(stage, frames, split)
    for o in out[:7]:
        assert set(o.loc[o.kind == "punctuation", "punctuation_ms"]) == {5}
        assert not (o.kind == "data").any()
    assert late_dropped(out) == 0
    assert sorted((lt[1][0], rt[1][0]) for c in current_joins(out, stage).values() for lt, rt in c) == \
        [("p0", "x")] + [(f"p{i}", f"a{i}") for i in range(1, 7)]


def test_current_results_gives_one_row_per_joined_pair_for_both_join_kinds():
    """``dk.current_results``, the final-results helper of every stage: a window join's folded panes
    and an interval join's pairs, as frames of the stage's columns (one shape), equal to
    ``current_joins``'s engine form."""
    import dataflow_kafka as dk

    window = WindowJoinStage(*sides(True), window=TumblingWindow(10), how="left_outer", trigger=EARLY_LATE,
                             accumulation_mode="accumulating_and_retracting", allowed_lateness_ms=20)
    interval = IntervalJoinStage.between(*sides(True), -5, 5)
    frames = [_frame([("persons", 0, "a", "alice", 3), ("persons", 1, "b", "bob", 4)], [("persons", 5)]),
              _frame([("auctions", 0, "a", "x", 7), ("auctions", 1, "a", "y", 8)], [("persons", 40), ("auctions", 40)])]
    got = dk.current_results(run(window, frames, True), window)
    assert list(got.columns) == ["k", "window_start_ms", "window_end_ms", "lv", "persons_event_time_ms", "rv",
                                 "auctions_event_time_ms"]
    assert got.values.tolist() == [["a", 0, 10, "alice", 3, "x", 7], ["a", 0, 10, "alice", 3, "y", 8],
                                   ["b", 0, 10, "bob", 4, None, None]]
    pairs = dk.current_results(run(interval, frames, True), interval)
    assert list(pairs.columns) == ["k", "lv", "persons_event_time_ms", "rv", "auctions_event_time_ms"]
    assert pairs.values.tolist() == [["a", "alice", 3, "x", 7], ["a", "alice", 3, "y", 8]]
    assert len(pairs) == sum(sum(c.values()) for c in current_joins(run(interval, frames, True), interval).values())


def test_specs_are_refused_with_the_value_named():
    left, right = sides(True)
    with pytest.raises(JoinError, match="both inputs are named 'persons'"):
        WindowJoinStage(left, left, window=TumblingWindow(10))
    with pytest.raises(JoinError, match="column 'lv' clashes"):
        WindowJoinStage(left, JoinInput("auctions", key="k", columns={"lv": "v"}), window=TumblingWindow(10))
    with pytest.raises(JoinError, match="2 key columns"):
        IntervalJoinStage.between(JoinInput("a", key=["k", "v"]), right, 0, 5)
    with pytest.raises(JoinError, match="how='sideways'"):
        IntervalJoinStage.between(left, right, 0, 5, how="sideways")
    with pytest.raises(JoinError, match="lower_bound_ms=6 > upper_bound_ms=5"):
        IntervalJoinStage.between(left, right, 6, 5)


# -- properties -----------------------------------------------------------------------------------
@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10 ** 6), how=st.sampled_from(HOWS), mode=st.sampled_from(MODES),
       groups=st.integers(1, 4), split=st.booleans())
def test_window_join_stage_equals_a_brute_force_join_per_window(seed, how, mode, groups, split):
    rng = random.Random(seed)
    window, lateness = _window(rng), rng.choice([0, 5, 30])
    stage = WindowJoinStage(*sides(split), window=window, how=how, trigger=rng.choice(TRIGGERS), accumulation_mode=mode,
                            allowed_lateness_ms=lateness, num_key_groups=groups)
    batches = random_batches(rng, keys=KEYS) + [flush()]
    out = run(stage, source_frames(batches, rng), split)
    assert as_reference(current_joins(out, stage)) == window_join(batches, window, how, lateness)
    assert late_dropped(out) == len(_late_rows(batches, window, lateness))
    for o in out:                                            # pairs lie in their window, and never behind the hold
        d = o[o.kind == "data"]
        for side in ("persons", "auctions"):
            t = d[f"{side}_event_time_ms"].dropna()
            assert ((d.loc[t.index, "window_start_ms"] <= t) & (t < d.loc[t.index, "window_end_ms"])).all()


@settings(max_examples=examples(12), deadline=None)
@given(seed=st.integers(0, 10 ** 6), how=st.sampled_from(HOWS), groups=st.integers(1, 4))
def test_sessions_across_both_inputs_equal_a_brute_force_join_per_session(seed, how, groups):
    rng = random.Random(seed)
    window = SessionWindow(rng.choice([3, 8, 15]))
    stage = WindowJoinStage(*sides(True), window=window, how=how, trigger=rng.choice(TRIGGERS),
                            accumulation_mode=rng.choice(MODES), allowed_lateness_ms=10 ** 9, num_key_groups=groups)
    batches = random_batches(rng, keys=KEYS) + [flush()]
    out = run(stage, source_frames(batches, rng), True)
    assert as_reference(current_joins(out, stage)) == window_join(batches, window, how, 0)


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10 ** 6), how=st.sampled_from(HOWS), groups=st.integers(1, 4), split=st.booleans())
def test_interval_join_stage_equals_a_brute_force_nested_loop(seed, how, groups, split):
    rng = random.Random(seed)
    lower = rng.randrange(-15, 5)
    upper, lateness = lower + rng.randrange(0, 20), rng.choice([0, 5, 30])
    stage = IntervalJoinStage.between(*sides(split), lower, upper, how=how, allowed_lateness_ms=lateness,
                                      num_key_groups=groups)
    batches = random_batches(rng, keys=KEYS) + [flush()]
    out = run(stage, source_frames(batches, rng), split)
    got = Counter({(repr(k), None if lt is None else (lt[0], lt[1][0]), None if rt is None else (rt[0], rt[1][0])): n
                   for k, c in current_joins(out, stage).items() for (lt, rt), n in c.items()})
    assert got == interval_join(batches, lower, upper, how, lateness)
    previous = None
    for o in out:                        # no row is emitted behind the previous batch's output watermark
        if previous is not None:
            assert (o.loc[o.kind == "data", "event_time_ms"] >= previous).all()
        marks = o.loc[o.kind == "punctuation", "punctuation_ms"].dropna()
        previous = int(marks.min()) if len(marks) else previous


@settings(max_examples=examples(6), deadline=None)
@given(seed=st.integers(0, 10 ** 6), how=st.sampled_from(HOWS), mode=st.sampled_from(MODES))
def test_key_groups_batch_splits_and_fusion_do_not_change_the_rows(seed, how, mode):
    """No row late (lateness beyond every timestamp): the joined rows, and the counts of a
    same-key stage after the join (fused into the join's operator or not), are the same for 1
    and 3 key groups and for another batch split of the same rows."""
    rng = random.Random(seed)
    stage = WindowJoinStage(*sides(True), window=_window(rng), how=how, trigger=rng.choice(TRIGGERS),
                            accumulation_mode=mode, allowed_lateness_ms=10 ** 9)
    batches = random_batches(rng, keys=KEYS, late_every=0)
    rows = [r for b in batches for r in b[0]]
    cut = sorted(rng.sample(range(len(rows) + 1), 3))
    resplit = [(rows[a:b], [], 10 * i) for i, (a, b) in enumerate(zip([0] + cut, cut + [len(rows)]))]
    results = []
    for groups, parts in ((1, batches), (3, batches), (2, resplit)):
        frames = source_frames(parts + [flush()], random.Random(seed))
        join = dataclasses.replace(stage, num_key_groups=groups)
        results.append(current_joins(Pipeline([join]).run_local(frames), join))
        count = TumblingCount(key="k", value="lv", size_ms=1_000, num_key_groups=groups, name="count")
        fused, unfused = (Pipeline([join, count]).run_local(frames, fuse=f) for f in (True, False))
        assert len(Pipeline([join, count]).plan()) == 1 and data_rows(fused) == data_rows(unfused)
    assert results[0] == results[1] == results[2]


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10 ** 6), interval=st.booleans())
def test_a_replayed_batch_gives_the_same_rows(seed, interval):
    """Each key group's operator runs every batch twice from the state committed before it (a
    crash before the commit) and goes on from the replay's state: the same rows each time, and
    the same rows as a run without replays."""
    from dataflow_kafka.keygroups.fan_in import tag_frame
    from dataflow_kafka.keygroups.frames import by_key_group, groups_of_columns

    rng = random.Random(seed)
    stage = (IntervalJoinStage.between(*sides(True), -10, 10, how="full_outer", num_key_groups=3) if interval else
             WindowJoinStage(*sides(True), window=_window(rng), how="full_outer", trigger=EARLY_LATE, num_key_groups=3,
                             accumulation_mode="accumulating_and_retracting", allowed_lateness_ms=10))
    pipe = Pipeline([stage])
    frames = source_frames(random_batches(rng, keys=KEYS) + [flush()], rng)
    with_data = [f for f in frames if (f["kind"] == "data").any()]        # bound as run_local binds
    spec = pipe.bound_specs(frame_types(with_data[0]) if with_data else {"k": "string", "v": "bigint"})[0]
    states: dict = {}
    replayed = []
    for frame in frames:
        tagged = tag_frame(frame, stage.stage_inputs(), True, stage.name)
        outs = []
        for kg, rows in by_key_group(tagged, groups_of_columns(tagged, ["k"], 3), 3):
            first, _ = run_key_group(spec, kg, rows, states.get(kg))
            again, states[kg] = run_key_group(spec, kg, rows, states.get(kg))
            pd.testing.assert_frame_equal(first, again)
            outs.append(again)
        replayed.append(pd.concat(outs, ignore_index=True) if outs else pd.DataFrame({"kind": []}))
    assert data_rows(replayed) == data_rows(pipe.run_local(frames))


def test_the_punctuation_of_a_partition_reaches_only_the_input_that_selects_its_topic():
    stage = IntervalJoinStage.between(*sides(True), 0, 0)
    out = Pipeline([stage]).run_local([_frame([], [("persons", 7)])])
    assert '"watermarks": {"persons": 7, "auctions": null}' in out[0].loc[out[0].kind == "metrics", "metrics"].iloc[0]
    assert SidePunctuation(LEFT, 7) in stage._punctuations(type("B", (), {"input_watermarks": {"persons": 7}})())
