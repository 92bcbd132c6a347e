"""Per stage and micro-batch metrics, where Spark users look for them.

Every stage operator writes, per stage, key group and batch, one ``metrics`` row
(:mod:`keygroups.contract`) whose JSON object holds the **standard metrics** below, beside any
counters of the stage's own (:attr:`keygroups.stage.StageOutput.metrics`):

=====================  ===========================================================================
``watermark_in_ms``    the stage's input low watermark after the batch (null: none yet)
``watermark_out_ms``   its output low watermark (what it promised the next stage)
``records_in``         data records it was given
``records_out``        data records it emitted (retractions included)
``retractions``        emitted records that retract an earlier one (``is_retraction``)
``dropped_<reason>``   records it did not use, by reason (``late``, ``null``, ``closed``, ...)
=====================  ===========================================================================

Every value is a function of the batch and the committed state, so a replayed batch writes the
same row. (A state's size in bytes is not: pickle writes the same state in more or fewer bytes
depending on which objects it shares, so the state size is Spark's own per operator,
``stateOperators`` of the progress, which :func:`progress_metrics` labels with the operator's
stages.)

:meth:`keygroups.Pipeline.apply` folds them per stage with ``DataFrame.observe`` (one observation
per stage, named ``dataflow-kafka:<stage>``): the minimum watermark over key groups (the stage's
watermark), the sums of the counters. They appear in ``StreamingQueryProgress.observedMetrics``,
so a ``StreamingQueryListener`` (and through it any metrics system) sees them;
:func:`progress_metrics` reads them back from a progress, with the consumer lag per source
computed as Spark's Kafka source does (latest offset minus the batch's end offset).
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

__all__ = ["STANDARD", "OBSERVATION_PREFIX", "DROP_REASONS", "stage_metrics", "observe_stages", "progress_metrics"]

#: The standard metrics of every stage (module docstring): name -> how key groups combine.
STANDARD: dict[str, str] = {
    "watermark_in_ms": "min", "watermark_out_ms": "min", "records_in": "sum", "records_out": "sum",
    "retractions": "sum",
}
#: Reasons of dropped records that get a column of their own in the observation (others are
#: counted in ``dropped_other``).
DROP_REASONS = ("late", "null", "closed")
OBSERVATION_PREFIX = "dataflow-kafka:"


def _count(data: Any) -> int:
    if data is None:
        return 0
    try:
        return len(data)
    except TypeError:
        return 0


def _retractions(data: Any) -> int:
    columns = getattr(data, "columns", None)
    if columns is None or "is_retraction" not in columns or not len(data):
        return 0
    return int(data["is_retraction"].fillna(False).astype(bool).sum())


def stage_metrics(data_in: Any, data_out: Any, watermark_in_ms: int | None, watermark_out_ms: int | None,
                  dropped: Iterable[Any], own: Mapping[str, Any] | None) -> dict:
    """One stage's metrics object for one key group and batch: the standard ones, then the
    stage's ``own`` counters (a name of its own that is also a standard name keeps the standard
    value, under ``own_<name>`` for the stage's)."""
    out: dict[str, Any] = {"watermark_in_ms": watermark_in_ms, "watermark_out_ms": watermark_out_ms,
                           "records_in": _count(data_in), "records_out": _count(data_out),
                           "retractions": _retractions(data_out)}
    for d in dropped:
        if d.count:
            name = f"dropped_{d.reason}"
            out[name] = out.get(name, 0) + int(d.count)
    for k, v in (own or {}).items():
        out[f"own_{k}" if k in out else k] = v
    return out


def observe_stages(df, stage_names: Iterable[str], qualifier: str | None = None):
    """``df`` (a pipeline's output) with one ``observe`` per stage folding its ``metrics`` rows:
    watermarks as the minimum over key groups, counters summed (module docstring). Observations
    are named ``dataflow-kafka:<stage>``, or ``dataflow-kafka:<qualifier>:<stage>``."""
    from pyspark.sql import functions as F

    for stage in stage_names:
        mine = (F.col("kind") == "metrics") & (F.col("topic") == F.lit(stage))

        def field(name: str):
            return F.when(mine, F.get_json_object(F.col("metrics"), f"$.{name}").cast("bigint"))

        exprs = [(F.min if how == "min" else F.sum)(field(name)).alias(name) for name, how in STANDARD.items()]
        exprs += [F.coalesce(F.sum(field(f"dropped_{r}")), F.lit(0)).alias(f"dropped_{r}") for r in DROP_REASONS]
        exprs.append(F.count(F.when(mine, 1)).alias("key_groups"))
        name = f"{qualifier}:{stage}" if qualifier else stage
        df = df.observe(f"{OBSERVATION_PREFIX}{name}", *exprs)
    return df


