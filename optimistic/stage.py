"""FlameStream in the stage layer: an order-sensitive stage as a :class:`keygroups.Stage`.

:class:`OptimisticStage` runs one order-sensitive stage (:class:`~optimistic.stages.Grouping` or
:class:`~optimistic.stages.StatefulMap`) and the stateless :class:`~optimistic.stages.Map` stages
after it, per key group, in one of two modes:

- ``"optimistic"`` (FlameStream §IV-V): items and tombstones are processed at once (late items
  replay the key's log from their insertion point and emit tombstones for outputs that became
  invalid); the **barrier** (Algorithm 3) sits in the last optimistic stage of a run (the
  pipeline adds it when no optimistic stage follows, :meth:`followed_by`) and releases, below the
  key group's low watermark, the items that are still valid, in order. The barrier partitioned
  by the last stage's key groups is still the pipeline's single buffer: an item and its
  tombstones are emitted by the same key group, so they meet without another shuffle.
- ``"buffered"``: a sort buffer before the stage, released below the low watermark (FlameStream's
  buffered baseline): no tombstones, a buffer per stage.

Between optimistic stages items travel as Python objects (fused) or as one row per item or
tombstone (column ``item``: the pickled ``(time_ms, source, offset, path, payload, tombstone)``).
The output low watermark is the input one: every item or tombstone emitted later derives from
an input at or above it and keeps its event time (a late input at ``t`` replays entries at
``>= t`` only); for the barrier it is the release bound.

Input from the source: ``decode(value)`` is the payload, the record's event time, Kafka
partition and offset its position in the total order (``leading`` maps run first); with
``from_row``, ``from_row(row)`` is (a dict of the row's columns other than the contract's: the
source's ``key``, ``value``, ``timestamp``, ...). Input from another kind of stage: ``from_row(row)``
(a dict of that stage's output columns) is the payload.
Released items leave as rows of ``output_columns``: by default ``key`` (``Meta.sort_key()``,
unique per item, so it deduplicates an at-least-once sink) and ``value`` (``encode(payload)``);
``output=fn`` maps a payload to a dict of typed columns (``output_schema`` declares them) for a
stage that follows, e.g. a slicer keyed by one of them; ``output_key`` names the columns that hold
this stage's key, so a stage keyed by them (with as many key groups) runs fused after the barrier.

Metrics: the barrier's counters per key group and batch (``metrics`` rows: ``items_in``,
``tombstones_in``, ``released``, ``replay_ratio``, ``early_tombstones``, ``late_items``,
``late_tombstones``, ``buffer``, ``max_buffer``, ``batch_released``, ``batch_lag_mean_ms``,
``lag_max_ms``; lags in ms of processing time). Items that reach the barrier below a bound it
already released (a broken punctuation) are reported as ``dropped`` (reason ``late``).
"""

from __future__ import annotations

import copy
import json
import math
import pickle
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups import Dropped, PythonRouter, Stage, StageInput, StageOutput, key_group_of
from dataflow_kafka.keygroups.contract import CONTROL_NAMES
from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.optimistic.barrier import Barrier
from dataflow_kafka.optimistic.order import Item, Meta
from dataflow_kafka.optimistic.replay import KeyedState
from dataflow_kafka.optimistic.stages import Map
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["OptimisticStage", "optimistic_stages", "decode_json", "encode_json", "MODES", "ITEM_COLUMN"]

MODES = ("optimistic", "buffered")
ITEM_COLUMN = "item"
_new = tuple.__new__   # Meta and Item without NamedTuple's argument handling (hot path)


def decode_json(value: bytes) -> Any:
    """Default payload decoder: the record value as JSON (lists become tuples, recursively)."""
    return _tuples(json.loads(value))


def _tuples(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_tuples(v) for v in x)
    if isinstance(x, dict):
        return {k: _tuples(v) for k, v in x.items()}
    return x


def encode_json(payload: Any) -> bytes:
    """Default payload encoder: compact JSON (tuples become arrays)."""
    return json.dumps(payload, separators=(",", ":")).encode()


def _apply_maps(maps: Sequence[Map], items: list[Item]) -> list[Item]:
    for m in maps:
        items = m.process(None, items)
    return items


