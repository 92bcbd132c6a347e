"""The interval join engine: transcripts, and hypothesis properties against a brute-force nested
loop for random out-of-order inputs, batch splits, 1-4 key groups and a replay."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from dataflow_kafka.joins import LEFT, RIGHT, JoinDropped, IntervalJoin, JoinError, Joined, SidePunctuation, Row
from dataflow_kafka.joins.interval_join import IntervalJoinEngine
from tests.joins.reference import flush, interval_join, random_batches, run_in_key_groups, watermarks_before
from tests.suite import examples

HOWS = ["inner", "left_outer", "right_outer", "full_outer"]


def test_sql_between_is_flinks_between():
    """``a.ts BETWEEN b.ts - 3 AND b.ts + 5`` (a left, b right) is ``between(-5, 3)``."""
    e = IntervalJoin.between(-5, 3).engine()
    rows = [Row(LEFT, "k", 100, "a")] + [Row(RIGHT, "k", t, t) for t in range(90, 110)]
    got = sorted(j.right[0] for j in e.process(rows).rows)
    assert got == [b for b in range(90, 110) if b - 3 <= 100 <= b + 5] == list(range(95, 104))


def test_outer_rows_are_emitted_once_they_can_no_longer_match_and_state_is_freed():
    e = IntervalJoin.between(0, 10, how="full_outer", allowed_lateness_ms=5).engine()
    out = e.process([Row(LEFT, "k", 100, "a"), Row(RIGHT, "k", 50, "x"), Row(RIGHT, "k", 105, "y")],
                    [SidePunctuation(LEFT, 100)])
    assert out.rows == [Joined("k", (100, "a"), (105, "y"))]                    # right side silent: nothing freed
    out = e.process([], [SidePunctuation(RIGHT, 100)])                             # bar 95: x (50 - 0 < 95) freed
    assert out.rows == [Joined("k", None, (50, "x"))]
    assert e.buffered() == {LEFT: 1, RIGHT: 1}
    out = e.process([Row(RIGHT, "k", 96, "z"), Row(LEFT, "k", 94, "late")], [SidePunctuation(LEFT, 120),
                                                                              SidePunctuation(RIGHT, 120)])
    assert out.dropped == [JoinDropped(LEFT, "k", "late", 1)]                      # 94 < 100 - 5
    assert out.rows == [Joined("k", None, (96, "z"))]                          # a (100) cannot reach 96: freed too
    assert e.buffered() == {LEFT: 0, RIGHT: 0}


def test_a_slow_side_holds_the_join_back_and_nothing_is_dropped():
    e = IntervalJoin.between(-2, 2).engine()
    e.process([Row(LEFT, "k", t, t) for t in range(0, 1000, 10)], [SidePunctuation(LEFT, 1000)])
    out = e.process([Row(RIGHT, "k", 11, "r")], [SidePunctuation(RIGHT, 12)])
    assert out.dropped == [] and out.rows == [Joined("k", (10, 10), (11, "r"))]
    assert e.buffered()[LEFT] == 99                                            # only 0 (0 + 2 < 12) freed


def test_bad_specs_are_refused():
    with pytest.raises(JoinError, match="lower_bound_ms=5 > upper_bound_ms=1"):
        IntervalJoin.between(5, 1)
    with pytest.raises(JoinError, match="upper_bound_ms=1.5"):
        IntervalJoin.between(0, 1.5)
    with pytest.raises(JoinError, match="how='cross'"):
        IntervalJoin.between(0, 1, how="cross")


def _counter(outs) -> Counter:
    return Counter((repr(j.key), j.left, j.right) for o in outs for j in o.rows)


@settings(max_examples=examples(80), deadline=None)
@given(seed=st.integers(0, 10 ** 6), how=st.sampled_from(HOWS), groups=st.integers(1, 4))
def test_interval_join_equals_a_brute_force_nested_loop(seed, how, groups):
    rng = random.Random(seed)
    lower = rng.randrange(-15, 10)
    upper = lower + rng.randrange(0, 20)
    lateness = rng.choice([0, 5, 40])
    join = IntervalJoin.between(lower, upper, how, lateness)
    batches = random_batches(rng, n_batches=10) + [flush()]
    outs = run_in_key_groups(join.engine, batches, groups)
    assert _counter(outs) == interval_join(batches, lower, upper, how, lateness)
    late = [r for (rows, _, _), wm in zip(batches, watermarks_before(batches)) for r in rows
            if wm is not None and r.ts_ms < wm - lateness]
    assert sum(d.count for o in outs for d in o.dropped) == len(late)


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 10 ** 6), how=st.sampled_from(HOWS))
def test_batch_splits_and_a_replay_do_not_change_the_result(seed, how):
    rng = random.Random(seed)
    join = IntervalJoin.between(-rng.randrange(10), rng.randrange(10), how, allowed_lateness_ms=10 ** 9)
    batches = random_batches(rng, late_every=0)
    rows = [r for b in batches for r in b[0]]
    cut = sorted(rng.sample(range(len(rows) + 1), 3))
    resplit = [(rows[a:b], [], None) for a, b in zip([0] + cut, cut + [len(rows)])] + [flush()]
    e, outs = join.engine(), []
    for rs, ps, pt in resplit:
        blob = e.to_bytes()
        out = e.process(rs, ps, pt)
        assert IntervalJoinEngine.from_bytes(join, blob).process(rs, ps, pt) == out    # a replayed batch
        outs.append(out)
    assert _counter(outs) == _counter(run_in_key_groups(join.engine, batches + [flush()], 1))


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 10 ** 6))
def test_state_holds_only_rows_that_can_still_match(seed):
    rng = random.Random(seed)
    lower, upper, lateness = -rng.randrange(10), rng.randrange(10), rng.choice([0, 10])
    e = IntervalJoin.between(lower, upper, "full_outer", lateness).engine()
    for rows, puncts, pt in random_batches(rng, n_batches=15):
        e.process(rows, puncts, pt)
        wm = e.watermark.low_watermark_ms
        if wm is not None:
            bar = wm - lateness
            for lefts, rights in e._state.values():
                assert (lefts.ts + upper >= bar).all() and (rights.ts - lower >= bar).all()
    e.process(*flush())
    assert e.buffered() == {LEFT: 0, RIGHT: 0}
