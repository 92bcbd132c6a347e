"""keygroups.routing's numpy path: ``key_groups_of`` hashes integer (and boolean) key columns in
numpy (``xxhash64_ints``) and must give, row by row, what Spark's ``pmod(xxhash64(cols...), n)``
gives. The reference here is built straight from ``xxhash.xxh64_intdigest`` and ``struct``: seed
42, each column's hash seeding the next, null skipped, a bigint as 8 little-endian bytes, an int
as 4, a boolean as the int 0/1, a string as its UTF-8 bytes."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups.frames import groups_of_columns
from dataflow_kafka.keygroups.routing import key_group_of, key_groups_of, xxhash64_ints
from tests.suite import examples

INT64 = (-2**63, 2**63 - 1)
INT32 = (-2**31, 2**31 - 1)
EXTREMES = [-2**63, 2**63 - 1, 0, -1, 1, -2**31, 2**31 - 1, 2**31, -2**31 - 1, 2**32 - 1, 2**32]
EXTREMES32 = [v for v in EXTREMES if INT32[0] <= v <= INT32[1]]


def ref_hash(value, seed: int, width: int) -> int:
    """Unsigned XXH64 of one column value, as Spark's ``XxHash64Function``."""
    if value is None:
        return seed
    if isinstance(value, bool):
        return xxhash.xxh64_intdigest(struct.pack("<i", int(value)), seed)
    if isinstance(value, int):
        return xxhash.xxh64_intdigest(struct.pack("<i" if width == 4 else "<q", value), seed)
    if isinstance(value, str):
        return xxhash.xxh64_intdigest(value.encode("utf-8"), seed)
    raise AssertionError(f"the reference has no hash for {value!r}")


def ref_groups(columns: list[list], n: int, widths: list[int] | None = None) -> list[int]:
    """``pmod(xxhash64(columns...), n)`` of each row, one row at a time."""
    widths = widths or [8] * len(columns)
    out = []
    for row in zip(*columns):
        h = 42
        for v, w in zip(row, widths):
            h = ref_hash(v, h, w)
        out.append((h - 2**64 if h >= 2**63 else h) % n)
    return out


def ints(lo: int, hi: int):
    return st.one_of(st.sampled_from([v for v in EXTREMES if lo <= v <= hi]), st.integers(lo, hi))


int64s, int32s = ints(*INT64), ints(*INT32)
ns = st.integers(1, 64)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.one_of(st.none(), int64s), max_size=40), ns)
def test_an_int64_column_with_nulls_hashes_as_row_by_row(values, n):
    want = ref_groups([values], n)
    assert key_groups_of([values], n).tolist() == want
    nulls = [v is None for v in values]
    lane = np.array([0 if v is None else v for v in values], dtype=np.int64)
    assert key_groups_of([np.ma.MaskedArray(lane, nulls)], n).tolist() == want
    assert key_groups_of([pd.Series(values, dtype="Int64")], n).tolist() == want
    if not any(nulls):
        assert key_groups_of([lane], n).tolist() == want
        assert key_groups_of([pd.Series(lane)], n).tolist() == want
        assert key_groups_of([[np.int64(v) for v in values]], n).tolist() == want


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.one_of(st.none(), int32s), max_size=40), ns)
def test_an_int32_column_hashes_four_bytes(values, n):
    want = ref_groups([values], n, [4])
    assert key_groups_of([values], n, [4]).tolist() == want
    assert key_groups_of([pd.Series(values, dtype="Int32")], n, [4]).tolist() == want
    lane = np.array([0 if v is None else v for v in values], dtype=np.int32)
    assert key_groups_of([np.ma.MaskedArray(lane, [v is None for v in values])], n, [4]).tolist() == want
    if None not in values:
        assert key_groups_of([lane], n, [4]).tolist() == want
        assert key_groups_of([lane.astype(np.int64)], n, [4]).tolist() == want   # the width, not the dtype


@st.composite
def key_columns(draw):
    """1-3 key columns of one length: int64, int32 (width 4), string, bool or mixed (ints with strings,
    or with bools: a bool among ints still hashes as a boolean), with nulls."""
    rows = draw(st.integers(0, 30))
    columns, widths = [], []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["int64", "int32", "str", "bool", "mixed", "bools and ints"]))
        value = {"int64": int64s, "int32": int32s, "str": st.text(max_size=6), "bool": st.booleans(),
                 "mixed": st.one_of(int32s, st.text(max_size=4)),
                 "bools and ints": st.one_of(st.booleans(), int32s)}[kind]
        columns.append(draw(st.lists(st.one_of(st.none(), value), min_size=rows, max_size=rows)))
        widths.append(4 if kind in ("int32", "mixed", "bools and ints") and draw(st.booleans()) else 8)
    return columns, widths


