"""``WindowingStage(select_before_shuffle=True)`` (``watermarks.before_shuffle``): the rows a
source task sends per key and window give the same panes as all of them, whatever the batch
split, the key groups, the lateness and the windows; what cannot keep the panes is refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.nexmark.aggregations import ArgMax
from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.watermarks import AfterCount, AfterProcessingTime, AfterWatermark, DefaultTrigger
from dataflow_kafka.watermarks.accumulation import TimestampCombiner
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import GlobalWindow, Max, Mean, Min, SessionWindow, SlidingWindow, Sum, TumblingWindow
from tests.keygroups.test_pipeline_local import batch
from tests.suite import examples


def _stage(**kw) -> WindowingStage:
    base = dict(key="k", value="v", windows=TumblingWindow(1_000), aggregations=[Max()],
                trigger=AfterWatermark(late=AfterCount(1)), select_before_shuffle=True, name="top")
    return WindowingStage(**{**base, **kw})


def test_which_aggregations_select_and_a_subclass_redefining_them_does_not_inherit_it():
    assert (Max().selection(1), Min().selection(1), Max().selection(2)) == (("max", 0), ("min", 0), None)
    assert ArgMax("price").selection(2) == ("max", 0)                   # (price, record) pairs
    assert ArgMax("p", fields=("a", "p")).selection(2) == ("max", 1)
    assert ArgMax("price").selection(1) is None                          # JSON texts: the price is inside
    assert (Sum().selection(1), Mean().selection(1)) == (None, None)

    class Doubled(Max):
        def add_input(self, accumulator, value):
            return super().add_input(accumulator, 2 * value)

    assert Doubled().selection(1) is None


@pytest.mark.parametrize("kw, says", [
    (dict(aggregations=[Max(), Sum()]), "Sum"),
    (dict(trigger=AfterWatermark(early=AfterCount(2))), "fires before the watermark"),
    (dict(trigger=AfterProcessingTime(1_000)), "fires before the watermark"),
    (dict(timestamp_combiner=TimestampCombiner.EARLIEST), "timestamp_combiner"),
    (dict(windows=SessionWindow(500)), "not a tumbling, sliding or global"),
    (dict(select={"q": "1s"}), "select="),
])
def test_what_would_change_the_panes_is_refused_naming_it(kw, says):
    with pytest.raises(InvalidArgumentError, match="select_before_shuffle") as e:
        _stage(**kw)
    assert says in str(e.value)
    _stage(trigger=DefaultTrigger(), windows={"a": SlidingWindow(1_000, 250), "g": GlobalWindow()})   # taken


def test_a_task_sends_its_top_rows_per_key_and_window_and_every_row_it_cannot_decide():
    sel = _stage(windows=TumblingWindow(1_000)).before_shuffle()
    t = pa.table({"kind": ["data"] * 8 + ["punctuation"], "event_time_ms": [1_100, 1_200, 1_300, 1_400, 1_500,
                                                                            200, 300, 1_600, None],
                  "k": ["a", "a", "a", "b", "b", "a", "a", "a", None],
                  "dataflow_value": [5.0, 7.0, 7.0, 1.0, None, 1.0, 9.0, float("nan"), None]})
    kinds = np.asarray(t.column("kind").to_pylist(), object)
    assert sel(t, kinds, None) is None                                   # nothing read before: all go
    # window [1000, 2000) of "a": the two 7s (a tie); of "b": its 1 and its null; window [0, 1000)
    # ended at or before the newest event time read before (1000): all of its rows; NaN and marker rows too
    assert sel(t, kinds, 1_000).tolist() == [False, True, True, True, True, True, True, True, True]
    assert sel(t, kinds, 2_000).all()                                    # every window may be late


def test_a_key_of_several_columns_in_several_chunks_selects_per_combination():
    sel = _stage(key={"a": "a", "b": "b"}, aggregations=[Min()]).before_shuffle()
    chunks = [{"a": ["x", "x", "y"], "b": [1, 2, 1], "v": [3.0, 5.0, 4.0]},
              {"a": ["x", "y", "x"], "b": [1, 1, 2], "v": [2.0, 6.0, 5.0]}]
    t = pa.Table.from_batches([pa.record_batch({"event_time_ms": pa.array([1_100] * 3, pa.int64()), "a": c["a"],
                                                "b": pa.array(c["b"], pa.int64()), "dataflow_value": c["v"]})
                               for c in chunks])
    # (x, 1): 3 and 2, the lowest 2; (x, 2): 5 and 5, a tie; (y, 1): 4 and 6
    assert sel(t, np.array(["data"] * 6, object), 1_000).tolist() == [False, True, True, True, False, True]


def _panes(frames) -> list:
    """Per batch, every output row but the metrics (whose ``records_in`` counts the rows sent), as
    a multiset: a batch's panes come by key in order of the key's first row in the batch, which
    the rows sent may change, and so may a data row's ``offset`` (its place in the key group's
    output), which is left out."""
    out = []
    for f in frames:
        f = f[f["kind"] != "metrics"].drop(columns=["metrics"], errors="ignore")
        f = f.assign(offset=f["offset"].where(f["kind"] != "data"))
        out.append(sorted(map(repr, f.astype(object).where(f.notna(), None).to_dict("records"))))
    return out


def _sent(stage: WindowingStage, frame: pd.DataFrame, bound_ms: int | None) -> pd.DataFrame:
    """``frame`` as the source's task of each partition sends it (the stage's step per partition)."""
    step = stage.before_shuffle()
    keep = np.ones(len(frame), bool)
    for p in frame["partition"].dropna().unique():
        rows = np.flatnonzero((frame["partition"] == p).to_numpy())
        part = frame.iloc[rows]
        table = pa.table({"event_time_ms": pa.array(part["event_time_ms"], pa.int64(), from_pandas=True),
                          "k": pa.array(part["k"].astype(object), pa.string(), from_pandas=True),
                          "dataflow_value": pa.array(part["v"], pa.float64(), from_pandas=True)})
        send = step(table, part["kind"].to_numpy(object), bound_ms)
        if send is not None:
            keep[rows[~send]] = False
    return frame[keep].reset_index(drop=True)


_WINDOWS = [TumblingWindow(200), SlidingWindow(200, 80), {"t": TumblingWindow(150), "g": GlobalWindow()}]


@settings(max_examples=examples(60), deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 1), st.sampled_from("ab"), st.one_of(st.none(), st.integers(0, 4)),
                                 st.sampled_from([0, 0, 150, 400])), min_size=30, max_size=80),
       cuts=st.lists(st.integers(1, 79), min_size=1, max_size=4), delay=st.integers(0, 150), lateness=st.sampled_from([0, 0, 60, 300]),
       windows=st.sampled_from(range(len(_WINDOWS))), both=st.booleans(), default_trigger=st.booleans(),
       accumulating=st.booleans(), key_groups=st.integers(1, 3))
def test_the_rows_sent_give_the_panes_of_all_rows(events, cuts, delay, lateness, windows, both, default_trigger,
                                                   accumulating, key_groups):
    """Each task (a partition) sends, in each batch, the rows ``before_shuffle`` keeps given the
    newest event time of the earlier batches; the stage's panes, drops and watermarks equal those
    of every row, late rows and null values among them, in every batch (in another order). Event ``i`` happens at
    ``20 i`` less its lag (some come late); punctuations follow the source (a partition's newest
    event time less ``delay``), and a partition is heard only once it has data."""
    stage = _stage(windows=_WINDOWS[windows], aggregations=[Max(), Min()] if both else [Max()],
                   trigger=DefaultTrigger() if default_trigger else AfterWatermark(late=AfterCount(1)),
                   accumulation_mode="accumulating" if accumulating else "discarding",
                   allowed_lateness_ms=lateness, num_key_groups=key_groups)
    bounds = sorted({c % len(events) for c in cuts} | {0, len(events)})
    newest: dict[int, int] = {}
    offsets: dict[int, int] = {}
    all_rows, sent = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        before = max(newest.values()) if newest else None
        records = []
        for i, (p, k, v, lag) in enumerate(events[lo:hi], lo):
            t = max(0, 20 * i - lag)
            offsets[p] = offsets.get(p, -1) + 1
            records.append((p, offsets[p], k, None if v is None else float(v), t))
            newest[p] = max(newest.get(p, t), t)
        frame = batch(records, {p: n - delay for p, n in newest.items()})
        all_rows.append(frame)
        sent.append(_sent(stage, frame, before))
    pipeline = Pipeline([stage])
    types = {"k": "string", "v": "double"}
    assert _panes(pipeline.run_local(sent, input_types=types)) == _panes(pipeline.run_local(all_rows,
                                                                                         input_types=types))


def test_a_command_adding_a_window_is_refused_and_one_removing_a_window_taken():
    """The element history holds the selected rows only: a window added later is refused (an error
    row naming it); removing one needs no history."""
    stage = _stage(windows={"a": TumblingWindow(1_000), "b": TumblingWindow(500)})
    add = {"op": "add_window", "id": "c", "window": {"type": "tumbling", "size_ms": 2_000}}
    remove = {"op": "remove_window", "id": "b"}
    out = Pipeline([stage]).run_local([batch([(0, 0, "a", 1.0, 100)], {0: 100}, mods=[(0, add), (1, remove)]),
                                       batch([(0, 1, "a", 2.0, 1_200)], {0: 5_000})], input_types={"k": "string",
                                                                                                   "v": "double"})
    errors = [e for f in out for e in f.loc[f["kind"] == "error", "error"]]
    assert len(errors) == 1 and "add_window 'c' ignored" in errors[0] and "select_before_shuffle" in errors[0]
    panes = out[1][out[1]["kind"] == "data"]
    assert sorted(set(panes["query_id"])) == ["a"]
