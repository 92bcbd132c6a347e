"""Other systems' names: each in one compat module, the same objects as (or constructors of) the
canonical ones; the old import paths still serve them, with a DeprecationWarning naming the new
path; the root exports one name per concept and the extension protocol."""

from __future__ import annotations

import importlib
import warnings

import pytest

import dataflow_kafka as dk
from dataflow_kafka.compat import beam, dataflow_model, scotty

BEAM = {"FixedWindows": dk.TumblingWindow, "SlidingWindows": dk.SlidingWindow, "Sessions": dk.SessionWindow,
        "GlobalWindows": dk.GlobalWindow, "SumCombiner": dk.Sum, "CountCombiner": dk.Count, "MeanCombiner": dk.Mean,
        "MinCombiner": dk.Min, "MaxCombiner": dk.Max, "ToListCombiner": dk.ToList, "CombineFn": dk.Combiner}
PAPER = {"AtWatermark": dk.AfterWatermark, "AtCount": dk.AfterCount, "SequenceOf": dk.AfterEach,
         "Repeat": dk.Repeatedly}


def test_beams_names_are_the_canonical_classes():
    assert set(beam.__all__) == set(BEAM)
    for name, ours in BEAM.items():
        assert getattr(beam, name) is ours, name
    assert beam.SlidingWindows(10, period_ms=5) == dk.SlidingWindow(10, 5)


def test_the_dataflow_papers_trigger_names_build_the_beam_triggers():
    for name, ours in PAPER.items():
        assert getattr(dataflow_model, name) is ours, name
    assert dataflow_model.AtPeriod(60_000) == dk.AfterProcessingTime(align_ms=60_000)
    assert dataflow_model.RepeatUntil(dk.AfterCount(1), dk.AfterWatermark()) == dk.OrFinally(
        dk.Repeatedly(dk.AfterCount(1)), dk.AfterWatermark())
    assert set(dataflow_model.__all__) == {*PAPER, "AtPeriod", "RepeatUntil"}


@pytest.mark.parametrize("scotty_form, ours", [
    (lambda M: scotty.TumblingWindow(M.Time, 5_000), lambda: dk.TumblingWindow(5_000)),
    (lambda M: scotty.TumblingWindow(M.Count, 3), lambda: dk.TumblingWindow(3, measure=dk.Measure.COUNT)),
    (lambda M: scotty.SlidingWindow(M.Time, 2_000, 1_000), lambda: dk.SlidingWindow(2_000, 1_000)),
    (lambda M: scotty.SlidingWindow(M.Count, 10, 5), lambda: dk.SlidingWindow(10, 5, measure="count")),
    (lambda M: scotty.SessionWindow(M.Time, 2_000), lambda: dk.SessionWindow(2_000)),
    (lambda M: scotty.FixedBandWindow(M.Count, 3, 4), lambda: __import__("dataflow_kafka.slicer", fromlist=["x"])
     .FixedBandWindow(3, 4, measure="count")),
])
def test_scottys_measure_first_constructors_build_the_canonical_windows(scotty_form, ours):
    class Names:                                    # the measure by its name, in Scotty's case
        Time, Count = "Time", "Count"

    assert scotty_form(scotty.WindowMeasure) == scotty_form(Names) == ours()


def test_scottys_measure_is_the_one_measure_enum():
    assert scotty.WindowMeasure.Time is dk.Measure.TIME and scotty.WindowMeasure.Count is dk.Measure.COUNT
    with pytest.raises(ValueError, match="sessions are time windows only"):
        scotty.SessionWindow(scotty.WindowMeasure.Count, 5)
    with pytest.raises(ValueError, match="measure='rows': expected 'time' or 'count'"):
        scotty.TumblingWindow("rows", 5)