def _flat(item: Item) -> bytes:
    m = item.meta
    return pickle.dumps((m[0], m[1], m[2], m[3], item.payload, bool(item.tombstone)), protocol=5)


def _item(blob: bytes) -> Item:
    t, s, o, p, payload, tomb = pickle.loads(blob)
    return _new(Item, (_new(Meta, (t, s, o, p)), payload, tomb))


@dataclass
class OptimisticStage(Stage):
    """One order-sensitive stage (and the maps after it) of a FlameStream pipeline; see the module
    docstring. ``stage.key(payload)`` is the key; ``num_key_groups`` its key groups."""

    stage: Any = None
    maps: tuple = ()
    leading: tuple = ()
    mode: str = "optimistic"
    num_key_groups: int = 4
    decode: Callable[[bytes], Any] = decode_json
    encode: Callable[[Any], bytes] = encode_json
    from_row: Callable[[dict], Any] | None = None
    output: Callable[[Any], dict] | None = None
    output_schema: tuple = (("key", "binary"), ("value", "binary"))
    output_key: tuple = ()
    name: str | None = None
    barrier: bool = True
    metrics: bool = True
    _check: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.stage is None or not getattr(self.stage, "order_sensitive", False):
            raise InvalidArgumentError(f"OptimisticStage needs an order-sensitive stage (Grouping or StatefulMap), "
                             f"got {self.stage!r}")
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not isinstance(self.num_key_groups, int) or self.num_key_groups < 1:
            raise InvalidArgumentError(f"num_key_groups must be a positive int, got {self.num_key_groups!r}")
        self.maps, self.leading = tuple(self.maps), tuple(self.leading)
        self.output_schema = tuple(tuple(c) for c in self.output_schema)
        self.output_key = tuple(self.output_key)
        unknown = set(self.output_key) - {c for c, _ in self.output_schema}
        if unknown:
            raise InvalidArgumentError(f"output_key {sorted(unknown)} must name columns of output_schema {self.output_schema}")

    # -- pipeline configuration -------------------------------------------------------------------
    def followed_by(self, downstream: Stage | None) -> "OptimisticStage":
        wanted = self.mode == "optimistic" and not isinstance(downstream, OptimisticStage)
        if wanted == self.barrier:
            return self
        s = copy.copy(self)
        s.barrier = wanted
        return s

    # -- routing ----------------------------------------------------------------------------------
    def routing(self) -> PythonRouter:
        """Items routed by ``stage.key`` in Python; fused after an optimistic stage with the same
        key function, handed over as items (no frame round trip)."""
        return PythonRouter(self._route, [(ITEM_COLUMN, "binary")], fused=self._fused_input,
                            fusable_after=self._same_key)

    def _same_key(self, upstream: Stage) -> bool:
        return isinstance(upstream, OptimisticStage) and upstream.stage.key is self.stage.key

    def _items_of(self, data: Any) -> list[Item]:
        """Items from any upstream: this package's items, item rows, source rows or typed rows."""
        if data is None:
            return []
        if isinstance(data, list):
            return data
        if not len(data):
            return []
        if ITEM_COLUMN in data.columns:
            return [_item(b) for b in data[ITEM_COLUMN]]
        times = data["event_time_ms"].to_numpy(dtype=np.int64)
        parts = data["partition"].to_numpy(dtype=np.int64)
        offs = data["offset"].to_numpy(dtype=np.int64)
        if self.from_row is None and "value" in data.columns:
            payloads = [self.decode(bytes(v)) for v in data["value"]]
            items = [Item.source(t, p, o, x) for t, p, o, x in zip(times, parts, offs, payloads)]
            return _apply_maps(self.leading, items)
        if self.from_row is None:
            raise InvalidArgumentError(f"stage {self.name!r}: input rows have no 'value' column; pass from_row= to "
                             f"build a payload from the upstream stage's columns {list(data.columns)}")
        rows = data.drop(columns=[c for c in data.columns if c in _CONTROL]).to_dict("records")
        return _apply_maps(self.leading, [Item.source(t, p, o, self.from_row(r))
                                          for t, p, o, r in zip(times, parts, offs, rows)])

    def _groups(self, items: list[Item]) -> np.ndarray:
        key, n = self.stage.key, self.num_key_groups
        return np.fromiter((key_group_of(key(i.payload), n) for i in items), dtype=np.int64, count=len(items))

    def _route(self, data: Any) -> tuple[pd.DataFrame, np.ndarray]:
        items = self._items_of(data)
        rows = pd.DataFrame({ITEM_COLUMN: [_flat(i) for i in items],
                             "event_time_ms": np.fromiter((i.meta.time_ms for i in items), np.int64, len(items))})
        return rows, self._groups(items)

    def _fused_input(self, upstream_data: Any) -> tuple[list[Item], np.ndarray]:
        items = self._items_of(upstream_data)
        return items, self._groups(items)

    # -- state ------------------------------------------------------------------------------------
    def new_state(self) -> dict:
        return {"state": self.stage.open_state(), "buffer": Barrier()}

    def dump_state(self, state: dict) -> bytes:
        return pickle.dumps((state["state"].to_bytes(), state["buffer"].to_bytes()), protocol=5)

    def load_state(self, blob: bytes) -> dict:
        st, buf = pickle.loads(blob)
        return {"state": KeyedState.from_bytes(st), "buffer": Barrier.from_bytes(buf)}

    def describe_state(self, state: dict) -> list[dict]:
        """Per key of the order-sensitive stage its log (``log``: ``count`` entries held for
        replay, their ``[start_ms, end_ms)``, ``state`` after them); the items the barrier (or,
        ``mode="buffered"``, the sort buffer) holds (``held``: one per item, ``start_ms`` its event
        time, ``count`` -1 for a tombstone waiting for its item) and ``barrier`` (``start_ms``:
        the bound released so far, items below it leave no more)."""
        logs: KeyedState = state["state"]
        rows = []
        for key in logs.keys():
            entries = logs.log(key)
            times = [m.time_ms for m, _, _ in entries]
            waiting = sum(1 for _, _, n in entries if n < 0)
            rows.append(state_item("log", key=key, start_ms=min(times, default=None),
                                   end_ms=max(times) + 1 if times else None, count=len(entries),
                                   state=logs.last_state(key), waiting_tombstones=waiting or None))
        buffer: Barrier = state["buffer"]
        held = buffer.held()
        if held or buffer.released_below_ms is not None:
            kind = "sort" if self.mode == "buffered" else "barrier"
            rows.append(state_item("barrier", start_ms=_bound(buffer.released_below_ms), count=len(held),
                                   buffer=kind, released=buffer.counters.released))
            rows += [state_item("held", start_ms=m.time_ms, count=n, partition=m.source, offset=m.offset,
                                path=m.path or None, payload=payload, buffer=kind) for m, payload, n in held]
        return rows

    # -- one batch --------------------------------------------------------------------------------
    def process(self, state: dict, batch: StageInput) -> StageOutput:
        w, now = batch.watermark_ms, batch.processing_time_ms or 0
        items = self._items_of(batch.data)
        buffer: Barrier = state["buffer"]
        if self.mode == "buffered":
            buffer.insert_all(items, now)
            items = buffer.punctuate(w, now) if w is not None else []
        out = _apply_maps(self.maps, self.stage.process(state["state"], items))
        if w is not None:
            self.stage.collect_garbage(state["state"], w)
        if not self.barrier:
            return StageOutput(out, w)
        return self._release(buffer, out, batch)

    def _release(self, barrier: Barrier, items: list[Item], batch: StageInput) -> StageOutput:
        now = batch.processing_time_ms or 0
        c = barrier.counters
        lag_before, released_before, late_before = c.lag_sum, c.released, c.late_items
        with warnings.catch_warnings():       # late items are reported as dropped rows below
            warnings.simplefilter("ignore", RuntimeWarning)
            barrier.insert_all(items, now)
        out = barrier.punctuate(batch.watermark_ms, now) if batch.watermark_ms is not None else []
        n = c.released - released_before
        metrics = None
        if self.metrics:
            metrics = {"key_group": batch.key_group, "processing_time_ms": batch.processing_time_ms,
                       "low_watermark_ms": batch.watermark_ms,
                       "items_in": c.items_in, "tombstones_in": c.tombstones_in, "released": c.released,
                       "replay_ratio": c.replay_ratio if math.isfinite(c.replay_ratio) else None,
                       "early_tombstones": c.early_tombstones, "late_items": c.late_items,
                       "late_tombstones": c.late_tombstones, "buffer": len(barrier), "max_buffer": c.max_buffer,
                       "batch_released": n, "batch_lag_mean_ms": (c.lag_sum - lag_before) / n if n else None,
                       "lag_max_ms": c.lag_max}
        late = c.late_items - late_before
        return StageOutput(out, batch.watermark_ms, [Dropped(None, "late", late)] if late else [], metrics)

    # -- output -----------------------------------------------------------------------------------
    def output_columns(self):
        return [tuple(c) for c in self.output_schema]

    def output_key_columns(self):
        """``output_key``: the output columns that hold this stage's key (``stage.key(payload)``),
        so that a stage keyed by them runs fused after the barrier."""
        return list(self.output_key) or None

    def output_frame(self, data: Any) -> pd.DataFrame | None:
        items = [i for i in (data or []) if not i.tombstone]
        times = np.fromiter((i.meta.time_ms for i in items), np.int64, len(items))
        if self.output is None:
            return pd.DataFrame({"key": [i.meta.sort_key() for i in items],
                                 "value": [self.encode(i.payload) for i in items], "event_time_ms": times})
        frame = pd.DataFrame([self.output(i.payload) for i in items], columns=[c for c, _ in self.output_schema])
        frame["event_time_ms"] = times
        return frame


