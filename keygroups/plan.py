"""A pipeline's plan, its building blocks: links, stage names, input types, the fusion rule (pure).

:class:`keygroups.Pipeline` (:mod:`keygroups.pipeline`) and the multi-input stages
(:mod:`keygroups.fan_in`) plan with these: a chain is a list of :class:`_Link` (a stage and its
``fuse`` choice), stage names are made unique (:func:`_named`, :func:`_unused`), stages are
configured by their successor (:func:`_configured`) and bound to their input types
(:func:`_bind`, :func:`_type_of`, :func:`frame_types`), and the fusion rule (:func:`_fusable`)
gives the fusion planner (:func:`keygroups.fusion.plan_chain`) its view of the chain
(:func:`_chain_links`). A multi-input first operator is described by a :class:`Head`. Names with
an underscore are the stage layer's own, not API.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups.computed import Computed
from dataflow_kafka.keygroups.stage import Stage, key_columns_of, router_of
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["plain_column", "frame_types", "Head"]


_IDENT = re.compile(r"^`?([A-Za-z_][A-Za-z0-9_]*)`?$")


def plain_column(expr: Any) -> str | None:
    """The column name if ``expr`` is a plain column reference (``name`` or ```name```), else None."""
    if not isinstance(expr, str):
        return None
    m = _IDENT.match(expr.strip())
    return m.group(1) if m else None


@dataclass(frozen=True)
class _Link:
    """A stage of a chain and its ``fuse`` choice (``Pipeline.then(stage, fuse=)``)."""

    stage: Stage
    fuse: bool | None


@dataclass(frozen=True)
class Head:
    """A multi-input first operator, as :mod:`keygroups.fan_in` prepares it: its inputs' names,
    the senders known in advance per input, the columns of its tagged input, and the emitted
    columns its upstreams carry."""

    inputs: tuple[str, ...]
    expected: tuple = ()
    columns: tuple[str, ...] = ()
    results: tuple = ()


def _named(links: list[_Link], taken: set | None = None) -> list[_Link]:
    """Copies of the stages with unique names (defaults from the class name), none in ``taken``."""
    out, seen = [], set(taken or ())
    for link in links:
        s = link.stage
        name = s.name or re.sub(r"(?<!^)(?=[A-Z])", "_", type(s).__name__.removesuffix("Stage")).lower() or "stage"
        name = _unused(name, seen)
        seen.add(name)
        if name != s.name:
            s = copy.copy(s)
            object.__setattr__(s, "name", name)
        out.append(_Link(s, link.fuse))
    return out


def _unused(name: str, taken) -> str:
    """``name``, or ``name_2``, ``name_3``, ... : the first not in ``taken``."""
    base, k = name, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


def _distinct(upstreams: "dict | None") -> list:
    """The distinct upstream pipelines of ``upstreams`` (by identity, in input order)."""
    out: list = []
    for u in (upstreams or {}).values():
        if u is not None and not any(u is v for v in out):
            out.append(u)
    return out


def _bind(stages: Sequence[Stage], input_types: dict[str, str]) -> tuple[Stage, ...]:
    """Stages of one operator bound to their input types: the first to the routed rows' types,
    each fused one to the previous stage's output types through its plain-column inputs (and
    the declared types of its :class:`~keygroups.computed.Computed` ones)."""
    bound = [stages[0].bind(input_types)]
    for s in stages[1:]:
        produced = dict(bound[-1].output_columns()) | {"event_time_ms": "bigint"}
        types = {} if router_of(s) is not None else {
            name: _type_of(expr, produced, None) for name, expr in s.inputs().items()
            if isinstance(expr, Computed) or plain_column(expr) in produced}
        bound.append(s.bind(types))
    return tuple(bound)


def _type_of(expr: Any, types: dict[str, str], name: str | None) -> str:
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


def _configured(links: list[_Link]) -> list[_Link]:
    """Each stage as :meth:`~keygroups.stage.Stage.followed_by` its successor configures it."""
    stages = [lk.stage for lk in links]
    return [_Link(s.followed_by(stages[i + 1] if i + 1 < len(stages) else None), lk.fuse)
            for i, (s, lk) in enumerate(zip(stages, links))]


def _link_rates(stages: Sequence[Stage], rates: Sequence[float] | None) -> list[float]:
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


def _chain_links(links: Sequence[_Link], rates: Sequence[float]) -> tuple[list[frozenset], list[float | None]]:
    """The planner's view of the chain (:func:`~keygroups.fusion.plan_chain`): per stage its
    partition attributes, ``{its key}`` (the previous stage's key when :func:`_fusable` says the
    key is kept, else a new one), and per link its rate, None where :func:`_fusable` says no."""
    attributes, out = [frozenset({"key0"})], []
    for i in range(1, len(links)):
        kept = _fusable(links[i - 1].stage, links[i].stage, links[i].fuse)
        attributes.append(attributes[-1] if kept else frozenset({f"key{i}"}))
        out.append(rates[i - 1] if kept else None)
    return attributes, out


def _fusable(prev: Stage, stage: Stage, fuse: bool | None) -> bool:
    """Whether ``stage`` keeps ``prev``'s key (so it may run fused after it), by the fusion rule of
    :mod:`keygroups.pipeline`; ``fuse=True`` forces it or refuses, ``fuse=False`` forbids it."""
    if fuse is False:
        return False
    same_n = prev.num_key_groups == stage.num_key_groups
    router = router_of(stage)
    if router is not None:
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
    keys = key_columns_of(stage) or []
    same_key = bool(keys) and [plain.get(k) for k in keys] == list(prev.output_key_columns() or [])
    if fuse is True:
        if not (same_n and all_plain and same_key):
            raise InvalidArgumentError(f"fuse=True: {stage.name!r} cannot run fused after {prev.name!r}: it needs the "
                             "same number of key groups, plain-column inputs of that stage's output and its "
                             f"key columns {prev.output_key_columns()} (got inputs {exprs}, key {keys})")
        return True
    return same_n and all_plain and same_key
