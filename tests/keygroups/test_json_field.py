"""``keygroups.json_field``: one field of a JSON record value, computed by Spark in the JVM
(its ``sql``, ``from_json``) and by ``run_local`` in one vectorised ``pyarrow.json`` pass (per row
when the pass cannot take a frame); both must give the same values on every row."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, strategies as st

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.keygroups import json_field

VALUES = [b'{"a": 3, "s": "x", "d": 1.5, "b": true}', b'{"a": -9223372036854775808, "s": "", "d": 2, "b": false}',
          b'{"a": "3", "s": 4, "d": "y", "b": 1}', b'{"s": null}', b'[1, 2]', b'not json', b'', None,
          b'{"a": 1.5, "nested": {"a": 7}}', b'{"a": true}', '{"a": 12, "s": "caf\\u00e9"}'.encode(),
          b'{"a": 99999999999999999999}', b'{"a": 2147483648}']
CLEAN = [b'{"a": %d, "s": "v%d", "d": %d.25, "b": %s}' % (i, i, i, b"true" if i % 2 else b"false")
         for i in range(50)]


def _plain(xs):
    return [None if x is None or (isinstance(x, float) and x != x) else x.item() if hasattr(x, "item") else x
            for x in xs]


@pytest.mark.parametrize("name,type_", [("a", "bigint"), ("a", "int"), ("s", "string"), ("d", "double"),
                                        ("b", "boolean")])
def test_the_vectorised_pass_equals_the_per_row_rule(name, type_):
    c = json_field(name, type_)
    for values in (CLEAN, VALUES):
        got = _plain(c(pd.DataFrame({"value": values})))
        assert got == c.fn._per_row(values)
    assert _plain(c(pd.DataFrame({"value": CLEAN}))) == [
        {"a": i, "s": f"v{i}", "d": i + 0.25, "b": bool(i % 2)}[name] for i in range(50)]


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidArgumentError, match="type='map'"):
        json_field("a", "map")
    with pytest.raises(InvalidArgumentError, match="name"):
        json_field("a`b")


@pytest.mark.spark
@pytest.mark.parametrize("name,type_", [("a", "bigint"), ("a", "int"), ("s", "string"), ("d", "double"),
                                        ("b", "boolean")])
def test_spark_computes_the_same_values_in_the_jvm(spark, name, type_):
    from pyspark.sql import functions as F

    c = json_field(name, type_)
    values = CLEAN[:5] + VALUES
    df = spark.createDataFrame(pd.DataFrame({"i": range(len(values)), "value": values}), "i int, value binary")
    got = [r[0] for r in df.orderBy("i").select(F.expr(c.sql).cast(type_)).collect()]
    assert got == _plain(c(pd.DataFrame({"value": values})))


def test_json_object_writes_what_json_dumps_writes():
    import json

    import numpy as np

    from dataflow_kafka.keygroups import json_object

    f = pd.DataFrame({"a": np.array([1, -2, 2**62, 0]), "b": pd.array([1, None, 3, 4], dtype="Int64"),
                      "c": [1.5, np.nan, 1e16, -0.0], "d": ["x", None, 'q"u\\ote', "caf\u00e9"],
                      "e": [True, False, True, False], "f": pd.array([True, None, False, True], dtype="boolean"),
                      "g": [{"k": 1}, [1, 2], None, pd.Timestamp(0)], "h": pd.array([1, 2, 3, 4], dtype="Int32"),
                      "u": np.array([0, 1, 2**63, 5], dtype=np.uint64),
                      "oi": pd.Series([np.int64(7), 8, None, -1], dtype=object),
                      "of": pd.Series([0.1, None, 1e16, 2.0], dtype=object),
                      "ob": pd.Series([True, None, False, True], dtype=object),
                      "inf": [float("inf"), 1.0, -float("inf"), 0.5], "none": [None] * 4,
                      "mix": pd.Series([1, "a", 2.5, None], dtype=object)})
    cols = tuple(f.columns)
    plain = [[None if pd.isna(v) is True else v.item() if hasattr(v, "item") else v for v in f[c].astype(object)]
             for c in cols]
    expected = [json.dumps(dict(zip(cols, row)), separators=(",", ":"), default=str) for row in zip(*plain)]
    assert json_object(*cols)(f).tolist() == expected
    assert json_object("a")(f.iloc[:0]).tolist() == []


@pytest.mark.spark
def test_several_fields_of_one_value_share_one_parse_and_give_the_same_values(spark):
    """Q7's first stage reads auction, bidder and price: one ``from_json`` with the three fields
    (keygroups.spark_steps), the same values as one parse per field and as run_local."""
    from dataflow_kafka.keygroups.spark_steps import compute_spark

    inputs = {"x": json_field("a"), "y": json_field("s", "string"), "z": json_field("d", "double"),
              "w": json_field("b", "boolean")}
    values = CLEAN[:5] + VALUES
    df = spark.createDataFrame(pd.DataFrame({"i": range(len(values)), "kind": "data", "value": values}),
                               "i int, kind string, value binary").repartition(1)    # no local folding
    out = compute_spark(df, inputs)
    plan = out._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("from_json(") == 1, plan
    rows = out.orderBy("i").collect()
    frame = pd.DataFrame({"value": values})
    for name, c in inputs.items():
        assert [r[name] for r in rows] == _plain(c(frame)), name


@given(picks=st.lists(st.sampled_from(VALUES + CLEAN), min_size=1, max_size=30),
       fields=st.lists(st.sampled_from([("a", "bigint"), ("a", "int"), ("s", "string"), ("d", "double"),
                                        ("b", "boolean")]), min_size=2, max_size=4),
       kinds=st.lists(st.sampled_from(["data", "data", "punctuation"]), min_size=30, max_size=30))
def test_several_fields_evaluated_together_equal_each_evaluated_alone(picks, fields, kinds):
    """``evaluate`` parses the fields of one column once where it can: each input's values (types
    and nulls included) equal what it computes alone, whatever the values and which rows are data."""
    from dataflow_kafka.keygroups.computed import evaluate

    frame = pd.DataFrame({"value": picks, "kind": kinds[:len(picks)]})
    computed = {f"in{i}": json_field(n, t) for i, (n, t) in enumerate(fields)}
    together = evaluate(frame, computed)
    for name, c in computed.items():
        alone = evaluate(frame, {name: c})[name]
        pd.testing.assert_series_equal(together[name], alone)


@given(picks=st.lists(st.sampled_from([v for v in VALUES if v is not None] + CLEAN + [b'{"a": 1,\n"s": "x"}']),
                      max_size=30),
       fields=st.lists(st.sampled_from([("a", "bigint"), ("a", "int"), ("s", "string"), ("d", "double"),
                                        ("b", "boolean")]), min_size=1, max_size=3, unique_by=lambda f: f[0]))
def test_the_arrow_pass_gives_json_fields_values_or_declines(picks, fields):
    """``json_fields_of_arrow`` (the source's parse, over an Arrow column) gives each field exactly
    what ``json_field`` computes, or raises where ``json_field`` parses row by row."""
    import pyarrow as pa

    from dataflow_kafka.keygroups.computed import json_fields_of_arrow

    arr = pa.array(picks, pa.binary())
    try:
        got = json_fields_of_arrow(pa.chunked_array([arr[:3], arr[3:]]), dict(fields))
    except (TypeError, ValueError, pa.ArrowInvalid):
        got = None
    for name, type_ in fields:
        want = _plain(json_field(name, type_)(pd.DataFrame({"value": picks})))
        if got is not None:
            assert got[name].to_pylist() == want
    if picks and all(v in CLEAN for v in picks):
        assert got is not None                         # clean values take the one pass


def test_evaluate_calls_no_function_for_a_batch_without_data_rows():
    """A batch of markers only: no input function is called (it may read a column such rows lack)."""
    from dataflow_kafka.keygroups import Computed
    from dataflow_kafka.keygroups.computed import evaluate

    def needs_key(frame):
        return frame["key"]

    out = evaluate(pd.DataFrame({"kind": ["punctuation"], "value": [None]}),
                   {"k": Computed(needs_key, "string", ("key",)), "a": json_field("a"), "b": json_field("b")})
    assert out["k"].isna().all() and out["a"].isna().all() and len(out) == 1
