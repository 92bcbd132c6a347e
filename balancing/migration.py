"""Windowed aggregation whose key groups move at runtime: router -> compute -> consolidate (Enorm §4.5, §5).

:func:`windowed_aggregation` builds the three-operator pipeline of **instant migration**:

1. :class:`balancing.slots.SlotRouter` (grouped by source partition): key group
   ``pmod(xxhash64(key), n)`` and its slot from the routing table in its state; move commands
   from the control topic change the table at the start of their batch;
2. :class:`balancing.compute.PaneCompute` (grouped by slot): partials per (key group, key, pane);
3. :class:`balancing.consolidate.Consolidate` (grouped by key): windows from the partials.

A move needs no state transfer: the new slot starts empty, the old slot emits its open panes when
they close, the consolidate stage merges both. Results equal a run without moves (tests:
``tests/balancing/test_migration_local.py``, ``test_migration_spark.py``).

:func:`load_of` folds the compute stage's ``metrics`` rows into what the balancer takes:
``{slot: {key_group: (rows, processor_ms)}}``.

>>> from dataflow_kafka.windowing import SlidingWindow
>>> p = windowed_aggregation("CAST(key AS STRING)", "CAST(get_json_object(CAST(value AS STRING), '$.v') AS DOUBLE)",
...                          {"10s": SlidingWindow(10_000, 5_000)}, num_key_groups=32, num_slots=4, num_partitions=2)
>>> [[s.name for s in op] for op in p.plan()]
[['router'], ['compute'], ['consolidate']]
"""

from __future__ import annotations

import json
from typing import Iterable

import pandas as pd

from dataflow_kafka.balancing.compute import PaneCompute
from dataflow_kafka.balancing.consolidate import Consolidate, pane_of
from dataflow_kafka.balancing.routing_table import RoutingTable
from dataflow_kafka.keygroups.contract import KIND_METRICS
from dataflow_kafka.keygroups.pipeline import Pipeline
from dataflow_kafka.balancing.slots import SlotRouter

__all__ = ["windowed_aggregation", "load_of", "consolidate_extra_rows"]


def windowed_aggregation(key: str, value: str, windows: dict, *, num_key_groups: int = 64, num_slots: int = 4,
                         num_partitions: int = 2, table: RoutingTable | None = None, routers: int = 2,
                         consolidators: int = 2, key_type: str = "string") -> Pipeline:
    """The router -> compute -> consolidate pipeline (see the module docstring).

    ``key``, ``value``: SQL expressions over the source rows (``value`` cast to double);
    ``windows``: ``{query id: TumblingWindow | SlidingWindow}``; ``table``: the initial routing
    table (default :meth:`RoutingTable.uniform`); ``num_partitions`` must equal the query's
    ``spark.sql.shuffle.partitions``; ``routers``, ``consolidators``: their key groups.
    """
    table = table or RoutingTable.uniform(num_key_groups, num_slots, num_partitions)
    router = SlotRouter(key=key, columns=(("value", f"CAST({value} AS DOUBLE)", "double"),), table=table,
                        key_type=key_type, num_key_groups=routers)
    compute = PaneCompute(pane_ms=pane_of(windows), slot_ids=table.slot_ids, key_type=key_type)
    consolidate = Consolidate(windows=dict(windows), key_type=key_type, num_key_groups=consolidators)
    return Pipeline([router, compute, consolidate])


def _metrics(frames: Iterable[pd.DataFrame], stage: str) -> Iterable[dict]:
    for f in frames:
        if f is None or not len(f):
            continue
        rows = f[(f["kind"] == KIND_METRICS) & (f["topic"] == stage)]
        for text in rows["metrics"]:
            yield json.loads(text)


def load_of(frames: Iterable[pd.DataFrame], stage: str = "compute") -> dict[int, dict[int, tuple[int, float]]]:
    """``{slot: {key_group: (rows, processor_ms)}}`` from the compute stage's metrics rows of the
    given output batches (summed when several batches are given)."""
    out: dict[int, dict[int, tuple[int, float]]] = {}
    for m in _metrics(frames, stage):
        per_slot = out.setdefault(int(m["slot"]), {})
        for kg, (rows, ms) in m["load"].items():
            r0, ms0 = per_slot.get(int(kg), (0, 0.0))
            per_slot[int(kg)] = (r0 + int(rows), ms0 + float(ms))
    return out


def consolidate_extra_rows(frames: Iterable[pd.DataFrame], stage: str = "consolidate") -> tuple[int, int]:
    """``(partial rows received, of which merged into another partial)`` by the consolidate stage."""
    got = merged = 0
    for m in _metrics(frames, stage):
        got += int(m["partials"])
        merged += int(m["merged"])
    return got, merged
