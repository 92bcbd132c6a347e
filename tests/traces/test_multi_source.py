"""Several sources merged into one vertex: MRG aligns inputs whose first markers
differ, and the parallel deployment equals the sequential reference on random multi-source DAGs."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from tests.traces.library import (INT_OUTPUT, AddOne, Seq, SumPerKey, Total, assert_parallel_equals_local,
                                   fan_out_and_in, random_input, shifted)
from tests.suite import examples
from dataflow_kafka.traces import Blocker, Dag, Marker, Punctuation, Record, TraceTypeError


def _two_source_sum() -> Dag:
    dag = Dag()
    a = dag.source("a", period_ms=100, partitions=1)
    b = dag.source("b", period_ms=100, partitions=1)
    dag.sink("out", dag.add_op(Total(), 1, a, b, name="sum"))
    return dag


def test_two_sources_starting_in_different_blocks_merge_instead_of_crashing():
    """The issue's case: a's first marker is 1 (punctuation 120), b's is 3 (punctuation 350); MRG
    used to raise "channel 1 sent Marker(index=3, ...) while another channel sent Marker(index=1, ...)"."""
    dag = _two_source_sum()
    inputs = {"a": [Record(0, 0, 50, "k", 1), Punctuation(0, 120)],
              "b": [Record(0, 0, 330, "k", 10), Punctuation(0, 350)]}
    out = dag.run_local(inputs).outputs["out"]
    assert [(m.index if isinstance(m, Marker) else (m.key, m.value)) for m in out] == [("k", 1), 1]  # a closed 1
    inputs["a"] += [Punctuation(0, 320)]
    out = dag.run_local(inputs).outputs["out"]
    assert [(m.index if isinstance(m, Marker) else (m.key, m.value)) for m in out] == [
        ("k", 1), 1, ("k", 1), 2, ("k", 1), 3]                 # b's 330 is in block 4, still open
    inputs["a"] += [Punctuation(0, 450)]
    inputs["b"] += [Record(0, 1, 120, "k", 100), Punctuation(0, 450)]   # late for b (its block 2 closed)
    r = dag.run_local(inputs)
    assert [(m.key, m.value) for m in r.events()][-1] == ("k", 11)
    assert r.late == {"a": [], "b": [Record(0, 1, 120, "k", 100)]}
    for seed in range(10):
        assert dag.run_parallel(inputs, seed=seed, par={"sum": 3}).canonical() == r.canonical()


def test_sources_with_different_periods_are_refused_where_they_meet():
    dag = Dag()
    a, b = dag.source("a", period_ms=100), dag.source("b", period_ms=50)
    dag.sink("out_a", dag.add_op(Total(), 1, a, name="alone"))          # not meeting: fine
    dag.sink("out", dag.add_op(Total(), 1, a, b, name="sum"))
    with pytest.raises(TraceTypeError, match=r"vertex 'sum': .*different periods \{'a': 100, 'b': 50\}.*"
                                             r"fix: give these sources the same period_ms"):
        dag.check()


def test_an_upstream_named_twice_is_refused():
    dag = Dag()
    a = dag.source("a", period_ms=10)
    with pytest.raises(TraceTypeError, match="vertex 'twice': upstreams \\['a', 'a'\\] name one vertex twice"):
        dag.add_op(Total(), 1, a, a, name="twice")


# -- random multi-source DAGs ---------------------------------------------------------------------
def _multi_input(rng: random.Random, sources: list[str]) -> dict[str, list]:
    """Per source (2 partitions): out-of-order records, shifted in time and some starting to
    punctuate late, so first markers differ; a closing punctuation per partition, except for a
    source that stalls (its last punctuations left out)."""
    out = {}
    for s in sources:
        by = rng.choice([0, 0, 25, 70, 130])
        msgs = shifted(random_input(rng, n=rng.randint(5, 40), partitions=2), by,
                       drop_first_punctuations=rng.choice([0, 0, 2, 5]))
        if rng.random() < 0.1:
            msgs = msgs[: len(msgs) // 2] + [m for m in msgs[len(msgs) // 2:] if isinstance(m, Record)]
        else:
            end = max(m.ts for m in msgs) - rng.randrange(15)
            msgs += [Punctuation(0, end), Punctuation(1, end)]
        out[s] = msgs
    return out


def _ordered(dag: Dag, vertex: str) -> bool:
    op = dag.vertices[vertex].op
    return op is not None and op.output.ordered


def _branch(dag: Dag, rng: random.Random, src: str, tag: str) -> str:
    prev = src
    for i in range(rng.randint(0, 2)):
        prev = dag.add_op(rng.choice(INT_OUTPUT)(), rng.randint(1, 3), prev, name=f"{tag}{i}")
    if _ordered(dag, prev):
        prev = dag.add_op(AddOne(), rng.randint(1, 3), prev, name=f"{tag}u")     # to U: MRG of U inputs
    return prev


def _random_multi_source_dag(rng: random.Random, ordering: str) -> Dag:
    dag = Dag(ordering)
    sources = [dag.source(f"s{i}", period_ms=10, partitions=2) for i in range(rng.randint(2, 3))]
    ends = [_branch(dag, rng, s, f"b{i}_") for i, s in enumerate(sources)]
    fan_in = rng.choice([Total, SumPerKey, Seq])
    prev = dag.add_op(fan_in(), rng.randint(1, 3), *ends, name="fan_in")
    if rng.random() < 0.5:                      # fan-out and fan-in again after the merge
        if _ordered(dag, prev):
            prev = dag.add_op(AddOne(), 2, prev, name="to_u")
        prev = fan_out_and_in(dag, rng, prev, AddOne, SumPerKey, [Total, Seq], most=3, tag="again_")
    dag.sink("out", prev)
    return dag


@settings(max_examples=examples(80), deadline=None)
@given(seed=st.integers(0, 10 ** 6), ordering=st.sampled_from(["sort", "optimistic"]))
def test_random_multi_source_dags_parallel_equals_run_local(seed, ordering):
    rng = random.Random(seed)
    dag = _random_multi_source_dag(rng, ordering)
    inputs = _multi_input(rng, dag.sources())
    assert_parallel_equals_local(dag, inputs, seed)


def _brute_force_totals(inputs: dict[str, list], period: int) -> list[tuple[int, dict]]:
    """Per merged marker the running total per key, from the records alone: a source's accepted
    records (not in its Blocker's late side output) are in block ``max(ts // P + 1, first)``, its
    first marker being that of its first low watermark; the merged markers run from the smallest
    first marker to the smallest last one."""
    firsts, lasts, accepted = [], [], []
    for msgs in inputs.values():
        blocker, first, last = Blocker(period, 2), None, None
        for m in msgs:
            for x in blocker.push(m):
                if isinstance(x, Marker):
                    first = x.index if first is None else first
                    last = x.index
        if first is None:
            return []
        firsts.append(first)
        lasts.append(last)
        late = {id(r) for r in blocker.late}
        accepted += [(max(r.ts // period + 1, first), r.key, r.value) for r in msgs
                     if isinstance(r, Record) and id(r) not in late]
    out = []
    for k in range(min(firsts), min(lasts) + 1):
        totals: dict = {}
        for block, key, value in accepted:
            if block <= k:
                totals[key] = totals.get(key, 0) + value
        out.append((k, totals))
    return out


@settings(max_examples=examples(80), deadline=None)
@given(seed=st.integers(0, 10 ** 6))
def test_multi_source_sum_equals_a_brute_force_sum_per_marker(seed):
    rng = random.Random(seed)
    dag = Dag()
    sources = [dag.source(f"s{i}", period_ms=10, partitions=2) for i in range(rng.randint(2, 3))]
    dag.sink("out", dag.add_op(Total(), rng.randint(1, 3), *sources, name="sum"))
    inputs = _multi_input(rng, dag.sources())
    got, cur = [], {}
    for m in dag.run_parallel(inputs, seed=seed).outputs["out"]:
        if isinstance(m, Marker):
            got.append((m.index, cur))
            cur = {}
        else:
            cur[m.key] = m.value
    assert got == _brute_force_totals(inputs, 10)

