"""``dataflow_kafka.collector``: the garbage-collector policy of the Python workers."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from dataflow_kafka import collector


def test_collector_paused_restores_the_collector():
    assert gc.isenabled()
    with pytest.raises(KeyError):
        with collector.collector_paused():
            assert not gc.isenabled()
            with collector.collector_paused():   # nested: leaves it to the outer one
                assert not gc.isenabled()
            assert not gc.isenabled()
            raise KeyError("x")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()                  # off before: left off
    finally:
        gc.enable()


def test_freeze_worker_heap_leaves_other_processes_alone():
    assert not collector.in_spark_worker()
    before = gc.get_freeze_count()
    collector.freeze_worker_heap()
    assert gc.get_freeze_count() == before


def test_spark_python_workers_are_recognised(spark):
    def probe(batches):
        import pyarrow as pa

        from dataflow_kafka import collector as c

        for b in batches:
            yield pa.RecordBatch.from_pydict({"worker": [c.in_spark_worker()] * b.num_rows})

    assert spark.range(1).mapInArrow(probe, "worker boolean").collect()[0]["worker"] is True


def test_freeze_worker_heap_freezes_once_per_process():
    """In a fresh interpreter taken for a worker (freezing this one would keep the suite's
    garbage): the first call moves the live objects to the permanent generation, cyclic garbage
    made before it is collected first, and a second call freezes nothing more."""
    code = """
import gc
from dataflow_kafka import collector
collector.in_spark_worker = lambda: True
class Node:
    pass
a = Node(); a.me = a; del a                       # cyclic garbage before the freeze
gc.disable()
collector.freeze_worker_heap()
first = gc.get_freeze_count()
assert first > 1000, first
assert not any(type(o).__name__ == "Node" for o in gc.get_objects(generation=2))
kept = [[] for _ in range(100)]
collector.freeze_worker_heap()
assert gc.get_freeze_count() == first, (gc.get_freeze_count(), first)
b = Node(); b.me = b; del b                       # cyclic garbage after it: still collected
assert gc.collect() >= 1
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_freeze_after_call_leaves_other_processes_alone():
    before = gc.get_freeze_count()
    collector.freeze_after_call()
    assert gc.get_freeze_count() == before


def test_freeze_after_call_freezes_what_lives_and_reclaims_frozen_cycles_every_refreeze():
    """In a fresh interpreter taken for a worker: a call's cyclic garbage is collected, not frozen;
    what the call leaves alive (a cached live state) is frozen, so a full collection after the
    call does not walk it; a frozen object later dropped as part of a cycle is reclaimed within
    ``REFREEZE_CALLS`` calls even when the heap does not grow."""
    code = """
import gc, weakref
from dataflow_kafka import collector
class Node:
    pass
gc.disable()                                      # as in a stage call (collector_paused)
garbage = Node(); garbage.me = garbage; gone = weakref.ref(garbage); del garbage
live = [Node() for _ in range(1000)]              # the call's live state
collector.freeze_after_call(in_worker=True)
assert gone() is None                             # the call's cyclic garbage: collected first
assert not any(type(o).__name__ == "Node" for o in gc.get_objects())   # the live state: frozen
frozen = live[0]; frozen.me = frozen; dropped = weakref.ref(frozen); del frozen, live
gc.collect()
assert dropped() is not None                      # a frozen cycle: not collected by a collection
for _ in range(collector.REFREEZE_CALLS):
    collector.freeze_after_call(in_worker=True)
assert dropped() is None                          # reclaimed at the refreeze
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_freeze_after_call_collects_in_full_once_resident_memory_grew_by_a_quarter():
    """In a fresh interpreter taken for a worker: a frozen cycle dropped is reclaimed at the first
    call after which the process's resident memory has grown by ``REFREEZE_GROWTH`` since the last
    full collection, long before ``REFREEZE_CALLS``; under that growth no call collects in full."""
    code = """
import gc, weakref
from dataflow_kafka import collector
class Node:
    pass
gc.disable()
collector.freeze_after_call(in_worker=True)       # the first call sets the mark
mark = collector.resident_bytes()
def state(fraction):                              # a live state holding memory, in a cycle
    n = Node(); n.me = n; n.payload = b"x" * int(mark * collector.REFREEZE_GROWTH * fraction)
    return n
live = state(0.5)
collector.freeze_after_call(in_worker=True)
dropped = weakref.ref(live); del live             # replaced: a frozen cycle, garbage now
collector.freeze_after_call(in_worker=True)
assert dropped() is not None                      # under the growth: no full collection
live = state(0.7)                                 # the next live state: past the growth
collector.freeze_after_call(in_worker=True)
assert dropped() is None                          # the full collection reclaimed the dropped one
assert live.me is live                            # and kept the live one
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_resident_bytes_follows_what_the_process_holds():
    before = collector.resident_bytes()
    held = b"x" * (64 << 20)
    assert collector.resident_bytes() >= before + (48 << 20)
    del held
