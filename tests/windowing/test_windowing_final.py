"""windowing.final: the current result per window from a stage's rows.

The fold (the latest row per window, a retraction deleting it) against a row-by-row reference on
random histories, its idempotence (a replayed batch), the stages it reads, and the Spark
``foreachBatch`` form (an upsert into a table keyed by window)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, Sum, TumblingWindow
from dataflow_kafka.windowing.final import UpsertWindows, WindowFold, current_windows

from tests.suite import examples

COLS = ["k", "query_id", "window_start_ms", "window_end_ms"]


def rows(*items, kind="data", topic="w") -> pd.DataFrame:
    """Rows ``(key, start, value, retraction)`` of query ``q``, windows ``[start, start + 10)``,
    in emission order (``offset``) in one key group."""
    return pd.DataFrame({"kind": kind, "topic": topic, "partition": 0, "offset": range(len(items)),
                         "k": [i[0] for i in items], "query_id": "q", "window_start_ms": [i[1] for i in items],
                         "window_end_ms": [i[1] + 10 for i in items], "sum": [i[2] for i in items],
                         "is_retraction": [i[3] for i in items], "event_time_ms": [i[1] + 9 for i in items]})


def as_dict(table: pd.DataFrame) -> dict:
    return {(r["k"], r["window_start_ms"]): r["sum"] for r in table.to_dict("records")}


def test_latest_row_per_window_and_retractions_delete():
    fold = WindowFold.of(key_columns=["k"])
    t = fold.apply(None, rows(("a", 0, 1, False), ("a", 0, 3, False), ("b", 0, 5, False)))
    assert as_dict(t) == {("a", 0): 3, ("b", 0): 5}
    assert list(t.columns) == ["k", "query_id", "window_start_ms", "window_end_ms", "sum", "event_time_ms"]
    t = fold.apply(t, rows(("a", 0, 3, True), ("a", 10, 1, False)))           # a session moved on
    assert as_dict(t) == {("b", 0): 5, ("a", 10): 1}
    t = fold.apply(t, rows(("b", 0, 5, True), ("b", 0, 6, False)))             # retracted, then back
    assert as_dict(t) == {("b", 0): 6, ("a", 10): 1}
    assert as_dict(fold.apply(t, rows())) == as_dict(t)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from([0, 10, 20]), st.integers(0, 9),
                                   st.booleans()), max_size=8), max_size=6))
def test_the_fold_equals_applying_rows_one_by_one_and_a_replayed_batch_changes_nothing(batches):
    fold = WindowFold.of(key_columns=["k"])
    table, want = None, {}
    for batch in batches:
        frame = rows(*batch)
        table = fold.apply(table, frame)
        assert as_dict(fold.apply(table, frame)) == as_dict(table)             # replayed
        for k, s, v, r in batch:
            if r:
                want.pop((k, s), None)
            else:
                want[(k, s)] = v
        assert as_dict(table) == want


def test_rows_of_one_key_group_are_taken_in_offset_order_and_result_rows_by_stage():
    frame = rows(("a", 0, 1, False), ("a", 0, 2, False)).iloc[::-1]            # out of order in the frame
    assert as_dict(current_windows(frame, key_columns=["k"])) == {("a", 0): 2}
    mixed = pd.concat([rows(("a", 0, 1, False), kind="result", topic="w"),
                       rows(("a", 0, 7, False), kind="result", topic="other"), rows(("a", 0, 9, False))])
    stage = SlicerStage(key="k", value="v", windows=[TumblingWindow(10)], aggregations=[Sum()], name="w")
    assert as_dict(current_windows(mixed, stage, kind="result")) == {("a", 0): 1}
    assert as_dict(current_windows(mixed, stage)) == {("a", 0): 9}


def test_current_results_folds_a_windowing_stage_as_current_windows_and_refuses_a_stage_without_results():
    import dataflow_kafka as dk
    from dataflow_kafka.keygroups.examples import RunningCount

    mixed = pd.concat([rows(("a", 0, 1, False), kind="result", topic="w"), rows(("a", 0, 9, False)),
                       rows(("a", 0, 9, True), ("b", 10, 2, False))])
    for stage in (SlicerStage(key="k", value="v", windows=[TumblingWindow(10)], aggregations=[Sum()], name="w"),
                  WindowingStage(key="k", value="v", windows=TumblingWindow(10), aggregations=[Sum()], name="w",
                                 accumulation_mode="accumulating")):
        for kind in ("data", "result"):
            pd.testing.assert_frame_equal(dk.current_results([mixed], stage, kind=kind),
                                          current_windows([mixed], stage, kind=kind))
    assert as_dict(dk.current_results(mixed, key_columns=["k"])) == {("b", 10): 2}
    with pytest.raises(ValueError, match="has no results to fold"):
        dk.current_results([mixed], RunningCount())


def test_discarding_panes_are_refused():
    panes = WindowingStage(key="k", value="v", windows=TumblingWindow(10), aggregations=[Count()])   # discarding
    with pytest.raises(ValueError, match="discarding mode: its panes are deltas"):
        WindowFold.of(panes)
    acc = WindowingStage(key="k", value="v", windows=TumblingWindow(10), aggregations=[Count()],
                         accumulation_mode="accumulating")
    assert WindowFold.of(acc).window_columns == COLS


def test_upsert_windows_keeps_a_table_keyed_by_window(spark, tmp_path):
    path = str(tmp_path / "windows")
    stage = SlicerStage(key="k", value="v", windows=[TumblingWindow(10)], aggregations=[Sum()], name="w")
    upsert = UpsertWindows(stage=stage, path=path)
    b0 = rows(("a", 0, 1, False), ("b", 0, 5, False), ("a", 0, 3, False))
    b1 = rows(("a", 0, 3, True), ("a", 10, 4, False))
    for i, b in enumerate([b0, b1, b1]):                                         # b1 replayed
        upsert(spark.createDataFrame(b), i)
    got = spark.read.parquet(path).toPandas()
    assert as_dict(got) == {("b", 0): 5, ("a", 10): 4}
    assert sorted(got.columns) == sorted(["k", "query_id", "window_start_ms", "window_end_ms", "sum", "event_time_ms"])
    with pytest.raises(ValueError, match="a table name or a path"):
        UpsertWindows("t", stage, path=path)


def test_docstring_examples():
    import doctest

    import dataflow_kafka.windowing.final as module
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
