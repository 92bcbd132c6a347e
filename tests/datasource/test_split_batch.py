"""keygroups.split_batch against a brute-force reference (pure pandas, no Spark)."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from keygroups.processor import _in_offset_order, split_batch
from watermarks.punctuation import PunctuationTracker

_rows = st.lists(
    st.tuples(st.sampled_from(["data", "data", "data", "punctuation", "modification"]),
              st.sampled_from(["a", "b", "t-1"]), st.integers(0, 3), st.integers(0, 20),
              st.one_of(st.none(), st.integers(0, 10_000))),
    max_size=40)


def _frame(rows) -> pd.DataFrame:
    pdf = pd.DataFrame(rows, columns=["kind", "topic", "partition", "offset", "value"])
    pdf["punctuation_ms"] = pd.array([v if k == "punctuation" else None for k, *_, v in rows], dtype="Int64")
    pdf["modification"] = [f"cmd-{v}" if k == "modification" else None for k, *_, v in rows]
    pdf["timestamp"] = pd.array([7 if k == "modification" else None for k, *_ in rows], dtype="Int64")
    pdf["processing_time_ms"] = pd.array([1_000] * len(rows), dtype="Int64")
    pdf["partition"] = pdf["partition"].astype("Int32")
    pdf["offset"] = pdf["offset"].astype("Int64")
    return pdf


@settings(max_examples=300, deadline=None)
@given(_rows, st.booleans(), st.randoms(use_true_random=False))
def test_split_batch_equals_sorting_every_time(rows, presort, rnd):
    pdf = _frame(rows)
    if presort:      # the order keygroups.packed unpacks in
        pdf = pdf.sort_values(["topic", "partition", "offset", "kind"], kind="stable")
    else:
        pdf = pdf.iloc[rnd.sample(range(len(pdf)), len(pdf))]
    got = split_batch(3, pdf, PunctuationTracker())
    data = pdf[pdf["kind"] == "data"].sort_values(["topic", "partition", "offset"], kind="stable")
    pd.testing.assert_frame_equal(got.data, data)
    ref = PunctuationTracker()
    for _, r in pdf[pdf["kind"] == "punctuation"].iterrows():
        ref.update(f"{r.topic}-{r.partition}", None if pd.isna(r.punctuation_ms) else int(r.punctuation_ms),
                   int(r.offset), 1_000)
    assert got.low_watermark_ms == ref.low_watermark_ms
    mods = list(dict.fromkeys(pdf.loc[pdf["kind"] == "modification", "modification"]))
    assert got.modifications == mods
    assert got.processing_time_ms == (1_000 if len(pdf) else None)


@settings(max_examples=300, deadline=None)
@given(_rows)
def test_in_offset_order_matches_a_sort(rows):
    pdf = _frame(rows)
    cols = ["topic", "partition", "offset"]
    by_sort = pdf.sort_values(cols, kind="stable")
    sorted_already = pdf[cols].reset_index(drop=True).equals(by_sort[cols].reset_index(drop=True))
    assert _in_offset_order(pdf) == sorted_already
    assert _in_offset_order(by_sort)
