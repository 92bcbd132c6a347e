"""The fusion planner (Enorm §4.4.1, Algorithm 1): the paper's Figure 1 -> Figure 2, the cycle check,
the alternative score, bad input, and properties on random DAGs against brute-force checks and a
literal transcription of Algorithm 1."""

from __future__ import annotations

import doctest
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups.fusion import ENORM_EXAMPLE_ATTRIBUTES, Component, inter_component_rate, plan_chain, plan_fusion

from tests.suite import examples

# Figure 1: op1 (per tuple, PA = all), op2/op3 (per area), op4/op5 (global, PA = {}).
FIGURE_1_PA = {"op1": ENORM_EXAMPLE_ATTRIBUTES, "op2": {"area"}, "op3": {"area"}, "op4": set(), "op5": set()}
FIGURE_1_EDGES = [("op1", "op2"), ("op1", "op3"), ("op2", "op4"), ("op3", "op5")]
# Figure 2 / Example 2b: C1 = {op1, op2, op3} partitioned on <area>; op4 and op5 alone, PA = {}.
FIGURE_2 = [Component(("op1", "op2", "op3"), frozenset({"area"})),
            Component(("op4",), frozenset()), Component(("op5",), frozenset())]


@pytest.mark.parametrize("score", ["rate", "attributes"])
@given(rates=st.lists(st.floats(0.001, 1e6), min_size=4, max_size=4))
def test_figure_1_fuses_into_figure_2_for_any_positive_rates(score, rates):
    assert plan_fusion(FIGURE_1_PA, dict(zip(FIGURE_1_EDGES, rates)), score=score) == FIGURE_2


def test_a_zero_rate_edge_is_not_fused_by_rate_but_by_the_alternative_score():
    rates = {("op1", "op2"): 5.0, ("op1", "op3"): 0.0, ("op2", "op4"): 1.0, ("op3", "op5"): 1.0}
    assert [c.operators for c in plan_fusion(FIGURE_1_PA, rates)] == [("op1", "op2"), ("op3",), ("op4",), ("op5",)]
    assert plan_fusion(FIGURE_1_PA, rates, score="attributes") == FIGURE_2


def test_highest_rate_first_decides_the_partitioning():
    # op1 can fuse with op2 (on "a") or op3 (on "b"), not both: the heavier edge wins.
    pa = {"op1": {"a", "b"}, "op2": {"a"}, "op3": {"b"}}
    heavy_b = plan_fusion(pa, {("op1", "op2"): 1.0, ("op1", "op3"): 2.0})
    assert heavy_b == [Component(("op1", "op3"), frozenset({"b"})), Component(("op2",), frozenset({"a"}))]
    heavy_a = plan_fusion(pa, {("op1", "op2"): 3.0, ("op1", "op3"): 2.0})
    assert heavy_a == [Component(("op1", "op2"), frozenset({"a"})), Component(("op3",), frozenset({"b"}))]


def test_alternative_score_prefers_the_most_shared_attributes_and_uses_weights():
    # rates would fuse op1-op2 (on x); the alternative score fuses op1-op3 (x and y in common) first,
    # after which op2 still fits (x).
    pa = {"op1": {"x", "y", "z"}, "op2": {"x"}, "op3": {"x", "y"}}
    rates = {("op1", "op2"): 9.0, ("op1", "op3"): 1.0}
    assert [c.operators for c in plan_fusion(pa, rates, score="attributes")] == [("op1", "op2", "op3")]
    # weights: z counts most; op4 shares z with op1, op3 shares x, y: op1-op4 first, then nothing fits op3
    pa = {"op1": {"x", "y", "z"}, "op3": {"x", "y"}, "op4": {"z"}}
    rates = {("op1", "op3"): 1.0, ("op1", "op4"): 1.0}
    got = plan_fusion(pa, rates, score="attributes", attribute_weights={"z": 5.0})
    assert [c.operators for c in got] == [("op1", "op4"), ("op3",)]
    assert [c.operators for c in plan_fusion(pa, rates, score="attributes")] == [("op1", "op3"), ("op4",)]


