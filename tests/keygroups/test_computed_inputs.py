"""Computed stage inputs and ``emit`` without Spark: an inner stage reads
a Python expression of several columns of the previous stage (Q5's
``to_json(named_struct('auction', auction, 'count', count))``), which ``run_local`` evaluates
as Spark does (``tests/keygroups/test_emit_spark.py`` runs the same pipeline shape on Spark); fused
or not and whatever the number of key groups, the result is the same; emitted rows keep their
stage's columns and types."""

from __future__ import annotations

import json
import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups import Computed, Pipeline, json_object
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.keygroups.plan import frame_types
from dataflow_kafka.slicer.stage import SlicerStage
from tests.keygroups.toy_stages import Hottest
from tests.suite import examples
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, Max, Sum, TumblingWindow


def bids(seed: int, n_batches: int = 5, per_batch: int = 25) -> list[pd.DataFrame]:
    """Source micro-batches of bids: ``auction`` (int64) and ``price`` columns, one partition."""
    rnd = random.Random(seed)
    out, off = [], 0
    for b in range(n_batches):
        rows, auctions = [], []
        for _ in range(per_batch):
            rows.append({"kind": "data", "topic": "bids", "partition": 0, "offset": off,
                         "event_time_ms": b * 1000 + rnd.randint(0, 999), "processing_time_ms": b})
            auctions.append(rnd.randrange(6))
            off += 1
        rows.append({"kind": "punctuation", "topic": "bids", "partition": 0, "offset": off,
                     "punctuation_ms": b * 1000 + 999, "processing_time_ms": b})
        frame = control_frame(rows)
        frame["auction"] = pd.array(auctions + [None], dtype="Int64")
        frame["price"] = [float(rnd.randint(1, 9)) for _ in range(per_batch)] + [None]
        out.append(frame)
    return out


def q5(n: int = 2, value=None) -> Pipeline:
    counts = SlicerStage(key="auction", value="price", windows={"1s": TumblingWindow(1000)}, aggregations=[Count()],
                         allowed_lateness_ms=0, num_key_groups=n, name="counts")
    hot = WindowingStage(key={"w": "window_end_ms"}, value=value or json_object("auction", "count"),
                         windows=TumblingWindow(1000), aggregations=[Hottest()], num_key_groups=n, name="hot")
    return counts.then(hot).emit("counts")


def test_q5_runs_locally_with_a_json_value_of_two_columns():
    batches = bids(1)
    out = q5().run_local(batches)
    got = {r["w"]: json.loads(json.loads(r["hottest"])) for o in out for r in o[o["kind"] == "data"].to_dict("records")}
    data = pd.concat([b[b["kind"] == "data"] for b in batches])
    for w, best in got.items():
        per = data[(data["event_time_ms"] >= w - 1000) & (data["event_time_ms"] < w)].groupby("auction").size()
        top = per.max()
        assert best == {"auction": int(per[per == top].index.min()), "count": int(top)}
    assert sorted(got) == [1000, 2000, 3000, 4000]


def test_an_inner_sql_expression_names_the_way_out():
    p = q5(value="to_json(named_struct('auction', auction, 'count', count))")
    with pytest.raises(ValueError, match="evaluated by Spark only: give the input as keygroups.Computed"):
        p.run_local(bids(1))


@settings(max_examples=examples(15), deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_computed_keys_and_values_give_the_same_result_for_any_key_groups_and_fused_or_not(seed, n):
    def pipe(groups):
        first = SlicerStage(key="auction", value="price", windows={"1s": TumblingWindow(1000)}, aggregations=[Sum()],
                            allowed_lateness_ms=0, num_key_groups=groups, name="sums")
        same_key = SlicerStage(key="auction", value=Computed(lambda df: df["sum"] * 2 + df["auction"], "double",
                                                             ("sum", "auction")),
                               windows={"2s": TumblingWindow(2000)}, aggregations=[Max()], allowed_lateness_ms=0,
                               num_key_groups=groups, name="same")
        rekeyed = WindowingStage(key={"parity": Computed(lambda df: df["auction"] % 2, "bigint", ("auction",))},
                                 value="max", windows=TumblingWindow(4000), aggregations=[Max()], num_key_groups=groups,
                                 name="parity")
        return first.then(same_key).then(rekeyed)

    assert [len(op) for op in pipe(n).plan()] == [2, 1]       # a computed value does not prevent fusion
    batches = bids(seed, 6)
    cols = ["parity", "window_start_ms", "max"]
    rows = [sorted(map(tuple, o[o["kind"] == "data"][cols].values.tolist())) for o in pipe(n).run_local(batches)]
    assert rows == [sorted(map(tuple, o[o["kind"] == "data"][cols].values.tolist()))
                    for o in pipe(1).run_local(batches, fuse=False)]
    assert any(rows)


def test_emitted_rows_keep_their_columns_and_types_locally():
    p = q5()
    batches = bids(3)
    out = p.run_local(batches)
    declared = p.bound_specs(frame_types(batches[0]))[-1].output_columns()
    assert dict(declared)["auction"] == "bigint"                       # the emitted stage's key, as on Spark
    assert p.output_columns(input=frame_types(batches[0])) == declared
    for o in out:
        assert list(o.columns) == [c for c, _ in declared]
        assert str(o["auction"].dtype) == "Int64"
        res = o[o["kind"] == "result"]
        assert res[["auction", "query_id", "window_start_ms", "window_end_ms", "count"]].notna().all().all()
        assert res["w"].isna().all()            # the next stage's input is computed on its data rows only
    assert sum((o["kind"] == "result").sum() for o in out) > 0


def test_an_emitted_column_whose_type_clashes_with_the_output_is_an_error():
    counts = SlicerStage(key="auction", value="price", windows={"1s": TumblingWindow(1000)}, aggregations=[Count()],
                         name="counts")
    ok = counts.then(WindowingStage(key={"w": "window_end_ms"}, value="count", windows=TumblingWindow(1000),
                                    aggregations=[Max()], name="totals")).emit("counts")
    assert dict(ok.bound_specs({"auction": "bigint", "price": "double"})[-1].output_columns())["count"] == "bigint"
    clash = counts.then(SlicerStage(key={"count": Computed(lambda df: df["count"].astype(str), "string", ("count",))},
                                    value="count", windows={"1s": TumblingWindow(1000)}, aggregations=[Sum()],
                                    name="by_count")).emit("counts")
    with pytest.raises(ValueError, match="emitted column 'count' is bigint, but operator 'counts' outputs 'count' "
                                         "as string"):
        clash.bound_specs({"auction": "bigint", "price": "double"})


def test_docstring_examples():
    import doctest

    import dataflow_kafka.keygroups.computed as module
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
