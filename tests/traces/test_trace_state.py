"""A compiled DAG's stage state as :func:`keygroups.state_view.local_state` shows it, against brute force
over out-of-order records (late ones included) and 1-3 key groups: the last closed block is the
watermark's; items of blocks not yet open are held per block, those of the open block in SORT's
buffer; a keyed ordered vertex's state per key has seen exactly the items of the closed blocks."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings, strategies as st

from dataflow_kafka.keygroups.state_view import local_state
from dataflow_kafka.traces import Dag
from dataflow_kafka.traces.spark import compile_dag
from tests.traces.frames import source_frames
from tests.traces.library import Seq
from tests.suite import examples

PERIOD, PARTS = 10, 2


def _records(seed: int, n: int) -> list[list[tuple]]:
    """Batches of ``(partition, ts, key, value)``: time moves on about 3 ms a record, up to 25 ms
    out of order, now and then a record 40 ms late."""
    rng, t, out = random.Random(seed), 0, []
    for _ in range(n):
        batch = []
        for _ in range(rng.randint(0, 10)):
            t += rng.randrange(6)
            ts = max(0, t - rng.randrange(25) - (40 if rng.random() < 0.1 else 0))
            batch.append((rng.randrange(PARTS), ts, rng.choice("abc"), rng.randrange(100)))
        out.append(batch)
    return out


def _closed_blocks(batches) -> list:
    """The last closed block after each batch: the watermark's block (None before one)."""
    newest, out, closed = {}, [], None
    for batch in batches:
        for p, ts, _, _ in batch:
            newest[p] = max(newest.get(p, ts), ts)
        if len(newest) == PARTS:
            block = min(newest.values()) // PERIOD
            closed = block if closed is None else max(closed, block)
        out.append(closed)
    return out


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 10 ** 6), groups=st.integers(1, 3), n=st.integers(1, 8))
def test_blocks_held_items_and_key_states_equal_the_brute_force(seed, groups, n):
    dag = Dag(ordering="sort")
    dag.sink("out", dag.add_op(Seq(), 2, dag.source("s", PERIOD, PARTS), name="seq"))
    compiled = compile_dag(dag, num_key_groups=groups)
    batches = _records(seed, n)
    states: dict = {}
    compiled.run_local(source_frames(batches, PARTS), states=states)
    view = local_state(compiled.pipeline, states)
    (name,) = set(view.items["stage"])
    marks = _closed_blocks(batches)
    closed = marks[-1]
    accepted = [r for batch, before in zip(batches, [None] + marks[:-1]) for r in batch
                if before is None or r[1] // PERIOD + 1 > before]          # an item of a closed block is late
    blocks = view.table(name, "block")
    assert len(blocks) == groups
    if closed is None:
        assert blocks["start_ms"].isna().all()
    else:
        assert set(blocks["closed_block"]) == {closed} and set(blocks["start_ms"]) == {closed * PERIOD}
    held = view.table(name, "held")
    pending = held[held["buffer"].isna()] if "buffer" in held else held
    got = Counter()
    for r in pending.to_dict("records"):
        got[int(r["block"])] += int(r["count"])
        assert (int(r["start_ms"]), int(r["end_ms"])) == ((int(r["block"]) - 1) * PERIOD, int(r["block"]) * PERIOD)
    waiting = [r for r in accepted if closed is None or r[1] // PERIOD + 1 > closed + 1]
    assert got == Counter(ts // PERIOD + 1 for _, ts, _, _ in waiting)
    sorting = held[held["buffer"] == "sort"] if "buffer" in held else held.iloc[:0]
    in_open = [r for r in accepted if closed is not None and r[1] // PERIOD + 1 == closed + 1]
    assert int(sorting["count"].sum()) == len(in_open)
    seen = Counter(k for _, ts, k, _ in accepted if closed is not None and ts < closed * PERIOD)
    states_shown = {r["key"]: int(r["state"]) for r in view.table(name, "key_state").to_dict("records")}
    assert states_shown == dict(seen)
