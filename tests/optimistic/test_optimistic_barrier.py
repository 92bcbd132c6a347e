"""The barrier (Algorithm 3) as a signed multiset: any interleaving of items and tombstones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.optimistic import Barrier, Item, Meta

from tests.suite import examples


def item(t: int, offset: int, payload="x", path=()) -> Item:
    return Item(Meta(t, 0, offset, path), payload)


@st.composite
def signed_stream(draw):
    """Valid items, and cancelled ones that arrive together with their tombstone, shuffled."""
    n = draw(st.integers(0, 25))
    metas = [(draw(st.integers(0, 9)), i) for i in range(n)]
    valid, events = [], []
    for t, o in metas:
        it = item(t, o, payload=draw(st.sampled_from("ab")))
        if draw(st.booleans()):
            valid.append(it)
            events.append(it)
        else:
            events += [it, it.retraction()]
        if draw(st.booleans()):  # re-emitted with another payload at the same meta, then cancelled
            other = Item(it.meta, ("other", it.payload))
            events += [other, other.retraction()]
    return valid, draw(st.permutations(events))


@settings(max_examples=examples(300), deadline=None)
@given(stream=signed_stream(), bounds=st.lists(st.integers(0, 12), max_size=4))
def test_releases_valid_items_in_order_whatever_the_interleaving(stream, bounds):
    valid, events = stream
    b = Barrier()
    b.insert_all(events)
    out = []
    for bound in sorted(bounds) + [100]:
        released = b.punctuate(bound)
        assert all(i.meta.time_ms < bound for i in released)
        out += released
    assert out == sorted(valid)
    assert len(b) == 0
    c = b.counters
    assert c.items_in + c.tombstones_in == len(events) and c.released == len(valid)
    assert c.orphan_tombstones == 0


def test_release_is_strictly_below_the_punctuation():
    b = Barrier()
    b.insert_all([item(5, 0), item(4, 1), item(6, 2)])
    assert [i.meta.time_ms for i in b.punctuate(5)] == [4]
    assert [i.meta.time_ms for i in b.punctuate(6)] == [5]
    assert b.punctuate(6) == [] and b.punctuate(3) == []  # bounds never move back


def test_tombstone_overtaking_its_item_across_batches():
    b = Barrier()
    doomed = item(3, 0)
    b.insert(doomed.retraction(), now=0)
    assert b.counters.early_tombstones == 1 and len(b) == 1
    b.insert(doomed, now=1)
    assert len(b) == 0
    assert b.punctuate(10, now=2) == []


def test_children_are_ordered_after_their_parent_and_before_the_next_input():
    b = Barrier()
    parent = Meta(7, 1, 4)
    b.insert_all([Item(Meta(7, 1, 5), "next"), Item(parent.child(1), "c1"), Item(parent, "p"),
                  Item(parent.child(0).child(2), "c02"), Item(parent.child(0), "c0")])
    assert [i.payload for i in b.punctuate(8)] == ["p", "c0", "c02", "c1", "next"]


def test_counters_orphans_late_and_lag():
    b = Barrier()
    b.insert(item(1, 0).retraction(), now=0)  # its item never comes
    b.insert(item(2, 1), now=0)
    assert b.punctuate(5, now=3) == [item(2, 1)]
    c = b.counters
    assert (c.orphan_tombstones, c.lag_max, c.released) == (1, 3, 1)
    with pytest.warns(RuntimeWarning, match="event time 4 arrived below the released bound 5"):
        b.insert(item(4, 2), now=4)  # below the released bound: the punctuation was broken
    with pytest.warns(RuntimeWarning, match="tombstone"):
        b.insert(item(2, 1).retraction(), now=4)
    assert (c.late_items, c.late_tombstones) == (1, 1)
    assert c.replay_ratio == (c.items_in + c.tombstones_in) / 1


def test_round_trip_keeps_pending_retractions_and_counters():
    b = Barrier()
    x, y = item(3, 0), item(4, 1, payload=("t", 1))
    b.insert_all([x.retraction(), y, item(1, 2)])
    b.punctuate(2)
    c = Barrier.from_bytes(b.to_bytes())
    assert c.counters == b.counters and len(c) == len(b) == 2
    c.insert(x)
    assert c.punctuate(10) == [y]
    assert len(c) == 0


def test_barrier_partitioned_by_key_group_releases_the_same_items():
    """One barrier per key group: each releases its share in order; together, the same items."""
    items = [item(t % 7, o, payload=o % 3) for o, t in enumerate(range(40, 0, -1))]
    events = items + [items[5].retraction(), items[9].retraction()]
    whole = Barrier()
    whole.insert_all(events)
    parts = [Barrier() for _ in range(3)]
    for ev in events:
        parts[ev.payload % 3].insert(ev)
    per_part = [p.punctuate(4) + p.punctuate(100) for p in parts]
    assert all(out == sorted(out) for out in per_part)
    assert sorted(i for out in per_part for i in out) == whole.punctuate(4) + whole.punctuate(100)
