"""FlameStream on Spark: optimistic stages and one barrier as ``transformWithStateInPandas`` processors.

Build the whole pipeline with :func:`build_pipeline`; write the result with the dataflow-kafka sink::

    src = spark.readStream.format("dataflow-kafka").option("subscribe", "docs") \\
        .option("eventTimeField", "ts").option("kafka.bootstrap.servers", bs).load()
    out = build_pipeline(src, inverted_index_stages(2), decode=decode_doc, output_topic="index",
                         metrics_topic="index-metrics", key_groups=4)
    out.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bs) \\
        .option("checkpointLocation", ck).start()

How stages map to Spark (one query)
-----------------------------------
Spark 4.3 accepts several ``transformWithStateInPandas`` operators chained in one streaming query
with ``timeMode="None"`` and output mode Append (checked: a two-operator chain runs and keeps
state across micro-batches), so the whole pipeline is **one query**, with no Kafka topic between
stages. The stage list is cut into *segments*: every order-sensitive stage (``Grouping``,
``StatefulMap``) starts one, and the stateless ``Map`` stages after it run in the same processor.

1. **ingest** (``mapInPandas``, stateless): source data rows become source items
   ``Meta(event_time_ms, kafka_partition, offset, ())``; the leading ``Map`` stages run; every item
   is routed to a key group of the first segment by ``stage.key(payload)``.
2. **one processor per segment** (``groupBy("key_group").transformWithStateInPandas(...,
   "Append", "None")``, a :class:`keygroups.PunctuatedKeyGroupProcessor`): its
   :class:`~optimistic.replay.KeyedState` is one value per key group; it processes the batch's
   items and tombstones at once (:meth:`Stage.process`), runs the following maps and routes the
   outputs by the next stage's key.
3. **the barrier**, fused into the last segment's processor: one :class:`~optimistic.barrier.Barrier`
   per key group of the last stage. An item and all its tombstones are emitted by the same key
   group (the one holding the key's log), so they meet without another shuffle; the barrier
   partitioned like this is still the only thing that waits, and releases what is valid below the
   key group's low watermark. (A first version had the barrier as a separate processor behind a
   shuffle by order key: one more Python operator per micro-batch made every batch slower. It
   remains, :class:`BarrierProcessor`, for pipelines without an order-sensitive stage.)
4. the released items are rows ``key = Meta.sort_key()``, ``value = encode(payload)`` for the
   dataflow-kafka sink, plus one metrics row per barrier key group and batch (``metrics_topic``).

Spark's ``EventTime`` mode is not used: it drops input rows behind Spark's watermark, exactly the
late rows optimism repairs. Time is driven only by the source's punctuations, carried as rows.

Markers through the stages (data-trace types)
---------------------------------------------
Rows between processors have one schema (:data:`INTER_SCHEMA`) and two kinds. A ``data`` row
carries, in ``items``, every item and tombstone one sender (the ingest task or an upstream key
group) sends to one key group in this micro-batch, as one pickled list of plain tuples
``(time_ms, source, offset, path, payload, tombstone)`` (a tombstone carries the payload of the
item it cancels). ``punctuation`` rows are markers.

- The source emits one punctuation per Kafka partition and micro-batch; ingest copies it to
  **every** key group of the first segment (a hash splitter sends every marker to all channels).
- Every processor folds the markers it received into a low watermark ``w`` = min over its upstream
  channels (Kafka partitions for the first segment, upstream key groups after that), using the
  base class's :class:`~watermarks.PunctuationTracker` (sources are named ``topic-partition``;
  a stage's markers use ``topic = "s<i>"`` and ``partition = <its key group>``).
- After processing the batch, a segment forwards its progress: one marker with ``w`` to every key
  group downstream. This is valid because every item it emits later, and every tombstone, derives
  from an input at or above ``w`` (a late input at ``t >= w`` replays entries at ``>= t`` only)
  and keeps its event time. It also collects garbage below ``w``.
- Each processor gets a marker from every upstream channel in every micro-batch, so every key
  group of every segment runs in every batch. The barrier of a last-stage key group releases
  below that key group's low watermark (min over the previous stage's key groups).

Within one query all processors see a micro-batch in the same batch, so the markers carry the
source's low watermark unchanged; the marker machinery is what makes the same processors correct
when stages are split over queries connected by Kafka topics (not needed here).

Modes (the same stage objects in every mode)
--------------------------------------------
- ``"optimistic"``: as above.
- ``"buffered"``: baseline (a), FlameStream's buffered scheme driven by our punctuations. Each
  segment holds a sort buffer (a :class:`Barrier` that never sees a tombstone) in front of its
  stage, releases below ``w``, applies the stage in order (never replays) and forwards ``w``.
  There is no barrier; the last segment writes the sink rows.
- ``"native"``: baseline (b), what a Spark user writes today: ``withWatermark("event_time",
  delay)`` and, per stage, ``transformWithStateInPandas(..., timeMode="EventTime")`` that buffers
  its input and registers an event-time timer at the smallest buffered event time; when Spark's
  watermark passes it, the buffer below the watermark is sorted and applied. Stages are chained
  with ``eventTimeColumnName="event_time"``. Rows behind Spark's watermark never reach the
  processors (Spark drops them and counts them in ``numRowsDroppedByWatermark``), so ``delay``
  must cover the disorder.

Metrics (``metrics_topic``, optimistic mode)
--------------------------------------------
One JSON record per barrier key group and micro-batch (key ``b"<key group>"``): ``key_group``,
``processing_time_ms`` (of the batch), ``low_watermark_ms``, cumulative ``items_in``,
``tombstones_in``, ``released``, ``replay_ratio`` (``(items_in + tombstones_in) / released``),
``early_tombstones``, ``late_items``, ``late_tombstones``; ``buffer`` (items held after the
batch), ``max_buffer``; release lag in ms of processing time between an item's arrival at the
barrier and its release: ``batch_released``, ``batch_lag_mean_ms``, ``lag_max_ms``.
Sum the cumulative counters of the newest record of every key group for a query-wide ratio
(:func:`read_metrics`).
"""

