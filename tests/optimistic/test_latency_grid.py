"""The latency experiment's grid (no JVM): the sweep varies one factor at a time around the base
point, the plot panels group points that differ in one factor, and the model ratio is the
documented one."""

from __future__ import annotations

import math

from bench.latency_experiment import Point, Result, grid, model_ratio, panels


def test_sweep_varies_one_factor_at_a_time_around_the_base():
    pts = grid([2, 1, 3], [10, 4, 30], [(2, 2), (4, 4)], [0, 5000, 15000], "sweep")
    base = Point(2, 10, 2, 2, 0)
    assert pts[0] == base and len(pts) == len(set(pts)) == 8
    for p in pts[1:]:
        differs = [f for f in ("stages", "rate", "level", "trigger_ms") if p.value(f) != base.value(f)]
        assert len(differs) == 1
    full = grid([2, 1], [10, 4], [(2, 2)], [0, 5000], "full")
    assert len(full) == 8 and len(set(full)) == 8


def test_panels_group_points_by_the_varied_factor():
    pts = grid([2, 1, 3], [10, 4], [(2, 2)], [0, 15000], "sweep")
    got = {f: [p.value(f) for p in ps] for f, ps in panels(pts)}
    assert got == {"stages": [1, 2, 3], "rate": [4, 10], "trigger_ms": [0, 15000]}
    assert panels([Point(2, 10, 2, 2, 0)])[0][1] == [Point(2, 10, 2, 2, 0)]


def _result(variant: str, trigger_ms: int, batch_ms: float) -> Result:
    nan = math.nan
    return Result(variant, 2, 10, 2, 2, trigger_ms, 4, 100, 0, nan, nan, nan, nan, None, None, None, None,
                  10, 10, batch_ms, 5, 0, 0)


def test_model_ratio_default_and_processing_time_trigger():
    # default trigger, equal batch durations: 1.5 D / 2.5 D
    assert math.isclose(model_ratio(_result("optimistic", 0, 4000), _result("native", 0, 4000)), 0.6)
    # 15 s trigger, D = 4 s: (7.5 + 4) / (7.5 + 4 + 15)
    assert math.isclose(model_ratio(_result("optimistic", 15000, 4000), _result("native", 15000, 4000)),
                        11.5 / 26.5)
