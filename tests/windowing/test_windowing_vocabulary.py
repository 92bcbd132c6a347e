"""The shared vocabulary: validation, values, JSON, aliases, and both engines agreeing on it."""

from __future__ import annotations

import doctest
import importlib
import math
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka import slicer
from dataflow_kafka import watermarks
from dataflow_kafka import windowing
from dataflow_kafka.slicer import SlicingWindowOperator
from dataflow_kafka.watermarks import DefaultTrigger, TriggerDriver
from dataflow_kafka.windowing import (
    END_OF_TIME_MS, M4, AggregateFunction, Combiner, Count, GlobalWindow, Max, Mean, Measure, Median, Min, Quantile,
    SessionWindow, SlidingWindow, Sum, ToList, TumblingWindow, window_from_json,
)
from dataflow_kafka.windowing.aggregations import combine_fn

from tests.suite import examples


@pytest.mark.parametrize("name", ["dataflow_kafka.windowing", "dataflow_kafka.windowing.windows", "dataflow_kafka.windowing.aggregations", "dataflow_kafka.windowing.commands"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("build, message", [
    (lambda: TumblingWindow(0), "TumblingWindow: size_ms=0: expected a positive integer"),
    (lambda: TumblingWindow(10, 10), "TumblingWindow: offset_ms=10: expected an integer in [0, 10)"),
    (lambda: TumblingWindow(10, -1), "TumblingWindow: offset_ms=-1: expected an integer in [0, 10)"),
    (lambda: TumblingWindow(2.5), "TumblingWindow: size_ms=2.5: expected a positive integer"),
    (lambda: TumblingWindow(True), "TumblingWindow: size_ms=True: expected a positive integer"),
    (lambda: TumblingWindow(10, measure="rows"), "TumblingWindow: measure='rows': expected 'time' or 'count'"),
    (lambda: SlidingWindow(10, -5), "SlidingWindow: slide_ms=-5: expected a positive integer"),
    (lambda: SlidingWindow(10, period_ms=0), "SlidingWindow: period_ms=0: expected a positive integer"),
    (lambda: SlidingWindow(10), "SlidingWindow: give slide_ms or period_ms (Beam's name), got slide_ms=None, "
                                "period_ms=None"),
    (lambda: SlidingWindow(10, 5, period_ms=5), "SlidingWindow: give slide_ms or period_ms"),
    (lambda: SlidingWindow(10, 5, 7), "SlidingWindow: offset_ms=7: expected an integer in [0, 5)"),
    (lambda: SessionWindow("5"), "SessionWindow: gap_ms='5': expected a positive integer"),
    (lambda: Quantile(1.5), "Quantile: q=1.5: every q must be in [0, 1]"),
])
def test_definitions_validate_and_quote_the_bad_value(build, message):
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value).startswith(message)


def test_definitions_are_immutable_values():
    w = SlidingWindow(60_000, 10_000, 5_000)
    assert w == SlidingWindow(60_000, period_ms=10_000, offset_ms=5_000) and hash(w) == hash(SlidingWindow(60_000, 10_000, 5_000))
    assert w != SlidingWindow(60_000, 10_000) and TumblingWindow(10) != SlidingWindow(10, 10)
    assert {TumblingWindow(5), TumblingWindow(5), GlobalWindow(), GlobalWindow()} == {TumblingWindow(5), GlobalWindow()}
    assert repr(TumblingWindow(5, measure="count")) == "TumblingWindow(size_ms=5, offset_ms=0, measure='count')"
    assert repr(SessionWindow(30)) == "SessionWindow(gap_ms=30)" and repr(GlobalWindow()) == "GlobalWindow()"
    assert w.period_ms == w.slide_ms == 10_000
    with pytest.raises(AttributeError, match="immutable"):
        w.size_ms = 5
    assert pickle.loads(pickle.dumps(w)) == w
    assert Quantile((0.25, 0.9)) == Quantile([0.25, 0.9]) != Quantile(0.25) and Sum() == Sum()
    assert hash(Quantile((0.1, 0.2))) == hash(Quantile((0.1, 0.2))) and Median().name == "median"


@pytest.mark.parametrize("window", [
    TumblingWindow(1_000), TumblingWindow(1_000, 250), TumblingWindow(3, measure="count"),
    SlidingWindow(60_000, 10_000), SlidingWindow(5, 2, 1, measure="count"), SessionWindow(30_000), GlobalWindow(),
])
def test_json_round_trip(window):
    form = window.to_json()
    assert window_from_json(form) == window
    assert window_from_json(__import__("json").dumps(form)) == window


def test_json_accepts_beam_names_and_defaults():
    assert window_from_json({"type": "fixed", "size_ms": 10}) == TumblingWindow(10)
    assert window_from_json({"type": "sessions", "gap_ms": 7}) == SessionWindow(7)
    assert window_from_json({"type": "sliding", "size_ms": 10, "period_ms": 5}) == SlidingWindow(10, 5)
    assert TumblingWindow(10).to_json() == {"type": "tumbling", "size_ms": 10, "offset_ms": 0}
    assert GlobalWindow().to_json() == {"type": "global"}


@pytest.mark.parametrize("form, message", [
    ({"type": "hopping", "size_ms": 5}, "window.type='hopping': expected one of tumbling (fixed), sliding"),
    ({"size_ms": 5}, "window.type=None"),
    ({"type": "tumbling"}, "window.size_ms: missing"),
    ({"type": "sliding", "size_ms": 10}, "window.slide_ms: missing"),
    ({"type": "session", "gap": 5}, "window.gap=5: not a field of a session window (fields: gap_ms)"),
    ({"type": "tumbling", "size_ms": "10"}, "TumblingWindow: size_ms='10': expected a positive integer"),
    ([1, 2], "window=[1, 2]: expected a JSON object"),
    ("{not json", "window '{not json': not JSON"),
])
def test_bad_json_names_the_field_and_value(form, message):
    with pytest.raises(ValueError) as err:
        window_from_json(form)
    assert str(err.value).startswith(message)


def test_one_name_per_concept_and_each_exported_from_windowing_only():
    """Other systems' names are not among the vocabulary (they live in dataflow_kafka.compat,
    tests/test_compat.py), and the engines do not export the vocabulary again."""
    other = {"FixedWindows", "SlidingWindows", "Sessions", "GlobalWindows", "WindowMeasure", "SumCombiner",
             "CountCombiner", "MeanCombiner", "MinCombiner", "MaxCombiner", "ToListCombiner"}
    assert not other & set(windowing.__all__) and not other & set(dir(windowing.windows))
    assert not {"AtWatermark", "AtCount", "AtPeriod", "SequenceOf", "Repeat", "RepeatUntil"} & set(watermarks.__all__)
    for engine in (slicer, watermarks):
        assert not set(engine.__all__) & set(windowing.__all__), engine.__name__


class Product(AggregateFunction):
    """User-defined, lift / combine / lower, with invert."""

    def lift(self, v):
        return float(v)

    def combine(self, a, b):
        return a * b

    @staticmethod
    def invert(a, b):
        return a / b


class SumOfSquares(Combiner):
    """User-defined, Beam style."""

    def create_accumulator(self):
        return 0.0

    def add_input(self, acc, v):
        return acc + float(v) ** 2

    def merge_accumulators(self, accs):
        return sum(accs)


def test_lift_combine_lower_runs_in_the_dataflow_driver_with_retractions():
    d = TriggerDriver(TumblingWindow(10), DefaultTrigger(), "accumulating", combiner=Product())
    d.add([(2, 1), (3, 2), (4, 3)])
    d.add_retractions([(4, 4)])
    assert [p.value for p in d.advance_watermark(10)] == [6.0]
    beam = combine_fn(Product())                    # Beam's view: None is the empty accumulator
    assert beam.create_accumulator() is None and beam.extract_output(None) is None
    assert beam.uncombine(beam.add_input(beam.add_input(None, 2), 3), 3) == 2.0
    assert combine_fn(Sum()) == Sum() and combine_fn(SumOfSquares()) == SumOfSquares()


def test_an_aggregation_missing_a_hook_fails_when_built():
    class NoCombine(AggregateFunction):
        def lift(self, v):
            return v

    class NoMerge(Combiner):
        def create_accumulator(self):
            return 0

        def add_input(self, acc, v):
            return acc + v

    for cls in (NoCombine, NoMerge):
        with pytest.raises(TypeError, match="abstract"):
            cls()


def test_beam_style_combiner_runs_in_the_slicer():
    op = SlicingWindowOperator()
    op.add_window(TumblingWindow(10))
    op.add_aggregation(SumOfSquares())
    op.process_elements(np.array([1.0, 2.0, 3.0]), np.array([1, 2, 12]))
    assert [(r.start, r.value) for r in op.process_watermark(20)] == [(0, 5.0), (10, 9.0)]
    assert SumOfSquares().uncombine is None and Sum().uncombine(5, 2) == 3


# --------------------------------------------------------------------------- Scotty's shapes
def test_one_measure_enum_for_both_engines():
    from dataflow_kafka.slicer.compile import compile_window
    from dataflow_kafka.slicer.windows import COUNT, measure_of

    assert TumblingWindow(10, measure=Measure.COUNT) == TumblingWindow(10, measure="count")
    assert TumblingWindow(10, measure=Measure.COUNT).measure == "count"      # stored as the plain string
    assert pickle.loads(pickle.dumps(SlidingWindow(10, 5, measure=Measure.COUNT))) == SlidingWindow(10, 5, measure="count")
    assert window_from_json(TumblingWindow(3, measure=Measure.COUNT).to_json()) == TumblingWindow(3, measure="count")
    assert Measure.COUNT == "count" and str(Measure.TIME) == "time" and Measure.parse("Time") is Measure.TIME
    assert measure_of(compile_window(TumblingWindow(3, measure=Measure.COUNT))) is COUNT is Measure.COUNT
    with pytest.raises(ValueError, match="measure='rows': expected 'time' or 'count'"):
        Measure.parse("rows")


def test_a_session_gap_of_exactly_gap_ms_joins_in_the_slicer_and_splits_in_the_dataflow_driver():
    records = [(1, 0), (1, 10)]
    assert list(_slicer_results(SessionWindow(10), records)) == [(0, 20)]                 # Scotty
    assert sorted(_dataflow_results(SessionWindow(10), records)) == [(0, 10), (10, 20)]  # Beam


# --------------------------------------------------------------------------- both engines agree
WINDOWS = st.one_of(
    st.builds(lambda s, o: TumblingWindow(s, o % s), st.integers(5, 60), st.integers(0, 59)),
    st.builds(lambda s, d, o: SlidingWindow(s, d, o % d), st.integers(5, 60), st.integers(3, 30), st.integers(0, 29)),
    st.builds(SessionWindow, st.integers(3, 30)),
    st.just(GlobalWindow()),
)
AGGS = [Sum(), Count(), Mean(), Min(), Max(), M4(), Median(), Quantile((0.25, 0.9)), ToList()]


def _slicer_results(window, records):
    # compact: the Dataflow driver has no empty windows and assigns windows with negative starts
    op = SlicingWindowOperator(emission="compact")
    op.add_window(window)
    for a in AGGS:
        op.add_aggregation(a)
    op.process_elements(np.array([float(v) for v, _ in records]), np.array([t for _, t in records]))
    return {(r.start, r.end): r.values for r in op.process_watermark(END_OF_TIME_MS)}


def _dataflow_results(window, records):
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, a in enumerate(AGGS):
            d = TriggerDriver(window, DefaultTrigger(), "accumulating", combiner=a)
            d.add(records)
            for p in d.advance_watermark(END_OF_TIME_MS):
                out.setdefault((p.start_ms, p.end_ms), [None] * len(AGGS))[i] = p.value
    return {k: tuple(v) for k, v in out.items()}


def _same(a, b) -> bool:
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


@settings(max_examples=examples(80), deadline=None)
@given(WINDOWS, st.lists(st.tuples(st.integers(-20, 20), st.integers(0, 300)), min_size=1, max_size=40))
def test_both_engines_give_the_same_windows_for_the_same_definition(window, records):
    """Any arrival order; one final watermark (the engines' lateness rules differ in between).
    ToList is in event-time order in the slicer and in arrival order in the Dataflow driver
    (merged sessions: the merged windows' lists one after the other)."""
    got = _slicer_results(window, records)
    if isinstance(window, SessionWindow):
        # Scotty joins records exactly gap apart, Beam splits them: the slicer's sessions of gap g
        # are the driver's of gap g + 1, each ending 1 ms earlier (docs/semantics.md)
        want = {(s, e - 1): v for (s, e), v in _dataflow_results(SessionWindow(window.gap_ms + 1), records).items()}
    else:
        want = _dataflow_results(window, records)
    assert got.keys() == want.keys()
    for k in got:
        s, d = got[k], want[k]
        assert _same(s[:-1], d[:-1]), (k, s, d)
        arrived = [float(v) for v, t in records if k[0] <= t < k[1]]
        assert ([float(v) for v in d[-1]] == arrived if not isinstance(window, SessionWindow)
                else sorted(float(v) for v in d[-1]) == sorted(arrived))
        by_time = sorted(range(len(records)), key=lambda i: (records[i][1], i))
        assert list(s[-1]) == [float(records[i][0]) for i in by_time if k[0] <= records[i][1] < k[1]]