from __future__ import annotations

import json
import math
import pickle
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator, Sequence

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from keygroups import KeyGroupBatch, PunctuatedKeyGroupProcessor
from optimistic.barrier import Barrier
from optimistic.order import Item, Meta
from optimistic.replay import KeyedState
from optimistic.stages import Map, Stage

__all__ = [
    "INTER_SCHEMA",
    "SINK_SCHEMA",
    "MODES",
    "Segment",
    "segments_of",
    "route",
    "build_pipeline",
    "OptimisticStageProcessor",
    "BufferedStageProcessor",
    "BarrierProcessor",
    "NativeStageProcessor",
    "decode_json",
    "encode_json",
    "read_metrics",
]

MODES = ("optimistic", "buffered", "native")

INTER_SCHEMA = (
    "key_group int, kind string, topic string, partition int, offset long, timestamp timestamp, "
    "modification string, punctuation_ms long, processing_time_ms long, items binary"
)
"""Rows between processors. The columns ``kind, topic, partition, offset, timestamp,
modification, punctuation_ms, processing_time_ms`` follow the source's row contract, so
:class:`keygroups.PunctuatedKeyGroupProcessor` reads markers exactly as source punctuations."""

NATIVE_SCHEMA = ("key_group int, event_time timestamp, event_time_ms long, sort_key binary, payload binary")
SINK_SCHEMA = "key binary, value binary, topic string, partition int"


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
    """Default payload encoder for the sink: compact JSON (tuples become arrays)."""
    return json.dumps(payload, separators=(",", ":")).encode()


def route(key: Hashable, n: int) -> int:
    """Key group of ``key`` among ``n``: CRC-32 of its pickle, so identical on every executor and
    run (keys must pickle deterministically: str, int, bytes, tuples of these)."""
    return zlib.crc32(pickle.dumps(key, protocol=4)) % n


def _barrier_route(sort_key: bytes, n: int) -> int:
    return zlib.crc32(sort_key) % n


@dataclass(frozen=True)
class Segment:
    """One order-sensitive stage and the stateless maps that follow it (one Spark processor)."""

    stage: Stage
    maps: tuple[Map, ...] = ()


