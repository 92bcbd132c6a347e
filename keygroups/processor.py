"""Base ``transformWithStateInPandas`` processor for one key group, driven by punctuations.

Every order-aware Spark operator of this project (slicer, watermarks, optimistic) is a subclass:
the base reads the key group's state once, splits the micro-batch's rows by kind, applies
modifications first (Enorm §6.2: they travel ahead of the timestamp punctuation), then data, then
folds the partitions' timestamp punctuations into the group's low watermark
(:class:`watermarks.PunctuationTracker`, min over Kafka partitions), calls the subclass, and
writes the state once. Time comes only from rows (punctuations and the processing time recorded
in the source's offsets), so a replayed micro-batch produces the same output.

Rows of kind ``error`` are ignored here: route them from the source DataFrame itself (a
dead-letter query on ``kind = 'error'``), where they name topic, partition and offset.

Use with ``timeMode="None"``: Spark's own event-time mode would drop rows behind Spark's
watermark before the processor sees them, and our late-data policies need them.

Subclass contract::

    class MyOperator(PunctuatedKeyGroupProcessor):
        def load(self, blob: bytes | None): ...          # engine state for this key group
        def dump(self, engine) -> bytes: ...
        def on_batch(self, engine, batch: KeyGroupBatch) -> Iterator[pd.DataFrame]: ...

``df`` must come from :func:`keygroups.with_key_groups` (it adds ``key_group`` and epoch-ms
columns)::

    with_key_groups(source, "key", 8).groupBy("key_group").transformWithStateInPandas(
        MyOperator(), output_schema, "Append", "None")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

from keygroups.contract import _in_offset_order
from keygroups.punctuation import PunctuationTracker

__all__ = ["StageProcessor", "PunctuatedKeyGroupProcessor", "KeyGroupBatch", "deferred"]

_STATE = StructType([StructField("engine", BinaryType()), StructField("tracker", BinaryType())])


@dataclass
class KeyGroupBatch:
    """What one micro-batch brings to one key group."""

    key_group: int
    data: pd.DataFrame                  # kind == "data" rows (all input columns)
    modifications: list[str]            # command texts, in control-topic order, deduplicated
    low_watermark_ms: int | None        # after this batch's punctuations
    previous_low_watermark_ms: int | None
    processing_time_ms: int | None      # recorded in the source offset


class PunctuatedKeyGroupProcessor(StatefulProcessor):
    """See module docstring. ``idle_timeout_ms``: :class:`PunctuationTracker` idle policy."""

    def __init__(self, idle_timeout_ms: int | None = None) -> None:
        self.idle_timeout_ms = idle_timeout_ms

    # -- subclass hooks ---------------------------------------------------------------------------
    def load(self, blob: bytes | None) -> Any:
        raise NotImplementedError

    def dump(self, engine: Any) -> bytes:
        raise NotImplementedError

    def on_batch(self, engine: Any, batch: KeyGroupBatch) -> Iterator[pd.DataFrame]:
        raise NotImplementedError

    # -- Spark side -------------------------------------------------------------------------------
    def init(self, handle: StatefulProcessorHandle) -> None:
        self._state = handle.getValueState("key_group_state", _STATE)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        pdf = pd.concat(list(rows), ignore_index=True)
        blob, tracker_blob = self._state.get() or (None, None)   # None when absent: one round trip
        tracker = (PunctuationTracker.from_bytes(bytes(tracker_blob)) if tracker_blob is not None
                   else PunctuationTracker(self.idle_timeout_ms))
        engine = self.load(None if blob is None else bytes(blob))
        batch = split_batch(int(key[0]), pdf, tracker)
        yield from self.on_batch(engine, batch)
        self._state.update((self.dump(engine), tracker.to_bytes()))

    def close(self) -> None:
        pass


class StageProcessor(StatefulProcessor):
    """The ``transformWithStateInPandas`` processor of a stage operator: one binary value state
    per key group, :func:`keygroups.operator.run_key_group` per call. ``packed``: the input comes
    from :func:`keygroups.packed.pack_key_groups` (Arrow IPC blobs to unpack)."""

    def __init__(self, spec, packed: bool = False) -> None:
        self.spec, self.packed = spec, packed

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._state = handle.getValueState("operator", _OPERATOR_STATE)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        from keygroups.operator import run_key_group

        if self.packed:
            from keygroups.packed import PAYLOAD_COLUMN, unpack_key_group

            pdf = unpack_key_group([p for part in rows for p in part[PAYLOAD_COLUMN]])
        else:
            pdf = pd.concat(list(rows), ignore_index=True)
        stored = self._state.get()
        blob = None if stored is None or stored[0] is None else bytes(stored[0])
        out, blob = run_key_group(self.spec, int(key[0]), pdf, blob)
        self._state.update((blob,))
        if out is not None and len(out):
            yield out

    def close(self) -> None:
        pass


_OPERATOR_STATE = StructType([StructField("blob", BinaryType())])


def split_batch(key_group: int, pdf: pd.DataFrame, tracker: PunctuationTracker) -> KeyGroupBatch:
    """Split rows by kind and advance ``tracker`` with the batch's punctuations (pure, testable).

    Data rows come out in (topic, partition, offset) order; rows that already are in that order
    (as :mod:`keygroups.packed` unpacks them) are not sorted again.
    """
    kinds = pdf["kind"].to_numpy(dtype=object)
    is_data = kinds == "data"                 # the one comparison over every row
    data = pdf[is_data]
    if not _in_offset_order(data):
        data = data.sort_values(["topic", "partition", "offset"], kind="stable")
    control = pdf[~is_data]                   # punctuations and modifications: a few rows
    control_kinds = control["kind"]
    # One copy per Kafka partition arrives; a command is identified by its text and the control
    # record's timestamp (two identical commands in the same millisecond count as one).
    mods_rows = control[control_kinds == "modification"]
    seen, mods = set(), []
    for text, ts in zip(mods_rows["modification"], mods_rows["timestamp"]):
        if (text, ts) not in seen:
            seen.add((text, ts))
            mods.append(text)
    previous = tracker.low_watermark_ms
    pt = pdf["processing_time_ms"].max() if len(pdf) else None
    processing_time = None if pt is None or pd.isna(pt) else int(pt)
    puncts = control[control_kinds == "punctuation"]
    for topic, part, value, offset in zip(puncts["topic"], puncts["partition"], puncts["punctuation_ms"],
                                          puncts["offset"]):
        tracker.update(f"{topic}-{part}", None if pd.isna(value) else int(value),
                       None if pd.isna(offset) else int(offset), processing_time or 0)
    return KeyGroupBatch(key_group, data, mods, tracker.low_watermark_ms, previous, processing_time)


def deferred(processor):
    """``processor`` wrapped so that Spark's driver-side pre-init imports nothing of this project.

    On the first micro-batch of every query run, Spark starts a fresh Python process on the driver
    only to call ``init`` and learn the state variables (``PRE_INIT``). Unpickling a processor there
    imports its modules (for ``slicer.spark.SlicingProcessor``: slicer, keygroups, numpy and pandas,
    which took as long as the rest of the planning). The wrapper is a local class, which cloudpickle
    pickles by value (it needs only pyspark); it carries the real processor as bytes plus the state
    variables its ``init`` registers (recorded here, on the driver). In ``PRE_INIT`` it registers
    those; on executors it unpickles the real processor and delegates every call to it, so results
    and state are exactly the real processor's.
    """
    from pyspark import cloudpickle
    from pyspark.sql.streaming import StatefulProcessor

    calls = _init_calls(processor)
    blob = cloudpickle.dumps(processor)

    class DeferredProcessor(StatefulProcessor):
        def init(self, handle) -> None:
            client = getattr(handle, "_statefulProcessorApiClient", None)
            if getattr(getattr(client, "handle_state", None), "name", None) == "PRE_INIT":
                self._real = None
                for name, args in calls:
                    getattr(handle, name)(*args)
                return
            import pickle

            self._real = pickle.loads(blob)
            self._real.init(handle)

        def handleInputRows(self, key, rows, timerValues):
            return self._real.handleInputRows(key, rows, timerValues)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            return self._real.handleExpiredTimer(key, timerValues, expiredTimerInfo)

        def handleInitialState(self, key, initialState, timerValues) -> None:
            self._real.handleInitialState(key, initialState, timerValues)

        def close(self) -> None:
            if getattr(self, "_real", None) is not None:
                self._real.close()

    return DeferredProcessor()


def _init_calls(processor) -> list[tuple[str, tuple]]:
    """The state variables ``processor.init`` registers, as ``(handle method, args)``, recorded
    with a stand-in handle (no Spark needed). Only state declarations are allowed in there."""
    calls: list[tuple[str, tuple]] = []

    class Recorder:
        def __getattr__(self, name):
            if name not in ("getValueState", "getListState", "getMapState"):
                raise TypeError(f"deferred: {type(processor).__name__}.init calls handle.{name}; "
                                "only state declarations can be replayed on the driver")
            return lambda *args: calls.append((name, args))

    processor.init(Recorder())
    return calls
