"""A pipeline's plan (pure): links, stage names, input types, the fusion rule, the operators' specs.

A chain of stages is a :class:`Chain`: its :class:`Link` s (a stage and its ``fuse`` choice) and
the names of the stages whose output it emits. Stage names are made unique (:func:`named_links`,
:func:`unused_name`), stages are configured by their successor (:func:`configured_links`) and
bound to their input types (:func:`bind_stages`, :func:`expression_type`, :func:`frame_types`,
:func:`ingest_columns`); the fusion rule (:func:`fusable`, Enorm §4.4.1: a keyed operator after a
hash split by the same key keeps every row in its key group) gives the fusion planner
(:func:`keygroups.fusion.plan_chain`, Enorm Algorithm 1) its view of the chain
(:func:`chain_links`), which cuts it into operators (:meth:`Chain.operators`), each described by
an :class:`~keygroups.operator.OperatorSpec` (:meth:`Chain.specs`). A multi-input first operator
is described by a :class:`Head`. :class:`keygroups.Pipeline` plans with these; the runners
(:mod:`keygroups.spark_steps`, :mod:`keygroups.frames`, :mod:`keygroups.dag`) run the specs.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups.computed import Computed, computed_inputs
from dataflow_kafka.keygroups.contract import CONTROL_COLUMNS
from dataflow_kafka.keygroups.fusion import plan_chain
from dataflow_kafka.keygroups.operator import OperatorSpec
from dataflow_kafka.keygroups.routing import KEY_GROUP_COLUMN
from dataflow_kafka.keygroups.stage import StageLogic, group_ids_of, key_columns_of, router_of
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["PARTIAL", "Link", "Chain", "Head", "plain_column", "named_links", "unused_name",
           "configured_links", "bind_stages", "expression_type", "frame_types", "ingest_columns", "link_rates",
           "chain_links", "fusable"]


#: ``Pipeline.then(stage, fuse=PARTIAL)``: ``stage`` runs in the previous stage's key groups whatever
#: its key (a partial aggregation before the shuffle; :mod:`keygroups.pipeline`).
PARTIAL = "partial"
_IDENT = re.compile(r"^`?([A-Za-z_][A-Za-z0-9_]*)`?$")


def plain_column(expr: Any) -> str | None:
    """The column name if ``expr`` is a plain column reference (``name`` or ```name```), else None."""
    if not isinstance(expr, str):
        return None
    m = _IDENT.match(expr.strip())
    return m.group(1) if m else None


@dataclass(frozen=True)
class Link:
    """A stage of a chain and its ``fuse`` choice (``Pipeline.then(stage, fuse=)``)."""

    stage: StageLogic
    fuse: bool | str | None         # None: the fusion rule decides; True, False; PARTIAL


@dataclass(frozen=True)
class Head:
    """A multi-input first operator, as :mod:`keygroups.fan_in` prepares it: its inputs' names,
    the senders known in advance per input, the columns of its tagged input, and the emitted
    columns its upstreams carry."""

    inputs: tuple[str, ...]
    expected: tuple = ()
    columns: tuple[str, ...] = ()
    results: tuple = ()


@dataclass(frozen=True)
class Chain:
    """A chain of stages as the planner reads it: its links (named and configured, in order) and
    the names of the stages whose output its operators emit as ``result`` rows."""

    links: tuple[Link, ...]
    emit: tuple[str, ...] = ()

    @property
    def stages(self) -> list[StageLogic]:
        """The chain's stages, in order."""
        return [link.stage for link in self.links]

    def operators(self, fuse: bool = True, rates: Sequence[float] | None = None) -> list[tuple[StageLogic, ...]]:
        """The operators: runs of consecutive stages that run fused (``fuse=False``: one per
        stage), as :func:`~keygroups.fusion.plan_chain` decides them from :func:`chain_links`;
        ``rates``: one per link (default 1 each), the highest-rate link fuses first."""
        if not self.links:
            raise InvalidArgumentError("an empty pipeline has nothing to run")
        stages = self.stages
        rates = link_rates(stages, rates)
        if not fuse:
            return [(s,) for s in stages]
        attributes, links = chain_links(self.links, rates)
        return [tuple(stages[i] for i in run) for run in plan_chain(attributes, links)]

    def specs(self, fuse: bool, idle_timeout_ms: int | None, types: dict[str, str] | None = None, *,
              head: Head | None = None, claims: Any = "own") -> list[OperatorSpec]:
        """One :class:`~keygroups.operator.OperatorSpec` per operator, bound to ``types`` (the first
        operator's input types; None: unbound). ``head``: a multi-input first operator (its
        inputs, expected senders, upstream result columns); ``claims``: the stages whose commands
        the first operator checks ("own": this chain's; None: no check, another operator of the
        query does it)."""
        ops = self.operators(fuse)
        if claims == "own":
            claims = tuple((str(s.name), frozenset(s.commands)) for op in ops for s in op)
        specs: list[OperatorSpec] = []
        results = head.results if head is not None else ()
        for j, stages in enumerate(ops):
            if types is not None:
                first = stages[0]
                if j == 0 and head is not None:
                    in_types = types
                elif router_of(first) is not None:
                    in_types = dict(ingest_columns(first)) if j == 0 else types
                else:
                    in_types = {name: expression_type(expr, types, name) for name, expr in first.inputs().items()}
                stages = bind_stages(stages, in_types)
            spec = self.operator_spec(ops, j, stages, results, idle_timeout_ms, claims if j == 0 else None,
                                      head if j == 0 else None)
            specs.append(spec)
            results = spec.result_columns
            if types is not None:
                types = dict(spec.output_columns())
        return specs

    def operator_spec(self, ops: Sequence[tuple[StageLogic, ...]], j: int, stages: tuple[StageLogic, ...],
                      results_in: tuple, idle_timeout_ms: int | None, claims: tuple | None,
                      head: Head | None) -> OperatorSpec:
        """The spec of operator ``j`` of ``ops`` running ``stages`` (bound or not), after operators
        that carry the emitted columns ``results_in``; emitted columns that clash are refused."""
        nxt = ops[j + 1][0] if j + 1 < len(ops) else None
        router = router_of(nxt) if nxt is not None else None
        data_cols = list(router.columns if router is not None else stages[-1].output_columns())
        # the next operator's Computed inputs are computed here, on the rows this operator emits
        next_inputs = tuple(computed_inputs(nxt.inputs()).items()) if nxt is not None and router is None else ()
        for name, c in next_inputs:
            data_cols = [col for col in data_cols if col[0] != name] + [(name, c.type)]
        last = nxt is None
        emit = tuple(i for i, s in enumerate(stages) if s.name in self.emit and not (last and i == len(stages) - 1))
        results = dict(results_in)
        for i in emit:
            for c, t in stages[i].output_columns() + [("event_time_ms", "bigint")]:
                if results.setdefault(c, t) != t:
                    raise InvalidArgumentError(f"emit: column {c!r} of stage {stages[i].name!r} is {t}, another emitted "
                                               f"stage's is {results[c]}")
        taken = dict(CONTROL_COLUMNS) | dict(data_cols)
        for c, t in results.items():
            if taken.get(c, t) != t:
                raise InvalidArgumentError(f"emit: the emitted column {c!r} is {t}, but operator {stages[-1].name!r} "
                                           f"outputs {c!r} as {taken[c]}: rename one of them (a key given as a dict "
                                           "names it)")
        ids = group_ids_of(stages[0])
        return OperatorSpec(tuple(stages), router, tuple(data_cols), idle_timeout_ms if j == 0 else None,
                            emit, tuple(results.items()), int(ids[0]) if ids else 0, claims, next_inputs,
                            head.inputs if head is not None else (), head.expected if head is not None else ())