def segments_of(stages: Sequence[Stage]) -> tuple[tuple[Map, ...], list[Segment]]:
    """Cut ``stages`` into the leading maps (run at ingest) and one segment per order-sensitive stage."""
    leading: list[Map] = []
    segments: list[Segment] = []
    for s in stages:
        if s.order_sensitive:
            segments.append(Segment(s))
        elif segments:
            last = segments[-1]
            segments[-1] = Segment(last.stage, last.maps + (s,))
        else:
            leading.append(s)
    return tuple(leading), segments


def _apply_maps(maps: Sequence[Map], items: list[Item]) -> list[Item]:
    for m in maps:
        items = m.process(None, items)
    return items


# -- row building --------------------------------------------------------------------------------

class _Rows:
    """Accumulates the inter-processor rows of one batch, then builds a typed DataFrame once.

    Items are not one row each: all items one sender sends to one key group travel as **one**
    ``data`` row whose ``items`` column is a pickled list of plain tuples
    ``(time_ms, source, offset, path, payload, tombstone)`` (:func:`_flat`). A micro-batch then
    ships a handful of rows per key group instead of one per item, and a receiver unpickles one
    blob per sender instead of decoding a sort key and a payload per item. ``topic`` and
    ``partition`` of such a row name the sender (``"ingest"``/``-1`` or ``"s<i>"``/key group).
    """

    def __init__(self, processing_time_ms: int | None, topic: str, partition: int) -> None:
        self.pt, self.topic, self.partition = processing_time_ms, topic, partition
        self.batches: dict[int, list[tuple]] = {}
        self.markers: list[tuple[int, str, int, int | None, int | None]] = []

    def item(self, kg: int, item: Item) -> None:
        self.batches.setdefault(kg, []).append(_flat(item))

    def marker(self, kg: int, topic: str, partition: int, offset: int | None, bound_ms: int | None) -> None:
        self.markers.append((kg, topic, partition, offset, bound_ms))

    def frame(self) -> pd.DataFrame:
        kgs = list(self.batches)
        n_data, n = len(kgs), len(kgs) + len(self.markers)
        m = self.markers
        return pd.DataFrame({
            "key_group": pd.array(kgs + [r[0] for r in m], dtype="Int32"),
            "kind": ["data"] * n_data + ["punctuation"] * len(m),
            "topic": [self.topic] * n_data + [r[1] for r in m],
            "partition": pd.array([self.partition] * n_data + [r[2] for r in m], dtype="Int32"),
            "offset": pd.array(list(range(n_data)) + [r[3] for r in m], dtype="Int64"),
            "timestamp": pd.Series([pd.NaT] * n, dtype="datetime64[us]"),
            "modification": [None] * n,
            "punctuation_ms": pd.array([None] * n_data + [r[4] for r in m], dtype="Int64"),
            "processing_time_ms": pd.array([self.pt] * n, dtype="Int64"),
            "items": [pickle.dumps(self.batches[kg], protocol=5) for kg in kgs] + [None] * len(m),
        })


def _flat(item: Item) -> tuple:
    m = item.meta
    return (m[0], m[1], m[2], m[3], item.payload, bool(item.tombstone))


_new = tuple.__new__  # builds Meta and Item without NamedTuple's argument handling (hot path)


def _items_of(data: pd.DataFrame) -> list[Item]:
    """The items of ``data`` rows (see :class:`_Rows`), in row order."""
    out: list[Item] = []
    for blob in data["items"]:
        out.extend(_new(Item, (_new(Meta, (t, s, o, p)), payload, tomb))
                   for t, s, o, p, payload, tomb in pickle.loads(blob))
    return out


@dataclass(frozen=True)
class _Router:
    """Where a processor sends its outputs: the next segment's key groups or the barrier's."""

    key: Callable[[Any], Hashable] | None  # next stage's key; None: route by order key (barrier)
    n: int

    def __call__(self, item: Item) -> int:
        if self.key is None:
            return _barrier_route(item.meta.sort_key(), self.n)
        return route(self.key(item.payload), self.n)


# -- ingest ---------------------------------------------------------------------------------------

