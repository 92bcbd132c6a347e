"""One stage operator: consecutive stages fused in one key group, per micro-batch (pure, no Spark).

:func:`run_key_group` is the whole per-batch logic of a stage operator for one key group. The
``transformWithStateInPandas`` processor (:class:`keygroups.processor.StageProcessor`) and the
local runner (:func:`keygroups.pipeline.Pipeline.run_local`) both call it, so a pipeline computes
the same on Spark and without it.

Per call: split the rows by kind (:func:`keygroups.contract.split_rows`); drop modifications
already applied (by ``control_offset``: an operator with several inputs meets each command once
per input reading it, and applies it once); fold the punctuation rows into the key group's
:class:`~keygroups.punctuation.PunctuationTracker` (min over senders; with several inputs one
tracker per input, :class:`~keygroups.punctuation.InputWatermarks`); then run the stages in
order, each one's output (data and output low watermark) being the next one's input; emit the
new modifications (key group 0 only: the next operator's routing copies them to every key group),
the last stage's data rows, the pass-on rows (errors, reports), the stages' ``dropped`` rows, one
``metrics`` row per stage (:mod:`keygroups.metrics`: watermarks, counts, and the stage's own
counters), and one punctuation row carrying the last stage's output low watermark.

**State.** A key group's state is one ``bytes`` value (magic, token, payload), and, when the
caller gives a :class:`StateLog` (the Spark processor: a map state beside the value), the
stages' append-only parts as segments in that log (:meth:`~keygroups.stage.StageLogic.dump_state_logged`:
a Dataflow stage's element history, each element written once instead of once per batch it
stays). Without a log everything is in the bytes (the local runner, :func:`load_operator_state`).
The log is read only when a stage looks into its segments (a Dataflow stage: when a query is
added or an element retracted), not at every load.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups.contract import (
    CONTROL_COLUMNS, KIND_DATA, KIND_DROPPED, KIND_ERROR, KIND_METRICS, KIND_MODIFICATION, KIND_PUNCTUATION,
    KIND_RESULT, Modification,
    Columns, conform, split_rows,
)
from dataflow_kafka.keygroups.computed import Computed, computed_inputs, evaluate
from dataflow_kafka.keygroups.metrics import stage_metrics
from dataflow_kafka.keygroups.punctuation import InputWatermarks, PunctuationTracker
from dataflow_kafka.keygroups.routing import KEY_GROUP_COLUMN
from dataflow_kafka.keygroups.stage import INPUT_COLUMN, PythonRouter, StageLogic, StageInput, StageOutput, router_of
from dataflow_kafka.errors import FusionError, InvalidArgumentError

__all__ = ["OperatorSpec", "OperatorState", "StateLog", "run_key_group", "load_operator_state"]

_MAGIC = b"KGO1"
_TOKEN = 16
# Live states of recently dumped key groups, by the state's token: a Python worker that gets the
# same key group again skips deserialising it (see _load).
_CACHE: "OrderedDict[bytes, OperatorState]" = OrderedDict()
_CACHE_SIZE = 64


@dataclass(frozen=True)
class OperatorSpec:
    """What a stage operator runs (picklable): fused ``stages``, the Python router of the next
    operator (None: the next operator routes by columns in the JVM, or this is the last one), and
    the output schema (control columns, ``key_group`` when ``out_router`` is set, data columns)."""

    stages: tuple[StageLogic, ...]
    out_router: PythonRouter | None = None
    data_columns: tuple[tuple[str, str], ...] = ()
    idle_timeout_ms: int | None = None
    emit: tuple[int, ...] = ()                       # stages whose output also leaves as ``result`` rows
    result_columns: tuple[tuple[str, str], ...] = ()  # their columns (and upstream operators')
    lead_group: int = 0                              # the key group that forwards modifications once
    claims: tuple | None = None                      # first operator: (stage name, ops it takes) of every stage
    next_inputs: tuple = ()                          # (name, Computed) inputs of the next operator, computed here
    inputs: tuple[str, ...] = ()                     # a multi-input first stage: its inputs' names
    expected: tuple = ()                             # ... and (input, senders known in advance) pairs

    @property
    def name(self) -> str:
        """The operator's name: its last stage's (the sender name of its punctuation rows)."""
        return str(self.stages[-1].name)

    def output_columns(self) -> list[tuple[str, str]]:
        """``(name, Spark DDL type)`` of the operator's output rows: the control columns, the key
        group (when ``out_router`` routes the next operator), the data columns, the emitted ones."""
        cols = list(CONTROL_COLUMNS)
        if self.out_router is not None:
            cols.append((KEY_GROUP_COLUMN, "int"))
        names = {c for c, _ in cols}
        data = [c for c in self.data_columns if c[0] not in names]
        names |= {c for c, _ in data}
        return cols + data + [c for c in self.result_columns if c[0] not in names]


@dataclass
class OperatorState:
    """A key group's state: tracker, one state per stage, output watermarks, counters."""

    tracker: PunctuationTracker | InputWatermarks      # InputWatermarks: a multi-input first stage
    states: list
    out_watermarks: list = field(default_factory=list)
    last_control_offset: int | None = None
    seq: int = 0                 # batches run (offset of this key group's punctuation rows)
    emitted: int = 0             # data rows emitted (offset of the next data row)


