"""``distinct_keys``, the windowing stages' one way to key a batch, against a row-by-row
reference: first-seen order, nulls of every kind one ``None``, numpy scalars as Python values,
for one and several key columns of every dtype a stage input has."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.windowing.rows import distinct_keys

from tests.suite import examples


def _plain(v):
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return None
    return v.item() if isinstance(v, np.generic) else v


def reference(frame, names):
    position, codes = {}, []
    for row in zip(*(frame[n].tolist() for n in names)):
        key = _plain(row[0]) if len(names) == 1 else tuple(_plain(v) for v in row)
        codes.append(position.setdefault(key, len(position)))
    return list(position), codes


COLUMNS = {
    "int64": st.lists(st.integers(-3, 3), min_size=0, max_size=30).map(lambda v: pd.Series(v, dtype="int64")),
    "Int64": st.lists(st.one_of(st.none(), st.integers(0, 3)), max_size=30).map(lambda v: pd.Series(v, dtype="Int64")),
    "float": st.lists(st.one_of(st.just(float("nan")), st.sampled_from([0.5, 1.0, -2.0])), max_size=30).map(
        lambda v: pd.Series(v, dtype="float64")),
    "str": st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "é"])), max_size=30).map(
        lambda v: pd.Series(v, dtype=object)),
    "mixed nulls": st.lists(st.sampled_from([None, float("nan"), pd.NA, 7, "7"]), max_size=30).map(
        lambda v: pd.Series(v, dtype=object)),
}


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=3).flatmap(
    lambda kinds: st.tuples(st.just(kinds), *(COLUMNS[k] for k in kinds))))
def test_distinct_keys_is_the_row_by_row_reference(drawn):
    kinds, *cols = drawn
    n = min(len(c) for c in cols)
    frame = pd.DataFrame({f"k{i}": c.iloc[:n].reset_index(drop=True) for i, c in enumerate(cols)})
    names = list(frame.columns)
    keys, codes = distinct_keys(frame, names)
    want_keys, want_codes = reference(frame, names)
    assert keys == want_keys and codes.tolist() == want_codes
    assert all(type(k) is type(w) for k, w in zip(keys, want_keys))
    assert codes.dtype == np.int64


def test_many_distinct_values_in_several_columns_stay_exact():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({c: rng.integers(0, 2**40, 5000) for c in "abcd"})
    frame = pd.concat([frame, frame.iloc[::7]], ignore_index=True)
    keys, codes = distinct_keys(frame, list("abcd"))
    assert (keys, codes.tolist()) == reference(frame, list("abcd"))