# --------------------------------------------------------------------------- the old paths
OLD_PATHS = [
    *((m, n, "dataflow_kafka.compat.beam") for m in ("dataflow_kafka.windowing", "dataflow_kafka.windowing.windows")
      for n in ("FixedWindows", "SlidingWindows", "Sessions", "GlobalWindows")),
    *((m, n, "dataflow_kafka.compat.beam") for m in ("dataflow_kafka.windowing", "dataflow_kafka.windowing.aggregations")
      for n in ("SumCombiner", "CountCombiner", "MeanCombiner", "MinCombiner", "MaxCombiner", "ToListCombiner")),
    *((m, "WindowMeasure", "dataflow_kafka.compat.scotty") for m in ("dataflow_kafka.windowing",
                                                                      "dataflow_kafka.windowing.windows")),
    *((m, n, "dataflow_kafka.compat.dataflow_model") for m in ("dataflow_kafka.watermarks",
                                                               "dataflow_kafka.watermarks.triggers")
      for n in ("AtWatermark", "AtCount", "AtPeriod", "SequenceOf", "Repeat", "RepeatUntil")),
    *(("dataflow_kafka", n, "dataflow_kafka.compat.beam") for n in ("FixedWindows", "SlidingWindows", "Sessions")),
    ("dataflow_kafka", "current_windows", "dataflow_kafka.windowing.final"),
]


@pytest.mark.parametrize("module, name, home", OLD_PATHS, ids=[f"{m}.{n}" for m, n, _ in OLD_PATHS])
def test_an_old_import_path_still_works_with_a_deprecation_warning(module, name, home):
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{name} is deprecated: .*import {name} from {home}"):
        value = getattr(importlib.import_module(module), name)
    assert value is getattr(importlib.import_module(home), name)


def test_a_from_import_of_an_old_name_warns_at_the_callers_line():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        from dataflow_kafka.windowing import FixedWindows  # noqa: F401
    assert seen and all(w.category is DeprecationWarning and w.filename == __file__ for w in seen)


def test_an_unknown_name_is_still_an_attribute_error():
    for module in (dk, importlib.import_module("dataflow_kafka.windowing"),
                   importlib.import_module("dataflow_kafka.watermarks")):
        with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
            getattr(module, "Nope")


@pytest.mark.parametrize("build, ours", [
    (lambda M: dk.TumblingWindow(M.TIME, 5_000), lambda: dk.TumblingWindow(5_000)),
    (lambda M: dk.SlidingWindow(M.COUNT, 10, 5), lambda: dk.SlidingWindow(10, 5, measure="count")),
    (lambda M: dk.SessionWindow("Time", 2_000), lambda: dk.SessionWindow(2_000)),
    (lambda M: __import__("dataflow_kafka.slicer", fromlist=["x"]).FixedBandWindow(M.COUNT, 3, 4),
     lambda: __import__("dataflow_kafka.slicer", fromlist=["x"]).FixedBandWindow(3, 4, measure="count")),
])
def test_the_measure_first_shape_on_the_canonical_classes_still_works_with_a_warning(build, ours):
    with pytest.warns(DeprecationWarning, match="the measure first is Scotty's constructor shape"):
        got = build(dk.Measure)
    assert got == ours()


def test_the_measure_first_shape_still_refuses_a_measure_given_twice():
    with pytest.raises(ValueError, match="TumblingWindow: measure given twice"):
        dk.TumblingWindow(dk.Measure.TIME, 5, measure="count")
    with pytest.raises(ValueError, match="sessions are time windows only"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dk.SessionWindow(dk.Measure.COUNT, 5)


# --------------------------------------------------------------------------- the root
def test_the_root_exports_one_name_per_concept():
    other = set(BEAM) | set(PAPER) | {"AtPeriod", "RepeatUntil", "WindowMeasure", "current_windows"}
    assert not other & set(dk.__all__)
    values = [getattr(dk, n) for n in dk.__all__]
    assert len({id(v) for v in values}) == len(values), "two root names for one object"


def test_the_root_exports_what_an_extension_extends_and_every_trigger():
    extension = {"Stage", "StageInput", "StageOutput", "Dropped", "Input", "PythonRouter", "Window", "WindowShape",
                 "Measure", "AggregateFunction", "Combiner", "Vectorised", "Trigger"}
    triggers = {"AfterWatermark", "AfterCount", "AfterProcessingTime", "Repeatedly", "AfterEach", "AfterAny",
                "AfterAll", "OrFinally", "DefaultTrigger"}
    windows = {"TumblingWindow", "SlidingWindow", "SessionWindow", "GlobalWindow"}
    assert extension | triggers | windows | {"current_results", "UpsertWindows"} <= set(dk.__all__)
    from dataflow_kafka.watermarks import triggers as trigger_module

    assert {n for n in trigger_module.__all__ if n not in ("finishes", "counts_only")} <= set(dk.__all__)