class StateLog:
    """Where a key group's stages keep their append-only parts: segments by ``(stage index,
    segment id)``. This one holds them in a dict (tests, tools); the Spark processor's is its map
    state (:class:`keygroups.processor.StageProcessor`). :meth:`read` is called only when the key
    group's live state is not cached in the process and a stage looks into its segments;
    :meth:`write` once per batch."""

    def __init__(self, segments: dict[tuple[int, int], bytes] | None = None) -> None:
        self.segments = dict(segments or {})

    def read(self) -> dict[tuple[int, int], bytes]:
        """Every segment held."""
        return dict(self.segments)

    def write(self, new: dict[tuple[int, int], bytes], dropped: list[tuple[int, int]]) -> None:
        """Delete ``dropped``, then add ``new``."""
        for k in dropped:
            self.segments.pop(k, None)
        self.segments.update(new)


def _new_tracker(spec: OperatorSpec) -> PunctuationTracker | InputWatermarks:
    if spec.inputs:
        return InputWatermarks(spec.inputs, spec.idle_timeout_ms, dict(spec.expected))
    return PunctuationTracker(spec.idle_timeout_ms)


def _new_state(spec: OperatorSpec) -> OperatorState:
    return OperatorState(_new_tracker(spec), [s.new_state() for s in spec.stages], [None] * len(spec.stages))


def _load(spec: OperatorSpec, blob: bytes | None, log: StateLog | None = None) -> OperatorState:
    """The state in ``blob`` (magic, token, payload; with its segments in ``log`` if it was
    written with one). If this process dumped exactly that state (same token) its live objects
    are *taken* from the cache: an attempt that fails after mutating them leaves no entry, and a
    dump that was never committed has a token the state store does not hold, so a retry or replay
    always starts from the committed bytes (and the committed log: Spark commits both at once)."""
    if blob is None:
        return _new_state(spec)
    blob = bytes(blob)
    if blob[:4] != _MAGIC:
        raise InvalidArgumentError(f"stage operator {spec.name!r}: key group state has an unknown format "
                         f"({blob[:4]!r}, expected {_MAGIC!r})")
    cached = _CACHE.pop(blob[4:4 + _TOKEN], None)
    if cached is not None:
        if log is not None:             # this call's log, for a stage that reads its segments later
            for s, x, seg in zip(spec.stages, cached.states, _segments_per_stage(log, len(spec.stages))):
                s.attach_log(x, seg)
        return cached
    tracker, stage_blobs, out_wms, last, seq, emitted, *rest = pickle.loads(blob[4 + _TOKEN:])
    if len(stage_blobs) != len(spec.stages):
        raise InvalidArgumentError(f"stage operator {spec.name!r}: the checkpoint holds {len(stage_blobs)} stage "
                         f"states, the pipeline has {len(spec.stages)} stages here (pipeline changed?)")
    if rest and rest[0]:                # written with a log
        if log is None:
            raise InvalidArgumentError(f"stage operator {spec.name!r}: this key group state keeps its stages' "
                                       "append-only parts in a log (the map state 'log'); read it with that log")
        per_stage = _segments_per_stage(log, len(spec.stages))
        states = [s.load_state_logged(b, seg) for s, b, seg in zip(spec.stages, stage_blobs, per_stage)]
    else:
        states = [s.load_state(b) for s, b in zip(spec.stages, stage_blobs)]
    tracker = (InputWatermarks if spec.inputs else PunctuationTracker).from_bytes(tracker)
    return OperatorState(tracker, states, list(out_wms), last, seq, emitted)