def named_links(links: list[Link], taken: set | None = None) -> list[Link]:
    """Copies of the stages with unique names (defaults from the class name), none in ``taken``."""
    out, seen = [], set(taken or ())
    for link in links:
        s = link.stage
        name = s.name or re.sub(r"(?<!^)(?=[A-Z])", "_", type(s).__name__.removesuffix("Stage")).lower() or "stage"
        name = unused_name(name, seen)
        seen.add(name)
        if name != s.name:
            s = copy.copy(s)
            object.__setattr__(s, "name", name)
        out.append(Link(s, link.fuse))
    return out


def unused_name(name: str, taken) -> str:
    """``name``, or ``name_2``, ``name_3``, ... : the first not in ``taken``."""
    base, k = name, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def bind_stages(stages: Sequence[StageLogic], input_types: dict[str, str]) -> tuple[StageLogic, ...]:
    """Stages of one operator bound to their input types: the first to the routed rows' types,
    each fused one to the previous stage's output types through its plain-column inputs (and
    the declared types of its :class:`~keygroups.computed.Computed` ones)."""
    bound = [stages[0].bind(input_types)]
    for s in stages[1:]:
        produced = dict(bound[-1].output_columns()) | {"event_time_ms": "bigint"}
        types = {} if router_of(s) is not None else {
            name: expression_type(expr, produced, None) for name, expr in s.inputs().items()
            if isinstance(expr, Computed) or plain_column(expr) in produced}
        bound.append(s.bind(types))
    return tuple(bound)


