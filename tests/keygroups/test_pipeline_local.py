"""The stage layer without Spark: routing, fusion, punctuation and modification forwarding, and the
equivalences the layer promises (key groups and fusion do not change results)."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups import Pipeline, key_group_of
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.keygroups.operator import FusionError
from tests.keygroups.toy_stages import RunningTotal, TumblingCount
from tests.suite import examples

PARTS = 3


def batch(records, watermarks, mods=(), pt=0) -> pd.DataFrame:
    """A source micro-batch: ``records`` = [(partition, offset, key, value, event_time_ms)],
    ``watermarks`` = {partition: punctuation_ms}, ``mods`` = [(control_offset, command dict)]."""
    rows = []
    for off, cmd in mods:
        for p in range(PARTS):
            rows.append({"kind": "modification", "topic": "t", "partition": p, "offset": 0,
                         "modification": json.dumps(cmd), "control_offset": off, "processing_time_ms": pt})
    data = pd.DataFrame([{"kind": "data", "topic": "t", "partition": p, "offset": o, "k": k, "v": v,
                          "event_time_ms": t, "processing_time_ms": pt} for p, o, k, v, t in records])
    for p, w in watermarks.items():
        rows.append({"kind": "punctuation", "topic": "t", "partition": p, "offset": 10_000, "punctuation_ms": w,
                     "processing_time_ms": pt})
    frames = [control_frame(rows)]
    if len(data):
        frames.append(data)
    return pd.concat(frames, ignore_index=True)


def data_rows(out: pd.DataFrame, *cols) -> list:
    d = out[out["kind"] == "data"]
    return sorted(tuple(r) for r in d[list(cols)].itertuples(index=False))


def test_windows_counts_late_and_null_reports_and_forwarded_watermark():
    recs = [(0, 0, "a", 1.0, 100), (1, 0, "b", 1.0, 900), (2, 0, "a", None, 300), (0, 1, "a", 1.0, 1500)]
    b1 = batch(recs, {0: 1500, 1: 900, 2: 1200})                  # low watermark 900
    b2 = batch([(1, 1, "b", 1.0, 200), (1, 2, "b", 1.0, 1100)], {0: 2600, 1: 2100, 2: 2500})
    out = Pipeline([TumblingCount()]).run_local([b1, b2])
    assert data_rows(out[0], "k", "window_start_ms", "count") == []            # nothing ended by 900
    assert data_rows(out[1], "k", "window_start_ms", "count", "event_time_ms") == [
        ("a", 0, 1, 999), ("a", 1000, 1, 1999), ("b", 0, 1, 999), ("b", 1000, 1, 1999)]
    drops = out[0][out[0]["kind"] == "dropped"]
    assert list(zip(drops["dropped_key"], drops["dropped_reason"], drops["dropped_count"])) == [("a", "null", 1)]
    late = out[1][out[1]["kind"] == "dropped"]
    assert list(zip(late["dropped_key"], late["dropped_reason"], late["dropped_count"])) == [("b", "late", 1)]
    for o, wm in zip(out, (900, 2100)):                        # one punctuation per key group
        p = o[o["kind"] == "punctuation"]
        assert sorted(p["partition"]) == [0, 1, 2] and set(p["punctuation_ms"]) == {wm}
        assert set(p["topic"]) == {"tumbling_count"}


def _random_batches(seed: int, n_batches: int = 5, with_mods: bool = False) -> list[pd.DataFrame]:
    rnd = random.Random(seed)
    offsets = [0] * PARTS
    newest = [None] * PARTS
    out = []
    for b in range(n_batches):
        recs = []
        for _ in range(rnd.randint(0, 25)):
            p = rnd.randrange(PARTS)
            t = b * 1000 + rnd.randint(-1500, 1000)
            recs.append((p, offsets[p], f"{rnd.choice('abc')}{rnd.randint(0, 9)}",
                         None if rnd.random() < 0.05 else 1.0, t))
            offsets[p] += 1
            newest[p] = t if newest[p] is None else max(newest[p], t)
        mods = [(b, {"op": "weight", "value": b + 1})] if with_mods and b in (1, 3) else []
        out.append(batch(recs, {p: newest[p] for p in range(PARTS)}, mods, pt=b * 1000))
    return out


def _data(outs, cols):
    return [data_rows(o, *cols) for o in outs]


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 10_000), n1=st.integers(1, 4), with_mods=st.booleans())
def test_key_groups_and_fusion_do_not_change_results(seed, n1, with_mods):
    """Data-trace types Thm 4.3 for our operators: a keyed stage gives the same rows whatever the
    number of key groups, fused or not; a re-keyed (Python-routed) stage after it too."""
    batches = _random_batches(seed, with_mods=with_mods)
    cols = ("k", "window_start_ms", "count", "event_time_ms")

    def two(n, m=2):
        return TumblingCount(num_key_groups=n).then(TumblingCount(key="k", value="count", size_ms=3000,
                                                                  num_key_groups=n, name="coarse")).then(
            RunningTotal(num_key_groups=m))
    reference = two(1, 1).run_local(batches, fuse=False)
    assume(any(_data(reference, ("group", "total"))))          # not vacuous: some seeds give no totals
    for n in (n1, 3):
        for fuse in (True, False):
            got = two(n).run_local(batches, fuse=fuse)
            assert _data(got, ("group", "total", "event_time_ms")) == _data(reference, ("group", "total", "event_time_ms"))
    a = Pipeline([TumblingCount(num_key_groups=n1)]).run_local(batches)
    b = Pipeline([TumblingCount(num_key_groups=1)]).run_local(batches)
    assert _data(a, cols) == _data(b, cols)


def test_plan_fuses_same_key_and_splits_on_rekeying():
    p = TumblingCount().then(TumblingCount(key="k", value="count", name="c2")).then(RunningTotal())
    assert [[s.name for s in op] for op in p.plan()] == [["tumbling_count", "c2"], ["running_total"]]
    assert [[s.name for s in op] for op in p.plan(fuse=False)] == [["tumbling_count"], ["c2"], ["running_total"]]
    # another number of key groups, an expression input, or fuse=False: a new operator
    assert len(TumblingCount().then(TumblingCount(key="k", value="count", num_key_groups=2)).plan()) == 2
    assert len(TumblingCount().then(TumblingCount(key="k", value="count * 2")).plan()) == 2
    assert len(TumblingCount().then(TumblingCount(key="k", value="count"), fuse=False).plan()) == 2
    with pytest.raises(ValueError, match="cannot run fused"):
        TumblingCount().then(TumblingCount(key="k", value="count * 2"), fuse=True).plan()


def test_forced_fusion_with_another_key_is_refused_at_run_time():
    p = TumblingCount(num_key_groups=2).then(RunningTotal(num_key_groups=2), fuse=True)
    assert len(p.plan()) == 1
    b = batch([(0, i, f"{c}{i}", 1.0, 10) for i, c in enumerate("abcdefgh")], {0: 5000, 1: 5000, 2: 5000})
    with pytest.raises(FusionError, match="is fused after 'tumbling_count'"):
        p.run_local([b])


def test_modification_applied_at_the_same_point_in_every_key_group_and_forwarded_once():
    recs1 = [(p, i, f"k{i}", 1.0, 100 + i) for p in range(PARTS) for i in range(6)]
    recs2 = [(p, 6 + i, f"k{i}", 1.0, 1100 + i) for p in range(PARTS) for i in range(6)]
    b1 = batch(recs1, {p: 1000 for p in range(PARTS)})
    b2 = batch(recs2, {p: 2000 for p in range(PARTS)}, mods=[(7, {"op": "weight", "stage": "tumbling_count",
                                                                    "value": 10})])
    p = TumblingCount().then(RunningTotal())
    outs = p.run_local([b1, b2])
    first = {r[0]: r[2] for r in data_rows(outs[0], "group", "event_time_ms", "total")}
    counts = data_rows(outs[1], "group", "total")
    # window [1000, 2000): 3 records per key, each weighted 10 from batch 2 on, in every key group
    assert first == {"k": 18} and counts[-1] == ("k", 18 + 6 * 30)
    mods = outs[1][outs[1]["kind"] == "modification"]
    assert len(mods) == 1 and mods["control_offset"].tolist() == [7] and mods["topic"].tolist() == ["running_total"]
    assert (outs[0]["kind"] == "modification").sum() == 0
    # replaying the command in a later batch (an upstream duplicate) changes nothing
    b3 = batch([], {p: 3000 for p in range(PARTS)}, mods=[(7, {"op": "weight", "value": 99})])
    assert (p.run_local([b1, b2, b3])[2]["kind"] == "modification").sum() == 0


def test_python_routing_uses_the_same_hash_as_the_jvm_formula():
    from dataflow_kafka.keygroups.routing import hash_key

    # values computed by Spark 4.3: SELECT xxhash64('hello'), xxhash64(CAST(7 AS BIGINT)), ...
    assert hash_key("hello") == -4367754540140381902 == hash_key(b"hello")
    assert hash_key(7) == -2864211556195259663 and hash_key(7, int_width=4) == 2786828215451145335
    assert hash_key(("a", "b")) == -7357372313250070212
    assert hash_key(None) == 42 and hash_key(1.5) == 7738255526519901366 and hash_key(True) == -6698625589789238999
    assert key_group_of("hello", 5) == -4367754540140381902 % 5
    with pytest.raises(TypeError, match="cannot route a key of type dict"):
        key_group_of({"a": 1}, 3)


@pytest.mark.parametrize("fuse", [True, False])
def test_emit_keeps_an_earlier_stage_output_as_result_rows(fuse):
    batches = _random_batches(11)
    p = TumblingCount().then(TumblingCount(key="k", value="count", size_ms=3000, name="coarse")).then(RunningTotal())
    outs = p.emit("tumbling_count").run_local(batches, fuse=fuse)
    alone = Pipeline([TumblingCount()]).run_local(batches)
    cols = ["k", "window_start_ms", "count", "event_time_ms"]
    for o, a in zip(outs, alone):
        res = o[(o["kind"] == "result") & (o["topic"] == "tumbling_count")]
        assert sorted(res[cols].itertuples(index=False)) == data_rows(a, *cols)
    assert sum((o["kind"] == "result").sum() for o in outs) > 0
    assert set(p.emit("tumbling_count").output_columns()) >= {("count", "bigint"), ("total", "bigint")}
    with pytest.raises(ValueError, match="no stage named 'nope'"):
        p.emit("nope")


def _totals(n: int, partial: bool):
    """Records counted per key and window, then the counts summed per window: with ``partial``
    through a partial sum per key group (``fuse="partial"``) summed again after the shuffle."""
    from dataflow_kafka.watermarks.stage import WindowingStage
    from dataflow_kafka.windowing import Count, Sum, TumblingWindow

    counts = WindowingStage(key={"k": "k"}, value="v", windows=TumblingWindow(1000), aggregations=[Count()],
                            output_watermark="input", num_key_groups=n, name="counts")
    if not partial:
        return counts.then(WindowingStage(key={"w": "window_end_ms"}, value="count", windows=TumblingWindow(1000),
                                          aggregations=[Sum()], num_key_groups=n, name="total"))
    part = WindowingStage(key={"w": "window_end_ms"}, value="count", windows=TumblingWindow(1000), aggregations=[Sum()],
                          output_watermark="input", num_key_groups=n, name="part")
    return counts.then(part, fuse="partial").then(WindowingStage(
        key={"w": "w"}, value="sum", windows=TumblingWindow(1000), aggregations=[Sum()], num_key_groups=n, name="total"))


@pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")
@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 10_000), n1=st.integers(1, 4))
def test_a_partial_stage_changes_no_result_for_any_key_groups_or_fusion(seed, n1):
    """``fuse="partial"``: the sum per window of counts per key, summed first per key group where
    the counts are and then after the shuffle, equals the sum without the partial stage, for any
    number of key groups, fused or not (then the partial stage runs on its own key)."""
    batches = _random_batches(seed)
    cols = ("w", "window_start_ms", "sum", "event_time_ms")
    reference = _totals(1, partial=False).run_local(batches, fuse=False)
    assume(any(_data(reference, cols)))
    for n in (n1, 3):
        for fuse in (True, False):
            assert _data(_totals(n, partial=True).run_local(batches, fuse=fuse), cols) == _data(reference, cols)


def test_a_partial_stage_runs_where_the_previous_stage_ran_and_the_next_one_is_shuffled():
    p = _totals(3, partial=True)
    assert [[s.name for s in op] for op in p.plan()] == [["counts", "part"], ["total"]]
    assert [[s.name for s in op] for op in p.plan(fuse=False)] == [["counts"], ["part"], ["total"]]
    with pytest.raises(ValueError, match="fuse=True: 'total' cannot run fused after 'part', a partial stage"):
        p.stages[0].then(p.stages[1], fuse="partial").then(p.stages[2], fuse=True).plan()
    with pytest.raises(ValueError, match="fuse='partial': 'running_total' cannot run in the key groups of 'counts'"):
        p.stages[0].then(RunningTotal(num_key_groups=3), fuse="partial").plan()
    with pytest.raises(ValueError, match="fuse must be None, True, False or 'partial', got 'yes'"):
        p.stages[0].then(p.stages[1], fuse="yes")
