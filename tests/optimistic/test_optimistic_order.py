"""The total order (section V.A): lexicographic, children after parents, a sortable byte form."""

from __future__ import annotations

import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.optimistic import Item, Meta

from tests.suite import examples

meta_st = st.builds(
    Meta,
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.lists(st.integers(0, 5), max_size=3).map(tuple),
)
small_meta_st = st.builds(Meta, st.integers(0, 3), st.integers(0, 2), st.integers(0, 3),
                          st.lists(st.integers(0, 2), max_size=3).map(tuple))


@settings(max_examples=examples(300))
@given(a=st.one_of(meta_st, small_meta_st), b=st.one_of(meta_st, small_meta_st))
def test_sort_key_orders_like_the_meta_and_round_trips(a, b):
    assert (a.sort_key() < b.sort_key()) == (a < b)
    assert (a.sort_key() == b.sort_key()) == (a == b)
    assert Meta.from_sort_key(a.sort_key()) == a


def test_children_follow_their_parent_and_precede_the_next_input():
    m = Meta(5, 0, 7)
    chain = [m, m.child(0), m.child(0).child(3), m.child(1), Meta(5, 0, 8), Meta(5, 1, 0), Meta(6, 0, 0)]
    assert sorted(reversed(chain)) == chain


def test_equal_timestamps_are_ordered_by_source_then_offset():
    assert sorted([Meta(1, 2, 0), Meta(1, 0, 9), Meta(1, 0, 3)]) == [Meta(1, 0, 3), Meta(1, 0, 9), Meta(1, 2, 0)]


def test_items_derive_tombstones_and_pickle():
    t = Item.source(3, 1, 4, "p").retraction()
    assert t.tombstone and t.derive(2, "q") == Item(Meta(3, 1, 4, (2,)), "q", True)
    assert pickle.loads(pickle.dumps(t)) == t