def expression_type(expr: Any, types: dict[str, str], name: str | None) -> str:
    """The Spark type of an input: a Computed's declared type, a plain column's type in ``types``,
    else (a SQL expression) the type ``types`` gives its ``name``, or ``string``."""
    if isinstance(expr, Computed):
        return expr.type
    col = plain_column(expr)
    if col is not None and col in types:
        return types[col]
    return types.get(name, "string") if name is not None else "string"


_DTYPES = {"int64": "bigint", "Int64": "bigint", "int32": "int", "Int32": "int", "int16": "smallint",
           "Int16": "smallint", "int8": "tinyint", "Int8": "tinyint", "float64": "double", "Float64": "double",
           "float32": "float", "Float32": "float", "bool": "boolean", "boolean": "boolean", "string": "string"}


def frame_types(frame: pd.DataFrame) -> dict[str, str]:
    """``{column: Spark DDL type}`` of a frame's columns, from their dtypes (object columns from their
    first non-null value: text -> string, bytes -> binary, bool -> boolean, int -> bigint, float -> double)."""
    out = {}
    for name, col in frame.items():
        ddl = _DTYPES.get(str(col.dtype))
        if ddl is None:
            first = next((v for v in col.tolist() if v is not None and not (isinstance(v, float) and v != v)), None)
            ddl = ("binary" if isinstance(first, (bytes, bytearray))
                   else "boolean" if isinstance(first, (bool, np.bool_))
                   else "bigint" if isinstance(first, (int, np.integer))
                   else "double" if isinstance(first, float) else "string")
        out[str(name)] = ddl
    return out


def ingest_columns(stage: StageLogic) -> list[tuple[str, str]]:
    """The columns of source rows routed in Python by ``stage``: the contract's, the key group, the router's."""
    names = {c for c, _ in CONTROL_COLUMNS}
    return list(CONTROL_COLUMNS) + [(KEY_GROUP_COLUMN, "int")] + [c for c in router_of(stage).columns
                                                                    if c[0] not in names]


def configured_links(links: list[Link]) -> list[Link]:
    """Each stage as :meth:`~keygroups.stage.StageLogic.followed_by` its successor configures it."""
    stages = [lk.stage for lk in links]
    return [Link(s.followed_by(stages[i + 1] if i + 1 < len(stages) else None), lk.fuse)
            for i, (s, lk) in enumerate(zip(stages, links))]


