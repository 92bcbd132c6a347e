"""The optimistic stage's state as :func:`keygroups.state_view.local_state` shows it, against brute
force over out-of-order batches and 1-3 key groups: the barrier holds exactly the valid outputs at
or above its release bound (the in-order grouping of every input seen, whatever replays and
tombstones happened), the buffered mode's sort buffer the inputs at or above it, and each key's
log the inputs the next late item may still replay."""

from __future__ import annotations

import random
from collections import Counter

import pandas as pd
from hypothesis import given, settings, strategies as st
from tests.suite import examples

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.keygroups.state_view import local_state
from dataflow_kafka.optimistic.stage import OptimisticStage
from dataflow_kafka.optimistic.stages import Grouping

PARTS, WINDOW = 2, 3


def parity(x: int) -> int:
    return x % 2


def _batches(seed: int, n: int) -> tuple[list[pd.DataFrame], list[tuple]]:
    """Source micro-batches of integers (event time about 10 per record, up to 60 ms out of order)
    and every input ``(time, partition, offset, value)``."""
    rng = random.Random(seed)
    offsets, newest, frames, inputs = [0] * PARTS, [None] * PARTS, [], []
    for b in range(n):
        rows = []
        for _ in range(rng.randint(0, 8)):
            p, v = rng.randrange(PARTS), rng.randrange(50)
            t = 10 * len(inputs) + rng.randint(-60, 0)
            rows.append({"kind": "data", "topic": "t", "partition": p, "offset": offsets[p],
                         "value": str(v).encode(), "event_time_ms": t, "processing_time_ms": b})
            inputs.append((t, p, offsets[p], v))
            offsets[p] += 1
            newest[p] = t if newest[p] is None else max(newest[p], t)
        marks = [{"kind": "punctuation", "topic": "t", "partition": p, "offset": offsets[p],
                  "punctuation_ms": None if newest[p] is None else newest[p] - 60, "processing_time_ms": b}
                 for p in range(PARTS)]
        frames.append(pd.concat([pd.DataFrame(rows, columns=["kind", "topic", "partition", "offset", "value",
                                                             "event_time_ms", "processing_time_ms"]),
                                 control_frame(marks)], ignore_index=True))
    return frames, inputs


def _bound(frames) -> int | None:
    """The release bound after the last batch: the minimum over partitions of their punctuations."""
    newest: dict = {}
    for f in frames:
        for p, m in zip(f["partition"], f["punctuation_ms"]):
            if not pd.isna(m):
                newest[p] = int(m)
    return min(newest.values()) if len(newest) == PARTS else None


def _groups(inputs) -> dict:
    """The in-order grouping of every input: ``{(time, partition, offset): tuple of the last WINDOW values}``."""
    out, last = {}, {}
    for t, p, o, v in sorted(inputs):
        g = last.get(parity(v), ()) + (v,)
        last[parity(v)] = g[-(WINDOW - 1):]
        out[(t, p, o)] = g
    return out


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 10 ** 6), groups=st.integers(1, 3), n=st.integers(1, 8),
       mode=st.sampled_from(["optimistic", "buffered"]))
def test_held_items_and_logs_equal_the_brute_force(seed, groups, n, mode):
    frames, inputs = _batches(seed, n)
    stage = OptimisticStage(stage=Grouping(window=WINDOW, key=parity), num_key_groups=groups, decode=int, mode=mode,
                            name="g")
    states: dict = {}
    Pipeline([stage]).run_local(frames, states=states)
    view = local_state(Pipeline([stage]), states)
    bound = _bound(frames)
    held = view.table("g", "held")
    got = Counter((int(r["start_ms"]), int(r["partition"]), int(r["offset"]), r["payload"], int(r["count"]))
                  for r in held.to_dict("records"))
    above = [(t, p, o, v) for t, p, o, v in inputs if bound is None or t >= bound]
    if mode == "optimistic":               # outputs: the key's group ending with each input
        want = Counter((t, p, o, g, 1) for (t, p, o), g in _groups(inputs).items() if bound is None or t >= bound)
    else:                                  # the sort buffer: the inputs themselves
        want = Counter((t, p, o, v, 1) for t, p, o, v in above)
    assert got == want
    barrier = view.of("g", "barrier")
    if bound is not None:
        assert set(barrier["start_ms"]) == {bound} and len(barrier) == groups
        assert barrier["count"].sum() == len(held)
    logs = view.of("g", "log")
    per_key = Counter(parity(v) for t, _, _, v in above) if mode == "optimistic" else Counter()
    assert {k: int(c) for k, c in zip(logs["key"], logs["count"]) if c} == dict(per_key)
