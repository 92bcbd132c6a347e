"""NEXMark without Spark: the generator has NEXMark's shape, and every registered query and
variant run by ``run_local`` on the source's micro-batches equals the brute-force reference, in
order and with 10% of the events delayed up to 5 s, whatever the batch size; with no allowed
lateness the delayed events change the results (so the data exercise late records)."""

from __future__ import annotations

import doctest
from collections import Counter

import pytest

import bench.nexmark.aggregations
import bench.nexmark.generator
from bench.nexmark.generator import FIRST_ID, NexmarkConfig, bids, generate
from bench.nexmark.queries import REGISTRY
from bench.nexmark.query import Settings
from bench.nexmark.runs import local_batches

CASES = [(q.name, v) for q in REGISTRY.values() for v in q.variants]


def events(delayed: float, seed: int = 5):
    return generate(NexmarkConfig(events=3000, seed=seed, events_per_s=100, delayed=delayed))


def test_shape_ratios_delays_and_recent_auctions():
    ev = events(0.1)
    assert Counter(e.kind for e in ev) == {"person": 60, "auction": 180, "bid": 2760}     # 1:3:46
    delayed = [e for e in ev if e.delay_ms]
    assert 0.08 < len(delayed) / len(ev) < 0.12 and max(e.delay_ms for e in delayed) <= 5000
    for p in range(4):      # each partition in arrival order
        arrivals = [e.arrival_ms for e in ev if e.partition == p]
        assert arrivals == sorted(arrivals)
    by_i = {e.i: e for e in ev}
    for e in ev:
        if e.kind == "bid":     # a bid names an auction among the latest 100 or the next 10
            last = FIRST_ID + (e.i // 50) * 3 + 2
            assert last - 100 <= e.record["auction"] <= last + 10
    assert sorted(by_i) == list(range(3000))
    # the same events with and without delays: only arrival times differ
    assert {e.i: e.record for e in events(0.0)} == {e.i: e.record for e in ev}


@pytest.mark.parametrize("delayed", [0.0, 0.1])
@pytest.mark.parametrize("name,variant", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_local_run_equals_the_reference(name, variant, delayed):
    query, ev = REGISTRY[name], events(delayed)
    expected = query.reference(bids(ev), variant)
    assert expected
    for per_batch in (131, 1000) if delayed else (1000,):
        assert query.results(variant, query.local(variant, local_batches(ev, per_batch))) == expected, per_batch


@pytest.mark.parametrize("name", ["q5", "q7"])
def test_the_top_per_window_in_several_key_groups_merged_by_a_second_operator(name):
    """The slicer forms of Q5 and Q7 take their top per window in one key group by default, in one
    operator; in several, a second operator merges the key groups' tops: the same results."""
    query, ev = REGISTRY[name], events(0.1)
    expected = query.reference(bids(ev), "slicer")
    assert len(query.pipeline("slicer").plan()) == 1
    for n in (2, 3):
        merged = Settings(top_key_groups=n)
        assert len(query.pipeline("slicer", merged).plan()) == 2
        for per_batch in (131, 1000):
            assert query.results("slicer", query.local("slicer", local_batches(ev, per_batch), merged), merged) \
                == expected, (n, per_batch)


@pytest.mark.parametrize("variant", ["slicer", "dataflow"])
def test_delayed_events_matter_without_allowed_lateness(variant):
    ev, query, none = events(0.1), REGISTRY["q5"], Settings(lateness_ms=0)
    out = query.local(variant, local_batches(ev, 131), none)
    assert query.results(variant, out, none) != query.reference(bids(ev), variant)
    assert sum(f.loc[f["kind"] == "dropped", "dropped_count"].sum() for f in out) > 100


@pytest.mark.parametrize("module", [bench.nexmark.generator, bench.nexmark.aggregations])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0