def test_cycle_check_skips_a_fusion_that_would_make_the_component_graph_cyclic():
    # a -> b -> c and a -> c: fusing a and c (the heaviest edge) would put b before and after {a, c}.
    pa = {"a": {"x", "y"}, "b": {"y"}, "c": {"x", "y"}}
    rates = {("a", "b"): 5.0, ("b", "c"): 1.0, ("a", "c"): 10.0}
    # a-c is blocked while b stands between them; a-b fuses (5), then {a, b} -> c (on y) fuses too.
    assert [c.operators for c in plan_fusion(pa, rates)] == [("a", "b", "c")]
    pa = {"a": {"x", "y"}, "b": {"y"}, "c": {"x"}}
    assert [c.operators for c in plan_fusion(pa, rates)] == [("a", "b"), ("c",)]
    pa = {"a": {"x"}, "b": {"y"}, "c": {"x"}}
    assert [c.operators for c in plan_fusion(pa, rates)] == [("a",), ("b",), ("c",)]


def test_inter_component_rate():
    rates = dict(zip(FIGURE_1_EDGES, [10.0, 20.0, 1.0, 2.0]))
    assert inter_component_rate(plan_fusion(FIGURE_1_PA, rates), rates) == 3.0
    singles = [Component((n,), frozenset(a)) for n, a in FIGURE_1_PA.items()]
    assert inter_component_rate(singles, rates) == 33.0


@pytest.mark.parametrize("pa, rates, kw, message", [
    ({"a": {"x"}}, {("a", "b"): 1.0}, {}, "names operator 'b'"),
    ({"a": {"x"}, "b": {"x"}}, {("a", "b"): -1.0}, {}, "rate of edge ('a', 'b')"),
    ({"a": {"x"}, "b": {"x"}}, {("a", "b"): float("nan")}, {}, "rate of edge"),
    ({"a": {"x"}}, {("a", "a"): 1.0}, {}, "self loop"),
    ({"a": {"x"}, "b": {"x"}}, {("a", "b"): 1.0, ("b", "a"): 1.0}, {}, "cycle: a -> b -> a"),
    ({"a": "area"}, {}, {}, "the string 'area'"),
    ({"a": {"x"}}, {}, {"score": "comm"}, "score must be one of"),
    ({"a": {"x"}}, {}, {"score": "attributes", "attribute_weights": {"x": -1}}, "attribute_weights['x']"),
    ({"a": {"x"}}, {("a",): 1.0}, {}, "a pair (upstream, downstream)"),
])
def test_bad_input_names_the_problem(pa, rates, kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        plan_fusion(pa, rates, **kw)


# --- properties on random DAGs ---------------------------------------------------------------------

ATTRS = "uvwxyz"


@st.composite
def dags(draw, tree: bool = False):
    n = draw(st.integers(1, 9))
    names = [f"o{i}" for i in range(n)]
    pa = {o: set(draw(st.sets(st.sampled_from(ATTRS), max_size=4))) for o in names}
    rates = {}
    for j in range(1, n):
        if tree:       # at most one upstream: the undirected graph is a forest
            parents = draw(st.lists(st.integers(0, j - 1), max_size=1))
        else:
            parents = draw(st.sets(st.integers(0, j - 1), max_size=3))
        for i in parents:
            rates[(names[i], names[j])] = draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, 8.0]))
    order = draw(st.permutations(names))          # declaration order need not be topological
    return {o: pa[o] for o in order}, rates


def _acyclic(nodes, edges) -> bool:
    """Brute force: repeatedly remove a node without incoming edges."""
    nodes, edges = set(nodes), {e for e in edges if e[0] != e[1]}
    while nodes:
        free = [v for v in nodes if not any(d == v and s in nodes for s, d in edges)]
        if not free:
            return False
        nodes -= set(free)
    return True


def _contracted(groups, rates):
    index = {o: k for k, g in enumerate(groups) for o in g}
    return {(index[s], index[d]) for s, d in rates} - {(k, k) for k in range(len(groups))}


def _check_valid(pa, rates, comps, score):
    groups = [set(c.operators) for c in comps]
    assert sorted(o for g in groups for o in g) == sorted(pa)                     # a partition
    for c, g in zip(comps, groups):
        assert c.partition_attributes == frozenset.intersection(*(frozenset(pa[o]) for o in g))
        if len(g) > 1:
            assert c.partition_attributes                                         # §4.4.1 condition 2
        # connected through its own edges (undirected)
        seen, todo = set(), [next(iter(g))]
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                todo += [d for s, d in rates if s == v and d in g] + [s for s, d in rates if d == v and s in g]
        assert seen == g
    assert _acyclic(range(len(groups)), _contracted(groups, rates))               # no cycle after contraction
    # maximal: no edge left whose fusion is allowed (positive score, shared attributes, stays acyclic)
    for (s, d), r in rates.items():
        a = next(k for k, g in enumerate(groups) if s in g)
        b = next(k for k, g in enumerate(groups) if d in g)
        if a == b or not (comps[a].partition_attributes & comps[b].partition_attributes):
            continue
        if score == "rate" and r <= 0:
            continue
        merged = [g for k, g in enumerate(groups) if k not in (a, b)] + [groups[a] | groups[b]]
        assert not _acyclic(range(len(merged)), _contracted(merged, rates)), (s, d)