def _ingest_fn(maps: tuple[Map, ...], router: _Router, decode: Callable[[bytes], Any]):
    def ingest(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in frames:
            pt = pdf["processing_time_ms"].max() if len(pdf) else None
            rows = _Rows(None if pt is None or pd.isna(pt) else int(pt), "ingest", -1)
            data = pdf[pdf["kind"] == "data"]
            items = [Item.source(int(t), int(p), int(o), decode(bytes(v)))
                     for t, p, o, v in zip(data["event_time_ms"], data["partition"], data["offset"], data["value"])]
            for item in _apply_maps(maps, items):
                rows.item(router(item), item)
            puncts = pdf[pdf["kind"] == "punctuation"]
            for topic, part, off, w in zip(puncts["topic"], puncts["partition"], puncts["offset"],
                                           puncts["punctuation_ms"]):
                for kg in range(router.n):
                    rows.marker(kg, str(topic), int(part), None if pd.isna(off) else int(off),
                                None if pd.isna(w) else int(w))
            yield rows.frame()
    return ingest


def _ingest(src, maps, router, decode):
    from pyspark.sql import functions as F

    cols = (src.where(F.col("kind").isin("data", "punctuation"))
            .select("kind", "topic", "partition", "offset", "value",
                    F.unix_millis("event_time").alias("event_time_ms"),
                    F.unix_millis("punctuation").alias("punctuation_ms"),
                    F.unix_millis("processing_time").alias("processing_time_ms")))
    return cols.mapInPandas(_ingest_fn(maps, router, decode), INTER_SCHEMA)


# -- processors -----------------------------------------------------------------------------------

class _SegmentProcessor(PunctuatedKeyGroupProcessor):
    """Shared by the optimistic and buffered segments: state = (stage state, buffer, seq).

    With ``sink`` set the processor is the last one and writes sink rows itself: the optimistic
    one through its :class:`Barrier` (the barrier fused into the last stage, partitioned as it
    is: an item and its tombstones are emitted by the same key group), the buffered one directly.
    """

    def __init__(self, index: int, segment: Segment, router: _Router | None, sink: "_SinkSpec | None" = None,
                 metrics_topic: str | None = None) -> None:
        super().__init__(idle_timeout_ms=None)
        self.index, self.segment, self.router = index, segment, router
        self.sink, self.metrics_topic = sink, metrics_topic

    def load(self, blob: bytes | None):
        if blob is None:
            return {"state": self.segment.stage.open_state(), "buffer": Barrier(), "seq": 0}
        state, buffer, seq = pickle.loads(blob)
        return {"state": KeyedState.from_bytes(state), "buffer": Barrier.from_bytes(buffer), "seq": seq}

    def dump(self, engine) -> bytes:
        return pickle.dumps((engine["state"].to_bytes(), engine["buffer"].to_bytes(), engine["seq"]), protocol=5)

    def _process(self, engine, items: list[Item], w: int | None, now: int) -> list[Item]:
        raise NotImplementedError

    def _to_sink(self, engine, out: list[Item], batch: KeyGroupBatch) -> pd.DataFrame | None:
        raise NotImplementedError

    def on_batch(self, engine, batch: KeyGroupBatch) -> Iterator[pd.DataFrame]:
        stage = self.segment.stage
        w, now = batch.low_watermark_ms, batch.processing_time_ms or 0
        out = _apply_maps(self.segment.maps, self._process(engine, _items_of(batch.data), w, now))
        if w is not None:
            stage.collect_garbage(engine["state"], w)
        if self.sink is not None:
            frame = self._to_sink(engine, out, batch)
            if frame is not None:
                yield frame
            return
        engine["seq"] += 1
        name = f"s{self.index}"
        rows = _Rows(batch.processing_time_ms, name, batch.key_group)
        for item in out:
            rows.item(self.router(item), item)
        for kg in range(self.router.n):
            rows.marker(kg, name, batch.key_group, engine["seq"], w)
        yield rows.frame()


class OptimisticStageProcessor(_SegmentProcessor):
    """An order-sensitive stage applied at once to every item and tombstone (replays, no waiting);
    the last one also holds the barrier of its key group."""

    def _process(self, engine, items: list[Item], w: int | None, now: int) -> list[Item]:
        return self.segment.stage.process(engine["state"], items)

    def _to_sink(self, engine, out: list[Item], batch: KeyGroupBatch) -> pd.DataFrame | None:
        return _release(engine["buffer"], out, batch, self.sink, self.metrics_topic)


class BufferedStageProcessor(_SegmentProcessor):
    """Baseline (a): a sort buffer before the stage, released below the low watermark ``w``."""

    def _process(self, engine, items: list[Item], w: int | None, now: int) -> list[Item]:
        buffer: Barrier = engine["buffer"]
        buffer.insert_all(items, now)
        released = buffer.punctuate(w, now) if w is not None else []
        return self.segment.stage.process(engine["state"], released)

    def _to_sink(self, engine, out: list[Item], batch: KeyGroupBatch) -> pd.DataFrame | None:
        return self.sink.frame(out, batch.key_group) if out else None  # empty object columns break Arrow


@dataclass(frozen=True)
class _SinkSpec:
    topic: str
    encode: Callable[[Any], bytes]
    partitions: int | None = None  # output partition = key group % partitions (None: by key)

    def frame(self, items: list[Item], key_group: int, extra: list[tuple[bytes, bytes, str]] = ()) -> pd.DataFrame:
        part = None if self.partitions is None else key_group % self.partitions
        keys = [i.meta.sort_key() for i in items] + [k for k, _, _ in extra]
        values = [self.encode(i.payload) for i in items] + [v for _, v, _ in extra]
        topics = [self.topic] * len(items) + [t for _, _, t in extra]
        parts = [part] * len(items) + [None] * len(extra)
        return pd.DataFrame({"key": keys, "value": values, "topic": topics,
                             "partition": pd.array(parts, dtype="Int32")})


def _release(barrier: Barrier, items: list[Item], batch: KeyGroupBatch, sink: _SinkSpec,
             metrics_topic: str | None) -> pd.DataFrame | None:
    """Insert ``items`` into the barrier, release below the batch's low watermark, and build the
    sink rows: released items, then the metrics record of this key group and batch."""
    now = batch.processing_time_ms or 0
    barrier.insert_all(items, now)
    c = barrier.counters
    lag_before, released_before = c.lag_sum, c.released
    out = barrier.punctuate(batch.low_watermark_ms, now) if batch.low_watermark_ms is not None else []
    extra = []
    if metrics_topic is not None:
        n = c.released - released_before
        m = {"key_group": batch.key_group, "processing_time_ms": batch.processing_time_ms,
             "low_watermark_ms": batch.low_watermark_ms, "items_in": c.items_in,
             "tombstones_in": c.tombstones_in, "released": c.released,
             "replay_ratio": c.replay_ratio if math.isfinite(c.replay_ratio) else None,
             "early_tombstones": c.early_tombstones, "late_items": c.late_items,
             "late_tombstones": c.late_tombstones, "buffer": len(barrier), "max_buffer": c.max_buffer,
             "batch_released": n, "batch_lag_mean_ms": (c.lag_sum - lag_before) / n if n else None,
             "lag_max_ms": c.lag_max}
        extra.append((str(batch.key_group).encode(), json.dumps(m).encode(), metrics_topic))
    return sink.frame(out, batch.key_group, extra) if out or extra else None


class BarrierProcessor(PunctuatedKeyGroupProcessor):
    """A stand-alone barrier (one :class:`Barrier` per key group) for pipelines without an
    order-sensitive stage; otherwise the barrier is fused into the last stage's processor."""

    def __init__(self, sink: _SinkSpec, metrics_topic: str | None = None) -> None:
        super().__init__(idle_timeout_ms=None)
        self.sink, self.metrics_topic = sink, metrics_topic

    def load(self, blob: bytes | None) -> Barrier:
        return Barrier() if blob is None else Barrier.from_bytes(blob)

    def dump(self, engine: Barrier) -> bytes:
        return engine.to_bytes()

    def on_batch(self, engine: Barrier, batch: KeyGroupBatch) -> Iterator[pd.DataFrame]:
        frame = _release(engine, _items_of(batch.data), batch, self.sink, self.metrics_topic)
        if frame is not None:
            yield frame


# -- native baseline ------------------------------------------------------------------------------

class NativeStageProcessor(StatefulProcessor):
    """Baseline (b): Spark's event-time watermark and timers decide when a stage may apply its
    buffered input (``timeMode="EventTime"``). State per key group: the stage state, the buffer
    and the registered timer."""

    def __init__(self, segment: Segment, router: _Router | None, sink: _SinkSpec | None = None) -> None:
        self.segment, self.router, self.sink = segment, router, sink

    def init(self, handle: StatefulProcessorHandle) -> None:
        from pyspark.sql.types import BinaryType, LongType, StructField, StructType

        self._handle = handle
        self._state = handle.getValueState("native", StructType([
            StructField("engine", BinaryType()), StructField("buffer", BinaryType()),
            StructField("timer", LongType())]))

    def _load(self):
        if self._state.exists():
            eng, buf, timer = self._state.get()
            return KeyedState.from_bytes(bytes(eng)), Barrier.from_bytes(bytes(buf)), timer
        return self.segment.stage.open_state(), Barrier(), None

    def _save(self, state, buffer, timer) -> None:
        self._state.update((state.to_bytes(), buffer.to_bytes(), timer))

    def _retime(self, buffer: Barrier, timer):
        first = buffer._slots[0].meta.time_ms if len(buffer) else None
        if first != timer:
            if timer is not None:
                self._handle.deleteTimer(int(timer))
            if first is not None:
                self._handle.registerTimer(int(first))
        return first

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        pdf = pd.concat(list(rows), ignore_index=True)
        state, buffer, timer = self._load()
        items = [Item(Meta.from_sort_key(bytes(k)), pickle.loads(bytes(p)), False)
                 for k, p in zip(pdf["sort_key"], pdf["payload"])]
        buffer.insert_all(items)
        timer = self._retime(buffer, timer)
        self._save(state, buffer, timer)
        return iter(())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        state, buffer, timer = self._load()
        wm = timerValues.getCurrentWatermarkInMs()
        released = buffer.punctuate(wm + 1)   # Spark drops rows at or below its watermark
        out = _apply_maps(self.segment.maps, self.segment.stage.process(state, released))
        self.segment.stage.collect_garbage(state, wm + 1)
        timer = None  # the expired timer is gone
        timer = self._retime(buffer, timer)
        self._save(state, buffer, timer)
        kg = int(key[0])
        if not out:
            return
        if self.sink is not None:
            yield self.sink.frame(out, kg)
            return
        yield pd.DataFrame({
            "key_group": pd.array([self.router(i) for i in out], dtype="Int32"),
            "event_time": pd.to_datetime([i.meta.time_ms for i in out], unit="ms"),
            "event_time_ms": pd.array([i.meta.time_ms for i in out], dtype="Int64"),
            "sort_key": [i.meta.sort_key() for i in out],
            "payload": [pickle.dumps(i.payload, protocol=5) for i in out],
        })

    def close(self) -> None:
        pass


def _native_ingest_fn(maps: tuple[Map, ...], router: _Router, decode: Callable[[bytes], Any]):
    def ingest(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in frames:
            data = pdf[pdf["kind"] == "data"]
            items = [Item.source(int(t), int(p), int(o), decode(bytes(v)))
                     for t, p, o, v in zip(data["event_time_ms"], data["partition"], data["offset"], data["value"])]
            out = _apply_maps(maps, items)
            if not out:
                continue
            yield pd.DataFrame({
                "key_group": pd.array([router(i) for i in out], dtype="Int32"),
                "event_time": pd.to_datetime([i.meta.time_ms for i in out], unit="ms"),
                "event_time_ms": pd.array([i.meta.time_ms for i in out], dtype="Int64"),
                "sort_key": [i.meta.sort_key() for i in out],
                "payload": [pickle.dumps(i.payload, protocol=5) for i in out],
            })
    return ingest


# -- the pipeline ---------------------------------------------------------------------------------

def build_pipeline(
    source,
    stages: Sequence[Stage],
    *,
    output_topic: str,
    mode: str = "optimistic",
    key_groups: int | Sequence[int] = 4,
    decode: Callable[[bytes], Any] = decode_json,
    encode: Callable[[Any], bytes] = encode_json,
    metrics_topic: str | None = None,
    output_partitions: int | None = None,
    native_delay_ms: int = 0,
):
    """The streaming DataFrame of sink rows (``key, value, topic, partition``) for ``stages``.

    ``source``: ``spark.readStream.format("dataflow-kafka")...load()``; the payload of a record is
    ``decode(value)`` and its event time the source's ``event_time``. ``key_groups``: one int for
    every processor, or one per order-sensitive stage (the barrier is partitioned as the last). ``output_partitions``: write
    key group ``g`` to partition ``g % output_partitions`` (else Kafka's partitioner on the key).
    ``mode``: ``"optimistic"``, ``"buffered"`` or ``"native"`` (module docstring);
    ``native_delay_ms`` is the ``withWatermark`` delay of ``"native"``.

    Output records: key = ``Meta.sort_key()`` of the item (decode with ``Meta.from_sort_key``;
    unique per item, so it deduplicates the at-least-once sink), value = ``encode(payload)``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    leading, segments = segments_of(stages)
    n_proc = max(1, len(segments))
    groups = [key_groups] * n_proc if isinstance(key_groups, int) else list(key_groups)
    if len(groups) != n_proc or any(not isinstance(g, int) or g < 1 for g in groups):
        raise ValueError(f"key_groups must be a positive int or {n_proc} positive ints "
                         f"(one per order-sensitive stage), got {key_groups!r}")
    sink = _SinkSpec(output_topic, encode, output_partitions)
    if mode == "native":
        return _build_native(source, leading, segments, groups, sink, decode, native_delay_ms)
    if not segments:  # nothing order-sensitive: one barrier (the only buffer) after the maps
        df = _ingest(source, leading, _Router(None, groups[-1]), decode)
        return df.groupBy("key_group").transformWithStateInPandas(
            BarrierProcessor(sink, metrics_topic), SINK_SCHEMA, "Append", "None")
    kind = BufferedStageProcessor if mode == "buffered" else OptimisticStageProcessor
    df = _ingest(source, leading, _Router(segments[0].stage.key, groups[0]), decode)
    for i, seg in enumerate(segments):
        if i == len(segments) - 1:
            proc = kind(i + 1, seg, None, sink, metrics_topic if mode == "optimistic" else None)
            return df.groupBy("key_group").transformWithStateInPandas(proc, SINK_SCHEMA, "Append", "None")
        proc = kind(i + 1, seg, _Router(segments[i + 1].stage.key, groups[i + 1]))
        df = df.groupBy("key_group").transformWithStateInPandas(proc, INTER_SCHEMA, "Append", "None")
    raise AssertionError("unreachable")


def _build_native(source, leading, segments, groups, sink, decode, delay_ms):
    from pyspark.sql import functions as F

    if not segments:
        raise ValueError("mode 'native' needs at least one order-sensitive stage")
    routers = [_Router(s.stage.key, g) for s, g in zip(segments, groups)]
    src = (source.where(F.col("kind") == "data")
           .select("kind", "partition", "offset", "value", "event_time",
                   F.unix_millis("event_time").alias("event_time_ms")))
    df = src.mapInPandas(_native_ingest_fn(leading, routers[0], decode), NATIVE_SCHEMA)
    df = df.withWatermark("event_time", f"{int(delay_ms)} milliseconds")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        proc = NativeStageProcessor(seg, None if last else routers[i + 1], sink if last else None)
        df = df.groupBy("key_group").transformWithStateInPandas(
            proc, SINK_SCHEMA if last else NATIVE_SCHEMA, "Append", "EventTime",
            eventTimeColumnName="" if last else "event_time")
    return df


def read_metrics(records: Sequence[Any]) -> dict:
    """Query-wide metrics from metrics-topic records (objects with ``.value()`` or dicts): the
    newest record per key group, cumulative counters summed, ``replay_ratio`` recomputed."""
    newest: dict[int, dict] = {}
    for r in records:
        m = json.loads(r.value()) if hasattr(r, "value") and callable(r.value) else r
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
    return total
