"""Enorm's split/combine cost model (§5.1.1) and decision rule (§5.1.2): the formulas from the paper,
worked cases, monotonicity properties, window shapes against brute force, the per-period policy."""

from __future__ import annotations

import doctest
import math
from functools import reduce

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.balancing.cost_model import (COMBINE, SPLIT, Measurement, SplitCombinePolicy, combine_cpu_ms,
                                  combine_latency_ms, decide, migration_cost_ms, split_cpu_ms,
                                  split_latency_ms, window_shape)
from dataflow_kafka.windowing import SlidingWindow, TumblingWindow

from tests.suite import examples


def _paper(T_p, E, W, PW_p, MK_p, K_1, L, G):
    """§5.1.1 as written: split CPU, combine CPU, combine latency."""
    return (T_p * E + PW_p * K_1 * G + MK_p * K_1,
            T_p * W * E + MK_p * K_1 * PW_p,
            MK_p * L)


measurements = st.builds(
    Measurement,
    tuples=st.integers(0, 10**7), tuple_cost_ms=st.floats(0, 1), overlapping_windows=st.integers(1, 50),
    partial_windows=st.integers(1, 500), migrated_key_groups=st.integers(0, 500),
    key_group_cost_ms=st.floats(0, 100), migration_latency_ms=st.floats(0, 1000), key_groups=st.integers(1, 4096))


@settings(max_examples=examples(200), deadline=None)
@given(m=measurements)
def test_costs_are_the_papers_formulas(m):
    split, combine, latency = _paper(m.tuples, m.tuple_cost_ms, m.overlapping_windows, m.partial_windows,
                                     m.migrated_key_groups, m.key_group_cost_ms, m.migration_latency_ms,
                                     m.key_groups)
    assert split_cpu_ms(m) == pytest.approx(split)
    assert combine_cpu_ms(m) == pytest.approx(combine)
    assert combine_latency_ms(m) == pytest.approx(latency)
    assert split_latency_ms(m) == 0.0


def test_worked_cases():
    # windows of 5, 10, ..., 30 minutes as in §7.1 (W = 6, p = 30 min, panes of 5 min)
    p, pane, pw, w = window_shape([TumblingWindow(k * 300_000) for k in range(1, 7)])
    assert (p, pane, pw, w) == (1_800_000, 300_000, 6, 6)
    many_windows = Measurement(tuples=1_000_000, tuple_cost_ms=0.01, overlapping_windows=w, partial_windows=pw,
                               migrated_key_groups=10, key_group_cost_ms=2.0, migration_latency_ms=50.0,
                               key_groups=64)
    # split: 10,000 + 6*2*64 + 10*2 = 10,788; combine: 60,000 + 10*2*6 = 60,120
    assert (split_cpu_ms(many_windows), combine_cpu_ms(many_windows)) == (10_788.0, 60_120.0)
    assert decide(many_windows) == SPLIT
    # one tumbling window, few moves: executing every tuple once either way, combine saves the partials
    one_window = Measurement(1_000_000, 0.01, 1, 30, 2, 2.0, 50.0, 64)
    assert (split_cpu_ms(one_window), combine_cpu_ms(one_window)) == (10_000 + 30 * 2 * 64 + 4, 10_000 + 2 * 2 * 30)
    assert decide(one_window) == COMBINE
    # ... unless its disruptive moves (2 * 50 ms) break the latency bound
    assert decide(one_window, max_latency_ms=99) == SPLIT
    assert decide(one_window, max_latency_ms=100) == COMBINE
    # many moves make combine pay every pane per move: split again
    busy = Measurement(1_000_000, 0.01, 1, 30, 5_000, 2.0, 50.0, 64)
    assert combine_cpu_ms(busy) > split_cpu_ms(busy) and decide(busy) == SPLIT


@settings(max_examples=examples(200), deadline=None)
@given(m=measurements, more=st.integers(1, 20), bound=st.floats(0, 1e6))
def test_decision_is_monotone(m, more, bound):
    """More overlapping windows, more moves, a tighter latency bound never turn split into combine."""
    kw = {f: getattr(m, f) for f in m.__dataclass_fields__}
    if decide(m, bound) == SPLIT:
        assert decide(Measurement(**{**kw, "overlapping_windows": m.overlapping_windows + more}), bound) == SPLIT
        assert decide(Measurement(**{**kw, "migrated_key_groups": m.migrated_key_groups + more}), bound) == SPLIT
        assert decide(m, bound / 2) == SPLIT
    assert decide(m, bound) in (SPLIT, COMBINE)
    if combine_latency_ms(m) > bound:
        assert decide(m, bound) == SPLIT


