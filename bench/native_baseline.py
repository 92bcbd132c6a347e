"""Baseline (b) of the latency experiment: what a Spark user writes today, for benchmarks only.

``withWatermark("event_time", delay)`` and, per order-sensitive stage,
``transformWithStateInPandas(..., timeMode="EventTime")`` that buffers its input and registers an
event-time timer at the smallest buffered event time; when Spark's watermark passes it, the
buffer below the watermark is sorted and applied (the same FlameStream stage objects as the
library's optimistic and buffered modes). Stages are chained with
``eventTimeColumnName="event_time"``. Rows behind Spark's watermark never reach the processors
(Spark drops them and counts them in ``numRowsDroppedByWatermark``), so ``delay`` must cover the
disorder. Spark's watermark is global and one batch behind, and every stage is its own stateful
operator: this is the plan :mod:`optimistic.spark` is measured against.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from dataflow_kafka.keygroups import key_group_of
from dataflow_kafka.optimistic.barrier import Barrier
from dataflow_kafka.optimistic.order import Item, Meta
from dataflow_kafka.optimistic.replay import KeyedState
from dataflow_kafka.optimistic.spark import SINK_SCHEMA
from dataflow_kafka.optimistic.stage import OptimisticStage, _apply_maps, decode_json, encode_json, optimistic_stages

__all__ = ["build_native", "NativeStageProcessor"]

NATIVE_SCHEMA = "key_group int, event_time timestamp, event_time_ms long, sort_key binary, payload binary"


@dataclass(frozen=True)
class _Router:
    key: Callable[[Any], Hashable]
    n: int

    def __call__(self, item: Item) -> int:
        return key_group_of(self.key(item.payload), self.n)


@dataclass(frozen=True)
class _SinkSpec:
    topic: str
    encode: Callable[[Any], bytes]
    partitions: int | None = None

    def frame(self, items: list[Item], key_group: int) -> pd.DataFrame:
        part = None if self.partitions is None else key_group % self.partitions
        return pd.DataFrame({"key": [i.meta.sort_key() for i in items], "value": [self.encode(i.payload) for i in items],
                             "topic": [self.topic] * len(items), "partition": pd.array([part] * len(items), dtype="Int32")})


def _rows(items: list[Item], router: _Router) -> pd.DataFrame:
    """Items as rows between native stages (routed to the next stage's key groups)."""
    return pd.DataFrame({
        "key_group": pd.array([router(i) for i in items], dtype="Int32"),
        "event_time": pd.to_datetime([i.meta.time_ms for i in items], unit="ms"),
        "event_time_ms": pd.array([i.meta.time_ms for i in items], dtype="Int64"),
        "sort_key": [i.meta.sort_key() for i in items],
        "payload": [pickle.dumps(i.payload, protocol=5) for i in items],
    })


def _native_ingest_fn(maps, router: _Router, decode: Callable[[bytes], Any]):
    def ingest(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in frames:
            data = pdf[pdf["kind"] == "data"]
            items = [Item.source(int(t), int(p), int(o), decode(bytes(v)))
                     for t, p, o, v in zip(data["event_time_ms"], data["partition"], data["offset"], data["value"])]
            out = _apply_maps(maps, items)
            if not out:
                continue
            yield _rows(out, router)
    return ingest


class NativeStageProcessor(StatefulProcessor):
    """Baseline (b): Spark's event-time watermark and timers decide when a stage may apply its
    buffered input (``timeMode="EventTime"``). State per key group: the stage state, the buffer
    and the registered timer."""

    def __init__(self, segment: OptimisticStage, router: "_Router | None", sink: "_SinkSpec | None" = None) -> None:
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
        yield _rows(out, self.router)

    def close(self) -> None:
        pass





def build_native(source, stages, *, output_topic: str, key_groups=4, decode=decode_json, encode=encode_json,
                 output_partitions: int | None = None, native_delay_ms: int = 0):
    """Sink rows (``key, value, topic, partition``) of ``stages`` run the Spark-native way (module
    docstring); ``native_delay_ms`` is the ``withWatermark`` delay (it must cover the disorder)."""
    pipe = optimistic_stages(stages, mode="buffered", key_groups=key_groups, decode=decode, encode=encode)
    segments = pipe.stages
    groups = [s.num_key_groups for s in segments]
    leading = segments[0].leading
    sink = _SinkSpec(output_topic, encode, output_partitions)
    delay_ms = native_delay_ms
    from pyspark.sql import functions as F

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


