"""What this project asks of Python's cyclic garbage collector in Spark's Python workers.

A Python worker holds a large heap that never becomes garbage (pyspark, pandas, pyarrow, numpy and
this package, imported once per worker process), and every full collection walks all of it: in a
NEXMark run's stage workers a full collection took 60-90 ms, and collections were 15-20% of their
CPU time. Two remedies, both with reference counting still freeing everything at once:

* :func:`freeze_worker_heap`, once per worker process on first use: what is alive then moves to
  the collector's permanent generation (``gc.freeze``), so later collections no longer walk it.
* :func:`collector_paused` around a block that creates many short-lived tracked objects (a Kafka
  poll's messages): the collector runs after the block, not dozens of times inside it.
* :func:`freeze_after_call` after each stage call: pyspark's daemon runs a full collection after
  every task a worker runs (``gc.collect()`` in ``pyspark/daemon.py``), which walks every object
  created since the last freeze, and the stage operators' live states (the key groups' engines,
  cached in the worker between micro-batches) are such objects: in NEXMark Q11 at 10k batches
  that collection took a quarter to half of the stage workers' samples. The call's young garbage
  is collected, then what is alive is frozen; every ``REFREEZE_CALLS`` calls everything is thawed
  and collected in full once, so a cycle frozen and dropped later is reclaimed then.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Iterator

__all__ = ["collector_paused", "freeze_worker_heap", "freeze_after_call", "in_spark_worker", "REFREEZE_CALLS"]

_frozen = False
#: Stage calls between two full collections of what :func:`freeze_after_call` froze.
REFREEZE_CALLS = 64
_calls = 0


def freeze_worker_heap() -> None:
    """In a Spark Python worker: collect once, then move every object alive to the permanent
    generation (``gc.freeze``); a no-op after the first call in a process, and in any other process
    (a driver, a test, ``run_local``), whose heap is not the worker's. The objects frozen are the
    worker's imports and whatever the first call's task holds; one that later becomes part of a
    reference cycle is never collected (a one-time cost, bounded by that first task)."""
    global _frozen
    if _frozen or not in_spark_worker():
        return
    _frozen = True
    gc.collect()
    gc.freeze()


def freeze_after_call(in_worker: bool | None = None) -> None:
    """After a stage call, in a Spark Python worker (``in_worker``: None asks
    :func:`in_spark_worker`): collect the young generations (what the call left as cyclic
    garbage), then freeze what is alive, so the full collection pyspark's daemon runs after the
    task walks only what was created since. Every ``REFREEZE_CALLS``-th call thaws everything
    and collects in full instead, then freezes again: a frozen object that became part of a
    dropped cycle (a live state replaced) waits at most that many calls to be reclaimed."""
    global _calls
    if not (in_spark_worker() if in_worker is None else in_worker):
        return
    _calls += 1
    if _calls % REFREEZE_CALLS == 0:
        gc.unfreeze()
        gc.collect()
    else:
        gc.collect(1)
    gc.freeze()


def in_spark_worker() -> bool:
    """Whether this process is one of Spark's Python workers: forked from pyspark's daemon, or
    pyspark's worker itself when Spark runs it without the daemon."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) in ("pyspark.daemon", "pyspark.worker")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while the block runs (a no-op when it is off
    already); it is on again, as before, when the block ends or raises.

    A consume of ``kafka_read.CHUNK`` records creates as many ``Message`` objects, which the
    collector tracks and traverses again and again as they pass from generation to generation:
    with it on, half of a read's CPU time went to the collector (``perf``, docs/source.md).
    Messages hold no cycles: reference counting frees them either way.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
