"""A query of several pipelines: a DAG of chains, each reading the source or upstream pipelines.

A :class:`QueryNode` is one pipeline of a query: its chain (:class:`~keygroups.plan.Chain`) and,
when its first stage takes several inputs (:meth:`keygroups.Stage.stage_inputs`, e.g. a join),
the upstream of each input: another node, or None (the input reads the source). A
:class:`keygroups.Pipeline` is a node; :meth:`keygroups.Pipeline.join` builds them. The runners
walk the nodes upstreams first (:meth:`QueryNode.nodes`): a node without upstreams runs its chain
on its source; a node with upstreams tags, unions and routes its inputs' rows
(:mod:`keygroups.fan_in`) into its multi-input first operator, whose punctuation trackers expect
the upstreams' key groups as senders from the start (:class:`~keygroups.plan.Head`). The same
query runs on Spark (:func:`apply_dag`; pyspark imported by the Spark steps on use) and without
it (:func:`run_dag_local`), from the same specs (:func:`dag_specs`).

**Fan-out**: an upstream given to several inputs of one stage is computed once: on Spark its rows
are copied to each input by one ``explode``; in :func:`run_dag_local` its output is computed once
per batch. An upstream feeding two *different* multi-input stages is computed once per batch
locally; on Spark, whose plan is a tree, each consumer plans it again (the same deterministic
operator over the same offsets: equal rows, twice the cost).

Stage names are unique across the query (:meth:`keygroups.Pipeline.join` renames a clash with a
suffix); the last pipeline's first operator reports control commands no stage of the query takes.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import pandas as pd

from dataflow_kafka.keygroups.contract import KIND_DATA, control_frame
from dataflow_kafka.keygroups.fan_in import check_key_types, input_columns, tag_frame, tag_spark, tagged_input_types
from dataflow_kafka.keygroups.frames import run_chain_local
from dataflow_kafka.keygroups.operator import OperatorSpec
from dataflow_kafka.keygroups.plan import Chain, Head, frame_types
from dataflow_kafka.keygroups.spark_steps import apply_chain
from dataflow_kafka.keygroups.stage import INPUT_COLUMN, Input, StageLogic, group_ids_of
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["QueryNode", "distinct_upstreams", "source_names", "dag_specs", "apply_dag", "run_dag_local"]


class QueryNode:
    """One pipeline of a query: its :class:`~keygroups.plan.Chain`, and the upstream of each input
    of its multi-input first stage (``{input: node, or None for the source}``; None: the chain
    reads the source). Nodes are compared by identity: an upstream given to several inputs is one
    node, run once."""

    def __init__(self, chain: Chain, upstreams: Mapping[str, QueryNode | None] | None = None) -> None:
        self._chain = chain
        self._upstreams = None if upstreams is None else dict(upstreams)

    @property
    def chain(self) -> Chain:
        """This pipeline's own chain (after its multi-input stage's upstreams): links and emitted stages."""
        return self._chain

    @property
    def stages(self) -> list[StageLogic]:
        """This pipeline's own chain of stages (after its multi-input stage's upstreams, :attr:`upstreams`)."""
        return self._chain.stages

    @property
    def upstreams(self) -> dict[str, QueryNode | None] | None:
        """A pipeline starting with a multi-input stage: ``{input: upstream pipeline or None (the
        source)}``; else None."""
        return None if self._upstreams is None else dict(self._upstreams)

    def nodes(self) -> list[QueryNode]:
        """The pipelines of the query, upstreams first, each once (by identity), this one last."""
        out: list[QueryNode] = []

        def visit(p: QueryNode) -> None:
            if any(p is q for q in out):
                return
            for u in distinct_upstreams(p._upstreams):
                visit(u)
            out.append(p)

        visit(self)
        return out

    def all_stages(self) -> list[StageLogic]:
        """Every stage of the query: the upstreams' (each once), then this chain's."""
        return [s for node in self.nodes() for s in node.stages]


def distinct_upstreams(upstreams: Mapping[str, QueryNode | None] | None) -> list[QueryNode]:
    """The distinct upstream nodes of ``upstreams`` (by identity, in input order)."""
    out: list[QueryNode] = []
    for u in (upstreams or {}).values():
        if u is not None and not any(u is v for v in out):
            out.append(u)
    return out


# -- the query's shape ---------------------------------------------------------------------------------

def _groups(p: QueryNode) -> list[tuple[QueryNode | None, str | None, list[Input]]]:
    """The inputs of ``p``'s multi-input stage grouped by what they read: ``(upstream pipeline,
    None, inputs)`` or ``(None, source name, inputs)``; inputs reading the source read the source
    named like them (several may read one DataFrame: :func:`_by_source` merges those)."""
    out: list = []
    for inp in p.stages[0].stage_inputs():
        u = p.upstreams[inp.name]
        for g in out:
            if u is not None and g[0] is u:
                g[2].append(inp)
                break
        else:
            out.append((u, None if u is not None else inp.name, [inp]))
    return out


def source_names(root: QueryNode) -> dict[int, set[str]]:
    """``{id(pipeline): source names}`` of the query's pipelines that read a source: a pipeline
    without upstreams reads the source of every input it feeds (its names must lead to one
    source); a multi-input stage's input without an upstream reads the source of its name."""
    names: dict[int, set[str]] = {}
    for p in root.nodes():
        if p.upstreams is None:
            continue
        for n, u in p.upstreams.items():
            if u is not None and u.upstreams is None:
                names.setdefault(id(u), set()).add(n)
    if root.upstreams is None:
        names.setdefault(id(root), set())
    return names