def _shape_brute_force(pairs):
    p = max(s for s, _ in pairs)
    horizon = reduce(math.lcm, [d for _, d in pairs] + [p]) * 2
    # pane: the largest length that divides every window boundary (starts k*slide, ends k*slide + size)
    bounds = {b for s, d in pairs for k in range(horizon // d + 1) for b in (k * d, k * d + s)}
    pane = max(g for g in range(1, p + 1) if all(b % g == 0 for b in bounds))
    # W: windows a time belongs to, at the most (sliding windows with slide <= size: all times)
    w = max(sum(sum(1 for k in range(-(s // d) - 1, t // d + 1) if k * d <= t < k * d + s) for s, d in pairs)
            for t in range(horizon))
    return p, pane, p // pane, w


@settings(max_examples=examples(100), deadline=None)
@given(pairs=st.lists(st.integers(1, 6).flatmap(lambda d: st.tuples(st.integers(d, 24).map(lambda s: s), st.just(d))),
                      min_size=1, max_size=3))
def test_window_shape_against_brute_force(pairs):
    assert window_shape(pairs) == _shape_brute_force(pairs)


def test_window_shape_accepts_windows_and_rejects_bad_ones():
    assert window_shape([SlidingWindow(60_000, 10_000), TumblingWindow(30_000)]) == (60_000, 10_000, 6, 7)
    with pytest.raises(ValueError, match="size_ms and slide_ms > 0"):
        window_shape([(0, 5)])
    with pytest.raises(ValueError, match="no windows"):
        window_shape([])


def test_migration_cost_from_state_size():
    assert migration_cost_ms(2_000_000, 100_000) == 20.0
    with pytest.raises(ValueError, match="bytes_per_ms must be"):
        migration_cost_ms(1, 0)
    with pytest.raises(ValueError, match="state_bytes must be"):
        migration_cost_ms(-1, 1)


def test_policy_evaluates_at_most_every_period_and_reports_switches():
    pol = SplitCombinePolicy(period_ms=60_000, max_latency_ms=500, initial=COMBINE)
    many = Measurement(1_000_000, 0.01, 6, 6, 10, 2.0, 50.0, 64)     # split
    one = Measurement(1_000_000, 0.01, 1, 30, 2, 2.0, 50.0, 64)      # combine
    d = pol.evaluate("agg", many, now_ms=1_000)
    assert (d.plan, d.switch, d.at_ms, d.smooth_until_ms) == (SPLIT, True, 1_000, 61_000)
    assert pol.plan("agg") == SPLIT
    assert pol.evaluate("agg", one, now_ms=60_999) is None             # within the period: no decision
    assert pol.plan("other") == COMBINE
    d = pol.evaluate("agg", many, now_ms=61_000)
    assert (d.plan, d.switch, d.smooth_until_ms) == (SPLIT, False, 61_000)
    d = pol.evaluate("agg", one, now_ms=121_000)
    assert (d.plan, d.switch, d.smooth_until_ms) == (COMBINE, True, 181_000)
    assert (d.split_cpu_ms, d.combine_cpu_ms, d.combine_latency_ms) == (split_cpu_ms(one), combine_cpu_ms(one), 100.0)


@pytest.mark.parametrize("kw, message", [
    ({"tuples": -1}, "Measurement.tuples must be"),
    ({"tuple_cost_ms": float("nan")}, "Measurement.tuple_cost_ms must be"),
    ({"overlapping_windows": 0}, "overlapping_windows and partial_windows must be >= 1"),
    ({"key_groups": True}, "Measurement.key_groups must be"),
])
def test_bad_measurement_names_the_field(kw, message):
    base = dict(tuples=1, tuple_cost_ms=1, overlapping_windows=1, partial_windows=1, migrated_key_groups=0,
                key_group_cost_ms=1, migration_latency_ms=1, key_groups=1)
    with pytest.raises(ValueError, match=message):
        Measurement(**{**base, **kw})


@pytest.mark.parametrize("kw, message", [
    ({"period_ms": 0}, "period_ms must be an integer > 0"),
    ({"period_ms": 10, "max_latency_ms": -1}, "max_latency_ms must be"),
    ({"period_ms": 10, "initial": "fused"}, "initial must be"),
])
def test_bad_policy_names_the_option(kw, message):
    with pytest.raises(ValueError, match=message):
        SplitCombinePolicy(**kw)


def test_docstring_examples():
    import dataflow_kafka.balancing.cost_model as module
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
