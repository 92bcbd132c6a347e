"""Windowed grouping: the paper's example (section V.B) and Algorithm 2's tombstones, as data."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.optimistic import Grouping, Item, Meta, run_local, safe_punctuations

from tests.suite import examples

# The paper, section V.B: inputs 1, 2, ..., key = parity, window = 3.
PAPER_GROUPS = [(1,), (2,), (1, 3), (2, 4), (1, 3, 5), (2, 4, 6), (3, 5, 7), (4, 6, 8)]


def parity(x: int) -> int:
    return x % 2


def arrivals_of(values) -> list[tuple[int, int, int, int]]:
    """Input ``v`` has event time ``v`` (source 0, offset ``v``), whatever its arrival position."""
    return [(v, 0, v, v) for v in values]


def payloads(result) -> list:
    return [i.payload for i in result.released]


def test_paper_example_in_order():
    g = Grouping(window=3, key=parity)
    state = g.open_state()
    out = g.process(state, [Item.source(v, 0, v, v) for v in range(1, 9)])
    assert [i.payload for i in out] == PAPER_GROUPS
    assert not any(i.tombstone for i in out)
    assert payloads(run_local([g], arrivals_of(range(1, 9)))) == PAPER_GROUPS


def test_paper_example_every_permutation_of_the_first_six():
    g = Grouping(window=3, key=parity)
    for perm in itertools.permutations(range(1, 7)):
        arrivals = arrivals_of(perm)
        assert payloads(run_local([g], arrivals, safe_punctuations(arrivals, 2))) == PAPER_GROUPS[:6], perm


@settings(max_examples=examples(200), deadline=None)
@given(perm=st.permutations(range(1, 9)), every=st.integers(1, 8), batch=st.integers(1, 4), seed=st.integers(0, 99))
def test_paper_example_under_reordering(perm, every, batch, seed):
    arrivals = arrivals_of(perm)
    r = run_local([Grouping(window=3, key=parity)], arrivals, safe_punctuations(arrivals, every),
                  batch_size=batch, shuffle_seed=seed)
    assert payloads(r) == PAPER_GROUPS


def test_same_timestamp_is_ordered_by_source_then_offset():
    # all at t=0: partition 1 comes after partition 0, then offsets
    arrivals = [(0, 1, 0, 2), (0, 0, 1, 3), (0, 0, 0, 1)]
    r = run_local([Grouping(window=3, key=lambda x: 0)], arrivals)
    assert payloads(r) == [(1,), (1, 3), (1, 3, 2)]


# Algorithm 2 as a transcript: a late item sends tombstones for exactly the groups that contain
# its insertion position, and the new groups; a later group is untouched.
def test_algorithm_2_late_insert_and_its_retraction():
    g = Grouping(window=3, key=parity)
    state = g.open_state()
    m = {v: Meta(t, 0, t) for v, t in [(1, 10), (3, 30), (5, 50), (7, 70), (9, 20)]}
    g.process(state, [Item(m[v], v) for v in (1, 3, 5, 7)])

    late = Item(m[9], 9)
    out = g.process(state, [late])
    assert sorted(out) == sorted([
        Item(m[9].child(0), (1, 9)),
        Item(m[3].child(0), (1, 3), True), Item(m[3].child(0), (1, 9, 3)),
        Item(m[5].child(0), (1, 3, 5), True), Item(m[5].child(0), (9, 3, 5)),
    ])  # (3, 5, 7) of item 7 keeps its content, so no tombstone for it

    out = g.process(state, [late.retraction()])
    assert sorted(out) == sorted([
        Item(m[9].child(0), (1, 9), True),
        Item(m[3].child(0), (1, 9, 3), True), Item(m[3].child(0), (1, 3)),
        Item(m[5].child(0), (9, 3, 5), True), Item(m[5].child(0), (1, 3, 5)),
    ])


def test_tombstone_before_its_item_cancels_it_at_grouping():
    g = Grouping(window=2, key=parity)
    state = g.open_state()
    first = Item.source(10, 0, 0, 1)
    later = Item.source(30, 0, 1, 3)
    late = Item.source(20, 0, 2, 5)
    assert [i.payload for i in g.process(state, [first, later])] == [(1,), (1, 3)]
    assert g.process(state, [late.retraction()]) == []  # waits as a negative count
    assert g.process(state, [late]) == []  # cancelled: nothing changes downstream
    assert state.entry_count() == 2


@pytest.mark.parametrize("window", [0, -1, 1.5, "3"])
def test_window_is_validated(window):
    with pytest.raises(ValueError, match=repr(window).replace(".", r"\.")):
        Grouping(window=window, key=parity)
