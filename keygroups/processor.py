"""The ``transformWithStateInPandas`` processor of a stage operator, and :func:`deferred`.

:class:`StageProcessor` holds one binary value state per key group (``operator``) and a map
state (``log``: the stages' append-only parts as segments, :class:`keygroups.operator.StateLog`)
and calls the pure :func:`keygroups.operator.run_key_group` once per key group and micro-batch
(the value read once and written once; segments read only when the process has not the key
group's live state, each written once). :class:`keygroups.Pipeline` builds it; use ``timeMode="None"``: Spark's own
event-time mode would drop rows behind Spark's watermark before the stage sees them, and the
stages' late-data policies need them. Time comes only from rows (punctuations and the
processing time recorded in the source's offsets), so a replayed micro-batch gives the same output.
"""

from __future__ import annotations

from typing import Iterator

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

from dataflow_kafka.errors import ArgumentTypeError

__all__ = ["StageProcessor", "deferred"]


class StageProcessor(StatefulProcessor):
    """The ``transformWithStateInPandas`` processor of a stage operator: one binary value state
    per key group, :func:`keygroups.operator.run_key_group` per call. ``packed``: the input comes
    from :func:`keygroups.packed.pack_key_groups` (Arrow IPC blobs to unpack). The worker's heap
    is frozen at the first ``init``, each call runs with the cyclic garbage collector held off,
    and what a call leaves alive (the live state it cached) is frozen after it
    (:mod:`dataflow_kafka.collector`)."""

    def __init__(self, spec, packed: bool = False) -> None:
        self.spec, self.packed = spec, packed

    def init(self, handle: StatefulProcessorHandle) -> None:
        from dataflow_kafka.collector import freeze_worker_heap

        self._state = handle.getValueState("operator", _OPERATOR_STATE)
        self._log = _MapStateLog(handle.getMapState("log", _LOG_KEY, _LOG_VALUE))
        freeze_worker_heap()

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        from dataflow_kafka.collector import collector_paused, freeze_after_call
        from dataflow_kafka.keygroups.operator import run_key_group

        with collector_paused():   # the engines' objects die with the call: reference counting frees them
            if self.packed:
                from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN, unpack_key_group

                pdf = unpack_key_group([p for part in rows for p in part[PAYLOAD_COLUMN]])
            else:
                pdf = pd.concat(list(rows), ignore_index=True)
            stored = self._state.get()
            blob = None if stored is None or stored[0] is None else bytes(stored[0])
            out, blob = run_key_group(self.spec, int(key[0]), pdf, blob, self._log)
            self._state.update((blob,))
            del pdf
        freeze_after_call()     # the live state cached by the call: not walked by the daemon's collection
        if out is not None and len(out):
            yield out

    def close(self) -> None:
        pass


_OPERATOR_STATE = StructType([StructField("blob", BinaryType())])
_LOG_KEY = StructType([StructField("stage", IntegerType()), StructField("segment", LongType())])
_LOG_VALUE = StructType([StructField("data", BinaryType())])


class _MapStateLog:
    """A :class:`keygroups.operator.StateLog` in a ``transformWithStateInPandas`` map state."""

    def __init__(self, state) -> None:
        self._state = state

    def read(self) -> dict[tuple[int, int], bytes]:
        return {(int(k[0]), int(k[1])): bytes(v[0]) for k, v in self._state.iterator()}

    def write(self, new: dict[tuple[int, int], bytes], dropped: list[tuple[int, int]]) -> None:
        for k in dropped:
            self._state.removeKey(k)
        for k, v in new.items():
            self._state.updateValue(k, (v,))


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