class _StageSegments(Mapping):
    """One stage's segments ``{segment id: bytes}`` of a :class:`StateLog`, read from it (for
    every stage at once) when first looked into."""

    def __init__(self, read: Callable[[], list[dict[int, bytes]]], stage: int) -> None:
        self._read, self._stage = read, stage

    def __getitem__(self, j: int) -> bytes:
        return self._read()[self._stage][j]

    def __iter__(self) -> Iterator[int]:
        return iter(self._read()[self._stage])

    def __len__(self) -> int:
        return len(self._read()[self._stage])


def _segments_per_stage(log: StateLog, n: int) -> list[_StageSegments]:
    """Each of ``n`` stages' segments in ``log``, which is read once, when one of them is looked into."""
    @functools.cache
    def read() -> list[dict[int, bytes]]:
        per_stage: list[dict[int, bytes]] = [{} for _ in range(n)]
        for (i, j), segment in log.read().items():
            if 0 <= i < n:
                per_stage[i][j] = bytes(segment)
        return per_stage

    return [_StageSegments(read, i) for i in range(n)]


def load_operator_state(spec: OperatorSpec, blob: bytes, log: StateLog | None = None) -> OperatorState:
    """A key group's committed state read from its bytes and ``log`` (never from this process's
    cache): what :func:`keygroups.state_view.read_state` shows of a stopped query."""
    _CACHE.pop(bytes(blob)[4:4 + _TOKEN], None)
    return _load(spec, blob, log)


def _dump(spec: OperatorSpec, st: OperatorState, log: StateLog | None = None) -> bytes:
    if log is None:
        stage_blobs = [s.dump_state(x) for s, x in zip(spec.stages, st.states)]
    else:
        stage_blobs, new, dropped = [], {}, []
        for i, (s, x) in enumerate(zip(spec.stages, st.states)):
            b, s_new, s_dropped = s.dump_state_logged(x)
            stage_blobs.append(b)
            new.update({(i, j): v for j, v in s_new.items()})
            dropped += [(i, j) for j in s_dropped]
        if new or dropped:
            log.write(new, dropped)
    payload = pickle.dumps((st.tracker.to_bytes(), stage_blobs, st.out_watermarks, st.last_control_offset, st.seq,
                            st.emitted, log is not None), protocol=5)
    token = os.urandom(_TOKEN)
    _CACHE[token] = st
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return _MAGIC + token + payload


def _fold_punctuations(tracker: PunctuationTracker | InputWatermarks, puncts: pd.DataFrame, pt: int | None) -> None:
    several = isinstance(tracker, InputWatermarks)
    inputs = puncts[INPUT_COLUMN] if several else [None] * len(puncts)
    for topic, part, value, offset, inp in zip(puncts["topic"], puncts["partition"], puncts["punctuation_ms"],
                                               puncts["offset"], inputs):
        part = part if pd.isna(part) else int(part)        # a sender's id whatever the column's dtype
        args = (f"{topic}-{part}", None if pd.isna(value) else int(value), None if pd.isna(offset) else int(offset),
                pt or 0)
        if several:
            tracker.update(inp, *args)
        else:
            tracker.update(*args)


