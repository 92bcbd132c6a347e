"""NEXMark's aggregations of its own. ArgMax: a window's values folded in one call
(``add_inputs``, the Dataflow driver's batch) give the accumulator of one ``add_input`` per value,
for JSON texts, bytes, lists of entries, parsed entries and ``(value, text)`` pairs, from any
accumulator; pairs give what their texts give, and tuples of ``fields`` what the JSON objects of
those fields give; its fast parse is ``json.loads`` on every text,
errors included. MostFrequent: the most frequent values of any bundles and merges, against a
brute-force count."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.nexmark.aggregations import ArgMax, MostFrequent, _parse

from tests.suite import examples

#: counts: small ints (ties), a float, ints beyond a double's precision (2**60 + 1 and 2**60 are one double)
count = st.one_of(st.none(), st.integers(0, 5), st.sampled_from([2.5, 2**60, 2**60 + 1]))
entry = st.fixed_dictionaries({"auction": st.integers(1, 4), "count": count})


def _as_value(entries, form):
    if form == "dict":
        return entries[0]
    if form == "pair":
        return entries[0].get("count"), json.dumps(entries[0], separators=(",", ":"))
    text = json.dumps(entries if form == "list" else entries[0], separators=(",", ":"))
    return text.encode() if form == "bytes" else (" " + text if form == "spaced" else text)


value = st.tuples(st.lists(entry, min_size=1, max_size=3),
                  st.sampled_from(["text", "bytes", "list", "dict", "spaced", "pair"])).map(lambda p: _as_value(*p))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(value, max_size=30), st.lists(value, max_size=4), st.sampled_from([("auction",), None]))
def test_add_inputs_is_one_add_input_per_value(values, before, key):
    agg = ArgMax("count", key=key)
    start = agg.create_accumulator()
    for v in before:
        start = agg.add_input(start, v)
    one_by_one = copy.deepcopy(start)
    for v in values:
        one_by_one = agg.add_input(one_by_one, v)
    batched = agg.add_inputs(copy.deepcopy(start), values)
    assert batched[0] == one_by_one[0]
    assert list(batched[1].items()) == list(one_by_one[1].items())
    assert agg.extract_output(batched) == agg.extract_output(one_by_one)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(entry, min_size=1, max_size=3), max_size=5), st.lists(value, max_size=4),
       st.sampled_from([("auction",), None]), st.booleans())
def test_pairs_give_what_their_texts_give(bundles, before, key, floats):
    """A Dataflow stage's tuple value ``(count, text)``: only the texts at the top are parsed, and
    the accumulator is the texts' alone, bundle after bundle (``add_inputs``) or one by one; also
    where the pair's number is a float (pandas' column of a nullable bigint) and the text's an int."""
    agg = ArgMax("count", key=key)
    start = agg.create_accumulator()
    for v in before:
        start = agg.add_input(start, v)
    texts, pairs, singles = copy.deepcopy(start), copy.deepcopy(start), copy.deepcopy(start)
    for bundle in bundles:
        as_text = [json.dumps(e, separators=(",", ":")) for e in bundle]
        texts = agg.add_inputs(texts, as_text)
        nums = [float(e["count"]) if floats and isinstance(e["count"], int) and e["count"] < 2**53 else e["count"]
                for e in bundle]
        pairs = agg.add_inputs(pairs, list(zip(nums, as_text)))
        for n, t in zip(nums, as_text):
            singles = agg.add_input(singles, (n, t))
    for got in (pairs, singles):
        assert got[0] == texts[0] and type(got[0]) is type(texts[0])
        assert list(got[1].items()) == list(texts[1].items())


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(entry, min_size=1, max_size=3), max_size=5), st.lists(value, max_size=4),
       st.sampled_from([("auction",), None]))
def test_field_tuples_give_what_their_json_objects_give(bundles, before, key):
    """``fields``: a Dataflow stage's tuple value of a previous stage's columns, ``(auction,
    count)``, gives the accumulator (and so the output) of the JSON object texts of those columns
    (``keygroups.json_object``), bundle after bundle or one by one."""
    texts_agg, agg = ArgMax("count", key=key), ArgMax("count", key=key, fields=("auction", "count"))
    start = texts_agg.create_accumulator()
    for v in before:
        start = texts_agg.add_input(start, v)
    texts, tuples, singles = copy.deepcopy(start), copy.deepcopy(start), copy.deepcopy(start)
    for bundle in bundles:
        texts = texts_agg.add_inputs(texts, [json.dumps({"auction": e["auction"], "count": e["count"]},
                                                        separators=(",", ":")) for e in bundle])
        as_tuples = [(e["auction"], e["count"]) for e in bundle]
        tuples = agg.add_inputs(tuples, as_tuples)
        for t in as_tuples:
            singles = agg.add_input(singles, t)
    for got in (tuples, singles):
        assert got[0] == texts[0] and type(got[0]) is type(texts[0])
        assert list(got[1].items()) == list(texts[1].items())
        assert json.dumps(agg.extract_output(got)) == json.dumps(texts_agg.extract_output(texts))
    with pytest.raises(ValueError, match="fields"):
        ArgMax("price", fields=("auction", "count"))


@pytest.mark.parametrize("text", ['{"a":1}', b'{"a":[1,2]}', ' {"a":1} ', "[1,2]", '{"a":1}x', '{"a":', "",
                                  b"\xef\xbb\xbf{\"a\":1}", b"{\"a\":\"\xff\"}", '{"a":1}\n', "[]",
                                  '{"a":1,"a":2}', '{"a":NaN}'])
def test_parse_is_json_loads(text):
    try:
        want = json.loads(text)
    except ValueError as e:
        with pytest.raises(type(e)):
            _parse(text)
    else:
        assert _parse(text) == want


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.lists(st.one_of(st.none(), st.integers(1, 5), st.just(float("nan"))), max_size=12), max_size=5),
       st.booleans())
def test_most_frequent_is_the_brute_force_top(bundles, merged):
    import numpy as np

    agg = MostFrequent("auction")
    if merged:      # each bundle its own accumulator (one as a numpy array), merged
        acc = agg.merge_accumulators([agg.add_inputs(agg.create_accumulator(), np.array(b, dtype=object) if i == 0 else b)
                                      for i, b in enumerate(bundles)])
    else:
        acc = agg.create_accumulator()
        for b in bundles:
            acc = agg.add_inputs(acc, b) if len(b) != 1 else agg.add_input(acc, b[0])
    seen = [v for b in bundles for v in b if v is not None and v == v]
    counts = {v: seen.count(v) for v in set(seen)}
    want = [] if not counts else [{"auction": v, "count": n} for v, n in sorted(counts.items()) if n == max(counts.values())]
    assert agg.extract_output(acc) == want