@settings(max_examples=examples(150), deadline=None)
@given(graph=dags(), score=st.sampled_from(["rate", "attributes"]))
def test_components_are_connected_acyclic_share_attributes_and_are_maximal(graph, score):
    pa, rates = graph
    _check_valid(pa, rates, plan_fusion(pa, rates, score=score), score)


def _algorithm_1(pa, rates, score):
    """Enorm's Algorithm 1 line by line (no cycle check), opFused as a map operator -> set."""
    op_fused = {o: frozenset([o]) for o in pa}
    get_pa = lambda comp: frozenset.intersection(*(frozenset(pa[o]) for o in comp))  # noqa: E731
    while True:
        max_score, src, dst = 0, None, None
        for i in pa:
            src_comp = op_fused[i]
            src_pa = get_pa(src_comp)
            for (s, j), rate in rates.items():
                if s != i or j in src_comp:
                    continue
                dst_pa = get_pa(op_fused[j])
                if not (src_pa & dst_pa):
                    continue
                sc = rate if score == "rate" else len(src_pa & dst_pa)
                if sc > max_score:
                    max_score, src, dst = sc, i, j
        if max_score > 0:
            merged = op_fused[src] | op_fused[dst]
            for o in merged:
                op_fused[o] = merged
        else:
            return {frozenset(c) for c in op_fused.values()}


@settings(max_examples=examples(150), deadline=None)
@given(graph=dags(tree=True), score=st.sampled_from(["rate", "attributes"]))
def test_equals_the_literal_algorithm_where_no_cycle_can_arise(graph, score):
    pa, rates = graph
    got = {frozenset(c.operators) for c in plan_fusion(pa, rates, score=score)}
    assert got == _algorithm_1(pa, rates, score)


def test_the_literal_algorithm_would_make_a_cycle_that_the_planner_avoids():
    pa = {"a": {"x"}, "b": {"y"}, "c": {"x"}}
    rates = {("a", "b"): 5.0, ("b", "c"): 1.0, ("a", "c"): 10.0}
    literal = [sorted(g) for g in _algorithm_1(pa, rates, "rate")]
    assert sorted(literal) == [["a", "c"], ["b"]]
    assert not _acyclic(range(2), _contracted([{"a", "c"}, {"b"}], rates))
    assert [c.operators for c in plan_fusion(pa, rates)] == [("a",), ("b",), ("c",)]


def test_declaration_order_breaks_ties_deterministically():
    pa = {"a": {"x"}, "b": {"x", "y"}, "c": {"y"}}
    rates = {("a", "b"): 1.0, ("b", "c"): 1.0}
    assert [c.operators for c in plan_fusion(pa, rates)] == [("a", "b"), ("c",)]
    rev = dict(reversed(list(pa.items())))
    assert [c.operators for c in plan_fusion(rev, rates)] == [("c", "b"), ("a",)]


@settings(max_examples=examples(200), deadline=None)
@given(chain=st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from([None, 1.0, 4.0])), min_size=1, max_size=10))
def test_a_chain_with_one_key_per_stage_fuses_the_runs_of_the_same_key(chain):
    """What Pipeline.plan does today: consecutive stages with the same key fuse unless a link forbids it."""
    keys = [k for k, _ in chain]
    rates = [r for _, r in chain[1:]]
    want, run = [], [0]
    for i in range(1, len(keys)):
        if keys[i] == keys[i - 1] and rates[i - 1] is not None:
            run.append(i)
        else:
            want.append(tuple(run))
            run = [i]
    want.append(tuple(run))
    assert plan_chain([{k} for k in keys], rates) == want


def test_plan_chain_checks_the_number_of_links():
    with pytest.raises(ValueError, match="3 stages need 2 link rates, got 1"):
        plan_chain([{"a"}, {"a"}, {"a"}], [1.0])


def test_docstring_examples():
    import dataflow_kafka.keygroups.fusion as module
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
