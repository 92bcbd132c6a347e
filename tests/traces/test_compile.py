"""compile_dag without Spark: the stage layer's local runner (the same per-key-group code Spark runs)
gives Dag.run_local's blocks, for both strategies and several key-group counts; refusals."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from tests.traces.frames import source_frames
from tests.traces.library import AddOne, Diff, DropEven, Rekey, Seq, SumPerKey
from tests.traces.test_engine import Heartbeat
from tests.suite import examples
from dataflow_kafka.traces import Dag, TraceTypeError
from dataflow_kafka.traces.examples.iot import build
from dataflow_kafka.traces.spark import canonical_blocks, canonical_rows, compile_dag, messages_from_frames


def _batches(seed: int, n_batches: int = 8, per_batch: int = 15):
    rng, t, out = random.Random(seed), 0, []
    for _ in range(n_batches):
        batch = []
        for _ in range(per_batch):
            t += 1
            s = rng.choice(["s1", "s2", "s3", "s4"])
            ts = max(0, t - rng.randrange(8) - (25 if rng.random() < 0.1 else 0))    # some late
            batch.append((rng.randrange(2), ts, s, {"id": s, "scalar": rng.randrange(100), "ts": ts}))
        out.append(batch)
    return out


def _spark_rows(pipe, frames):
    return [dict(r, batch=i) for i, o in enumerate(pipe.run_local([f.copy() for f in frames]))
            for r in o.to_dict("records")]


@pytest.mark.parametrize("ordering", ["sort", "optimistic"])
@pytest.mark.parametrize("groups", [1, 3])
def test_compiled_iot_dag_equals_run_local(ordering, groups):
    frames = source_frames(_batches(groups), 2)
    dag = build(par=2, period_ms=10, ordering=ordering)
    rows = _spark_rows(compile_dag(dag, num_key_groups=groups), frames)
    ref = dag.run_local(messages_from_frames(frames))
    assert ref.late["hub"], "the input has late records"
    blocks = canonical_rows(rows, ordered=False)
    assert len(blocks) >= 5 and blocks == canonical_blocks(ref.outputs["out"], ordered=False)
    dropped = sum(r["dropped_count"] for r in rows if r["kind"] == "dropped")
    assert dropped == sum(r.value["id"] != "s3" for r in ref.late["hub"])


class ValueKey(AddOne):
    """Re-keys to the value (the next keyed vertex needs a shuffle)."""

    def on_item(self, key, value, emit):
        emit(value % 5, value)


def _int_frames(seed):
    rng = random.Random(seed)
    return source_frames([[(rng.randrange(2), max(0, 10 * b + i - rng.randrange(6)), f"k{rng.randrange(3)}",
                            rng.randrange(40)) for i in range(10)] for b in range(6)], 2)


def test_same_key_vertices_fuse_and_a_rekey_starts_a_stage_with_o_output():
    dag = Dag()
    src = dag.source("s", 10, 2)
    a = dag.add_op(Seq(), 2, dag.add_op(AddOne(), 2, src), name="seq")
    b = dag.add_op(Seq(), 2, a, name="seq_again")                  # same key as seq: fused
    c = dag.add_op(SumPerKey(), 2, dag.add_op(ValueKey(), 2, b, name="rekey"), name="sum")
    dag.sink("out", dag.add_op(Seq(), 2, c, name="seq2"))         # after OpKeyedUnordered: a shuffle
    pipe = compile_dag(dag, num_key_groups=3)
    assert [[v.name for v in op[0].vertices] for op in pipe.plan()] == [["seq", "seq_again", "rekey"], ["sum"],
                                                                         ["seq2"]]
    frames = _int_frames(4)
    rows = _spark_rows(pipe, frames)
    ref = dag.run_local(messages_from_frames(frames))
    assert canonical_rows(rows, ordered=True) == canonical_blocks(ref.outputs["out"], ordered=True)


def test_compile_refusals_name_the_vertex():
    dag = Dag()
    dag.sink("out", dag.add_op(Diff(), 1, dag.add_op(Heartbeat(), 1, dag.source("s", 10, 1), name="hb")))
    with pytest.raises(TraceTypeError, match="vertex 'hb': OpStateless.on_marker emits"):
        compile_dag(dag)
    apart = Dag()                                   # two sources that never meet, of different periods
    apart.sink("out_a", apart.add_op(SumPerKey(), 1, apart.source("a", 10, 1)))
    apart.sink("out_b", apart.add_op(SumPerKey(), 1, apart.source("b", 20, 1)))
    apart.check()
    with pytest.raises(TraceTypeError, match=r"different periods \{'a': 10, 'b': 20\}.*fix: give every source"):
        compile_dag(apart)


def _linear_dag(rng: random.Random, ordering: str, library=None, most: int = 4) -> Dag:
    from tests.traces.library import INT_OUTPUT

    dag = Dag(ordering)
    prev = dag.source("src", period_ms=10, partitions=2)
    ops = [rng.choice(library or INT_OUTPUT) for _ in range(rng.randint(1, most))]
    if not any(issubclass(c, (Seq, SumPerKey)) for c in ops):
        ops.append(rng.choice([Seq, SumPerKey]))        # a keyed vertex in every random chain
    for i, cls in enumerate(ops):
        prev = dag.add_op(cls(), rng.randint(1, 4), prev, name=f"v{i}")
    dag.sink("out", prev)
    return dag


@settings(max_examples=examples(12), deadline=None)
@given(seed=st.integers(0, 10 ** 6), ordering=st.sampled_from(["sort", "optimistic"]), groups=st.integers(1, 4))
def test_random_linear_dags_compiled_equal_run_local(seed, ordering, groups):
    rng = random.Random(seed)
    dag = _linear_dag(rng, ordering)
    frames = _int_frames(seed)
    rows = _spark_rows(compile_dag(dag, num_key_groups=groups), frames)
    ref = dag.run_local(messages_from_frames(frames))
    ordered = dag.check().out_types["out"].ordered
    assert canonical_rows(rows, ordered) == canonical_blocks(ref.outputs["out"], ordered)


# -- fusion through the planner (keygroups.fusion, Enorm Algorithm 1) ------------------------------
class KeepDropEven(DropEven):
    preserves_key = True                # declared: a keyed vertex after it can run in the same stage


class KeepSum(SumPerKey):
    preserves_key = True


_FUSION_LIBRARY = [AddOne, Rekey, DropEven, KeepDropEven, Seq, SumPerKey, KeepSum]


def _old_segments(dag: Dag) -> tuple[list[str], list[list[str]]]:
    """The rule compile_dag applied before it asked the planner (transcribed): the router prefix and
    the stages' vertex names."""
    from dataflow_kafka.traces.compile import _keeps_key
    from dataflow_kafka.traces.templates import OpStateless

    prefix, segments, keeps = [], [], False
    for n in [n for n in dag.check().order if dag.vertices[n].kind == "op"]:
        op = dag.vertices[n].op
        if isinstance(op, OpStateless):
            (segments[-1] if segments else prefix).append(n)
            keeps = keeps and _keeps_key(op)
        else:
            if segments and keeps:
                segments[-1].append(n)
            else:
                segments.append([n])
            keeps = _keeps_key(op)
    return prefix, segments


