"""The balancing stages' state as :func:`keygroups.state_view.local_state` shows it, against brute force,
with key groups moved between slots at random batches (router -> compute -> consolidate, without
Spark): every router instance holds the routing table after the moves; the compute slots hold, per
key and pane, the partials of the accepted records of the panes still open (summed over the slots
a moved key group left partials in); the consolidate stage the panes the slots emitted that a
window still open needs, and those windows with their record counts."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.balancing.migration import windowed_aggregation
from dataflow_kafka.balancing.routing_table import RoutingTable
from dataflow_kafka.keygroups.state_view import local_state
from tests.balancing.migration_support import batches_with_moves, low_watermarks
from tests.balancing.test_migration_local import KG, SLOTS, WINDOWS, _workload
from tests.suite import examples

PANE, ROUTERS = 500, 2                     # the gcd of WINDOWS' sizes and slides


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10_000), moves=st.dictionaries(st.integers(0, 4), st.lists(
    st.tuples(st.integers(0, KG - 1), st.integers(0, SLOTS - 1)), min_size=1, max_size=3), max_size=3),
    n=st.integers(1, 5))
def test_routes_partials_panes_and_windows_equal_the_brute_force(seed, moves, n):
    batches, puncts = _workload(seed, n, 25, 300)
    pipe = windowed_aggregation("key", "value", WINDOWS, num_key_groups=KG, num_slots=SLOTS, num_partitions=2,
                                routers=ROUTERS)
    states: dict = {}
    pipe.run_local(batches_with_moves(batches, puncts, moves, KG), states=states)
    view = local_state(pipe, states)

    table = RoutingTable.uniform(KG, SLOTS, 2)
    sent = [m for b in sorted(k for k in moves if k < n) for m in moves[b]]
    for kg, to in sent:
        table = table.moved(kg, to)
    routes = view.table("router", "route")
    assert len(routes) == ROUTERS * KG
    assert {(int(k), int(s)) for k, s in zip(routes["key"], routes["slot"])} == set(enumerate(table.assignment))
    versions = set(routes["version"]) if "version" in routes else set()
    assert versions == ({len(sent) - 1} if sent else set())      # the control offset of the last move

    accepted, wm = [], None                 # records not late: event time >= the watermark before their batch
    for recs, new in zip(batches, low_watermarks(puncts)):
        accepted += [(k, v, t) for _, _, k, v, t in recs if v is not None and (wm is None or t >= wm)]
        wm = new if wm is None or (new is not None and new > wm) else wm
    open_panes = Counter((k, t - t % PANE) for k, _, t in accepted if wm is None or t - t % PANE + PANE > wm)
    for item in ("slice", "window"):      # the pane query's slices and its open windows: the same panes
        rows = view.table("compute", item)
        got = Counter()
        for k, s, c in zip(rows["key"], rows["start_ms"], rows["count"]):
            got[(k, int(s))] += int(c)
        assert got == open_panes, item
    assert set(view.table("compute", "window")["state"]) <= {"pending"}

    longest = max(w.size_ms for w in WINDOWS.values())
    emitted = Counter((k, t - t % PANE) for k, _, t in accepted
                      if wm is not None and t - t % PANE + PANE <= wm and t - t % PANE >= wm - longest)
    panes = view.of("consolidate", "pane")
    assert Counter({(k, int(s)): int(c) for k, s, c in zip(panes["key"], panes["start_ms"], panes["count"])}) \
        == emitted
    want = Counter()
    for (k, ps), c in emitted.items():
        for qid, w in WINDOWS.items():
            size, slide, off = w.grid
            s = ps - (ps - off) % slide
            while s + size > ps:
                if s + size > wm:
                    want[(k, qid, s, s + size)] += c
                s -= slide
    shown = view.of("consolidate", "window")
    assert Counter({(k, q, int(s), int(e)): int(c) for k, q, s, e, c in
                    zip(shown["key"], shown["query_id"], shown["start_ms"], shown["end_ms"], shown["count"])}) == want


@settings(max_examples=examples(6), deadline=None)
@given(seed=st.integers(0, 10_000), kg=st.integers(0, KG - 1), shift=st.integers(1, SLOTS - 1), n=st.integers(1, 4))
def test_disruptive_migration_state_holds_totals_and_the_moved_key_groups_rows(seed, kg, shift, n):
    """A key group moved in the last batch: its state is on its way (``awaiting``), its rows of that
    batch are ``held``; every other key's ``total`` is the sum of its values so far."""
    import uuid

    from dataflow_kafka.balancing.migration_disruptive import MemoryHandoff, ordered_pipeline
    from dataflow_kafka.keygroups import key_group_of

    batches, puncts = _workload(seed, n, 25, 0)
    table = RoutingTable.uniform(KG, SLOTS, 2)
    pipe = ordered_pipeline("key", "value", table, MemoryHandoff(uuid.uuid4().hex), routers=1)
    states: dict = {}
    pipe.run_local(batches_with_moves(batches, puncts, {n - 1: [(kg, (table.slot_of(kg) + shift) % SLOTS)]}, KG),
                   states=states)
    view = local_state(pipe, states)
    moved = [r for r in batches[-1] if key_group_of(r[2], KG) == kg]
    want = Counter()
    for recs in batches:
        for _, _, k, v, _ in recs:
            if key_group_of(k, KG) != kg:
                want[k] += v or 0.0
    totals = view.table("running_total", "total")
    assert dict(zip(totals["key"], totals["total"])) == pytest.approx(dict(want))
    awaiting = view.table("running_total", "awaiting")
    held = view.table("running_total", "held")
    assert list(awaiting["kg"]) == [kg]
    assert (list(held.get("kg", [])), list(held["count"])) == (([kg], [len(moved)]) if moved else ([], []))
