"""The Dataflow driver's state codec (``watermarks._codec``): the numpy pass over rows of integer
tuples writes exactly the bytes of the value-by-value encoder, and everything decodes back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.watermarks import _codec


def _reference(v) -> bytes:
    """The value-by-value encoding (the fast path switched off)."""
    saved = _codec._ROWS_AT_ONCE
    _codec._ROWS_AT_ONCE = 1 << 62
    try:
        return _codec.encode(v)
    finally:
        _codec._ROWS_AT_ONCE = saved


INT64 = st.integers(-2**63, 2**63 - 1)
ANY_INT = st.one_of(INT64, st.integers(-2**70, 2**70), st.integers(-200, 200))
SCALAR = st.one_of(st.none(), st.booleans(), ANY_INT, st.floats(allow_nan=False), st.text(max_size=4))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4).flatmap(lambda m: st.lists(st.tuples(*[ANY_INT] * m), min_size=0, max_size=60)))
def test_rows_of_int_tuples_encode_to_the_same_bytes(rows):
    for value in (rows, tuple(rows), [("key", rows)], {"h": rows}):
        assert _codec.encode(value) == _reference(value)
        assert _codec.decode(_codec.encode(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(INT64, INT64), st.tuples(SCALAR, INT64), st.lists(SCALAR, max_size=3)),
                min_size=16, max_size=40))
def test_mixed_rows_fall_back_to_the_same_bytes(rows):
    assert _codec.encode(rows) == _reference(rows)
    assert _codec.decode(_codec.encode(rows)) == rows


def test_edges():
    rows = [(0, -1), (2**63 - 1, -2**63), (127, 128), (-64, -65), (16383, 16384)] * 4
    assert _codec.encode(rows) == _reference(rows)
    assert _codec.decode(_codec.encode(rows)) == rows
    bools = [(True, 1)] * 20                      # bools are not ints here: the slow path
    assert _codec.decode(_codec.encode(bools)) == bools
