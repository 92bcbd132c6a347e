"""Pipeline.plan decides through the fusion planner (keygroups.fusion.plan_chain, Enorm Algorithm 1):
the same groups as the stage layer's own rule (consecutive stages whose key is kept) on random chains,
for any link rates, because with one key per stage no two fusions of a chain conflict; bad rates are
refused naming the link. No Spark."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.fusion import plan_chain
from dataflow_kafka.keygroups.plan import chain_links, fusable
from tests.keygroups.toy_stages import RunningTotal, TumblingCount
from tests.suite import examples


@dataclass(eq=False)
class SameKeyTotal(RunningTotal):
    """A running total that says its key is a previous running total's with the same key function."""

    def fusable_after(self, upstream):
        return isinstance(upstream, RunningTotal) and upstream.key_fn is self.key_fn


def _old_plan(pipe: Pipeline, fuse: bool = True) -> list[list[str]]:
    """The rule Pipeline.plan applied before it asked the planner (transcribed): a stage joins the
    previous stage's operator when ``fusable`` says so."""
    groups: list[list] = []
    for link in pipe.chain.links:
        if groups and fuse and fusable(groups[-1][-1], link.stage, link.fuse):
            groups[-1].append(link.stage)
        else:
            groups.append([link.stage])
    return [[s.name for s in g] for g in groups]


def _names(plan) -> list[list[str]]:
    return [[s.name for s in op] for op in plan]


# a stage: (kind, num_key_groups); kinds chosen so that every fusable branch occurs
_KINDS = ["count_plain", "count_quoted", "count_expr", "count_rekey", "total", "same_key_total"]


def _stage(kind: str, n: int):
    if kind == "count_plain":
        return TumblingCount(key="k", value="count", num_key_groups=n)          # same key after a count
    if kind == "count_quoted":
        return TumblingCount(key="`k`", value="`count`", num_key_groups=n)
    if kind == "count_expr":
        return TumblingCount(key="k", value="count * 2", num_key_groups=n)      # not a plain column
    if kind == "count_rekey":
        return TumblingCount(key="window_start_ms", value="count", num_key_groups=n)   # another key
    if kind == "total":
        return RunningTotal(num_key_groups=n)                                   # Python-routed, re-keys
    return SameKeyTotal(num_key_groups=n)


_chains = st.lists(st.tuples(st.sampled_from(_KINDS), st.sampled_from([2, 2, 3]),
                             st.sampled_from([None, None, None, False, True])), min_size=1, max_size=7)


def _pipeline(spec) -> Pipeline:
    pipe = Pipeline([TumblingCount(num_key_groups=spec[0][1])])
    for kind, n, fuse in spec[1:]:
        pipe = pipe.then(_stage(kind, n), fuse=fuse)
    return pipe


def _old_or_error(pipe: Pipeline, fuse: bool = True):
    try:
        return _old_plan(pipe, fuse)
    except ValueError as exc:
        return ("error", str(exc))


@settings(max_examples=examples(200), deadline=None)
@given(spec=_chains, rates=st.lists(st.floats(0.001, 1e6), min_size=6, max_size=6), fuse=st.booleans())
def test_planner_gives_the_old_rules_groups_on_random_chains_for_any_rates(spec, rates, fuse):
    pipe = _pipeline(spec)
    expected = _old_or_error(pipe, fuse)
    for r in (None, rates[:len(spec) - 1]):
        if isinstance(expected, tuple):
            with pytest.raises(ValueError) as err:
                pipe.plan(fuse, rates=r)
            assert str(err.value) == expected[1]
        else:
            assert _names(pipe.plan(fuse, rates=r)) == expected


def test_the_random_chains_reach_every_branch_of_the_rule():
    """The generator above is not vacuous: fused groups, splits and refused forced fusions occur."""
    fused = _pipeline([("count", 3, None), ("count_plain", 3, None), ("count_quoted", 3, None)])
    assert _names(fused.plan()) == [["tumbling_count", "tumbling_count_2", "tumbling_count_3"]]
    split = _pipeline([("count", 3, None), ("count_expr", 3, None), ("count_plain", 2, None),
                       ("count_rekey", 2, None), ("total", 2, None), ("same_key_total", 2, None),
                       ("count_plain", 2, False)])
    assert _names(split.plan()) == _old_plan(split) == [
        ["tumbling_count"], ["tumbling_count_2"], ["tumbling_count_3"], ["tumbling_count_4"],
        ["running_total", "same_key_total"], ["tumbling_count_5"]]
    forced = _pipeline([("count", 3, None), ("count_expr", 3, True)])
    with pytest.raises(ValueError, match="cannot run fused"):
        forced.plan()
    assert _names(_pipeline([("count", 2, None), ("total", 2, True)]).plan()) == [["tumbling_count", "running_total"]]


def test_no_fusion_conflict_in_a_chain_of_one_key_per_stage():
    """Where rates could matter: two fusions conflict only when a stage shares attributes with both
    neighbours but they share none with each other (partial key overlap). With one key per stage
    (as the stage layer declares them) a link fuses exactly when both ends have the same key, an
    equivalence, so every fusable link fuses whatever its rate: rates cannot change a chain's plan
    today. The planner does let rates decide when keys overlap partially:"""
    assert plan_chain([{"page"}, {"page", "user"}, {"user"}], [1.0, 5.0]) == [(0,), (1, 2)]
    assert plan_chain([{"page"}, {"page", "user"}, {"user"}], [5.0, 1.0]) == [(0, 1), (2,)]
    # and the pipeline's view of a chain has one attribute per stage, shared along fusable links only
    pipe = _pipeline([("count", 3, None), ("count_plain", 3, None), ("total", 3, None), ("same_key_total", 3, None)])
    attributes, links = chain_links(pipe.chain.links, [7.0, 8.0, 9.0])
    assert all(len(a) == 1 for a in attributes)
    assert links == [7.0, None, 9.0]
    assert [attributes[i] == attributes[i + 1] for i in range(3)] == [True, False, True]
    for rates in ([1.0, 1.0, 1.0], [100.0, 1.0, 0.5], [0.5, 1.0, 100.0]):
        assert _names(pipe.plan(rates=rates)) == [["tumbling_count", "tumbling_count_2"],
                                                  ["running_total", "same_key_total"]]


@settings(max_examples=examples(100), deadline=None)
@given(keys=st.lists(st.integers(0, 2), min_size=1, max_size=8), data=st.data())
def test_single_key_chains_plan_the_same_for_any_rates(keys, data):
    """The claim above on random chains of keys and random links (some refused: None)."""
    links = [data.draw(st.one_of(st.none(), st.floats(0.001, 1e6))) for _ in keys[1:]]
    runs = [[0]]
    for i in range(1, len(keys)):
        if links[i - 1] is not None and keys[i] == keys[i - 1]:
            runs[-1].append(i)
        else:
            runs.append([i])
    assert plan_chain([{k} for k in keys], links) == [tuple(r) for r in runs]


def test_bad_rates_name_the_link():
    pipe = _pipeline([("count", 3, None), ("count_plain", 3, None)])
    with pytest.raises(ValueError, match="2 stages have 1 links, got 2 rates"):
        pipe.plan(rates=[1.0, 2.0])
    for bad in (0, -1.0, math.nan, math.inf, True, "5"):
        with pytest.raises(ValueError, match=r"rates\[0\] \(link 'tumbling_count' -> 'tumbling_count_2'\)"):
            pipe.plan(rates=[bad])
    assert _names(pipe.plan(rates=[3])) == [["tumbling_count", "tumbling_count_2"]]
