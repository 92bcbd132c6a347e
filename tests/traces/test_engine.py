"""The pure engine of traces/: blocks, glue, templates, checker, and parallel = sequential."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from tests.traces.library import (INT_OUTPUT, AddOne, Diff, Rekey, Seq, SumPerKey, assert_parallel_equals_local,
                                   fan_out_and_in, random_input)
from tests.suite import examples
from dataflow_kafka.traces import (Dag, Event, Marker, O, OpKeyedOrdered, OpStateless, Punctuation, Record, TraceError,
                    TraceTypeError, U)
from dataflow_kafka.traces.examples.iot import LinearInterpolation, build
from dataflow_kafka.traces.glue import Merge
from dataflow_kafka.traces.types import Blocker


# -- blocks -------------------------------------------------------------------------------------
def test_blocker_blocks_hold_early_items_and_route_late_ones():
    b = Blocker(10, partitions=2)
    assert b.push(Record(0, 0, 5, "a", 1)) == []                       # before any watermark: held
    assert b.push(Punctuation(0, 20)) == []                             # p1 has not punctuated
    out = b.push(Punctuation(1, 12))                                    # low watermark 12 -> marker 1
    assert out == [Event("a", 1, 5, (0, 0)), Marker(1, 10)]
    assert b.push(Record(1, 0, 15, "b", 2)) == [Event("b", 2, 15, (1, 0))]   # open block 2
    assert b.push(Record(1, 1, 27, "c", 3)) == []                       # block 3: early, held
    assert b.push(Record(1, 2, 9, "d", 4)) == []                        # block 1 closed: late
    assert b.late == [Record(1, 2, 9, "d", 4)]
    out = b.push(Punctuation(1, 30))                                    # watermark 20: block 2 closes
    assert out == [Marker(2, 20), Event("c", 3, 27, (1, 1))]


def test_marker_before_any_item_and_empty_blocks():
    b = Blocker(10, partitions=1)
    assert b.push(Punctuation(0, 30)) == [Marker(3, 30)]
    assert b.push(Punctuation(0, 55)) == [Marker(4, 40), Marker(5, 50)]  # empty blocks still close


def test_merge_forwards_a_marker_when_every_input_sent_it_and_holds_early_items():
    m = Merge(2)
    assert m.push(0, Event("a", 1, 1, (0,))) == []                      # before every first marker: held
    assert m.push(0, Marker(1, 10)) == []
    assert m.push(0, Event("b", 2, 12, (1,))) == []                     # block 2 on channel 0: held
    assert m.push(1, Event("c", 3, 4, (2,))) == []
    assert m.push(1, Marker(1, 10)) == [Event("a", 1, 1, (0,)), Event("c", 3, 4, (2,)), Marker(1, 10),
                                        Event("b", 2, 12, (1,))]
    assert m.push(1, Event("d", 4, 15, (3,))) == [Event("d", 4, 15, (3,))]   # the open block: at once


def test_merge_aligns_channels_whose_first_markers_differ():
    """A channel's first marker j stands for every marker below j; its earlier items are block j."""
    m = Merge(2)
    assert m.push(1, Event("late-start", 7, 250, (9,))) == []           # channel 1's block 3 (its first)
    assert m.push(1, Marker(3, 30)) == []
    assert m.push(1, Event("x", 8, 330, (10,))) == []                   # channel 1's block 4
    assert m.push(0, Event("a", 1, 5, (0,))) == []
    assert m.push(0, Marker(1, 10)) == [Event("a", 1, 5, (0,)), Marker(1, 10)]
    assert m.push(0, Event("b", 2, 15, (1,))) == [Event("b", 2, 15, (1,))]
    assert m.push(0, Marker(2, 20)) == [Marker(2, 20), Event("late-start", 7, 250, (9,))]   # block 3 opens
    assert m.push(0, Marker(3, 30)) == [Marker(3, 30), Event("x", 8, 330, (10,))]
    with pytest.raises(TraceError, match="channel 0 sent Marker.index=5.* after marker 3.*consecutive"):
        m.push(0, Marker(5, 50))
    assert m.push(0, Marker(4, 40)) == []
    with pytest.raises(TraceError, match="same on every input.*same period_ms"):
        m.push(1, Marker(4, 41))