def _fusion_dag(rng: random.Random) -> Dag:
    return _linear_dag(rng, "sort", _FUSION_LIBRARY, most=7)


def _compiled(pipe) -> tuple[list[str], list[list[str]]]:
    ops = pipe.plan()
    return [v.name for v in ops[0][0].prefix], [[v.name for s in op for v in s.vertices] for op in ops]


@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 10 ** 6))
def test_planner_stages_equal_the_old_rule_on_random_linear_dags_for_any_rates(seed):
    rng = random.Random(seed)
    dag = _fusion_dag(rng)
    edges = [(u, n) for n, v in dag.vertices.items() for u in v.upstreams]
    rates = {e: rng.choice([0.01, 1.0, 3.0, 1000.0]) for e in edges if rng.random() < 0.7}
    expected = _old_segments(dag)
    assert _compiled(compile_dag(dag)) == expected
    assert _compiled(compile_dag(dag, rates=rates)) == expected


def test_the_random_fusion_dags_fuse_and_split():
    """Not vacuous: declared preserves_key fuses across a stateless vertex, an undeclared one splits."""
    dag = Dag()
    prev = dag.source("src", 10, 2)
    for name, cls in [("p", Rekey), ("a", Seq), ("b", KeepDropEven), ("c", KeepSum), ("d", Seq), ("e", DropEven),
                      ("f", Seq)]:
        prev = dag.add_op(cls(), 2, prev, name=name)
    dag.sink("out", prev)
    assert _compiled(compile_dag(dag, rates={("e", "f"): 100.0, ("a", "b"): 0.5})) == _old_segments(dag) == (
        ["p"], [["a", "b", "c", "d", "e"], ["f"]])
    frames = _int_frames(7)
    rows = _spark_rows(compile_dag(dag, num_key_groups=3), frames)
    ref = dag.run_local(messages_from_frames(frames))
    assert canonical_rows(rows, ordered=True) == canonical_blocks(ref.outputs["out"], ordered=True) != {}


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 10 ** 6), groups=st.integers(1, 3))
def test_planner_compiled_random_dags_equal_run_local(seed, groups):
    rng = random.Random(seed)
    dag = _fusion_dag(rng)
    frames = _int_frames(seed)
    rows = _spark_rows(compile_dag(dag, num_key_groups=groups), frames)
    ref = dag.run_local(messages_from_frames(frames))
    ordered = dag.check().out_types["out"].ordered
    assert canonical_rows(rows, ordered) == canonical_blocks(ref.outputs["out"], ordered)


def test_fusion_input_and_bad_rates():
    from dataflow_kafka.traces.spark import fusion_input

    dag = Dag()
    prev = dag.source("src", 10, 2)
    for name, cls in [("p", AddOne), ("a", Seq), ("b", AddOne), ("c", Seq), ("d", KeepSum), ("e", Seq)]:
        prev = dag.add_op(cls(), 2, prev, name=name)
    dag.sink("out", prev)
    prefix, attributes, edges = fusion_input(dag, {("d", "e"): 4.0})
    assert prefix == ["p"]
    assert {n: sorted(a) for n, a in attributes.items()} == {"a": ["key1"], "b": ["key1"], "c": ["key2"],
                                                             "d": ["key2"], "e": ["key2"]}
    assert edges == {("a", "b"): 1.0, ("b", "c"): 1.0, ("c", "d"): 1.0, ("d", "e"): 4.0}
    with pytest.raises(TraceTypeError, match=r"rates: \('a', 'c'\) is not an edge"):
        compile_dag(dag, rates={("a", "c"): 1.0})
    for bad in (0, -2.0, float("nan"), True):
        with pytest.raises(TraceTypeError, match="rates: edge 'c'->'d' must have a finite rate > 0"):
            compile_dag(dag, rates={("c", "d"): bad})
