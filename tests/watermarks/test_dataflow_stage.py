"""WindowingStage without Spark: its panes equal one MultiQueryDriver fed the same micro-batches,
whatever the number of key groups, with a window query added halfway by a modification."""

from __future__ import annotations

import dataclasses
import json
import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.watermarks import AfterCount, AfterProcessingTime, AfterWatermark, MultiQueryDriver
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Combiner, SessionWindow, SlidingWindow, Sum, TumblingWindow, parse_command

from tests.suite import examples

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

PARTS = 2
ADD = {"op": "add_window", "id": "slide", "window": {"type": "sliding", "size_ms": 2000, "slide_ms": 1000}}


def _batches(seed: int, n: int = 6):
    rnd = random.Random(seed)
    offsets, newest, out = [0] * PARTS, [None] * PARTS, []
    for b in range(n):
        rows = []
        if b == 3:
            rows += [{"kind": "modification", "topic": "t", "partition": p, "offset": offsets[p],
                      "modification": json.dumps(ADD), "control_offset": 5, "processing_time_ms": b * 700}
                     for p in range(PARTS)]
        for _ in range(rnd.randint(0, 20)):
            p = rnd.randrange(PARTS)
            t = b * 800 + rnd.randint(-1200, 600)
            rows.append({"kind": "data", "topic": "t", "partition": p, "offset": offsets[p],
                         "k": f"k{rnd.randrange(4)}", "v": None if rnd.random() < 0.05 else rnd.randint(1, 9),
                         "event_time_ms": t, "processing_time_ms": b * 700})
            offsets[p] += 1
            newest[p] = t if newest[p] is None else max(newest[p], t)
        rows += [{"kind": "punctuation", "topic": "t", "partition": p, "offset": offsets[p],
                  "punctuation_ms": newest[p], "processing_time_ms": b * 700} for p in range(PARTS)]
        out.append(control_frame(rows).assign(k=[r.get("k") for r in rows], v=[r.get("v") for r in rows]))
    return out


def _stage(n: int) -> WindowingStage:
    return WindowingStage(key="k", value="v", windows={"fixed": TumblingWindow(1000), "session": SessionWindow(400)},
                          trigger=AfterWatermark(early=AfterProcessingTime(500), late=AfterCount(1)),
                          accumulation_mode="accumulating_and_retracting", allowed_lateness_ms=1000,
                          aggregations=[Sum()], num_key_groups=n, name="panes")


def _reference(batches) -> list[list[tuple]]:
    """One driver for all keys, fed as the stage feeds each key group's driver."""
    d = _stage(1).new_state()
    wm, out = None, []
    for frame in batches:
        rows = []
        for text in frame.loc[frame["kind"] == "modification", "modification"].unique():
            d.apply(parse_command(text))
        pt = int(frame["processing_time_ms"].max())
        panes = d.advance_processing_time(pt)
        data = frame[frame["kind"] == "data"].sort_values(["topic", "partition", "offset"])
        per_key: dict = {}
        for k, v, t in zip(data["k"], data["v"], data["event_time_ms"]):
            if v is not None and v == v:
                per_key.setdefault(k, []).append((int(v), int(t)))
        for k, elems in per_key.items():
            panes += d.add(elems, key=k)
        puncts = frame[frame["kind"] == "punctuation"]["punctuation_ms"]
        if puncts.notna().all():
            new = int(puncts.min())
            wm = new if wm is None else max(wm, new)
        if wm is not None:
            panes += d.advance_watermark(wm)
        out.append(sorted((p.key, p.query_id, p.start_ms, p.end_ms, p.index, p.timing.name, p.is_retraction,
                           float(p.value)) for p in panes))
    return out


def _panes(outs) -> list[list[tuple]]:
    cols = ["k", "query_id", "window_start_ms", "window_end_ms", "pane_index", "timing", "is_retraction", "sum"]
    return [sorted(tuple(r) for r in o.loc[o["kind"] == "data", cols].itertuples(index=False)) for o in outs]


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3))
def test_stage_equals_one_driver_with_a_query_added_halfway(seed, n):
    batches = _batches(seed)
    outs = Pipeline([_stage(n)]).run_local(batches)
    assert _panes(outs) == _reference(batches)


def test_query_added_halfway_emits_late_panes_and_retractions():
    panes = [r for o in _panes(Pipeline([_stage(2)]).run_local(_batches(0))) for r in o]
    assert sum(r[1] == "slide" for r in panes) > 0 and sum(r[5] == "LATE" for r in panes) > 0
    assert sum(r[6] for r in panes) > 0                                  # retractions


def test_output_watermark_is_input_minus_lateness_and_panes_are_not_behind_it():
    batches = _batches(7)
    outs = Pipeline([_stage(2)]).run_local(batches)
    previous = None
    for o in outs:
        p = o[o["kind"] == "punctuation"]["punctuation_ms"].dropna()
        data = o[o["kind"] == "data"]
        if previous is not None and len(data):
            assert data["event_time_ms"].min() >= previous
        if len(p):
            previous = int(p.min())
    drops = pd.concat([o[o["kind"] == "dropped"] for o in outs])
    assert set(drops["dropped_reason"]) <= {"late", "closed", "null"} and "null" in set(drops["dropped_reason"])


