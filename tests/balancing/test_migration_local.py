"""Instant migration without Spark (Enorm §4.5): moves of key groups between slots, at random
batches, do not change the window results; the stages' reports (load per slot and key group,
merged partials) say what happened."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.balancing.migration import consolidate_extra_rows, load_of, windowed_aggregation
from dataflow_kafka.balancing.routing_table import RoutingTable
from tests.balancing.migration_support import batches_with_moves, low_watermarks, reference, results, source_batch
from tests.suite import examples
from dataflow_kafka.windowing import SlidingWindow, TumblingWindow

KG, SLOTS, PARTS = 8, 3, 2
WINDOWS = {"s": SlidingWindow(1_000, 500), "t": TumblingWindow(1_500)}


def _workload(seed: int, n_batches: int, per_batch: int, delay: int):
    rnd = random.Random(seed)
    newest = {p: None for p in range(PARTS)}
    offsets = {p: 0 for p in range(PARTS)}
    batches, puncts = [], []
    for b in range(n_batches):
        recs = []
        for _ in range(per_batch):
            p = rnd.randrange(PARTS)
            t = b * 700 + rnd.randrange(900) - (rnd.randrange(1_500) if rnd.random() < 0.2 else 0)
            v = None if rnd.random() < 0.05 else float(rnd.randint(1, 9))
            recs.append((p, offsets[p], f"k{rnd.randrange(12)}", v, max(t, 0)))
            offsets[p] += 1
            newest[p] = max(t, newest[p] if newest[p] is not None else t)
        batches.append(recs)
        puncts.append({p: None if newest[p] is None else newest[p] - delay for p in range(PARTS)})
    return batches, puncts


def _run(batches, puncts, moves: dict, routers: int = 2):
    """``moves``: {batch index: [(key group, to slot)]} sent as control commands in that batch."""
    pipe = windowed_aggregation("key", "value", WINDOWS, num_key_groups=KG, num_slots=SLOTS, num_partitions=2,
                                routers=routers)
    return pipe.run_local(batches_with_moves(batches, puncts, moves, KG))


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10_000), moves=st.dictionaries(st.integers(0, 5), st.lists(
    st.tuples(st.integers(0, KG - 1), st.integers(0, SLOTS - 1)), min_size=1, max_size=4), max_size=4),
    delay=st.sampled_from([0, 300]))
def test_random_move_schedules_give_the_results_of_no_moves(seed, moves, delay):
    batches, puncts = _workload(seed, 5, 25, delay)
    still = _run(batches, puncts, {}, routers=1)
    moved = _run(batches, puncts, moves, routers=1)
    want = reference(batches, low_watermarks(puncts), WINDOWS)
    for b in range(len(batches)):
        assert results(still[b]) == want[b], f"batch {b}: no moves differs from the reference"
        assert results(moved[b]) == want[b], f"batch {b}: moves {moves} changed the results"


def test_a_move_routes_the_key_groups_rows_to_the_new_slot_from_its_batch_on():
    batches, puncts = _workload(3, 5, 40, 0)
    table = RoutingTable.uniform(KG, SLOTS, 2)
    kg = 4
    old, new = table.slot_of(kg), (table.slot_of(kg) + 1) % SLOTS
    out = _run(batches, puncts, {2: [(kg, new)]})
    rows_kg = [{s: r for s, per in load_of([o]).items() for k, (r, _) in per.items() if k == kg and r}
               for o in out]
    assert all(set(r) <= {old} for r in rows_kg[:2]) and any(rows_kg[:2])
    assert all(set(r) <= {new} for r in rows_kg[2:]) and any(r.get(new) for r in rows_kg[2:])
    assert sum(r.get(old, 0) for r in rows_kg[2:]) == 0
    router = [[m for m in o.loc[(o["kind"] == "metrics") & (o["topic"] == "router"), "metrics"] if '"moves"' in m]
              for o in out]
    assert [len(r) for r in router] == [0, 0, 2, 0, 0]                  # each router instance applied it once
    _, none = consolidate_extra_rows(_run(batches, puncts, {}))
    assert none == 0                                                   # without moves, one partial per pane


def test_load_counts_every_row_once_per_batch():
    batches, puncts = _workload(5, 3, 30, 0)
    out = _run(batches, puncts, {1: [(0, 2)]})
    for recs, o in zip(batches, out):
        load = load_of([o])
        assert sum(r for per in load.values() for r, _ in per.values()) == len(recs)
        assert all(ms >= 0 for per in load.values() for _, ms in per.values())


def test_malformed_move_is_an_error_row_and_the_query_goes_on():
    batches, puncts = _workload(7, 3, 10, 0)
    pipe = windowed_aggregation("key", "value", WINDOWS, num_key_groups=KG, num_slots=SLOTS, num_partitions=2)
    frames = [source_batch(batches[0], puncts[0], KG, [(0, {"op": "move", "key_group": KG, "to": 0})]),
              source_batch(batches[1], puncts[1], KG), source_batch(batches[2], puncts[2], KG)]
    out = pipe.run_local(frames)
    errors = out[0][out[0]["kind"] == "error"]["error"].tolist()
    assert errors and all("control command @0" in e and "'key_group' must be an int in [0, 8)" in e for e in errors)
    want = reference(batches, low_watermarks(puncts), WINDOWS)
    assert [results(o) for o in out] == want


def test_routing_table_state_survives_bytes_and_rejects_another_table():
    from dataflow_kafka.balancing.slots import SlotRouter

    t = RoutingTable.uniform(KG, SLOTS, 2).moved(3, 0, version=7)
    r = SlotRouter(key="key", table=RoutingTable.uniform(KG, SLOTS, 2))
    assert r.load_state(r.dump_state({"table": t}))["table"] == t
    other = SlotRouter(key="key", table=RoutingTable.uniform(KG * 2, SLOTS, 2))
    with pytest.raises(ValueError, match="the checkpoint's routing table has 8 key groups"):
        other.load_state(r.dump_state({"table": t}))


def test_no_result_is_lost_when_a_key_group_moves_back_and_forth_every_batch():
    batches, puncts = _workload(11, 6, 30, 200)
    schedule = {b: [(kg, (b + kg) % SLOTS) for kg in range(KG)] for b in range(6)}
    want = reference(batches, low_watermarks(puncts), WINDOWS)
    out = _run(batches, puncts, schedule)
    assert [results(o) for o in out] == want
    assert any(want)
    got, merged = consolidate_extra_rows(out)
    assert 0 < merged < got                                            # partials of two slots merged


def test_results_frame_columns():
    batches, puncts = _workload(1, 2, 5, 0)
    out = _run(batches, puncts, {})
    assert isinstance(out[0], pd.DataFrame) and "window_start_ms" in out[0].columns