@settings(max_examples=examples(300), deadline=None)
@given(key_columns(), ns)
def test_chained_columns_mixing_ints_strings_and_nulls(cols, n):
    columns, widths = cols
    want = ref_groups(columns, n, widths)
    assert key_groups_of(columns, n, widths).tolist() == want
    assert [key_group_of(row, n) for row in zip(*columns)] == ref_groups(columns, n)   # tuples: bigint ints


@pytest.mark.parametrize("value", EXTREMES)
@pytest.mark.parametrize("seed", [42, 0, 2**64 - 1, 0x9E3779B185EBCA87])
def test_xxhash64_ints_is_xxh64_of_the_packed_int(value, seed):
    if INT64[0] <= value <= INT64[1]:
        assert int(xxhash64_ints(np.int64(value), seed)) == xxhash.xxh64_intdigest(struct.pack("<q", value), seed)
    if INT32[0] <= value <= INT32[1]:
        assert int(xxhash64_ints(value, seed, 4)) == xxhash.xxh64_intdigest(struct.pack("<i", value), seed)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(int64s, min_size=1, max_size=50), st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50))
def test_xxhash64_ints_takes_a_seed_per_value(values, seeds):
    k = min(len(values), len(seeds))
    got = xxhash64_ints(np.array(values[:k], np.int64), np.array(seeds[:k], np.uint64))
    assert got.dtype == np.uint64
    assert got.tolist() == [xxhash.xxh64_intdigest(struct.pack("<q", v), s) for v, s in zip(values, seeds)]
    got4 = xxhash64_ints(np.array(values[:k], np.int64) % 2**32 - 2**31, np.array(seeds[:k], np.uint64), 4)
    assert got4.tolist() == [xxhash.xxh64_intdigest(struct.pack("<i", v % 2**32 - 2**31), s)
                             for v, s in zip(values, seeds)]


def test_extremes_in_every_form():
    for n in (1, 2, 7, 64):
        want = ref_groups([EXTREMES[:2] + [0, -1]], n)
        for column in (EXTREMES[:2] + [0, -1], np.array(EXTREMES[:2] + [0, -1], np.int64),
                       pd.Series(EXTREMES[:2] + [0, -1], dtype="Int64")):
            assert key_groups_of([column], n).tolist() == want
        assert key_groups_of([EXTREMES32], n, [4]).tolist() == ref_groups([EXTREMES32], n, [4])


def test_a_long_int_column_and_a_bool_column():
    rng = np.random.default_rng(5)
    lane = rng.integers(-2**63, 2**63 - 1, size=3000, dtype=np.int64, endpoint=True)
    flags = rng.random(3000) < 0.5
    want = ref_groups([lane.tolist(), flags.tolist()], 13)
    assert key_groups_of([lane, flags], 13).tolist() == want
    assert key_groups_of([lane.tolist(), flags.tolist()], 13).tolist() == want
    assert key_groups_of([np.arange(1000)], 4).tolist() == ref_groups([list(range(1000))], 4)


def test_ints_that_do_not_fit_fail_as_before():
    with pytest.raises(struct.error):
        key_groups_of([[1, 2**63]], 4)
    with pytest.raises(struct.error):
        key_groups_of([[1, 2**31]], 4, [4])
    with pytest.raises(struct.error):
        key_groups_of([np.array([2**64 - 1], np.uint64)], 4)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["data", "data", "punctuation"]), st.one_of(st.none(), int64s),
                          st.text(max_size=3), int32s), max_size=30), ns)
def test_groups_of_columns_on_a_nullable_int64_key(rows, n):
    df = pd.DataFrame({"kind": pd.Series([r[0] for r in rows], dtype=object),
                       "k": pd.Series([r[1] for r in rows], dtype="Int64"),
                       "s": pd.Series([r[2] for r in rows], dtype=object),
                       "i32": pd.Series([r[3] for r in rows], dtype="int32"),
                       "i64": pd.Series([r[3] for r in rows], dtype="int64")})
    data = [r for r in rows if r[0] == "data"]
    k, s, i = ([r[j] for r in data] for j in (1, 2, 3))
    for keys, columns, widths in ((["k"], [k], [8]), (["k", "s"], [k, s], [8, 8]),
                                  (["i32", "k"], [i, k], [4, 8]), (["s", "i64"], [s, i], [8, 8])):
        got = groups_of_columns(df, keys, n)
        assert got.dtype == np.int64 and len(got) == len(rows)
        assert got[(df["kind"] == "data").to_numpy()].tolist() == ref_groups(columns, n, widths)
        assert (got[(df["kind"] != "data").to_numpy()] == 0).all()
