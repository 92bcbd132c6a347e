"""DAGs with fan-out, fan-in and several sources compiled to the stage layer, run by
its local runner (the per-key-group code Spark runs): every sink's blocks equal Dag.run_local's on
the same micro-batches, for 1-4 key groups, both strategies and random batch splits; a stalled
source holds the output back and loses nothing."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from tests.traces.frames import source_frames
from tests.traces.library import AddOne, Seq, SumPerKey, Total
from tests.traces.test_engine import _random_dag
from tests.traces.test_multi_source import _random_multi_source_dag
from tests.suite import examples
from dataflow_kafka.traces import Blocker, Dag, Marker, TraceTypeError
from dataflow_kafka.traces.spark import canonical_blocks, canonical_rows, compile_dag, messages_from_frames


def _rows(compiled, frames):
    return [dict(r, batch=i) for i, o in enumerate(compiled.run_local(frames)) for r in o.to_dict("records")]


def _passed_by_every_source(dag: Dag, messages: dict) -> int | None:
    """The last block every source closed (its own Blocker's last marker; None if one closed none)."""
    lasts = []
    for s, msgs in messages.items():
        blocker, last = Blocker(dag.vertices[s].period_ms, dag.vertices[s].partitions), None
        for m in msgs:
            last = next((x.index for x in reversed(blocker.push(m)) if isinstance(x, Marker)), last)
        lasts.append(last)
    return None if None in lasts else min(lasts)


def _assert_sinks_equal(dag: Dag, rows: list, messages) -> int:
    """Every sink's blocks that every source closed equal run_local's; a later block holds a part
    of run_local's (a stage closes a block when every source passed it, run_local each vertex when
    its own inputs did). Returns the number of equal non-empty blocks."""
    messages = messages if isinstance(messages, dict) else {dag.sources()[0]: messages}
    ref = dag.run_local(messages)
    upto = _passed_by_every_source(dag, messages)
    types = dag.check().out_types
    blocks = 0
    for sink in ref.outputs:
        ordered = types[sink].ordered
        got, want = canonical_rows(rows, ordered, sink=sink), canonical_blocks(ref.outputs[sink], ordered)
        closed = [b for b in set(got) | set(want) if upto is not None and b <= upto]
        assert {b: got.get(b) for b in closed} == {b: want.get(b) for b in closed}, sink
        for b in set(got) - set(closed):
            assert _part_of(got[b], want.get(b, []), ordered), (sink, b)
        blocks += sum(1 for b in closed if b in got)
    return blocks


def _part_of(got: list, want: list, ordered: bool) -> bool:
    """``got`` is a sub-multiset (U) or per key a prefix (O) of ``want``, in canonical form."""
    if ordered:
        w = dict(want)
        return all(seq == w.get(k, [])[:len(seq)] for k, seq in got)
    w = dict(want)
    return all(n <= w.get(item, 0) for item, n in got)


def _source_batches(rng: random.Random, n_batches: int, start: int = 0, stall: range = range(0)) -> list:
    """Micro-batches of ``(partition, ts, key, int value)`` on 2 partitions, out of order, some late;
    no records in the batches of ``stall``."""
    out, t = [], start
    for b in range(n_batches):
        batch = []
        for _ in range(rng.randint(0, 8)):
            t += rng.randrange(4)
            ts = max(0, t - rng.randrange(10) - (30 if rng.random() < 0.08 else 0))
            batch.append((rng.randrange(2), ts, f"k{rng.randrange(4)}", rng.randrange(50)))
        out.append([] if b in stall else batch)
    return out


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10 ** 6), ordering=st.sampled_from(["sort", "optimistic"]), groups=st.integers(1, 4))
def test_random_fan_out_fan_in_dags_compiled_equal_run_local(seed, ordering, groups):
    rng = random.Random(seed)
    dag = _random_dag(rng, ordering)
    frames = source_frames(_source_batches(rng, 8), 2)
    rows = _rows(compile_dag(dag, num_key_groups=groups), frames)
    _assert_sinks_equal(dag, rows, messages_from_frames(frames))


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 10 ** 6), ordering=st.sampled_from(["sort", "optimistic"]), groups=st.integers(1, 4))
def test_random_multi_source_dags_compiled_equal_run_local(seed, ordering, groups):
    rng = random.Random(seed)
    dag = _random_multi_source_dag(rng, ordering)
    n = rng.randint(4, 10)
    frames = {s: source_frames(_source_batches(rng, n, start=rng.choice([0, 20, 60]),
                                               stall=range(rng.randrange(n), rng.randrange(n + 1))), 2, topic=s)
              for s in dag.sources()}
    rows = _rows(compile_dag(dag, num_key_groups=groups), frames)
    _assert_sinks_equal(dag, rows, messages_from_frames(frames))


