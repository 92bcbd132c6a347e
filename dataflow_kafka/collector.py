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
  is collected, then what is alive is frozen. Everything is thawed and collected in full once the
  worker's resident memory has grown by ``REFREEZE_GROWTH`` (a quarter) since the last full
  collection, or after ``REFREEZE_CALLS`` calls, so a cycle frozen and dropped later is reclaimed
  then and the memory such cycles hold stays bounded. Growth is read from resident memory, not
  counted in objects: ``gc.get_freeze_count()`` walks the whole frozen list, and the objects a call
  leaves alive include states that reference counting frees again (measured in docs/nexmark.md,
  "the full collection by memory").
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from typing import Iterator

__all__ = ["collector_paused", "freeze_worker_heap", "freeze_after_call", "in_spark_worker", "resident_bytes",
           "REFREEZE_CALLS", "REFREEZE_GROWTH"]

_frozen = False
#: Growth of the worker's resident memory since the last full collection (a fraction of it then)
#: at which :func:`freeze_after_call` thaws and collects everything.
REFREEZE_GROWTH = 0.25
#: Stage calls after which :func:`freeze_after_call` thaws and collects everything in any case.
REFREEZE_CALLS = 1024
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_calls = 0                              # stage calls since the last full collection
_resident_after_full: int | None = None  # resident bytes after it (None: before the first call)


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
    task walks only what was created since. When the process's resident memory has grown by
    ``REFREEZE_GROWTH`` since the last full collection (the first call sets the mark), or after
    ``REFREEZE_CALLS`` calls, everything is thawed, collected in full and frozen again: a frozen
    object that became part of a dropped cycle (a live state replaced) holds memory until then,
    at most about a quarter of the worker's."""
    global _calls, _resident_after_full
    if not (in_spark_worker() if in_worker is None else in_worker):
        return
    _calls += 1
    gc.collect(1)
    gc.freeze()
    if _resident_after_full is None:          # the first call: the worker's heap was collected at init
        _resident_after_full, _calls = resident_bytes(), 0
    elif resident_bytes() > _resident_after_full * (1 + REFREEZE_GROWTH) or _calls >= REFREEZE_CALLS:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _resident_after_full, _calls = resident_bytes(), 0


def resident_bytes() -> int:
    """This process's resident memory in bytes (``/proc/self/statm``; elsewhere its peak, from
    ``getrusage``, whose unit varies by system: only its growth is used; 0 where neither is there):
    one small read, where counting the frozen objects walks them all."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:         # no way to tell: the full collections come every REFREEZE_CALLS calls
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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
