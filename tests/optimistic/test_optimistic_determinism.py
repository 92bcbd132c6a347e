"""Determinism: whatever the arrival order, the barrier releases what an in-order run produces.

The reference below is a brute-force sequential run written from the paper's semantics (section
V.A for the order of derived items, Algorithm 1 for grouping, V.C for stateful maps) on plain
tuples; it shares no code with the engine beyond reading the stage's fields.
"""

from __future__ import annotations

import functools
import pickle
import random
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataflow_kafka.optimistic import Grouping, Map, StatefulMap, run_buffered, run_local, safe_punctuations
from dataflow_kafka.optimistic.workload import document_arrivals, generate_documents, inverted_index_stages

from tests.suite import examples


# -- user functions (module level, so stages pickle) -----------------------------------------

def as_int(p) -> int:
    return p if isinstance(p, int) else sum(as_int(x) for x in p)


def mod_key(k: int, p) -> int:
    return as_int(p) % k


def fan_out(n: int, p) -> list:
    """``n`` outputs per input, none for multiples of 5 (empty output lists happen)."""
    v = as_int(p)
    return [] if v % 5 == 0 else [(v * 7 + j) % 101 for j in range(n)]


def hash_chain(n: int, state: int, p) -> tuple[int, list]:
    """Order-sensitive state; the number of outputs depends on the state."""
    state = (state * 31 + as_int(p)) % 1009
    return state, [(state, j) for j in range(state % (n + 1))]


# -- the reference --------------------------------------------------------------------------

def reference(stages, arrivals) -> list[tuple]:
    items = sorted(((t, s, o, ()), p) for t, s, o, p in arrivals)
    for stage in stages:
        out = []
        buckets: dict = defaultdict(list)
        states: dict = {}
        for (t, s, o, path), p in items:
            if isinstance(stage, Map):
                outputs = list(stage.fn(p))
            elif isinstance(stage, Grouping):
                bucket = buckets[stage.key(p)]
                bucket.append(p)
                outputs = [tuple(bucket[-stage.window:])]
            else:
                k = stage.key(p)
                states[k], outputs = stage.fn(states.get(k, stage.initial), p)
            out += [((t, s, o, path + (j,)), q) for j, q in enumerate(outputs)]
        items = out
    return items


def released(result) -> list[tuple]:
    return [(tuple(i.meta), i.payload) for i in result.released]


# -- strategies -----------------------------------------------------------------------------

stage_st = st.one_of(
    st.builds(lambda n: Map(functools.partial(fan_out, n)), st.integers(1, 3)),
    st.builds(lambda w, k: Grouping(window=w, key=functools.partial(mod_key, k)), st.integers(1, 4), st.integers(1, 3)),
    st.builds(
        lambda n, k: StatefulMap(functools.partial(hash_chain, n), key=functools.partial(mod_key, k), initial=1),
        st.integers(1, 3), st.integers(1, 3),
    ),
)


@st.composite
def workload_st(draw):
    n = draw(st.integers(1, 18))
    times = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))  # few values: equal timestamps
    sources = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    offsets: dict[int, int] = defaultdict(int)
    events = []
    for t, s, v in zip(times, sources, draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))):
        events.append((t, s, offsets[s], v))
        offsets[s] += 1
    arrivals = draw(st.permutations(events))
    every = draw(st.integers(1, 6))
    return arrivals, safe_punctuations(arrivals, every)


@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stages=st.lists(stage_st, min_size=1, max_size=3),
    work=workload_st(),
    batch_size=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_barrier_output_equals_in_order_run(stages, work, batch_size, seed):
    arrivals, punctuations = work
    expected = reference(stages, arrivals)
    opts = dict(batch_size=batch_size, shuffle_seed=seed)
    r = run_local(stages, arrivals, punctuations, **opts)
    assert released(r) == expected
    assert r.released_count == len(expected)
    c = r.counters
    assert (c.late_items, c.late_tombstones, c.orphan_tombstones) == (0, 0, 0)
    assert released(run_buffered(stages, arrivals, punctuations, **opts)) == expected
    assert released(run_local(stages, arrivals, punctuations, gc=False, **opts)) == expected
    assert released(run_local(stages, arrivals, punctuations, restart_every=1 + seed % 3, **opts)) == expected
    assert released(run_buffered(stages, arrivals, punctuations, restart_every=2, **opts)) == expected


def test_the_property_exercises_tombstones_overtaking_items():
    """Guard against a vacuous property: with shuffled links, tombstones do overtake items."""
    stages = [Map(functools.partial(fan_out, 2)),
              StatefulMap(functools.partial(hash_chain, 2), key=functools.partial(mod_key, 2), initial=1)]
    rng = random.Random(7)
    events = [(rng.randrange(5), rng.randrange(3), i, rng.randrange(50)) for i in range(40)]
    arrivals = rng.sample(events, len(events))
    r = run_local(stages, arrivals, safe_punctuations(arrivals, 8), batch_size=8, shuffle_seed=3)
    assert r.counters.early_tombstones > 0
    assert r.tombstones_in > 0 and r.replay_ratio > 1
    assert released(r) == reference(stages, arrivals)


def test_processing_in_arrival_order_would_fail_the_property():
    """The comparison can fail: applying the same function in arrival order gives other output."""
    stages = [StatefulMap(functools.partial(hash_chain, 1), key=functools.partial(mod_key, 1), initial=1)]
    arrivals = [(t, 0, t, t) for t in (3, 1, 2)]
    in_arrival_order = [(i, 0, i, v) for i, (_, _, _, v) in enumerate(arrivals)]
    payloads = [p for _, p in reference(stages, arrivals)]
    assert payloads != [p for _, p in reference(stages, in_arrival_order)]
    assert [i.payload for i in run_local(stages, arrivals).released] == payloads


@pytest.mark.parametrize("order_sensitive", [1, 2, 3])
def test_inverted_index_under_disorder(order_sensitive):
    stages = inverted_index_stages(order_sensitive)
    docs = generate_documents(40, vocabulary_size=60, words_per_doc=(3, 8), seed=order_sensitive)
    events = document_arrivals(docs, partitions=3, mean_gap_ms=2.0, seed=1)
    rng = random.Random(order_sensitive)
    # bounded disorder: each document is delayed by up to 6 positions
    arrivals = [e for _, e in sorted((i + rng.uniform(0, 6), e) for i, e in enumerate(events))]
    punctuations = safe_punctuations(arrivals, 4)
    expected = reference(stages, arrivals)
    r = run_local(stages, arrivals, punctuations, batch_size=2, shuffle_seed=5)
    assert released(r) == expected
    assert r.tombstones_in > 0
    b = run_buffered(stages, arrivals, punctuations, batch_size=2)
    assert released(b) == expected
    assert b.buffering_stages == order_sensitive and r.buffering_stages == 1
    assert b.tombstones_in == 0 and b.replay_ratio == 1.0


def test_stages_pickle_with_their_functions():
    stages = inverted_index_stages(3) + [Grouping(window=2, key=len)]
    assert pickle.loads(pickle.dumps(stages)) == stages  # module-level functions: value equality