def test_the_random_compiled_dags_are_not_vacuous():
    """Most random multi-source cases produce output blocks, and fan-ins share a stage or not."""
    produced, stages = 0, set()
    for seed in range(12):
        rng = random.Random(seed)
        dag = _random_multi_source_dag(rng, "sort")
        frames = {s: source_frames(_source_batches(rng, 8, start=rng.choice([0, 20, 60])), 2, topic=s)
                  for s in dag.sources()}
        compiled = compile_dag(dag, num_key_groups=2)
        stages.add(len(compiled.pipeline.plan()))
        produced += _assert_sinks_equal(dag, _rows(compiled, frames), messages_from_frames(frames)) > 2
    assert produced >= 10 and len(stages) >= 3, (produced, stages)


def _diamond() -> Dag:
    """Two sources -> a per-source Seq each -> fan-in Total -> fan-out: AddOne and SumPerKey -> fan-in Seq."""
    dag = Dag()
    a, b = dag.source("a", period_ms=10, partitions=2), dag.source("b", period_ms=10, partitions=2)
    ua = dag.add_op(AddOne(), 2, dag.add_op(Seq(), 2, a, name="seq_a"), name="u_a")
    ub = dag.add_op(AddOne(), 2, dag.add_op(Seq(), 2, b, name="seq_b"), name="u_b")
    total = dag.add_op(Total(), 2, ua, ub, name="total")
    left, right = dag.add_op(AddOne(), 2, total, name="left"), dag.add_op(SumPerKey(), 2, total, name="right")
    dag.sink("out", dag.add_op(Seq(), 2, left, right, name="seq"))
    dag.sink("totals", total)
    return dag


def test_diamond_plan_heads_then_stages():
    compiled = compile_dag(_diamond(), num_key_groups=3)
    assert [[v.name for s in op for v in s.vertices] for op in compiled.plan()] == [
        [], [], ["seq_a", "u_a"], ["seq_b", "u_b"], ["total", "left"], ["right"], ["seq"]]   # AddOne re-keys
    assert [s.source for op in compiled.plan() for s in op] == ["a", "b", None, None, None, None, None]


def test_a_stalled_source_holds_the_output_back_and_loses_nothing():
    dag = _diamond()
    rng = random.Random(5)
    a = _source_batches(rng, 10)
    b = _source_batches(rng, 10, stall=range(1, 7))            # b: data in batch 0, then nothing until 7
    frames = {"a": source_frames(a, 2, topic="a"), "b": source_frames(b, 2, topic="b")}
    outs = compile_dag(dag, num_key_groups=2).run_local(frames)
    b_watermark = max(ts for batch in b[:1] for _, ts, _, _ in batch)
    for i in range(1, 7):                                       # held: nothing beyond b's first blocks
        blocks = [int(x) for x in outs[i].loc[outs[i]["kind"] == "data", "tblock"]]
        assert all(x <= b_watermark // 10 + 1 for x in blocks), (i, blocks)
    rows = [dict(r, batch=i) for i, o in enumerate(outs) for r in o.to_dict("records")]
    messages = messages_from_frames(frames)
    ref = dag.run_local(messages)
    assert not ref.late["a"], "a ran ahead of b: none of its records is late"
    dropped = sum(r["dropped_count"] for r in rows if r["kind"] == "dropped")
    assert dropped == len(ref.late["b"])
    assert _assert_sinks_equal(dag, rows, messages) > 5
    assert max(r["tblock"] for r in rows if r["kind"] == "data") > b_watermark // 10 + 3   # released at the end


def test_multi_source_inputs_must_name_every_source():
    compiled = compile_dag(_diamond())
    with pytest.raises(TraceTypeError, match=r"the DAG has sources \['a', 'b'\]; pass \{source: input\}"):
        compiled.run_local([])


@pytest.mark.parametrize("groups", [1, 3])
def test_load_prediction_example_compiled_equals_run_local(groups):
    """Figure 5's DAG (fan-out to the features, fan-in at Predict, two sinks) on the stage layer."""
    from dataflow_kafka.traces.examples.loads import build, measurements

    dag = build(period_ms=1_000)
    assert [[v.name for s in op for v in s.vertices] for op in compile_dag(dag).plan()] == [
        ["interpolate", "to_device"], ["average", "past_minute", "current_load", "predict"]]
    records = measurements(90, 1_000_000, seed=groups)
    batches = [[(i % 2, v["ts"], k, v) for i, (k, v) in enumerate(records[j:j + 40])]
               for j in range(0, len(records), 40)]
    frames = source_frames(batches, 2)
    messages = messages_from_frames(frames)
    ref = dag.run_local(messages)
    assert len(ref.events("predictions")) > 100 and len(ref.events("averages")) > 100
    assert _assert_sinks_equal(dag, _rows(compile_dag(dag, num_key_groups=groups), frames), messages) > 50
