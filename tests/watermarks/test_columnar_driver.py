"""The vectorised driver (ColumnarDriver) against the per-element driver (TriggerDriver) as the
reference, with hypothesis, for the component aggregations and for combiners' own accumulators
(``ToList``, ``Median``, a user's ``Combiner`` with its own ``add_inputs``): the same panes (window, value, timing, index, first / last flags,
timestamp, in the same order), the same drops, live windows, window states and key order, across state round
trips and from a state the per-element driver wrote; and MultiQueryDriver's column batches against
its one ``add`` per key."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.watermarks import AfterCount, AfterProcessingTime, AfterWatermark, DefaultTrigger, TriggerDriver
from dataflow_kafka.watermarks.columnar import ColumnarDriver
from dataflow_kafka.watermarks.multi import MultiQueryDriver
from dataflow_kafka.watermarks.windows import compile_window_fn
from dataflow_kafka.windowing.aggregations import Combined
from dataflow_kafka.windowing import (
    END_OF_TIME_MS, M4, AddWindow, AggregateFunction, Combiner, Count, Max, Mean, Median, Min, RemoveWindow, SessionWindow, SlidingWindow,
    Sum, ToList, TumblingWindow,
)

pytestmark = [pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped"),
              pytest.mark.filterwarnings("ignore:trigger .* finishes:UserWarning")]

WINDOWS = [TumblingWindow(20), TumblingWindow(15, 5), SlidingWindow(30, 10), SlidingWindow(25, 10, 3), SlidingWindow(10, 10)]
TRIGGERS = [DefaultTrigger(), AfterWatermark(), AfterWatermark(early=AfterCount(1)), AfterWatermark(late=AfterCount(1)),
            AfterWatermark(early=AfterCount(2), late=AfterCount(3)), AfterWatermark(early=AfterCount(3))]


class TopTwo(Combiner):
    """A user's combiner with its own ``add_inputs`` and a mutable accumulator (a list changed in
    place): the two highest values, the first seen on a tie."""

    def create_accumulator(self) -> list:
        return []

    def add_input(self, accumulator: list, value: int) -> list:
        return self.add_inputs(accumulator, [value])

    def add_inputs(self, accumulator: list, values) -> list:
        accumulator += values
        accumulator.sort(key=lambda v: -v)
        del accumulator[2:]
        return accumulator

    def merge_accumulators(self, accumulators) -> list:
        out: list = []
        for a in accumulators:
            out = self.add_inputs(out, list(a))
        return out

    def extract_output(self, accumulator: list) -> list:
        return list(accumulator)


class LowestText(AggregateFunction):
    """A user's lift / combine / lower aggregation (no Combiner methods): the lowest value's text."""

    def lift(self, v):
        return str(v)

    def combine(self, a, b):
        return a if int(a) <= int(b) else b


def count_and_list() -> Combined:              # several aggregations: one tuple accumulator per window
    return Combined([Count(), ToList()])


COMBINERS = [Count, Sum, Min, Max, Mean, ToList, Median, TopTwo, LowestText, count_and_list]

_keys = st.sampled_from(["a", "b", 7, ("x", 1), None])
_step = st.one_of(
    st.tuples(st.just("add"), st.lists(st.tuples(_keys, st.integers(-20, 20), st.integers(-30, 200)), max_size=12)),
    st.tuples(st.just("watermark"), st.integers(0, 40)),
    st.tuples(st.just("processing"), st.integers(0, 5)),
    st.tuples(st.just("roundtrip"), st.booleans()),
)


def _make(cls, window, trigger, mode, lateness, combiner, on_time, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(compile_window_fn(window), trigger, mode, lateness, "end_of_window", combiner(), on_time, **kw)


def _bundles(records):
    """One bundle per key, keys in first-appearance order (as the stage calls ``add``)."""
    out: dict = {}
    for k, v, t in records:
        out.setdefault(k, []).append((v, t))
    return out


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(WINDOWS), st.sampled_from(TRIGGERS), st.sampled_from(["discarding", "accumulating"]),
       st.integers(0, 40), st.sampled_from(COMBINERS), st.sampled_from(["fire_always", "fire_if_non_empty"]),
       st.lists(_step, min_size=1, max_size=14), st.booleans())
def test_columnar_equals_per_element(window, trigger, mode, lateness, combiner, on_time, steps, batch):
    args = (window, trigger, mode, lateness, combiner, on_time)
    ref = _make(TriggerDriver, *args)
    col = _make(ColumnarDriver, *args, integral_values=True)
    wm = now = 0
    for step in steps + [("watermark", 10**6)]:
        if step[0] == "add":
            bundles = _bundles(step[1])
            want = [p for k, elems in bundles.items() for p in ref.add(elems, key=k)]
            if batch:
                keys = list(bundles)
                rows = np.array([keys.index(k) for k, _, _ in step[1]], np.int64)
                cols, late, closed = col.add_batch(keys, rows, [v for _, v, _ in step[1]],
                                                   np.array([t for _, _, t in step[1]], np.int64))
                got = cols.panes()
                assert late.sum() + closed.sum() == ref.dropped_late + ref.dropped_closed - \
                    (col.dropped_late + col.dropped_closed - late.sum() - closed.sum())
            else:
                got = [p for k, elems in bundles.items() for p in col.add(elems, key=k)]
        elif step[0] == "watermark":
            wm = min(wm + step[1], END_OF_TIME_MS) if step[1] < 10**6 else END_OF_TIME_MS
            want, got = ref.advance_watermark(wm), col.advance_watermark(wm)
        elif step[0] == "processing":
            now += step[1]
            want, got = ref.advance_processing_time(now), col.advance_processing_time(now)
        else:
            want = got = []
            col = (ColumnarDriver.from_bytes(ref.to_bytes() if step[1] else col.to_bytes(), compile_window_fn(window),
                                             trigger, mode, lateness, "end_of_window", combiner(), on_time,
                                             integral_values=True))
        assert got == want
        assert (col.dropped_late, col.dropped_closed) == (ref.dropped_late, ref.dropped_closed)
        assert col.keys() == ref.keys()
        assert all(col.windows(k) == ref.windows(k) for k in ref.keys())
        assert col.window_states() == ref.window_states()


@pytest.mark.parametrize("config", [
    (SessionWindow(10), DefaultTrigger(), "accumulating", Count),
    (TumblingWindow(10), AfterWatermark(early=AfterProcessingTime(5)), "accumulating", Count),
    (TumblingWindow(10), DefaultTrigger(), "accumulating_and_retracting", Count),
    (TumblingWindow(10), DefaultTrigger(), "accumulating", M4),       # timestamped values
])
def test_other_configurations_run_per_element(config):
    window, trigger, mode, combiner = config
    assert not ColumnarDriver.supports(compile_window_fn(window), trigger, mode, "end_of_window", combiner(), True)
    d = MultiQueryDriver([window], trigger, mode, combiner=combiner(), integral_values=True)
    assert isinstance(d._queries["0"].driver, TriggerDriver)


def test_sums_need_integer_values():
    fn = compile_window_fn(TumblingWindow(10))
    assert ColumnarDriver.supports(fn, DefaultTrigger(), "accumulating", combiner=Count())
    assert not ColumnarDriver.supports(fn, DefaultTrigger(), "accumulating", combiner=Sum())
    assert ColumnarDriver.supports(fn, DefaultTrigger(), "accumulating", combiner=Sum(), integral_values=True)
    d = ColumnarDriver(fn, DefaultTrigger(), "accumulating", combiner=Sum(), integral_values=True)
    with pytest.raises(ValueError, match="integer values expected"):
        d.add([(1.5, 3)])


def test_retractions_take_back_counts():
    args = (compile_window_fn(TumblingWindow(10)), DefaultTrigger(), "accumulating", 100, "end_of_window", Count())
    ref, col = TriggerDriver(*args), ColumnarDriver(*args)
    for d in (ref, col):
        d.add([(1, 3), (1, 4)], key="k")
    assert col.advance_watermark(10) == ref.advance_watermark(10)
    assert col.add_retractions([(1, 4)], key="k") == ref.add_retractions([(1, 4)], key="k")
    lists = (compile_window_fn(TumblingWindow(10)), DefaultTrigger(), "accumulating", 100, "end_of_window", ToList())
    ref, col = TriggerDriver(*lists), ColumnarDriver(*lists)
    for d in (ref, col):
        d.add([(1, 3), (2, 4), (1, 5)], key="k")
    assert col.add_retractions([(1, 4)], key="k") == ref.add_retractions([(1, 4)], key="k")
    assert col.advance_watermark(10) == ref.advance_watermark(10)
    mx = (compile_window_fn(TumblingWindow(10)), DefaultTrigger(), "accumulating", 0, "end_of_window", Max())
    with pytest.raises(TypeError, match="has no uncombine"):
        ColumnarDriver(*mx, integral_values=True).add_retractions([(1, 1)])


# -- MultiQueryDriver: column batches against one add per key ---------------------------------------
_QUERY = st.sampled_from([TumblingWindow(20), SlidingWindow(30, 10), SessionWindow(8), TumblingWindow(15, 5)])
_mstep = st.one_of(
    st.tuples(st.just("add"), st.lists(st.tuples(_keys, st.integers(0, 9), st.integers(0, 200)), max_size=12)),
    st.tuples(st.just("watermark"), st.integers(0, 40)),
    st.tuples(st.just("add_window"), _QUERY, st.sampled_from(["p", "q"])),
    st.tuples(st.just("remove_window"), st.integers(0, 3)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_QUERY, min_size=1, max_size=3), st.sampled_from(TRIGGERS[:4]),
       st.sampled_from(["discarding", "accumulating"]), st.integers(0, 30), st.sampled_from([Count, Sum]),
       st.lists(_mstep, min_size=1, max_size=12))
def test_multi_batches_equal_one_add_per_key(windows, trigger, mode, lateness, combiner, steps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = MultiQueryDriver(windows, trigger, mode, lateness, combiner=combiner())          # per element only
        new = MultiQueryDriver(windows, trigger, mode, lateness, combiner=combiner(), integral_values=True)
    wm = 0
    for step in steps + [("watermark", 10**6)]:
        if step[0] == "add":
            bundles = _bundles(step[1])
            before = ref.dropped_late + ref.dropped_closed
            want = [p for k, elems in bundles.items() for p in ref.add(elems, key=k)]
            keys = list(bundles)
            cols, late, closed = new.add_batch(keys, np.array([keys.index(k) for k, _, _ in step[1]], np.int64),
                                               [v for _, v, _ in step[1]],
                                               np.array([t for _, _, t in step[1]], np.int64))
            got = cols.panes()
            assert late.sum() + closed.sum() == ref.dropped_late + ref.dropped_closed - before
        elif step[0] == "watermark":
            wm = wm + step[1] if step[1] < 10**6 else END_OF_TIME_MS
            want, got = ref.advance_watermark(wm), new.advance_watermark_columns(wm).panes()
        elif step[0] == "add_window":
            for d in (ref, new):
                d.apply(AddWindow(step[2], step[1]))
            want = got = []
        else:
            if ref.query_ids:
                qid = ref.query_ids[step[1] % len(ref.query_ids)]
                for d in (ref, new):
                    d.apply(RemoveWindow(qid))
            want = got = []
        assert got == want
        assert (new.dropped_late, new.dropped_closed) == (ref.dropped_late, ref.dropped_closed)
        new = MultiQueryDriver.from_bytes(new.to_bytes(), windows, trigger, mode, lateness, combiner=combiner(),
                                          integral_values=True)


def test_state_of_the_per_element_driver_loads_into_the_vectorised_one():
    """A checkpoint written before the vectorised path (MultiQueryDriver format 1, per-element
    driver states) carries on, and a vectorised state is refused clearly by a per-element query."""
    args = ([SlidingWindow(20, 10)], AfterWatermark(late=AfterCount(1)), "accumulating", 50)
    old = MultiQueryDriver(*args, combiner=Sum())                         # per element (not integral)
    old.add([(2, 5), (3, 14)], key="k")
    old.advance_watermark(20)
    new = MultiQueryDriver.from_bytes(old.to_bytes(), *args, combiner=Sum(), integral_values=True)
    assert isinstance(new._queries["0"].driver, ColumnarDriver)
    assert [p for p in new.add([(4, 6)], key="k")] == [p for p in old.add([(4, 6)], key="k")]
    assert new.advance_watermark(100) == old.advance_watermark(100)
    with pytest.raises(ValueError, match="written by the vectorised driver"):
        MultiQueryDriver.from_bytes(new.to_bytes(), *args, combiner=Sum())


def test_a_driver_without_a_value_type_loads_a_vectorised_state():
    """``integral_values=None`` (a stage not bound to its input types, as ``read_state`` builds
    them) takes a vectorised query's state into the vectorised driver; a per-element state stays
    per element, and ``False`` (bound to a non-integer type) still refuses it."""
    args = ([SlidingWindow(20, 10)], AfterWatermark(late=AfterCount(1)), "accumulating", 50)
    vec = MultiQueryDriver(*args, combiner=Sum(), integral_values=True)
    vec.add([(2, 5), (3, 14)], key="k")
    vec.advance_watermark(20)
    seen = MultiQueryDriver.from_bytes(vec.to_bytes(), *args, combiner=Sum(), integral_values=None)
    assert isinstance(seen._queries["0"].driver, ColumnarDriver)
    assert seen.to_bytes() == vec.to_bytes()
    per = MultiQueryDriver(*args, combiner=Sum())
    per.add([(2, 5)], key="k")
    assert isinstance(MultiQueryDriver.from_bytes(per.to_bytes(), *args, combiner=Sum(), integral_values=None)
                      ._queries["0"].driver, TriggerDriver)
    with pytest.raises(ValueError, match="written by the vectorised driver"):
        MultiQueryDriver.from_bytes(vec.to_bytes(), *args, combiner=Sum(), integral_values=False)