def _as_dict(row: Any) -> dict:
    """An observed metrics row as ``{name: value}``: a ``Row``, a JSON object, or the
    ``{"values": [...], "schema": {...}}`` form a Spark Connect client's progress carries."""
    if row is None:
        return {}
    row = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
    if set(row) == {"values", "schema"} and isinstance(row["schema"], Mapping):
        return {f["name"]: v for f, v in zip(row["schema"].get("fields", []), row["values"])}
    return row


def _offsets(text: Any) -> dict[str, dict[str, int]]:
    """``{topic: {partition: offset}}`` from a source's offset JSON (Spark's Kafka form or ours)."""
    if not text:
        return {}
    obj = json.loads(text) if isinstance(text, str) else text
    parts = obj.get("partitions", obj) if isinstance(obj, dict) else {}
    out: dict[str, dict[str, int]] = {}
    for topic, ps in parts.items():
        if not isinstance(ps, dict):
            continue
        out[topic] = {str(p): int(v["o"] if isinstance(v, dict) else v) for p, v in ps.items()
                      if isinstance(v, (int, dict)) and (not isinstance(v, dict) or "o" in v)}
    return out


def progress_metrics(progress: Any, pipeline: Any = None) -> dict:
    """The metrics of one ``StreamingQueryProgress`` (the object a listener gets, its JSON dict,
    or ``query.lastProgress``)::

        {"batch_id": 7,
         "stages": {stage: {"watermark_in_ms": ..., "watermark_out_ms": ..., "records_in": ...,   # or "<qualifier>:<stage>"
                            "records_out": ..., "retractions": ..., "dropped_late": ..., ...}},
         "state": [{"operator": ("page_windows", "panes"), "key_groups": 2, "memory_bytes": ...,
                    "custom": {...}}],         # Spark's stateOperators, labelled with their stages
         "sources": [{"description": ..., "lag": {topic: {partition: records}}, "max_lag": ...,
                      "total_lag": ...}]}

    The lag is the source's latest offset minus the batch's end offset (Spark's Kafka source
    reports ``maxOffsetsBehindLatest`` alike). ``pipeline``: a chain
    (:class:`keygroups.Pipeline`) whose operators label ``state``; without it (or for a pipeline
    with upstreams) each is labelled by its position."""
    p = progress if isinstance(progress, Mapping) else json.loads(progress.json)
    stages = {name[len(OBSERVATION_PREFIX):]: _as_dict(row) for name, row in (p.get("observedMetrics") or {}).items()
              if name.startswith(OBSERVATION_PREFIX)}
    names: list = []
    if pipeline is not None and pipeline.upstreams is None:
        names = pipeline.state_operators()
    state = [{"operator": names[k] if k < len(names) else (f"operator {k}",), "key_groups": op.get("numRowsTotal"),
              "memory_bytes": op.get("memoryUsedBytes"), "custom": dict(op.get("customMetrics") or {})}
             for k, op in enumerate(p.get("stateOperators") or [])]
    sources = []
    for s in p.get("sources") or []:
        end, latest = _offsets(s.get("endOffset")), _offsets(s.get("latestOffset"))
        lag = {t: {part: max(0, latest[t][part] - o) for part, o in ps.items() if part in latest.get(t, {})}
               for t, ps in end.items()}
        each = [v for ps in lag.values() for v in ps.values()]
        sources.append({"description": s.get("description"), "lag": lag, "max_lag": max(each, default=None),
                        "total_lag": sum(each) if each else None})
    return {"batch_id": p.get("batchId"), "stages": stages, "state": state, "sources": sources}
