"""FlameStream on Spark: optimistic stages and their barrier in one streaming query, to Kafka.

The stages are :class:`~optimistic.stage.OptimisticStage` objects in a :class:`keygroups.Pipeline`
(the stage layer: routing, state, punctuations and modifications are its job, as for every
engine); :func:`build_pipeline` adds what a Kafka pipeline needs on top: the released items as
the dataflow-kafka sink's rows, and the barrier's metrics and any late or error report as JSON
records of ``metrics_topic``::

    src = spark.readStream.format("dataflow-kafka").option("subscribe", "docs") \\
        .option("eventTimeField", "ts").option("kafka.bootstrap.servers", bs).load()
    out = build_pipeline(src, inverted_index_stages(2), decode=decode_doc, output_topic="index",
                         metrics_topic="index-metrics", key_groups=4, fuse_same_key=True)
    out.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bs) \\
        .option("checkpointLocation", ck).start()

To compose with other engines, use :func:`optimistic.stage.optimistic_stages` (a pipeline) and
``.then(...)`` other stages; the barrier then releases into the next stage (``output=`` maps a
payload to typed columns).

How it maps to Spark: one ``mapInPandas`` step decodes the source's records and routes them by
the first stage's key (:func:`keygroups.key_group_of`, the JVM's hash); each operator is one
``transformWithStateInPandas`` processor (``timeMode="None"``: Spark's event-time mode would drop
the late rows optimism repairs; time comes from the source's punctuations). Consecutive stages
keyed alike run fused in one processor (``fuse_same_key=True``; per row checked at run time),
which Spark's native plan (one stateful operator per stage) cannot do. Output records: key =
``Meta.sort_key()`` of the item (unique per item: it deduplicates the at-least-once sink), value =
``encode(payload)``, partition = the barrier's key group modulo ``output_partitions`` (else
Kafka's partitioner on the key).

Metrics records (``metrics_topic``): one JSON object per barrier key group and micro-batch
(see :mod:`optimistic.stage`; cumulative counters plus ``key_group``), and one per ``dropped`` or
``error`` row; :func:`read_metrics` sums the newest record of every key group.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from dataflow_kafka.optimistic.stage import MODES, decode_json, encode_json, optimistic_stages

__all__ = ["MODES", "SINK_SCHEMA", "build_pipeline", "to_sink_rows", "decode_json", "encode_json", "read_metrics"]

SINK_SCHEMA = "key binary, value binary, topic string, partition int"


def build_pipeline(
    source,
    stages: Sequence,
    *,
    output_topic: str,
    mode: str = "optimistic",
    key_groups: int | Sequence[int] = 4,
    decode: Callable[[bytes], Any] = decode_json,
    encode: Callable[[Any], bytes] = encode_json,
    metrics_topic: str | None = None,
    output_partitions: int | None = None,
    fuse_same_key: bool | Sequence[bool] = False,
):
    """The streaming DataFrame of sink rows (``key, value, topic, partition``) for FlameStream
    ``stages`` (``Map``, ``Grouping``, ``StatefulMap``) over ``source`` (the dataflow-kafka source;
    a record's payload is ``decode(value)``, its event time the source's ``event_time``).

    ``mode``: ``"optimistic"`` (stages at once, tombstones, one barrier) or ``"buffered"`` (a sort
    buffer before each stage). ``key_groups``: one int or one per order-sensitive stage.
    ``fuse_same_key``: run consecutive stages with the same number of key groups in one processor
    (their keys must agree): ``True`` for every link, or one bool per link between consecutive
    order-sensitive stages. ``output_partitions``: write key group ``g`` to partition
    ``g % output_partitions``.
    """
    pipe = optimistic_stages(stages, mode=mode, key_groups=key_groups, decode=decode, encode=encode,
                             fuse_same_key=fuse_same_key, metrics=metrics_topic is not None)
    return to_sink_rows(pipe.apply(source), output_topic, metrics_topic, output_partitions)


def to_sink_rows(df, output_topic: str, metrics_topic: str | None = None, output_partitions: int | None = None):
    """Rows of an optimistic pipeline's output (stage-layer contract) as dataflow-kafka sink rows:
    data rows to ``output_topic``; metrics, dropped and error rows as JSON to ``metrics_topic``."""
    from pyspark.sql import functions as F

    part = (F.pmod(F.col("partition"), F.lit(output_partitions)) if output_partitions
            else F.lit(None)).cast("int")
    data = F.col("kind") == "data"
    report = F.to_json(F.struct(*[F.col(c) for c in ("kind", "topic", "partition", "processing_time_ms",
                                                      "dropped_key", "dropped_reason", "dropped_count", "error")]))
    value = F.when(data, F.col("value")).when(F.col("kind") == "metrics", F.col("metrics").cast("binary")) \
        .otherwise(report.cast("binary"))
    kinds = ["data"] + (["metrics", "dropped", "error"] if metrics_topic else [])
    return (df.where(F.col("kind").isin(*kinds))
            .select(F.when(data, F.col("key")).otherwise(F.col("partition").cast("string").cast("binary")).alias("key"),
                    value.alias("value"),
                    F.when(data, F.lit(output_topic)).otherwise(F.lit(metrics_topic)).alias("topic"),
                    F.when(data, part).otherwise(F.lit(None).cast("int")).alias("partition")))


def read_metrics(records: Sequence[Any]) -> dict:
    """Query-wide metrics from metrics-topic records (objects with ``.value()`` or dicts): the
    newest record per key group, cumulative counters summed, ``replay_ratio`` recomputed;
    ``late_reports``: items the barrier reported late (``dropped`` records)."""
    newest: dict[int, dict] = {}
    late = 0
    for r in records:
        m = json.loads(r.value()) if hasattr(r, "value") and callable(r.value) else r
        if m.get("kind") in ("dropped", "error"):
            late += m.get("dropped_count") or 0
            continue
        if "key_group" not in m:
            continue            # another stage's metrics row (keygroups.metrics), not a barrier's counters
        kg = m["key_group"]
        if kg not in newest or (m["processing_time_ms"] or 0, m["released"]) >= (
                newest[kg]["processing_time_ms"] or 0, newest[kg]["released"]):
            newest[kg] = m
    total = {k: sum(m[k] for m in newest.values())
             for k in ("items_in", "tombstones_in", "released", "early_tombstones", "late_items",
                       "late_tombstones", "buffer", "max_buffer")}
    arrived = total["items_in"] + total["tombstones_in"]
    total["replay_ratio"] = arrived / total["released"] if total["released"] else None
    total["lag_max_ms"] = max((m["lag_max_ms"] for m in newest.values()), default=0)
    total["key_groups"] = len(newest)
    total["late_reports"] = late
    return total