def _source(sources: Any, names: set[str], what: str) -> Any:
    """The one source of ``names`` in ``sources`` (one object for every source, or a dict)."""
    if not isinstance(sources, Mapping):
        return sources
    found = [sources[n] for n in sorted(names) if n in sources]
    if not found:
        raise InvalidArgumentError(f"{what}: no source given for input(s) {sorted(names)} (sources given: {sorted(sources)})")
    if any(f is not found[0] for f in found[1:]):
        raise InvalidArgumentError(f"{what}: an upstream read by inputs {sorted(names)} needs one source, "
                         f"got different ones for them")
    return found[0]


def _claims(root: QueryNode) -> tuple:
    return tuple((str(s.name), frozenset(s.commands)) for s in root.all_stages())


def _expected(p: QueryNode, upstream_specs: Mapping[int, list[OperatorSpec]]) -> tuple:
    """Per input reading an upstream pipeline: its last operator's key groups, the senders of its
    punctuation rows (``<operator>-<key group>``), known before they speak."""
    out = []
    for inp in p.stages[0].stage_inputs():
        u = p.upstreams[inp.name]
        if u is None:
            continue
        spec = upstream_specs[id(u)][-1]
        first = spec.stages[0]
        ids = group_ids_of(first) or range(first.num_key_groups)
        out.append((inp.name, tuple(f"{spec.name}-{int(g)}" for g in ids)))
    return tuple(out)


def _results(p: QueryNode, upstream_specs: Mapping[int, list[OperatorSpec]]) -> tuple:
    """The emitted columns every upstream of ``p`` carries (their union; a clash of types is refused)."""
    out: dict[str, str] = {}
    for u in distinct_upstreams(p.upstreams):
        for c, t in upstream_specs[id(u)][-1].result_columns:
            if out.setdefault(c, t) != t:
                raise InvalidArgumentError(f"emit: column {c!r} is emitted as {t} by one upstream of {p.stages[0].name!r} "
                                 f"and as {out[c]} by another: rename one of them")
    return tuple(out.items())


def _head(p: QueryNode, upstream_specs: Mapping[int, list[OperatorSpec]]) -> Head:
    """``p``'s multi-input first operator: its inputs, their expected senders, the tagged input's
    columns and the emitted columns its upstreams carry."""
    stage = p.stages[0]
    return Head(tuple(i.name for i in stage.stage_inputs()), _expected(p, upstream_specs),
                (INPUT_COLUMN, *input_columns(stage)), _results(p, upstream_specs))


def dag_specs(root: QueryNode, fuse: bool, idle_timeout_ms: int | None,
              source_types: Mapping[str, Any] | None) -> dict[int, list[OperatorSpec]]:
    """``{id(pipeline): its operators' specs}`` for every pipeline of the query; bound to
    ``source_types`` (``{column: type}`` of every source, or ``{source: {column: type}}``), or
    unbound (None)."""
    specs: dict[int, list[OperatorSpec]] = {}
    names = source_names(root)
    per_source = source_types is not None and all(isinstance(v, Mapping) for v in source_types.values())

    def types_of(source_names_: set[str]) -> dict | None:
        if source_types is None:
            return None
        return dict(_source(source_types, source_names_, "input_types")) if per_source else dict(source_types)

    for p in root.nodes():
        claims = _claims(root) if p is root else None
        if p.upstreams is None:
            specs[id(p)] = p.chain.specs(fuse, idle_timeout_ms, types_of(names.get(id(p), set())), claims=claims)
            continue
        head = _head(p, specs)
        types = None
        if source_types is not None:
            types = tagged_input_types(p.stages[0], {
                n: (dict(specs[id(u)][-1].output_columns()) if u is not None else types_of({n}))
                for n, u in p.upstreams.items()})
        specs[id(p)] = p.chain.specs(fuse, idle_timeout_ms, types, head=head, claims=claims)
    return specs


# -- running the query ---------------------------------------------------------------------------------