def link_rates(stages: Sequence[StageLogic], rates: Sequence[float] | None) -> list[float]:
    """``rates`` validated: one finite number > 0 per link (default 1 each)."""
    n = len(stages) - 1
    if rates is None:
        return [1.0] * n
    rates = list(rates)
    if len(rates) != n:
        raise InvalidArgumentError(f"rates: {n + 1} stages have {n} links, got {len(rates)} rates")
    for i, r in enumerate(rates):
        if isinstance(r, bool) or not isinstance(r, (int, float, np.integer, np.floating)) \
                or not np.isfinite(r) or r <= 0:
            raise InvalidArgumentError(f"rates[{i}] (link {stages[i].name!r} -> {stages[i + 1].name!r}) must be a finite "
                             f"number > 0, got {r!r}")
    return [float(r) for r in rates]


def chain_links(links: Sequence[Link], rates: Sequence[float]) -> tuple[list[frozenset], list[float | None]]:
    """The planner's view of the chain (:func:`~keygroups.fusion.plan_chain`): per stage its
    partition attributes, ``{its key}`` (the previous stage's key when :func:`fusable` says the
    key is kept, else a new one), and per link its rate, None where :func:`fusable` says no."""
    attributes, out = [frozenset({"key0"})], []
    for i in range(1, len(links)):
        kept = fusable(links[i - 1].stage, links[i].stage, links[i].fuse, after_partial=links[i - 1].fuse == PARTIAL)
        attributes.append(attributes[-1] if kept else frozenset({f"key{i}"}))
        out.append(rates[i - 1] if kept else None)
    return attributes, out


def fusable(prev: StageLogic, stage: StageLogic, fuse: bool | str | None, after_partial: bool = False) -> bool:
    """Whether ``stage`` keeps ``prev``'s key (so it may run fused after it), by the fusion rule of
    :mod:`keygroups.pipeline`; ``fuse=True`` forces it or refuses, ``fuse=False`` forbids it,
    ``fuse=PARTIAL`` runs it in ``prev``'s key groups whatever its key (or refuses).
    ``after_partial``: ``prev`` runs as a partial stage, so its rows are not grouped by its key:
    only another partial stage fuses after it."""
    if fuse is False:
        return False
    if after_partial and fuse != PARTIAL:
        if fuse is True:
            raise InvalidArgumentError(f"fuse=True: {stage.name!r} cannot run fused after {prev.name!r}, a partial "
                                       "stage: its rows are grouped by the stage before it, not by its key")
        return False
    same_n = prev.num_key_groups == stage.num_key_groups
    router = router_of(stage)
    if router is not None and fuse != PARTIAL:
        if fuse is True:
            if not same_n:
                raise InvalidArgumentError(f"fuse=True: {stage.name!r} has {stage.num_key_groups} key groups, "
                                 f"{prev.name!r} {prev.num_key_groups}")
            return True
        return same_n and router.fusable_after is not None and bool(router.fusable_after(prev))
    exprs = stage.inputs()
    produced = {c for c, _ in prev.output_columns()} | {"event_time_ms"}
    plain = {name: plain_column(e) for name, e in exprs.items()}
    all_plain = all(isinstance(exprs[n], Computed) or (c is not None and c in produced) for n, c in plain.items())
    if fuse == PARTIAL:
        if router is not None or not (same_n and all_plain):
            raise InvalidArgumentError(
                f"fuse={PARTIAL!r}: {stage.name!r} cannot run in the key groups of {prev.name!r}: it needs the same "
                f"number of key groups ({stage.num_key_groups} against {prev.num_key_groups}), column keys, and inputs "
                f"that are columns of that stage's output (got {exprs})")
        return True
    keys = key_columns_of(stage) or []
    same_key = bool(keys) and [plain.get(k) for k in keys] == list(prev.output_key_columns() or [])
    if fuse is True:
        if not (same_n and all_plain and same_key):
            raise InvalidArgumentError(f"fuse=True: {stage.name!r} cannot run fused after {prev.name!r}: it needs the "
                             "same number of key groups, plain-column inputs of that stage's output and its "
                             f"key columns {prev.output_key_columns()} (got inputs {exprs}, key {keys})")
        return True
    return same_n and all_plain and same_key
