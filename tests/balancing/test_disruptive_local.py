"""Disruptive migration without Spark: a keyed ordered operator's key groups move with their state
(shipped through a hand-off channel, rows held for one batch); every record is counted exactly
once and every running total equals the run without moves."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.balancing.migration_disruptive import MemoryHandoff, ordered_pipeline
from dataflow_kafka.balancing.routing_table import RoutingTable
from tests.balancing.migration_support import batches_with_moves, canonical
from tests.balancing.test_migration_local import _workload
from tests.suite import examples

KG, SLOTS = 8, 3


def _run(batches, puncts, moves: dict):
    table = RoutingTable.uniform(KG, SLOTS, 2)
    pipe = ordered_pipeline("key", "value", table, MemoryHandoff(uuid.uuid4().hex), routers=1)
    return pipe.run_local(batches_with_moves(batches, puncts, moves, KG))


def _totals(out) -> list[list[tuple]]:
    rows = []
    for o in out:
        d = o[o["kind"] == "data"]
        rows.append(sorted(tuple(canonical(v) for v in r)
                           for r in d[["key", "event_time_ms", "value", "total"]].itertuples(index=False)))
    return rows


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10_000), moves=st.dictionaries(st.integers(0, 4), st.lists(
    st.tuples(st.integers(0, KG - 1), st.integers(0, SLOTS - 1)), min_size=1, max_size=4), max_size=4))
def test_moves_ship_state_and_lose_or_duplicate_nothing(seed, moves):
    batches, puncts = _workload(seed, 5, 25, 0)
    batches, puncts = batches + [[]], puncts + [puncts[-1]]      # rows held by a move in the last batch
    still, moved = _totals(_run(batches, puncts, {})), _totals(_run(batches, puncts, moves))
    assert sorted(r for b in moved for r in b) == sorted(r for b in still for r in b)
    assert sum(map(len, still)) == sum(len(b) for b in batches)


def test_the_moved_key_groups_rows_are_held_one_batch_then_processed_with_the_shipped_state():
    batches, puncts = _workload(2, 4, 40, 0)
    table = RoutingTable.uniform(KG, SLOTS, 2)
    kgs = [kg for kg in range(KG) if table.slot_of(kg) == 0]
    still = _totals(_run(batches, puncts, {}))
    moved = _totals(_run(batches, puncts, {1: [(kgs[0], 1), (kgs[1], 2), (kgs[1], 0)], 2: [(kgs[0], 2)]}))
    assert len(moved[1]) < len(still[1])                  # batch of the move: the rows of kgs[0] held
    assert sorted(moved[1] + moved[2] + moved[3]) == sorted(still[1] + still[2] + still[3])
    assert moved[0] == still[0]
