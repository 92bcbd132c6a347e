"""keygroups.contract.split_rows against a brute-force reference (pure pandas, no Spark)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups.contract import Modification, _in_offset_order, split_rows

from tests.suite import examples

_rows = st.lists(
    st.tuples(st.sampled_from(["data", "data", "data", "punctuation", "modification", "dropped", "error"]),
              st.sampled_from(["a", "b", "t-1"]), st.integers(0, 3), st.integers(0, 20),
              st.one_of(st.none(), st.integers(0, 5))),
    max_size=40)


def _frame(rows) -> pd.DataFrame:
    pdf = pd.DataFrame(rows, columns=["kind", "topic", "partition", "offset", "value"])
    pdf["punctuation_ms"] = pd.array([v if k == "punctuation" else None for k, *_, v in rows], dtype="Int64")
    # Copies of one command arrive from every sender: the control offset is the identity (the
    # text alone when a row has none).
    pdf["modification"] = [f"cmd-{v}" if k == "modification" else None for k, *_, v in rows]
    pdf["control_offset"] = pd.array([v if k == "modification" else None for k, *_, v in rows], dtype="Int64")
    pdf["processing_time_ms"] = pd.array([1_000 + len(rows)] * len(rows), dtype="Int64")
    pdf["partition"] = pdf["partition"].astype("Int32")
    pdf["offset"] = pdf["offset"].astype("Int64")
    return pdf


@settings(max_examples=examples(300), deadline=None)
@given(_rows, st.booleans(), st.randoms(use_true_random=False))
def test_split_rows_equals_sorting_and_deduplicating_every_time(rows, presort, rnd):
    pdf = _frame(rows)
    if presort:      # the order keygroups.packed unpacks in
        pdf = pdf.sort_values(["topic", "partition", "offset", "kind"], kind="stable")
    else:
        pdf = pdf.iloc[rnd.sample(range(len(pdf)), len(pdf))]
    got = split_rows(pdf)
    data = pdf[pdf["kind"] == "data"].sort_values(["topic", "partition", "offset"], kind="stable")
    pd.testing.assert_frame_equal(got.data, data)
    mods = pdf[pdf["kind"] == "modification"]
    ref: dict = {}
    for text, off in zip(mods["modification"], mods["control_offset"]):
        key = ("t", text) if pd.isna(off) else ("o", int(off))
        ref.setdefault(key, Modification(None if pd.isna(off) else int(off), text))
    by_offset = sorted((m for m in ref.values() if m.control_offset is not None), key=lambda m: m.control_offset)
    assert got.modifications == by_offset + [m for m in ref.values() if m.control_offset is None]
    pd.testing.assert_frame_equal(got.punctuations, pdf[pdf["kind"] == "punctuation"])
    assert sorted(got.pass_on["kind"]) == sorted(k for k in pdf["kind"] if k in ("dropped", "error"))
    assert got.processing_time_ms == (1_000 + len(rows) if len(pdf) else None)


@settings(max_examples=examples(300), deadline=None)
@given(_rows)
def test_in_offset_order_matches_a_sort(rows):
    pdf = _frame(rows)
    cols = ["topic", "partition", "offset"]
    by_sort = pdf.sort_values(cols, kind="stable")
    sorted_already = pdf[cols].reset_index(drop=True).equals(by_sort[cols].reset_index(drop=True))
    assert _in_offset_order(pdf) == sorted_already
    assert _in_offset_order(by_sort)


def test_conform_types_nulls_and_missing_columns():
    from dataflow_kafka.keygroups.contract import conform

    a = pd.DataFrame({"kind": ["data", "data"], "n": [1, 2], "x": [0.5, None], "flag": [True, False],
                      "extra": ["dropped", "too"]})
    b = pd.DataFrame({"kind": ["punctuation"], "n": pd.array([None], dtype="Int64"), "s": [b"\x00"],
                      "p": pd.array([7], dtype="Int32")})
    c = pd.DataFrame({"kind": ["dropped"], "n": [3.0], "p": [None], "s": [float("nan")]})
    cols = [("kind", "string"), ("n", "bigint"), ("p", "int"), ("x", "double"), ("flag", "boolean"),
            ("s", "binary"), ("missing", "bigint")]
    got = conform([a, pd.DataFrame(), None, b, c], cols)
    assert list(got.columns) == [n for n, _ in cols] and list(got.index) == [0, 1, 2, 3]
    assert str(got["n"].dtype) == "Int64" and str(got["p"].dtype) == "Int32"
    assert str(got["flag"].dtype) == "boolean" and got["x"].dtype == "float64"
    assert got["n"].tolist() == [1, 2, pd.NA, 3]
    assert got["p"].tolist() == [pd.NA, pd.NA, 7, pd.NA]
    assert got["flag"].tolist() == [True, False, pd.NA, pd.NA]
    assert got["x"].isna().tolist() == [False, True, True, True] and got["x"][0] == 0.5
    assert got["s"].tolist() == [None, None, b"\x00", None]          # NaN in an object column -> None
    assert got["missing"].isna().all()
    empty = conform([], cols)
    assert len(empty) == 0 and list(empty.columns) == [n for n, _ in cols]


_cell = {"string": st.one_of(st.none(), st.sampled_from(["a", "data", ""])),
         "bigint": st.one_of(st.none(), st.integers(-2**62, 2**62)),
         "int": st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)),
         "double": st.one_of(st.none(), st.floats(allow_nan=False, width=64)),
         "boolean": st.one_of(st.none(), st.booleans())}
_COLS = [("kind", "string"), ("n", "bigint"), ("p", "int"), ("x", "double"), ("flag", "boolean")]


@st.composite
def _parts(draw):
    """Parts of rows given three ways: dict rows (as ``control_frame`` takes them), a frame plus
    columns given as scalars or numpy arrays, and ``Columns`` of the same."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        k = draw(st.integers(1, 5))
        names = draw(st.lists(st.sampled_from([c for c, _ in _COLS]), unique=True))
        how = {c: draw(st.sampled_from(["list", "scalar", "array"])) for c in names}
        values = {}
        for c in names:
            ddl = dict(_COLS)[c]
            if how[c] == "scalar":
                values[c] = draw(_cell[ddl])
            elif how[c] == "array" and ddl in ("bigint", "int", "double"):
                values[c] = np.array(draw(st.lists(_cell[ddl].filter(lambda v: v is not None), min_size=k, max_size=k)))
            else:
                values[c] = draw(st.lists(_cell[ddl], min_size=k, max_size=k))
        parts.append((k, values))
    return parts