# -- templates ----------------------------------------------------------------------------------
class EmitOtherKey(OpKeyedOrdered):
    def on_item(self, state, key, value, emit):
        emit(key + "!", value)
        return state


class Heartbeat(OpStateless):
    def on_item(self, key, value, emit):
        emit(key, value)

    def on_marker(self, marker, emit):
        emit("beat", marker.index)


def _stream(*ts_values, key="k", partitions=1):
    msgs = [Record(0, i, ts, key, v) for i, (ts, v) in enumerate(ts_values)]
    return msgs + [Punctuation(p, 10 ** 6) for p in range(partitions)]


@pytest.mark.parametrize("ordering", ["sort", "optimistic"])
def test_keyed_ordered_emitting_another_key_is_refused_at_run_time(ordering):
    dag = Dag(ordering)
    dag.sink("out", dag.add_op(EmitOtherKey(), 2, dag.source("s", 10, 1), name="bad"))
    with pytest.raises(TraceError, match="vertex 'bad'.*emitted key 'k!'.*processing key 'k'"):
        dag.run_local(_stream((1, 1)))
    with pytest.raises(TraceError, match="vertex 'bad'"):
        dag.run_parallel(_stream((1, 1)), seed=1)


def test_stateless_emitting_on_marker_refused_at_parallelism_above_one_only():
    dag = Dag()
    dag.sink("out", dag.add_op(Heartbeat(), 1, dag.source("s", 10, 1), name="hb"))
    assert [e.key for e in dag.run_parallel(_stream((1, 1)), seed=0).events()] == ["k", "beat"]
    dag2 = Dag()
    dag2.sink("out", dag2.add_op(Heartbeat(), 2, dag2.source("s", 10, 1), name="hb"))
    with pytest.raises(TraceError, match="vertex 'hb': OpStateless.on_marker emitted at parallelism > 1"):
        dag2.run_parallel(_stream((1, 1)), seed=0)


def test_keyed_unordered_is_table_3_including_keys_with_empty_blocks():
    # SumPerKey: update_state(s, agg) = s + agg + 1; start state advances at every marker too
    dag = Dag()
    dag.sink("out", dag.add_op(SumPerKey(), 1, dag.source("s", 10, 1)))
    msgs = [Record(0, 0, 1, "a", 5), Punctuation(0, 10), Punctuation(0, 20), Record(0, 1, 21, "b", 7),
            Record(0, 2, 22, "a", 1), Punctuation(0, 30)]
    got = [(e.key, e.value) for e in dag.run_local(msgs).events()]
    # block 1: a on_item sees 0, marker: a = 0+5+1 = 6, start = 1; block 2 empty: a = 7, start = 2
    # block 3: b first seen with start 2 -> on_item 2; a on_item 7; marker: a = 7+1+1, b = 2+7+1
    assert got == [("a", 0), ("a", 6), ("a", 7), ("b", 2), ("a", 7), ("a", 9), ("b", 10)]


def test_key_first_seen_late_starts_from_initial_state_and_gets_later_markers():
    dag = Dag()
    dag.sink("out", dag.add_op(Diff(), 1, dag.source("s", 10, 1)))
    msgs = [Record(0, 0, 1, "a", 5), Punctuation(0, 10), Punctuation(0, 20), Record(0, 1, 25, "b", 3),
            Punctuation(0, 30)]
    got = [(e.key, e.value) for e in dag.run_local(msgs).events()]
    assert got == [("a", ("d", 5, 0)), ("a", ("m", 1)), ("a", ("m", 1)),          # markers 1, 2: only a
                   ("b", ("d", 3, 0)), ("a", ("m", 1)), ("b", ("m", 1))]          # marker 3: a and b