def apply_dag(root: QueryNode, sources: Any, *, fuse: bool = True, idle_timeout_ms: int | None = None,
              pack_source: bool = True):
    """Spark: the query of ``root`` and its upstreams (:meth:`keygroups.Pipeline.apply`)."""
    outs: dict[int, Any] = {}
    specs: dict[int, list[OperatorSpec]] = {}
    names = source_names(root)
    for p in root.nodes():
        claims = _claims(root) if p is root else None
        if p.upstreams is None:
            src = _source(sources, names.get(id(p), set()), "apply")
            outs[id(p)], specs[id(p)] = apply_chain(p.chain, src, fuse, idle_timeout_ms, pack_source, claims=claims)
            continue
        stage = p.stages[0]
        groups = _by_source(_groups(p), sources)
        upstream_dfs = [(outs[id(u)] if u is not None else source, inputs) for u, source, inputs in groups]
        check_key_types([(df, inputs) for df, inputs in upstream_dfs], stage)
        tagged = [tag_spark(df, inputs, stage.name) for df, inputs in upstream_dfs]
        union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)
        head = _head(p, specs)
        outs[id(p)], specs[id(p)] = apply_chain(p.chain, union, fuse, idle_timeout_ms, pack_source, head=head,
                                                  claims=claims)
    return outs[id(root)]


def _framed(frame: pd.DataFrame) -> pd.DataFrame:
    """A micro-batch frame; one without rows or columns (a source that did not move) as an empty
    frame of the row contract."""
    return frame if "kind" in frame.columns else control_frame([])


def _by_source(groups: list, sources: Any) -> list[tuple[QueryNode | None, Any, list[Input]]]:
    """``groups`` with the inputs that read the same source DataFrame merged (one tagging, one
    scan of the source): ``(upstream, source or None, inputs)``."""
    out: list = []
    for u, name, inputs in groups:
        if u is not None:
            out.append((u, None, inputs))
            continue
        src = _source(sources, {name}, "apply/run_local")
        for g in out:
            if g[0] is None and g[1] is src:
                g[2].extend(inputs)
                break
        else:
            out.append((None, src, list(inputs)))
    return out


def run_dag_local(root: QueryNode, batches: Any, *, fuse: bool = True, idle_timeout_ms: int | None = None,
                  input_types: Mapping[str, Any] | None = None, states: dict | None = None) -> list[pd.DataFrame]:
    """Without Spark: the query of ``root`` and its upstreams on micro-batches
    (:meth:`keygroups.Pipeline.run_local`): ``batches`` is a list of frames (one source) or
    ``{source: frames}``, the same number of micro-batches each. Stages are bound as on Spark:
    to ``input_types``, or to the dtypes of each source's first frame with data rows, once every
    source had one. ``states``: as :meth:`~keygroups.Pipeline.run_local`'s."""
    per = {n: list(f) for n, f in batches.items()} if isinstance(batches, Mapping) else None
    single = None if per is not None else list(batches)
    counts = {n: len(f) for n, f in per.items()} if per is not None else {"": len(single)}
    if len(set(counts.values())) > 1:
        raise InvalidArgumentError(f"run_local: every source needs the same number of micro-batches, got {counts}")
    n_batches = next(iter(counts.values()), 0)
    nodes, names = root.nodes(), source_names(root)
    unbound = dag_specs(root, fuse, idle_timeout_ms, None)
    bound = None if input_types is None else dag_specs(root, fuse, idle_timeout_ms, input_types)
    seen_types: dict[str, dict] = {}
    states_of = {id(p): [{} for _ in unbound[id(p)]] for p in nodes}
    outputs = []
    for i in range(n_batches):
        now = {n: _framed(f[i]) for n, f in per.items()} if per is not None else _framed(single[i])
        if bound is None:
            for n, f in (now.items() if per is not None else [("", now)]):
                if n not in seen_types and (f["kind"] == KIND_DATA).any():
                    seen_types[n] = frame_types(f)
            if len(seen_types) == len(counts):
                bound = dag_specs(root, fuse, idle_timeout_ms, seen_types if per is not None else seen_types[""])
        specs = bound or unbound
        out: dict[int, pd.DataFrame] = {}
        for p in nodes:
            if p.upstreams is None:
                frame = _source(now, names.get(id(p), set()), "run_local")
                out[id(p)] = run_chain_local(frame, specs[id(p)], states_of[id(p)])
                continue
            stage = p.stages[0]
            parts = [tag_frame(out[id(u)] if u is not None else src, inputs, u is None, stage.name)
                     for u, src, inputs in _by_source(_groups(p), now)]
            tagged = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
            out[id(p)] = run_chain_local(tagged, specs[id(p)], states_of[id(p)], head=True)
        outputs.append(out[id(root)])
    if states is not None:
        states.update({spec.name: dict(k) for p in nodes for spec, k in zip(unbound[id(p)], states_of[id(p)])})
    return outputs
