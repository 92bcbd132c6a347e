"""The state of a stopped query, for people: per stage and key, the open windows, slices, held
records and watermarks.

Each stage operator keeps one Spark value state per key group (``operator``: the key group's
tracker, its stages' states and output watermarks, :mod:`keygroups.operator`). Spark's state data
source reads it (``spark.read.format("statestore").option("operatorId", k)
.option("stateVarName", "operator").load(checkpoint)``: one row per key group, the state as
bytes); :func:`read_state` does that for every operator of the checkpoint, decodes each key
group's state with the pipeline's stages and asks each stage to describe its part
(:meth:`keygroups.Stage.describe_state`).

Which Spark operator is which: Spark numbers stateful operators from the sink towards the source;
each key group's tracker names the senders of its punctuations (Kafka partitions ``topic-p`` for
an operator reading the source, ``<stage>-<key group>`` for one after another operator), which
identifies the operator before it, so the mapping is read from the state itself and checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.keygroups.operator import OperatorSpec, load_operator_state
from dataflow_kafka.keygroups.punctuation import InputWatermarks

__all__ = ["StateView", "read_state", "describe_operator"]

STATE_NAME = "operator"            # the value state every StageProcessor keeps (keygroups.processor)
ITEM_COLUMNS = ["operator", "stage", "key_group", "key", "item", "start_ms", "end_ms", "count", "detail"]
WATERMARK_COLUMNS = ["operator", "stage", "key_group", "watermark_in_ms", "watermark_out_ms", "senders"]


@dataclass
class StateView:
    """A checkpoint's state, as two tables (pandas): ``items`` (one row per window, slice, held
    record group, ... of a stage and key: ``operator``, ``stage``, ``key_group``, ``key``,
    ``item``, ``start_ms``, ``end_ms``, ``count``, ``detail``) and ``watermarks`` (per stage and
    key group: its input and output low watermarks; ``senders``: the newest punctuation of each
    sender, on the operator's first stage). ``batch_id``: the batch whose committed state this is."""

    items: pd.DataFrame
    watermarks: pd.DataFrame
    batch_id: int | None

    def of(self, stage: str) -> pd.DataFrame:
        """The items of one stage."""
        return self.items[self.items["stage"] == stage].reset_index(drop=True)


def _senders(state) -> dict[str, Any]:
    tracker = state.tracker
    if isinstance(tracker, InputWatermarks):
        return {f"{name}/{s}": v for name, t in tracker.trackers.items() for s, v in t.source_punctuations().items()}
    return tracker.source_punctuations()


def describe_operator(spec: OperatorSpec, key_group: int, blob: bytes) -> tuple[list[dict], list[dict]]:
    """One key group's committed state of operator ``spec``: ``(items, watermarks)`` rows
    (:class:`StateView`'s columns)."""
    st = load_operator_state(spec, blob)
    op = " > ".join(str(s.name) for s in spec.stages)
    items: list[dict] = []
    marks: list[dict] = []
    wm_in = st.tracker.low_watermark_ms
    for i, (stage, state) in enumerate(zip(spec.stages, st.states)):
        for row in stage.describe_state(state):
            items.append({"operator": op, "stage": str(stage.name), "key_group": key_group, **row})
        marks.append({"operator": op, "stage": str(stage.name), "key_group": key_group, "watermark_in_ms": wm_in,
                      "watermark_out_ms": st.out_watermarks[i], "senders": _senders(st) if i == 0 else None})
        wm_in = st.out_watermarks[i]
    return items, marks


def _upstreams_of(senders: dict[str, Any], names: set[str]) -> set[str | None]:
    """The operators whose key groups sent these punctuations (None: the source's partitions)."""
    out: set[str | None] = set()
    for s in senders:
        stage = s.split("/", 1)[-1].rsplit("-", 1)[0]
        out.add(stage if stage in names else None)
    return out


def _expected_upstreams(pipeline: Any, fuse: bool) -> list[tuple[OperatorSpec, set]]:
    """Every operator of the query with the operators (by name) that may send it punctuations:
    the previous one of its chain, the last ones of its upstream pipelines, or the source (None)."""
    out: list[tuple[OperatorSpec, set]] = []
    last: dict[int, str] = {}
    for node in pipeline.nodes():
        specs = node.specs(fuse)
        ups = node.upstreams
        first = {None} if ups is None else {last[id(u)] if u is not None else None for u in ups.values()}
        for j, spec in enumerate(specs):
            out.append((spec, first if j == 0 else {specs[j - 1].name}))
        last[id(node)] = specs[-1].name
    return out


def _match(expected: list[tuple[OperatorSpec, set]], decoded: dict[int, list[tuple[int, bytes]]]
           ) -> dict[int, OperatorSpec]:
    """Spark operator id -> the spec it runs, read from each operator's senders (module docstring)."""
    names = {spec.name for spec, _ in expected}
    out: dict[int, OperatorSpec] = {}
    for op_id, rows in decoded.items():
        fits, senders = [], {}
        for spec, ups in expected:
            try:
                st = load_operator_state(spec, rows[0][1])       # the stage count and codecs must fit
            except Exception:  # noqa: BLE001 - another operator's state: not this spec
                continue
            senders = _senders(st)
            if _upstreams_of(senders, names) <= ups:
                fits.append(spec)
        if len(fits) != 1:
            raise InvalidArgumentError(
                f"read_state: Spark operator {op_id} of the checkpoint matches {len(fits)} operators of this pipeline "
                f"(its punctuations come from {sorted(senders)[:4]}; the pipeline's operators: {sorted(names)}): "
                "is it the pipeline the checkpoint was written by?")
        out[op_id] = fits[0]
    return out


def read_state(checkpoint: str, pipeline: Any, spark: Any = None, batch_id: int | None = None,
               fuse: bool = True) -> StateView:
    """The committed state of the query that ``pipeline`` (the :class:`keygroups.Pipeline` applied
    to the query, with its upstreams) wrote to ``checkpoint``, after ``batch_id`` (default: the last committed
    batch), read with Spark's state data source in ``spark`` (a classic session; default: the
    active one). See :class:`StateView`."""
    from pyspark.sql import SparkSession

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise InvalidArgumentError("read_state: no active SparkSession; pass spark=")
    meta = spark.read.format("state-metadata").load(checkpoint).collect()
    ours = [r for r in meta if STATE_NAME in (r["operatorProperties"] or "")]
    if not ours:
        raise InvalidArgumentError(f"read_state: {checkpoint!r} holds no stage operator state (operators: "
                                   f"{[r['operatorName'] for r in meta]})")
    decoded: dict[int, list[tuple[int, bytes]]] = {}
    for r in ours:
        reader = spark.read.format("statestore").option("operatorId", r["operatorId"]).option("stateVarName", STATE_NAME)
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        rows = reader.load(checkpoint).select("key.key_group", "value.blob").collect()
        decoded[r["operatorId"]] = sorted((int(k), bytes(b)) for k, b in rows if b is not None)
    decoded = {k: v for k, v in decoded.items() if v}
    mapping = _match(_expected_upstreams(pipeline, fuse), decoded)
    items: list[dict] = []
    marks: list[dict] = []
    for op_id in sorted(decoded, reverse=True):                 # source first
        for kg, blob in decoded[op_id]:
            its, ms = describe_operator(mapping[op_id], kg, blob)
            items += its
            marks += ms
    last = batch_id if batch_id is not None else max((r["maxBatchId"] for r in ours), default=None)
    return StateView(pd.DataFrame(items, columns=ITEM_COLUMNS), pd.DataFrame(marks, columns=WATERMARK_COLUMNS), last)
