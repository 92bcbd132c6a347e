"""The fusion planner: which operators share one physical operator (Enorm §4.4.1, Algorithm 1).

An operator graph is declared as plain data: each operator's **partition attributes** ``PA(O)``
(the attributes it may be partitioned by; every attribute of its input when it does not care,
none when it is global) and the measured **rate** of every edge (tuples per unit of time from
one operator to the next). Fusion groups operators into **components** such that every
operator is in exactly one component and the operators of a component share at least one
partition attribute, ``PA(C) = ∩ PA(O) ≠ ∅`` (§4.4): the component is partitioned by ``PA(C)``
and its operators exchange no tuples across the network (in this project: one
``transformWithStateInPandas`` operator, one shuffle, one state round trip per batch).

Algorithm 1 fuses greedily: while some edge joins two components whose partition attributes
intersect, the edge with the highest score fuses its two components; ties go to the first
edge in declaration order (operators in the order given, then their downstream edges in the
order given). Scores:

* ``score="rate"`` (Algorithm 1): the edge's rate (an edge of rate 0 never fuses);
* ``score="attributes"`` (the paper's alternative score, for jobs without measured rates): the
  summed weights of the attributes the two components share, ``Σ_{a ∈ PA(C_i) ∩ PA(C_j)} w(a)``,
  ``w(a) = 1`` unless ``attribute_weights`` says otherwise: fusing the most common attributes
  first leaves the most room for later fusions.

**Cycle check.** In a DAG, contracting two components that are joined by an edge can make a
cycle when another path leads from one to the other through a third component (``a→b→c`` and
``a→c``: fusing ``a`` and ``c`` leaves ``b`` both after and before ``{a, c}``); such a pair is
skipped (the paper's pseudo code does not check it; a physical operator cannot feed itself
within one micro-batch). So every component is connected and the component graph stays a DAG.

>>> components = plan_fusion(
...     {"op1": ENORM_EXAMPLE_ATTRIBUTES, "op2": {"area"}, "op3": {"area"}, "op4": set(), "op5": set()},
...     {("op1", "op2"): 10.0, ("op1", "op3"): 10.0, ("op2", "op4"): 1.0, ("op3", "op5"): 1.0})
>>> [(c.operators, sorted(c.partition_attributes)) for c in components]
[(('op1', 'op2', 'op3'), ['area']), (('op4',), []), (('op5',), [])]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["Component", "plan_fusion", "plan_chain", "component_graph", "inter_component_rate",
           "ENORM_EXAMPLE_ATTRIBUTES"]

#: The input schema of Enorm's motivating job (§2, Figure 1): ``PA(op1)`` is all of it.
ENORM_EXAMPLE_ATTRIBUTES = frozenset({"user", "area", "date", "approval", "amount", "return", "lendingTime", "income"})

_SCORES = ("rate", "attributes")


@dataclass(frozen=True)
class Component:
    """Operators that share one physical operator (in declaration order) and ``PA(C)``, the
    attributes it is partitioned by."""

    operators: tuple[str, ...]
    partition_attributes: frozenset[str]


def _validated(partition_attributes: Mapping[str, Iterable[str]], rates: Mapping[tuple[str, str], float]):
    pa = {}
    for name, attrs in partition_attributes.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"plan_fusion: operator names are non-empty strings, got {name!r}")
        if isinstance(attrs, str):
            raise InvalidArgumentError(f"plan_fusion: partition attributes of {name!r} must be a collection of names, "
                             f"got the string {attrs!r}")
        pa[name] = frozenset(attrs)
    down: dict[str, list[tuple[str, float]]] = {n: [] for n in pa}
    for edge, rate in rates.items():
        if not (isinstance(edge, tuple) and len(edge) == 2):
            raise InvalidArgumentError(f"plan_fusion: an edge is a pair (upstream, downstream), got {edge!r}")
        src, dst = edge
        for end in (src, dst):
            if end not in pa:
                raise InvalidArgumentError(f"plan_fusion: edge {edge!r} names operator {end!r}, which has no partition "
                                 f"attributes declared (operators: {sorted(pa)})")
        if src == dst:
            raise InvalidArgumentError(f"plan_fusion: edge {edge!r} is a self loop")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
            raise InvalidArgumentError(f"plan_fusion: rate of edge {edge!r} must be a finite number >= 0, got {rate!r}")
        down[src].append((dst, float(rate)))
    cycle = _find_cycle(down)
    if cycle:
        raise InvalidArgumentError(f"plan_fusion: the operator graph has a cycle: {' -> '.join(cycle)}")
    return pa, down


def _find_cycle(down: Mapping[str, list[tuple[str, float]]]) -> list[str] | None:
    state: dict[str, int] = {}          # 1 on the stack, 2 done
    for root in down:
        if root in state:
            continue
        stack = [(root, iter(down[root]))]
        path = [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
                continue
            child = nxt[0]
            if state.get(child) == 1:
                return path[path.index(child):] + [child]
            if child not in state:
                state[child] = 1
                stack.append((child, iter(down[child])))
                path.append(child)
    return None


def _reaches_via_third(a: int, b: int, succ: Mapping[int, set[int]]) -> bool:
    """Whether component ``b`` is reachable from ``a`` through some other component."""
    seen = set()
    todo = [c for c in succ[a] if c != b]
    while todo:
        c = todo.pop()
        if c == b:
            return True
        if c in seen:
            continue
        seen.add(c)
        todo.extend(succ[c])
    return False


def plan_fusion(partition_attributes: Mapping[str, Iterable[str]], rates: Mapping[tuple[str, str], float], *,
                score: str = "rate", attribute_weights: Mapping[str, float] | None = None) -> list[Component]:
    """Enorm's Algorithm 1 with a cycle check (module docstring).

    Parameters
    ----------
    partition_attributes : ``{operator: PA(operator)}``, in declaration order.
    rates : ``{(upstream, downstream): tuples per unit of time}``: every edge of the DAG (with
        ``score="attributes"`` the values are not used, but the edges are).
    score : ``"rate"`` or ``"attributes"``.
    attribute_weights : ``w(a)`` for the alternative score (default 1 per attribute).

    Returns
    -------
    The components, ordered by their first operator's declaration.
    """
    if score not in _SCORES:
        raise InvalidArgumentError(f"plan_fusion: score must be one of {_SCORES}, got {score!r}")
    weights = dict(attribute_weights or {})
    for a, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise InvalidArgumentError(f"plan_fusion: attribute_weights[{a!r}] must be a finite number >= 0, got {w!r}")
    pa, down = _validated(partition_attributes, rates)
    names = list(pa)
    comp = {n: i for i, n in enumerate(names)}                 # operator -> component id
    comp_pa = {i: pa[n] for i, n in enumerate(names)}
    members = {i: [n] for i, n in enumerate(names)}
    succ = {i: set() for i in members}                           # component graph
    for src in names:
        for dst, _ in down[src]:
            succ[comp[src]].add(comp[dst])
    blocked: set[tuple[int, int]] = set()                       # component pairs a fusion would make cyclic
    while True:
        best, best_score = None, 0.0
        for i in names:
            ci = comp[i]
            for j, rate in down[i]:
                cj = comp[j]
                if ci == cj or (ci, cj) in blocked:
                    continue
                common = comp_pa[ci] & comp_pa[cj]
                if not common:
                    continue
                s = rate if score == "rate" else float(sum(weights.get(a, 1.0) for a in common))
                if s > best_score:
                    if _reaches_via_third(ci, cj, succ):
                        blocked.add((ci, cj))
                        continue
                    best, best_score = (ci, cj), s
        if best is None:
            break
        keep, gone = best
        members[keep] += members.pop(gone)
        comp_pa[keep] = comp_pa[keep] & comp_pa.pop(gone)
        for n in members[keep]:
            comp[n] = keep
        succ[keep] = (succ[keep] | succ.pop(gone)) - {keep, gone}
        for c in succ:
            if gone in succ[c]:
                succ[c].discard(gone)
                if c != keep:
                    succ[c].add(keep)
        blocked = set()                                          # reachability changed
    order = {n: k for k, n in enumerate(names)}
    out = [Component(tuple(sorted(ms, key=order.__getitem__)), comp_pa[c]) for c, ms in members.items()]
    return sorted(out, key=lambda c: order[c.operators[0]])


def plan_chain(partition_attributes: Sequence[Iterable[str]], rates: Sequence[float | None], *,
               score: str = "rate") -> list[tuple[int, ...]]:
    """:func:`plan_fusion` for a chain of stages (a :class:`~keygroups.pipeline.Pipeline`): stage ``i``
    has ``partition_attributes[i]``; ``rates[i]`` is the measured rate of the link ``i -> i + 1``, or
    None where the link cannot fuse for reasons of the stage layer (another number of key groups,
    inputs that are not plain columns). Returns runs of consecutive stage indices.

    >>> plan_chain([{"user"}, {"user"}, {"page"}, {"page"}], [1.0, 5.0, 2.0])
    [(0, 1), (2, 3)]
    """
    n = len(partition_attributes)
    if len(rates) != max(n - 1, 0):
        raise InvalidArgumentError(f"plan_chain: {n} stages need {max(n - 1, 0)} link rates, got {len(rates)}")
    names = [f"s{i}" for i in range(n)]
    links = {(names[i], names[i + 1]): r for i, r in enumerate(rates) if r is not None}
    comps = plan_fusion(dict(zip(names, partition_attributes)), links, score=score)
    return [tuple(int(o[1:]) for o in c.operators) for c in comps]


def component_graph(components: Iterable[Component], rates: Mapping[tuple[str, str], float]) -> dict[tuple[int, int], float]:
    """``{(i, j): rate}`` between components ``i != j`` (indices into ``components``): the summed rates
    of the edges that cross from one to the other."""
    index = {op: k for k, c in enumerate(components) for op in c.operators}
    out: dict[tuple[int, int], float] = {}
    for (src, dst), rate in rates.items():
        a, b = index[src], index[dst]
        if a != b:
            out[(a, b)] = out.get((a, b), 0.0) + float(rate)
    return out


def inter_component_rate(components: Iterable[Component], rates: Mapping[tuple[str, str], float]) -> float:
    """The rate that still crosses components (Enorm §7.6, Figure 15's measure)."""
    return sum(component_graph(list(components), rates).values())
