"""The Dataflow Model on Spark: windows, triggers and accumulation modes as a stateful operator.

:func:`apply_windowing` takes a streaming DataFrame read with ``format("dataflow-kafka")`` and
returns a DataFrame of **panes**. It runs :class:`watermarks.TriggerDriver` inside a
``transformWithStateInPandas`` processor (:class:`keygroups.PunctuatedKeyGroupProcessor`): keys
are hashed into ``num_key_groups`` key groups, each group keeps one driver state blob (all its
keys), and every micro-batch does, per key group::

    advance_processing_time(batch processing time)   # recorded in the source offset
    add(elements of key k, key=k)  for every key k    # in Kafka (topic, partition, offset) order
    advance_watermark(low watermark)                  # min over Kafka partitions' punctuations

Time comes only from rows: event time from the source's timestamp punctuations, processing time
from the batch time the source writes into its offset log. A micro-batch replayed after a crash
therefore sees the same elements, watermark and processing time and fires the same panes.

Output columns (:data:`PANE_SCHEMA`, plus ``window`` and ``timestamp`` as Spark timestamps):

============================  ==================================================================
``kind``                      ``"pane"``, or ``"dropped"`` (a per-key, per-batch drop counter)
``key``                       the key (string)
``window_start_ms``, ``_end`` the pane's window ``[start, end)`` in epoch ms
``value``                     the aggregate as a double (null when it is not a number, e.g. lists)
``value_json``                the aggregate as JSON text (always set for panes; lists, means ...)
``pane_index``                0, 1, 2 ... per window (a merged session continues the numbering)
``timing``                    ``EARLY``, ``ON_TIME`` or ``LATE``
``is_first``, ``is_last``     first pane of the window / window closed (trigger done or GC)
``is_retraction``             this row takes back an earlier pane (ACCUMULATING_AND_RETRACTING)
``timestamp_ms``              output timestamp (:class:`TimestampCombiner`)
``watermark_ms``              the key group's low watermark after the batch
``processing_time_ms``        the batch's processing time
``dropped_late``              ``kind="dropped"`` rows: element copies of this key dropped in this
                              batch because their window was past the allowed lateness
``dropped_closed``            ... because their window's trigger had finished (window closed)
``dropped_null``              ... because the value expression was null
``key_group``, ``seq``        key group, and emission order within the key group's batch output
                              (a retraction comes before the pane replacing it)
============================  ==================================================================

Late data are never dropped silently: every batch in which a key lost elements yields one
``kind = "dropped"`` row for that key with the counts (the pane columns are null). Filter
``kind = "pane"`` for the panes only.

Example::

    from watermarks import FixedWindows, AfterWatermark, AfterCount, AccumulationMode, SumCombiner
    from watermarks.spark import apply_windowing

    src = (spark.readStream.format("dataflow-kafka")
           .option("kafka.bootstrap.servers", "localhost:9092").option("subscribe", "scores")
           .option("eventTimeField", "ts").load())
    panes = apply_windowing(
        src, key="CAST(key AS STRING)",
        value="CAST(get_json_object(CAST(value AS STRING), '$.score') AS LONG)",
        window_fn=FixedWindows(60_000),
        trigger=AfterWatermark(early=AfterCount(100), late=AfterCount(1)),
        accumulation_mode=AccumulationMode.ACCUMULATING,
        allowed_lateness_ms=600_000, combiner=SumCombiner())
    panes.writeStream.format("console").option("checkpointLocation", "/tmp/ck").start()
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Iterator

import pandas as pd

from keygroups import KeyGroupBatch, PunctuatedKeyGroupProcessor, with_key_groups
from watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, TimestampCombiner
from watermarks.driver import TriggerDriver
from watermarks.triggers import Trigger
from watermarks.windows import BEGINNING_OF_TIME_MS, WindowFn
from windowing import AggregateFunction, ToList, Window

__all__ = ["apply_windowing", "WindowingProcessor", "PANE_SCHEMA", "PANE_COLUMNS"]

_KEY, _VALUE = "dataflow_key", "dataflow_value"

#: Schema of the processor's output (``apply_windowing`` adds ``window`` and ``timestamp``).
PANE_SCHEMA = (
    "kind string, key string, window_start_ms long, window_end_ms long, value double, "
    "value_json string, pane_index long, timing string, is_first boolean, is_last boolean, "
    "is_retraction boolean, timestamp_ms long, watermark_ms long, processing_time_ms long, "
    "dropped_late long, dropped_closed long, dropped_null long, key_group int, seq int"
)
PANE_COLUMNS = [c.strip().split(" ")[0] for c in PANE_SCHEMA.split(",")]


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _json(v: Any) -> str:
    try:
        return json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        return json.dumps(repr(v))


class WindowingProcessor(PunctuatedKeyGroupProcessor):
    """One :class:`TriggerDriver` per key group; see the module docstring.

    ``integral_values``: convert values to ``int`` before they reach the combiner (pandas turns
    a nullable integer column into floats).
    """

    def __init__(self, window_fn: Window | WindowFn, trigger: Trigger, accumulation_mode: Any,
                 allowed_lateness_ms: int, timestamp_combiner: Any, combiner: AggregateFunction,
                 on_time_behavior: Any, integral_values: bool, idle_timeout_ms: int | None = None) -> None:
        super().__init__(idle_timeout_ms)
        self.window_fn, self.trigger, self.accumulation_mode = window_fn, trigger, accumulation_mode
        self.allowed_lateness_ms, self.timestamp_combiner = allowed_lateness_ms, timestamp_combiner
        self.combiner, self.on_time_behavior = combiner, on_time_behavior
        self.integral_values = integral_values

    def new_driver(self) -> TriggerDriver:
        with warnings.catch_warnings():  # apply_windowing already warned once, on the driver side
            warnings.simplefilter("ignore")
            return TriggerDriver(self.window_fn, self.trigger, self.accumulation_mode,
                                 self.allowed_lateness_ms, self.timestamp_combiner, self.combiner,
                                 self.on_time_behavior)

    def load(self, blob: bytes | None) -> TriggerDriver:
        driver = self.new_driver()
        if blob is not None:
            driver.load_bytes(blob)
        return driver

    def dump(self, engine: TriggerDriver) -> bytes:
        return engine.to_bytes()

    def on_batch(self, engine: TriggerDriver, batch: KeyGroupBatch) -> Iterator[pd.DataFrame]:
        rows = run_batch(engine, batch.data, batch.low_watermark_ms, batch.processing_time_ms,
                         self.integral_values)
        if rows:
            for i, r in enumerate(rows):
                r["key_group"], r["seq"] = batch.key_group, i
            yield pd.DataFrame(rows, columns=PANE_COLUMNS)


def batch_elements(data: pd.DataFrame, integral_values: bool) -> tuple[list[tuple[Any, list]], dict[Any, int]]:
    """``[(key, [(value, event_time_ms), ...]), ...]`` in order of first appearance, and null counts.

    Rows keep their order (Kafka order); a null key is the key ``None``.
    """
    if data.empty:
        return [], {}
    keys = data[_KEY].astype(object)
    keys = keys.where(keys.notna(), None).tolist()
    values = data[_VALUE]
    present = values.notna().tolist()
    values = values.astype(object).tolist()
    times = data["event_time_ms"].astype("int64").tolist()
    groups: dict[Any, list] = {}
    nulls: dict[Any, int] = {}
    for k, v, ok, t in zip(keys, values, present, times):
        elems = groups.get(k)
        if elems is None:
            elems = groups[k] = []
        if not ok:
            nulls[k] = nulls.get(k, 0) + 1
            continue
        elems.append((int(v) if integral_values else v, t))
    return [(k, e) for k, e in groups.items() if e], nulls


def run_batch(driver: TriggerDriver, data: pd.DataFrame, watermark_ms: int | None,
              processing_time_ms: int | None, integral_values: bool) -> list[dict]:
    """One micro-batch through ``driver``: processing time, elements per key, watermark.

    Returns output rows (dicts of :data:`PANE_COLUMNS` without ``key_group`` / ``seq``).
    """
    panes: list[Pane] = []
    if processing_time_ms is not None:
        panes += driver.advance_processing_time(processing_time_ms)
    elements, nulls = batch_elements(data, integral_values)
    drops: dict[Any, list[int]] = {}
    for key, elems in elements:
        late, closed = driver.dropped_late, driver.dropped_closed
        panes += driver.add(elems, key=key)
        late, closed = driver.dropped_late - late, driver.dropped_closed - closed
        if late or closed or nulls.get(key):
            drops[key] = [late, closed, nulls.get(key, 0)]
    for key, n in nulls.items():
        drops.setdefault(key, [0, 0, n])
    if watermark_ms is not None:
        panes += driver.advance_watermark(watermark_ms)
    wm = None if driver.watermark_ms <= BEGINNING_OF_TIME_MS else driver.watermark_ms
    pt = None if driver.processing_time_ms <= BEGINNING_OF_TIME_MS else driver.processing_time_ms
    rows = []
    for p in panes:
        rows.append({"kind": "pane", "key": p.key, "window_start_ms": p.start_ms, "window_end_ms": p.end_ms,
                     "value": _number(p.value), "value_json": _json(p.value), "pane_index": p.index,
                     "timing": p.timing.name, "is_first": p.is_first, "is_last": p.is_last,
                     "is_retraction": p.is_retraction, "timestamp_ms": p.timestamp_ms,
                     "watermark_ms": wm, "processing_time_ms": pt,
                     "dropped_late": 0, "dropped_closed": 0, "dropped_null": 0})
    for key, (late, closed, null) in drops.items():
        rows.append({"kind": "dropped", "key": key, "watermark_ms": wm, "processing_time_ms": pt,
                     "dropped_late": late, "dropped_closed": closed, "dropped_null": null})
    return rows


_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType", "BooleanType")


def apply_windowing(
    df,
    key: str,
    value: Any,
    window_fn: Window | WindowFn,
    trigger: Trigger,
    accumulation_mode: AccumulationMode | str = AccumulationMode.DISCARDING,
    allowed_lateness_ms: int = 0,
    timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW,
    combiner: AggregateFunction | None = None,
    num_key_groups: int = 8,
    on_time_behavior: OnTimeBehavior | str = OnTimeBehavior.FIRE_ALWAYS,
    idle_timeout_ms: int | None = None,
):
    """Windowing + trigger + accumulation mode over a ``dataflow-kafka`` stream; a DataFrame of panes.

    Parameters
    ----------
    df : DataFrame
        Streaming DataFrame from ``spark.readStream.format("dataflow-kafka")`` (its ``kind``,
        ``event_time``, ``punctuation`` and ``processing_time`` columns drive the operator).
    key : str
        Column name or SQL expression of the key (cast to string), e.g. ``"CAST(key AS STRING)"``.
    value : str or Column
        Column name or SQL expression of the element value fed to the combiner, e.g.
        ``"CAST(get_json_object(CAST(value AS STRING), '$.score') AS LONG)"``. Null values are
        skipped and counted (``dropped_null``).
    window_fn, trigger, accumulation_mode, allowed_lateness_ms, timestamp_combiner, combiner,
    on_time_behavior :
        As :class:`watermarks.TriggerDriver` (``combiner`` default: ``ToList()``).
    num_key_groups : int
        Number of key groups (units of state; at most this many processor tasks).
    idle_timeout_ms : int or None
        Leave Kafka partitions idle for this long (batch processing time) out of the low
        watermark (:class:`watermarks.PunctuationTracker`); default: an idle partition holds it.

    Returns a streaming DataFrame with the columns of :data:`PANE_SCHEMA` plus ``window``
    (struct of ``start``, ``end`` timestamps) and ``timestamp`` (output timestamp); write it with
    output mode ``append``.
    """
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    combiner = combiner if combiner is not None else ToList()
    # Validate eagerly (bad arguments fail here, not in a Python worker) and warn once.
    probe = TriggerDriver(window_fn, trigger, accumulation_mode, allowed_lateness_ms, timestamp_combiner,
                          combiner, on_time_behavior)
    value_col = value if isinstance(value, Column) else F.expr(value)
    keyed = df.withColumn(_KEY, F.expr(key).cast("string")).withColumn(_VALUE, value_col)
    vtype = type(keyed.schema[_VALUE].dataType).__name__
    if vtype == "BooleanType":
        keyed = keyed.withColumn(_VALUE, F.col(_VALUE).cast("long"))
    processor = WindowingProcessor(window_fn, trigger, probe.accumulation_mode, allowed_lateness_ms,
                                   probe.timestamp_combiner, combiner, probe.on_time_behavior,
                                   integral_values=vtype in _INTEGRAL, idle_timeout_ms=idle_timeout_ms)
    keep = ["kind", "topic", "partition", "offset", "timestamp", "modification", _KEY, _VALUE]
    grouped = with_key_groups(keyed.select(*keep, "event_time", "punctuation", "processing_time"),
                              _KEY, num_key_groups)
    panes = grouped.drop("event_time", "punctuation", "processing_time").groupBy("key_group") \
        .transformWithStateInPandas(processor, PANE_SCHEMA, "Append", "None")
    return panes.select(
        *PANE_COLUMNS[:4],
        F.struct(F.timestamp_millis("window_start_ms").alias("start"),
                 F.timestamp_millis("window_end_ms").alias("end")).alias("window"),
        *PANE_COLUMNS[4:12], F.timestamp_millis("timestamp_ms").alias("timestamp"), *PANE_COLUMNS[12:])