@given(_parts(), st.sampled_from(["columns", "of_frame", "of_rows"]))
@settings(max_examples=examples(300))
def test_conform_takes_columns_as_it_takes_the_same_rows_as_frames(parts, how):
    """``Columns`` (lists, scalars, numpy arrays; over a frame; of dict rows) give what frames of
    the same rows give, the path every part took before ``Columns``."""
    from dataflow_kafka.keygroups.contract import Columns, conform

    def rows_of(k, values):
        return [{c: (v[i] if not _scalar(v) else v) for c, v in values.items()} for i in range(k)]

    # the reference: frames of Python objects (a frame inferred from rows with a null beside an integer
    # holds it as a double, which loses integers past 2**53: the old path for control rows did)
    frames = [pd.DataFrame(rows_of(k, v), index=range(k), dtype=object) if v else pd.DataFrame(index=range(k))
              for k, v in parts]
    if how == "columns":
        light = [Columns(k, dict(values)) for k, values in parts]
    elif how == "of_frame":
        light = [Columns.of_frame(pd.DataFrame({c: pd.Series(v, dtype=object) if isinstance(v, list) else v
                                                for c, v in values.items() if not _scalar(v)}, index=range(k)),
                                  **{c: v for c, v in values.items() if _scalar(v)}) for k, values in parts]
    else:
        light = [Columns.of_rows(rows_of(k, values)) if values else Columns(k, {}) for k, values in parts]
    assert [len(x) for x in light] == [k for k, _ in parts]
    pd.testing.assert_frame_equal(conform(light, _COLS), conform(frames, _COLS))


def _scalar(v) -> bool:
    return not isinstance(v, (list, np.ndarray))
