"""The ``transformWithStateInPandas`` processor of a stage operator, and :func:`deferred`.

:class:`StageProcessor` holds one binary value state per key group and calls the pure
:func:`keygroups.operator.run_key_group` once per key group and micro-batch (state read once,
written once). :class:`keygroups.Pipeline` builds it; use ``timeMode="None"``: Spark's own
event-time mode would drop rows behind Spark's watermark before the stage sees them, and the
stages' late-data policies need them. Time comes only from rows (punctuations and the
processing time recorded in the source's offsets), so a replayed micro-batch gives the same output.
"""

from __future__ import annotations

from typing import Iterator

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from dataflow_kafka.errors import ArgumentTypeError, StateLayoutError
from dataflow_kafka.keygroups.placement import BY_NUMBER_STATE, PLACED_COLUMN, PLACED_STATE

__all__ = ["StageProcessor", "deferred"]


class StageProcessor(StatefulProcessor):
    """The ``transformWithStateInPandas`` processor of a stage operator: one value state per key
    group, :func:`keygroups.operator.run_key_group` per call. ``packed``: the input comes from
    :func:`keygroups.packed.pack_key_groups` (Arrow IPC blobs to unpack).

    ``placement``: each key group's grouping value (:func:`keygroups.placement.placement_ids` over
    ``partitions`` shuffle partitions); its state ``key_group_state`` holds the key group's number
    beside its bytes. ``None``: grouped by key-group number, state ``operator`` (the bytes only),
    the layout of checkpoints written before 2026-11-29. A placed operator refuses, at a key
    group's first batch, a checkpoint of the other layout or of another number of shuffle
    partitions (:class:`~dataflow_kafka.errors.StateLayoutError`) rather than read another key
    group's state or start from none."""

    def __init__(self, spec, packed: bool = False, placement=None, partitions: int | None = None) -> None:
        self.spec, self.packed = spec, packed
        self.placement = None if placement is None else tuple(int(v) for v in placement)
        self.partitions = partitions

    def init(self, handle: StatefulProcessorHandle) -> None:
        if self.placement is None:
            self._state = handle.getValueState(BY_NUMBER_STATE, _OPERATOR_STATE)
            return
        self._state = handle.getValueState(PLACED_STATE, _PLACED_STATE)
        self._by_number = handle.getValueState(BY_NUMBER_STATE, _OPERATOR_STATE)   # read only to refuse it
        self._key_groups = {v: kg for kg, v in enumerate(self.placement)}

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        from dataflow_kafka.keygroups.operator import run_key_group

        if self.packed:
            from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN, unpack_key_group

            pdf = unpack_key_group([p for part in rows for p in part[PAYLOAD_COLUMN]])
        else:
            pdf = pd.concat(list(rows), ignore_index=True)
        if self.placement is None:
            key_group = int(key[0])
            stored = self._state.get()
            blob = None if stored is None or stored[0] is None else bytes(stored[0])
        else:
            key_group, blob = self._placed_state(int(key[0]))
            if PLACED_COLUMN in pdf.columns:
                pdf = pdf.drop(columns=[PLACED_COLUMN])
        out, blob = run_key_group(self.spec, key_group, pdf, blob)
        self._state.update((blob,) if self.placement is None else (key_group, blob))
        if out is not None and len(out):
            yield out

    def _placed_state(self, value: int) -> tuple[int, bytes | None]:
        """``(key group, its state bytes or None)`` for the grouping value ``value``."""
        name = self.spec.name
        key_group = self._key_groups.get(value)
        stored = self._state.get()
        if key_group is None or (stored is not None and stored[0] is not None and int(stored[0]) != key_group):
            held = "" if stored is None or stored[0] is None else f", whose state is key group {int(stored[0])}'s"
            raise StateLayoutError(
                f"stage operator {name!r}: grouping value {value}{held} is not where this query places key group "
                f"{key_group}: the checkpoint was written with another number of shuffle partitions than the "
                f"{self.partitions} of spark.sql.shuffle.partitions now; set it back (Spark keeps a stateful "
                "query's shuffle partitions for the life of its checkpoint)")
        if stored is not None and stored[1] is not None:
            return key_group, bytes(stored[1])
        # no state yet: this key group's first batch, unless the checkpoint has another layout's state
        if self._by_number.exists():
            raise StateLayoutError(
                f"stage operator {name!r}: the checkpoint holds state grouped by key-group number (written "
                "before 2026-11-29); run it with Pipeline.apply(..., placement='by_number'), or start a new "
                "checkpoint for the even placement")
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is not None and self.partitions and ctx.partitionId() != key_group % self.partitions:
            raise StateLayoutError(
                f"stage operator {name!r}: key group {key_group} runs on shuffle partition {ctx.partitionId()}, "
                f"not {key_group % self.partitions} as planned for spark.sql.shuffle.partitions={self.partitions}: "
                "the checkpoint was written with another number of shuffle partitions; set it back (Spark keeps "
                "a stateful query's shuffle partitions for the life of its checkpoint)")
        return key_group, None

    def close(self) -> None:
        pass


_OPERATOR_STATE = StructType([StructField("blob", BinaryType())])
_PLACED_STATE = StructType([StructField("key_group", IntegerType()), StructField("blob", BinaryType())])


def deferred(processor):
    """``processor`` wrapped so that Spark's driver-side pre-init imports nothing of this project.

    On the first micro-batch of every query run, Spark starts a fresh Python process on the driver
    only to call ``init`` and learn the state variables (``PRE_INIT``). Unpickling a processor there
    imports its modules (for a stage processor: the engine, keygroups, numpy and pandas,
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
                raise ArgumentTypeError(f"deferred: {type(processor).__name__}.init calls handle.{name}; "
                                "only state declarations can be replayed on the driver")
            return lambda *args: calls.append((name, args))

    processor.init(Recorder())
    return calls
