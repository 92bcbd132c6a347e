"""ArgMax, NEXMark's one aggregation of its own: a window's values folded in one call
(``add_inputs``, the Dataflow driver's batch) give the accumulator of one ``add_input`` per value,
for JSON texts, bytes, lists of entries and parsed entries, from any accumulator; its fast parse
is ``json.loads`` on every text, errors included."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.nexmark.aggregations import ArgMax, _parse

from tests.suite import examples

#: counts: small ints (ties), a float, ints beyond a double's precision (2**60 + 1 and 2**60 are one double)
count = st.one_of(st.none(), st.integers(0, 5), st.sampled_from([2.5, 2**60, 2**60 + 1]))
entry = st.fixed_dictionaries({"auction": st.integers(1, 4), "count": count})


def _as_value(entries, form):
    if form == "dict":
        return entries[0]
    text = json.dumps(entries if form == "list" else entries[0], separators=(",", ":"))
    return text.encode() if form == "bytes" else (" " + text if form == "spaced" else text)


value = st.tuples(st.lists(entry, min_size=1, max_size=3),
                  st.sampled_from(["text", "bytes", "list", "dict", "spaced"])).map(lambda p: _as_value(*p))


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