def _monotone(prev: int | None, new: int | None) -> int | None:
    if new is None:
        return prev
    return new if prev is None else max(prev, new)


def _key_text(key: Any) -> str | None:
    if key is None or isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return key.decode("utf-8", "replace")
    try:
        return json.dumps(list(key) if isinstance(key, tuple) else key, default=str)
    except (TypeError, ValueError):
        return repr(key)


def _handoff(prev: StageLogic, prev_data: Any, stage: StageLogic, key_group: int) -> Any:
    """The previous fused stage's output as ``stage``'s input data."""
    router = router_of(stage)
    if router is not None:
        rows, groups = router.fused_input(prev_data)
        groups = np.asarray(groups)
        if len(groups) and bool((groups != key_group).any()):
            bad = int(np.flatnonzero(groups != key_group)[0])
            raise FusionError(
                f"stage {stage.name!r} is fused after {prev.name!r} but its key puts row {bad} of key group "
                f"{key_group} into key group {int(groups[bad])}: key it like {prev.name!r} or pass fuse=False")
        return rows
    frame = prev.output_frame(prev_data)
    if frame is None:
        return None
    inputs = stage.inputs()
    renames = {name: expr for name, expr in inputs.items() if not isinstance(expr, Computed) and name != expr}
    if renames:
        frame = frame.assign(**{name: frame[expr] for name, expr in renames.items()})
    return evaluate(frame, computed_inputs(inputs), data_only=False)