_CONTROL = set(CONTROL_NAMES) | {"key_group"}   # the contract's columns: not part of a row's payload


def _bound(ms: int | float | None) -> int | None:
    """A release bound as ms (an infinite one, the end of input, as None)."""
    return int(ms) if ms is not None and math.isfinite(ms) else None


def optimistic_stages(stages: Sequence, *, mode: str = "optimistic", key_groups: int | Sequence[int] = 4,
                      fuse_same_key: bool | Sequence[bool] = False, **options):
    """A :class:`keygroups.Pipeline` of :class:`OptimisticStage` segments for a FlameStream stage
    list (``Map``, ``Grouping``, ``StatefulMap``): leading maps run before the first stage, each
    order-sensitive stage starts a segment and takes the maps after it. ``key_groups``: one int,
    or one per order-sensitive stage. ``fuse_same_key``: ``True`` runs consecutive segments with
    the same number of key groups fused, or one bool per link between consecutive segments (e.g.
    :func:`optimistic.workload.inverted_index_same_key`); fused stages' keys must agree (checked
    per row at run time).
    ``options``: passed to every :class:`OptimisticStage` (``decode``, ``encode``, ``output``, ...)."""
    from dataflow_kafka.keygroups import Pipeline

    leading: list = []
    segments: list[tuple[Any, list]] = []
    for s in stages:
        if getattr(s, "order_sensitive", False):
            segments.append((s, []))
        elif segments:
            segments[-1][1].append(s)
        else:
            leading.append(s)
    if not segments:
        raise InvalidArgumentError("optimistic_stages: at least one order-sensitive stage (Grouping or StatefulMap)")
    groups = [key_groups] * len(segments) if isinstance(key_groups, int) else list(key_groups)
    if len(groups) != len(segments) or any(not isinstance(g, int) or g < 1 for g in groups):
        raise InvalidArgumentError(f"key_groups must be a positive int or {len(segments)} positive ints "
                         f"(one per order-sensitive stage), got {key_groups!r}")
    links = ([bool(fuse_same_key)] * (len(segments) - 1) if isinstance(fuse_same_key, bool)
             else [bool(f) for f in fuse_same_key])
    if len(links) != len(segments) - 1:
        raise InvalidArgumentError(f"fuse_same_key must be a bool or {len(segments) - 1} bools (one per link between "
                         f"order-sensitive stages), got {fuse_same_key!r}")
    pipe = None
    for i, ((stage, maps), n) in enumerate(zip(segments, groups)):
        st = OptimisticStage(stage=stage, maps=tuple(maps), leading=tuple(leading) if i == 0 else (), mode=mode,
                             num_key_groups=n, name=f"s{i + 1}", **options)
        if pipe is None:
            pipe = Pipeline([st])
        else:
            pipe = pipe.then(st, fuse=True if links[i - 1] and groups[i - 1] == n else None)
    return pipe