def test_malformed_command_is_an_error_row_not_a_failure():
    frame = control_frame([{"kind": "modification", "topic": "t", "partition": 0, "offset": 0,
                            "modification": '{"op": "add_window", "id": "x", "window": {"type": "tumbling"}}',
                            "control_offset": 1, "processing_time_ms": 0},
                           {"kind": "punctuation", "topic": "t", "partition": 0, "offset": 0, "punctuation_ms": 5}])
    (out,) = Pipeline([_stage(1)]).run_local([frame.assign(k=None, v=None)])
    errors = out[out["kind"] == "error"]
    assert len(errors) == 1 and "malformed window command" in errors["error"].iloc[0]
    assert "size_ms" in errors["error"].iloc[0]


def test_configuration_errors_name_the_problem():
    with pytest.raises(ValueError, match="needs windows="):
        WindowingStage(key="k", value="v")
    with pytest.raises(ValueError, match="allowed_lateness_ms"):
        WindowingStage(key="k", value="v", windows=TumblingWindow(10), allowed_lateness_ms=-1)
    with pytest.raises(ValueError, match="clash"):
        WindowingStage(key="query_id", value="v", windows=SlidingWindow(10, 5))


def test_several_aggregations_give_one_column_each_equal_to_one_stage_per_aggregation():
    """``aggregations=[...]`` as the slicer takes them: each column equals the stage that runs that
    aggregation alone, on the same batches (M4 gets event times, Sum does not)."""
    from dataflow_kafka.windowing import M4, Count, Mean

    batches = _batches(3)
    several = Pipeline([dataclasses.replace(_stage(2), aggregations=[Sum(), M4(), Count(), Mean()])]).run_local(batches)
    cols = ["k", "query_id", "window_start_ms", "window_end_ms", "pane_index", "is_retraction"]
    m4 = ["m4_min", "m4_max", "m4_first", "m4_last"]
    assert [c for c, _ in _stage(1).output_columns()][-1] == "sum"
    for agg, names in ((Sum(), ["sum"]), (M4(), m4), (Count(), ["count"]), (Mean(), ["mean"])):
        alone = Pipeline([dataclasses.replace(_stage(2), aggregations=[agg])]).run_local(batches)
        for got, want in zip(several, alone):
            got, want = (f.loc[f["kind"] == "data", cols + names].sort_values(cols).reset_index(drop=True)
                         for f in (got, want))
            pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert sum(len(f[f["kind"] == "data"]) for f in several) > 10


def test_the_old_aggregation_keyword_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"WindowingStage\(aggregation=...\) is deprecated"):
        old = WindowingStage(key="k", value="v", windows=TumblingWindow(10), aggregation=Sum())
    assert old == WindowingStage(key="k", value="v", windows=TumblingWindow(10), aggregations=[Sum()])
    assert old.aggregations == [Sum()] and old.output_columns()[-1] == ("sum", "double")
    with pytest.raises(ValueError, match="give aggregations= only"):
        WindowingStage(key="k", value="v", windows=TumblingWindow(10), aggregation=Sum(), aggregations=[Sum()])
    with pytest.raises(TypeError, match=r"aggregations=Sum\(\): expected a list, e.g. aggregations=\[Sum\(\)\]"):
        WindowingStage(key="k", value="v", windows=TumblingWindow(10), aggregations=Sum())



class _TotalOfFirst(Combiner):
    """A combiner of ``(v, "w<v>")`` tuples: the total of their first fields (``Sum``'s of them alone)."""

    name, spark_type = "sum", "double"

    def create_accumulator(self):
        return 0.0

    def add_input(self, acc, value):
        assert isinstance(value, tuple) and len(value) == 2 and value[1] == f"w{int(value[0])}", value
        return acc + value[0]

    def merge_accumulators(self, accs):
        return float(sum(accs))


def test_a_tuple_value_gives_the_combiner_tuples_and_drops_a_row_with_any_field_null():
    """``value={name: expression}``: each element is the tuple of those columns; a combiner of its
    first field gives ``Sum``'s panes of that column; a null in any field drops the row as null."""
    batches = _batches(5)
    for f in batches:
        f["w"] = [None if v is None or v != v else f"w{int(v)}" for v in f["v"]]
    cols = ["k", "query_id", "window_start_ms", "window_end_ms", "pane_index", "is_retraction", "sum"]
    pairs = dataclasses.replace(_stage(2), value={"v": "v", "w": "w"}, aggregations=[_TotalOfFirst()])
    got, want = Pipeline([pairs]).run_local(batches), Pipeline([_stage(2)]).run_local(batches)
    for g, w in zip(got, want):
        g, w = (f.loc[f["kind"] == "data", cols].sort_values(cols).reset_index(drop=True) for f in (g, w))
        pd.testing.assert_frame_equal(g, w, check_dtype=False)
    assert sum(len(f[f["kind"] == "data"]) for f in got) > 10
    for f in batches:                          # w null alone: those rows are dropped, counted as null
        f["w"] = [None if i % 3 == 0 else w for i, w in enumerate(f["w"])]
    nulls = sum(f.loc[f["kind"] == "dropped"].query("dropped_reason == 'null'")["dropped_count"].sum()
                for f in Pipeline([pairs]).run_local(batches))
    expected = sum(int(((f["kind"] == "data") & (f["w"].isna() | f["v"].isna())).sum()) for f in batches)
    assert nulls == expected > 0
    with pytest.raises(ValueError, match="names no column"):
        WindowingStage(key="k", value={}, windows=TumblingWindow(10))
