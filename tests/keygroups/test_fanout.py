"""``keygroups.fanout``: a first stage's key spreading one global aggregation over ``n`` buckets
(Beam's ``Combine.globally(...).withFanout(n)``). Its values put bucket ``i`` in key group ``i``,
Spark's JVM computes the same ones (its ``sql``), and a global aggregation fanned out this way
gives the same windows whatever ``n``, the key groups and the batch split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.keygroups import Pipeline, fanout, key_groups_of
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, Sum, TumblingWindow
from tests.keygroups.test_pipeline_local import batch
from tests.suite import examples


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 16])
def test_bucket_i_lands_in_key_group_i_and_offsets_take_turns(n):
    c = fanout(n)
    offsets = np.arange(5 * n) + 1_000
    keys = np.asarray(c(pd.DataFrame({"offset": offsets})), np.int64)
    assert key_groups_of([keys], n, [8]).tolist() == [int(o % n) for o in offsets]
    assert len(set(keys.tolist())) == n                      # n distinct keys, consecutive offsets rotate


def test_null_offsets_give_null_keys_and_bad_arguments_are_refused():
    got = fanout(3)(pd.DataFrame({"offset": pd.array([4, None, -1], dtype="Int64")}))
    values = fanout(3).fn.keys.tolist()
    assert list(got) == [values[1], None, values[2]]          # -1: bucket 2, as Spark's pmod
    for bad in (0, -2, True, 2.0):
        with pytest.raises(InvalidArgumentError, match="fanout"):
            fanout(bad)
    with pytest.raises(InvalidArgumentError, match="column"):
        fanout(2, column="a`b")


@pytest.mark.spark
@pytest.mark.parametrize("n", [1, 3, 8])
def test_spark_computes_the_same_keys_in_the_jvm(spark, n):
    from pyspark.sql import functions as F

    c = fanout(n)
    offsets = [0, 1, 2, 5, 17, 2**40 + 3, -1, None]
    df = spark.createDataFrame(pd.DataFrame({"i": range(len(offsets)), "offset": pd.array(offsets, dtype="Int64")}),
                               "i int, offset bigint")
    got = [r[0] for r in df.orderBy("i").select(F.expr(c.sql)).collect()]
    assert got == [None if v is None or v is pd.NA else int(v) for v in c(pd.DataFrame({"offset": offsets}))]


def _global_count(n: int, key_groups: int) -> Pipeline:
    """Per window: the number of records, fanned out over ``n`` buckets (discarding panes: each
    carries the records since the bucket's previous pane), then summed."""
    first = WindowingStage(key={"fan": fanout(n)}, value="v", aggregations=[Count()], output_watermark="input",
                           windows=TumblingWindow(1_000), trigger=AfterWatermark(late=AfterCount(1)),
                           accumulation_mode="discarding", allowed_lateness_ms=2_000, num_key_groups=key_groups,
                           name="fan")
    top = WindowingStage(key={"w": "window_end_ms"}, value="count", aggregations=[Sum()],
                         windows=TumblingWindow(1_000), trigger=AfterWatermark(late=AfterCount(1)),
                         accumulation_mode="accumulating", allowed_lateness_ms=2_000, num_key_groups=2, name="top")
    return Pipeline([first]).then(top)


@settings(max_examples=examples(40), deadline=None)
@given(records=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50), st.integers(0, 4_999)),
                        min_size=1, max_size=40),
       n=st.integers(1, 6), key_groups=st.integers(1, 5), cut=st.integers(0, 40))
def test_a_fanned_out_global_aggregation_equals_the_brute_force_per_window(records, n, key_groups, cut):
    """Whatever ``n``, the first stage's key groups and where the batches are cut: each window's
    last pane holds the window's number of records. The first batch's watermark
    (2,500) closes the first two windows; their records in the second batch come late, within the
    lateness (2,000 ms), and fire late panes of the buckets they fall in."""
    offsets: dict[int, int] = {}
    rows = []
    for p, v, t in records:
        offsets[p] = offsets.get(p, -1) + 1
        rows.append((p, offsets[p], "k", float(v), t))
    cut = min(cut, len(rows))
    out = _global_count(n, key_groups).run_local([batch(rows[:cut], {p: 2_500 for p in range(3)}),
                                                  batch(rows[cut:], {p: 9_999 for p in range(3)})])
    last: dict[int, int] = {}
    for frame in out:
        d = frame[frame["kind"] == "data"]
        last.update((int(w), int(c)) for w, c in zip(d["w"], d["sum"]))
    expected: dict[int, int] = {}
    for _, _, _, _, t in rows:
        end = t // 1_000 * 1_000 + 1_000
        expected[end] = expected.get(end, 0) + 1
    assert last == expected