def test_equal_timestamps_are_ordered_by_partition_offset_and_position():
    dag = Dag()
    src = dag.source("s", 10, 2)
    dag.sink("out", dag.add_op(Seq(), 2, dag.add_op(Rekey(), 3, src)))
    msgs = [Record(1, 0, 5, "x", 4), Record(0, 0, 5, "y", 1), Record(0, 1, 5, "x", 7), Record(1, 1, 5, "z", 1),
            Punctuation(0, 10), Punctuation(1, 10)]
    ref = dag.run_local(msgs)
    # all at ts 5; key 1 = value % 3: p0@0 (1, then 10), p0@1 (7, then 70), p1@0 (4), p1@1 (1, 10)
    assert [e.value for e in ref.events() if e.key == 1] == [1, 1010, 2007, 3070, 4004, 5001, 6010]
    seq = [(e.value // 1000, e.value % 1000, e.pos) for e in ref.events() if e.key == 1]
    assert [p for _, _, p in seq] == sorted(p for _, _, p in seq)       # SORT: (ts, partition, offset, path)
    for seed in range(20):
        assert dag.run_parallel(msgs, seed=seed).canonical() == ref.canonical()


def test_final_block_without_marker_stays_open():
    dag = Dag()
    src = dag.source("s", 10, 1)
    dag.sink("out", dag.add_op(Diff(), 2, dag.add_op(AddOne(), 2, src)))
    msgs = [Record(0, 0, 1, "a", 5), Punctuation(0, 10), Record(0, 1, 12, "a", 9), Record(0, 2, 31, "a", 2)]
    ref = dag.run_local(msgs)
    blocks = ref.canonical()["out"]
    assert blocks[-1] == (None, [])            # block 2 is open: SORT holds it, nothing leaks
    assert [b[0] for b in blocks] == [(1, 10), None]
    for seed in range(10):
        assert dag.run_parallel(msgs, seed=seed).canonical() == ref.canonical()


# -- checker ------------------------------------------------------------------------------------
def test_o_edge_without_sort_is_refused_by_the_checker():
    dag = Dag(ordering="none")
    src = dag.source("s", 10, 1)
    dag.sink("out", dag.add_op(Diff(), 2, dag.add_op(AddOne(), 2, src, name="parse"), name="diff"))
    with pytest.raises(TraceTypeError, match=r"vertex 'diff'.*edge 'parse'->'diff' is U\(\*, \*\).*"
                                             r"fix: ordering='sort'"):
        dag.check()
    with pytest.raises(TraceTypeError):
        dag.run_local([])


def test_checker_errors_name_vertex_edge_and_fix():
    dag = Dag()
    a = dag.source("a", 10, 1)
    with pytest.raises(TraceTypeError, match="vertex 'x': upstream 'nope' does not exist"):
        dag.add_op(AddOne(), 1, "nope", name="x")
    m1 = dag.add_op(Diff(), 1, a, name="o1")
    m2 = dag.add_op(Diff(), 1, a, name="o2")
    dag.sink("out", dag.add_op(Seq(), 1, m1, m2, name="join"))
    with pytest.raises(TraceTypeError, match="vertex 'join': merging O inputs.*disjoint_keys=True"):
        dag.check()
    typed = Dag()
    s = typed.source("s", 10, 1, type=U("ID", "M"))
    typed.sink("out", typed.add_op(LinearInterpolation(), 1, s, name="li"))
    with pytest.raises(TraceTypeError, match=r"vertex 'li': edge 's'->'li' carries U\(ID, M\).*O\(ID, V\)"):
        typed.check()
    dangling = Dag()
    dangling.add_op(AddOne(), 1, dangling.source("s", 10, 1), name="lonely")
    with pytest.raises(TraceTypeError, match="vertex 'lonely' has no downstream"):
        dangling.check()


def test_parallel_stateless_with_ordered_output_becomes_unordered():
    class KeepOrder(OpStateless):
        input, output = O(), O()

    dag = Dag(ordering="none")
    d = dag.add_op(Diff(), 1, dag.add_op(AddOne(), 1, dag.source("s", 10, 1)), ordering="sort")
    dag.sink("out", dag.add_op(KeepOrder(), 2, d, name="keep"))
    assert dag.check().out_types["keep"] == U()


# -- the paper's motivating failure (§2) --------------------------------------------------------
class Parse(OpStateless):
    def on_item(self, key, value, emit):
        emit(key, value)


READINGS = [(0, 0), (10, 2), (0, 4), (10, 6)]      # (value, t) of one sensor


def _plain_interpolation(arrivals):
    """What plain Spark does: a parallel map, then keyed stateful interpolation in arrival order."""
    li, out = LinearInterpolation(), []
    state = li.initial_state()
    for v, t in arrivals:
        state = li.on_item(state, "s", (float(v), t), lambda k, val, ts=None: out.append(val))
    return out


def test_plain_parallel_interpolation_depends_on_the_interleaving():
    in_order = _plain_interpolation(READINGS)
    swapped = _plain_interpolation([READINGS[0], READINGS[2], READINGS[1], READINGS[3]])  # 2 map tasks
    assert in_order == [(0.0, 0), (5.0, 1), (10.0, 2), (5.0, 3), (0.0, 4), (5.0, 5), (10.0, 6)]
    assert swapped != in_order


@pytest.mark.parametrize("par", [1, 2, 3, 4])
@pytest.mark.parametrize("ordering", ["sort", "optimistic"])
def test_typed_pipeline_gives_the_in_order_interpolation_at_every_parallelism(par, ordering):
    dag = Dag(ordering)
    src = dag.source("sensor", period_ms=100, partitions=2)
    dag.sink("out", dag.add_op(LinearInterpolation(), par, dag.add_op(Parse(), par, src)))
    msgs = [Record(i % 2, i // 2, t, "s", (float(v), t)) for i, (v, t) in enumerate(READINGS)]
    msgs += [Punctuation(0, 100), Punctuation(1, 100)]
    expected = [(0.0, 0), (5.0, 1), (10.0, 2), (5.0, 3), (0.0, 4), (5.0, 5), (10.0, 6)]
    for seed in range(10):
        assert [e.value for e in dag.run_parallel(msgs, seed=seed).events()] == expected
    assert [e.value for e in dag.run_local(msgs).events()] == expected


# -- equivalence: parallel deployment = sequential reference (Corollary 4.4) --------------------
def _random_dag(rng: random.Random, ordering: str) -> Dag:
    dag = Dag(ordering)
    prev = dag.source("src", period_ms=10, partitions=2)
    for i in range(rng.randint(1, 4)):
        cls = rng.choice(INT_OUTPUT if i < 3 else INT_OUTPUT + [Diff])
        prev = dag.add_op(cls(), rng.randint(1, 4), prev, name=f"v{i}")
    if rng.random() < 0.3 and not isinstance(dag.vertices[prev].op, Diff):       # a fan-out and fan-in of two U branches
        prev = fan_out_and_in(dag, rng, prev, AddOne, Rekey, [SumPerKey, Seq])
    dag.sink("out", prev)
    return dag


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 10 ** 6), ordering=st.sampled_from(["sort", "optimistic"]))
def test_random_pipelines_parallel_equals_run_local(seed, ordering):
    rng = random.Random(seed)
    dag = _random_dag(rng, ordering)
    msgs = random_input(rng)
    assert_parallel_equals_local(dag, msgs, seed)


def test_iot_example_parallel_equals_run_local_for_both_strategies():
    rng = random.Random(3)
    msgs, off = [], [0, 0]
    for t in range(60):
        for s in ("s1", "s2", "s3", "s4"):
            if rng.random() < 0.5:
                p = rng.randrange(2)
                msgs.append(Record(p, off[p], t, s, {"id": s, "scalar": rng.randrange(100), "ts": t}))
                off[p] += 1
        if t % 7 == 6:
            msgs += [Punctuation(0, t - 3), Punctuation(1, t - 3)]
    ref = build(par=1).run_local(msgs)
    assert len(ref.events()) > 5
    for ordering in ("sort", "optimistic"):
        for seed in range(5):
            assert build(par=3, ordering=ordering).run_parallel(msgs, seed=seed).canonical() == ref.canonical()


def test_a_parallel_run_that_loses_order_is_caught_by_the_canonical_form():
    """The property above can fail: feeding Diff without SORT (a wrong deployment) differs."""
    dag = Dag()
    dag.sink("out", dag.add_op(Diff(), 1, dag.add_op(AddOne(), 1, dag.source("s", 10, 1))))
    msgs = _stream((3, 1), (1, 2), (2, 3))
    ref = dag.run_local(msgs).canonical()
    dag.vertices["diff"].ordering = "none"
    dag.vertices["diff"].op.input = U()           # lie to the checker: no SORT inserted
    assert dag.run_local(msgs).canonical() != ref