def unclaimed_command(mod: Modification, claims: tuple) -> str | None:
    """Why no stage of the query takes the command ``mod`` (None: one does, or the text is not a
    JSON object, which the source reports). ``claims``: ``((stage name, ops), ...)`` of every stage."""
    try:
        obj = json.loads(mod.text)
    except (TypeError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    op, target = obj.get("op"), obj.get("stage")
    takes = {name: sorted(ops) for name, ops in claims}
    where = f"control record @{mod.control_offset}: {mod.text[:200]}"
    if target is not None and target not in takes:
        return (f"{where}: names stage {target!r}, which is not in this query (its stages: "
                f"{sorted(takes)}); ignored")
    if target is not None and op not in takes[target]:
        return (f"{where}: stage {target!r} does not take op {op!r} (it takes: {takes[target] or 'no commands'})"
                "; ignored")
    if not any(op in ops for ops in takes.values()):
        offered = sorted({o for ops in takes.values() for o in ops})
        return (f"{where}: op {op!r} is not a command of any stage of this query (commands taken here: "
                f"{offered or 'none'}); ignored")
    return None


def run_key_group(spec: OperatorSpec, key_group: int, pdf: pd.DataFrame, blob: bytes | None,
                  log: StateLog | None = None) -> tuple[pd.DataFrame | None, bytes]:
    """One micro-batch of one key group: ``(output rows or None, new state blob)``; with ``log``,
    the stages' append-only parts are read from and written to it (module docstring)."""
    st = _load(spec, blob, log)
    split = split_rows(pdf)
    pt = split.processing_time_ms
    mods = [m for m in split.modifications
            if st.last_control_offset is None or m.control_offset is None or m.control_offset > st.last_control_offset]
    previous = st.tracker.low_watermark_ms
    _fold_punctuations(st.tracker, split.punctuations, pt)
    wm, prev_wm = st.tracker.low_watermark_ms, previous
    data: Any = split.data
    reports: list[dict] = []
    results: list[pd.DataFrame] = []
    prev_stage: StageLogic | None = None
    per_input = st.tracker.per_input() if spec.inputs else None
    observed: list[tuple] = []           # per stage: what its standard metrics need (keygroups.metrics)
    for i, stage in enumerate(spec.stages):
        if prev_stage is not None:
            data = _handoff(prev_stage, data, stage, key_group)
        out: StageOutput = stage.process(st.states[i], StageInput(key_group, data, mods, wm, prev_wm, pt,
                                                                  per_input if i == 0 else None))
        before = st.out_watermarks[i]
        st.out_watermarks[i] = _monotone(before, out.watermark_ms)
        observed.append((data, out, wm))
        wm, prev_wm = st.out_watermarks[i], before
        for d in out.dropped:
            if d.count:
                reports.append({"kind": KIND_DROPPED, "topic": stage.name, "partition": key_group,
                                "processing_time_ms": pt, "dropped_key": _key_text(d.key),
                                "dropped_reason": d.reason, "dropped_count": int(d.count)})
        for text in out.errors + (out.command_errors if key_group == spec.lead_group else []):
            reports.append({"kind": KIND_ERROR, "topic": stage.name, "partition": key_group,
                            "processing_time_ms": pt, "error": text})
        if i in spec.emit:
            frame = stage.output_frame(out.data)
            if frame is not None and len(frame):
                results.append(Columns.of_frame(frame, kind=KIND_RESULT, topic=stage.name, partition=key_group,
                                                processing_time_ms=pt))
        data, prev_stage = out.data, stage
    if spec.claims is not None and key_group == spec.lead_group:
        for m in mods:
            text = unclaimed_command(m, spec.claims)
            if text:
                reports.append({"kind": KIND_ERROR, "topic": spec.name, "partition": key_group,
                                "processing_time_ms": pt, "error": text})
    for m in mods:
        if m.control_offset is not None:
            st.last_control_offset = _monotone(st.last_control_offset, m.control_offset)
    for stage, (data_in, out, wm_in), wm_out in zip(spec.stages, observed, st.out_watermarks):
        reports.append({"kind": KIND_METRICS, "topic": stage.name, "partition": key_group, "processing_time_ms": pt,
                        "metrics": json.dumps(stage_metrics(data_in, out.data, wm_in, wm_out, out.dropped,
                                                            out.metrics), default=str)})
    frames: list[pd.DataFrame | Columns] = []
    name = spec.name
    if key_group == spec.lead_group and mods:
        frames.append(Columns.of_rows([{"kind": KIND_MODIFICATION, "topic": name, "partition": 0,
                                      "modification": m.text, "control_offset": m.control_offset,
                                      "processing_time_ms": pt} for m in mods]))
    last = spec.stages[-1]
    routed: dict = {}
    if spec.out_router is not None:
        rows, groups = spec.out_router(data) if data is not None else (None, None)
        if rows is not None and len(rows):
            routed[KEY_GROUP_COLUMN] = np.asarray(groups, np.int64)
    else:
        rows = last.output_frame(data) if data is not None else None
        if spec.next_inputs and rows is not None and len(rows):
            rows = evaluate(rows, dict(spec.next_inputs), data_only=False)
    if rows is not None and len(rows):
        n = len(rows)
        frames.append(Columns.of_frame(rows, **routed, kind=KIND_DATA, topic=name, partition=key_group,
                                       offset=np.arange(st.emitted, st.emitted + n, dtype=np.int64),
                                       processing_time_ms=pt))
        st.emitted += n
    frames += results
    if len(split.pass_on):
        frames.append(split.pass_on)
    if reports:
        frames.append(Columns.of_rows(reports))
    st.seq += 1
    frames.append(Columns.of_rows([{"kind": KIND_PUNCTUATION, "topic": name, "partition": key_group,
                                  "offset": st.seq, "punctuation_ms": st.out_watermarks[-1],
                                  "processing_time_ms": pt}]))
    out_frame = conform(frames, spec.output_columns())
    return out_frame, _dump(spec, st, log)
