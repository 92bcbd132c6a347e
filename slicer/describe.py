"""The slicer's state for people: queries, slices and open windows (:func:`keygroups.state_view.read_state`).

Rows (:func:`keygroups.state_view.state_item`) per key group, for every form of
:class:`~slicer.stage.SlicerStage`'s state (the keyed table, the keyed session table, one engine
per key) and for :class:`balancing.compute.PaneCompute`'s key groups:

* ``query``: a running query (``query_id``), its window and ``start_ms`` its coverage start
  (windows starting before it are never reported: a query added while running, :mod:`slicer.coverage`);
  ``coverage``: a key whose own coverage start is later;
* ``slice``: a slice that holds records (Scotty §5.2): ``[start_ms, end_ms)`` (``end_ms`` None:
  the open last slice), ``count`` records, ``newest_ms`` (and ``oldest_ms``) record time; a count
  window's slice covers the record positions ``positions`` ``(first, end)`` (end None: open),
  ``[start_ms, end_ms)`` the times of its records;
* ``window``: a window that holds records and can still be emitted or updated: its end is past
  the watermark minus the allowed lateness (each window type by its emission rule); ``state``
  ``pending`` (the watermark has not reached it) or ``emitted`` (records within the allowed
  lateness may still update it), ``count`` records and the current aggregates, one field per output
  column of the stage (``sum``, ``mean``, ``m4_min``, ...; ``value_count`` for ``Count``, as
  ``count`` is the records'). Windows already final are not listed, so a sliding window of many
  instances costs what its open ones do. A count window's bounds are ``positions``.

The keyed session table (:func:`describe_sessions`) keeps one partial per (key, session) and
nothing finer: its ``slice`` rows are those partials, one per session, bounded as the per-key
engine bounds a session's slice (Scotty §6.2: a session is one slice), so both forms describe the
same input alike.

Built column-wise (a DataFrame per key group), so describing many keys costs numpy calls, not a
Python call per window.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups.state_view import ROW_COLUMNS, concat_rows, state_item
from dataflow_kafka.slicer.keyed import KeyedSlicingOperator
from dataflow_kafka.slicer.keyed_sessions import KeyedSessionOperator
from dataflow_kafka.slicer.operator import SlicingWindowOperator
from dataflow_kafka.slicer.results import OpenWindows, Slices, object_array
from dataflow_kafka.windowing.rows import aggregation_columns

__all__ = ["describe_keyed", "describe_sessions", "describe_engines"]


def describe_keyed(op: KeyedSlicingOperator, **extra: Any) -> pd.DataFrame:
    """Rows of a :class:`~slicer.keyed.KeyedSlicingOperator` (every key of a key group);
    ``extra``: fields added to every row's detail."""
    rows = []
    for i, qid in enumerate(op.query_ids):
        rows.append(state_item("query", query_id=qid, start_ms=op.coverage_start(qid), window=op.specs[i],
                               fresh=bool(op.fresh[i]) or None, **extra))
        for key in op.key_start[i]:
            rows.append(state_item("coverage", key=key, query_id=qid, start_ms=op.coverage_start(qid, key), **extra))
    return _frame(rows, [_slices(op.slices())], [_windows(op.open_windows(), op.aggregations)], extra)


def describe_sessions(op: KeyedSessionOperator, **extra: Any) -> pd.DataFrame:
    """Rows of a :class:`~slicer.keyed_sessions.KeyedSessionOperator` (every key of a key group):
    its query (run from the start: no coverage rows), and per key its sessions, each a ``window``
    row and a ``slice`` row (the one partial the table keeps for it); ``extra``: fields added to
    every row's detail."""
    rows = [state_item("query", query_id=qid, start_ms=op.coverage_start(qid), window=spec, **extra)
            for qid, spec in zip(op.query_ids, op.specs)]
    return _frame(rows, [_slices(op.slices())], [_windows(op.open_windows(), op.aggregations)], extra)


def describe_engines(template: SlicingWindowOperator, engines: dict[Any, SlicingWindowOperator],
                     **extra: Any) -> pd.DataFrame:
    """Rows of one :class:`~slicer.SlicingWindowOperator` per key: the queries every key runs
    (``template``'s, listed once), and per key its coverage starts where they differ from the
    template's, its slices and its open windows."""
    rows = [state_item("query", query_id=qid, start_ms=template.coverage_start(qid), window=template.window(qid),
                       **extra) for qid in template.query_ids]
    slices, windows = [], []
    for key, op in engines.items():
        for qid in op.query_ids:
            start = op.coverage_start(qid)
            if qid not in template.query_ids or start != template.coverage_start(qid):
                rows.append(state_item("coverage", key=key, query_id=qid, start_ms=start, **extra))
        slices += [_slices(sl, key) for sl in op.slices()]
        windows.append(_windows(op.open_windows(), op.aggregations, key))
    return _frame(rows, slices, windows, extra)


def _frame(rows: list[dict], slices: list[pd.DataFrame], windows: list[pd.DataFrame], extra: dict) -> pd.DataFrame:
    parts = [pd.DataFrame.from_records(rows)] if rows else []
    parts += [p.assign(**extra) for p in slices + windows if len(p)]
    return concat_rows(parts) if parts else pd.DataFrame(columns=ROW_COLUMNS)


def _keys(keys: np.ndarray | None, key: Any, n: int) -> np.ndarray:
    return keys if keys is not None else object_array([key] * n)


def _slices(sl: Slices, key: Any = None) -> pd.DataFrame:
    n = len(sl.start)
    end = pd.array(sl.end, dtype="Int64")
    cols: dict[str, Any] = {"item": "slice", "key": _keys(sl.keys, key, n)}
    if sl.measure == "count":                   # bounds are record positions: times as the span of its records
        cols.update(start_ms=sl.oldest, end_ms=sl.newest + 1, count=sl.count, measure="count",
                    positions=object_array(list(zip(sl.start.tolist(), sl.end))))
    else:
        cols.update(start_ms=sl.start, end_ms=end, count=sl.count, oldest_ms=sl.oldest, newest_ms=sl.newest)
    return pd.DataFrame(cols, index=pd.RangeIndex(n))


def _windows(ow: OpenWindows, aggregations: list, key: Any = None) -> pd.DataFrame:
    res = ow.results
    n = len(res)
    cols: dict[str, Any] = {"item": "window", "key": _keys(ow.keys, key, n), "query_id": res.query_id}
    count_measure = res.measure == "count"
    if count_measure.any():
        cols.update(start_ms=pd.array(np.where(count_measure, None, res.start), dtype="Int64"),
                    end_ms=pd.array(np.where(count_measure, None, res.end), dtype="Int64"),
                    measure=np.where(count_measure, "count", None),
                    positions=object_array([(int(s), int(e)) if c else None for s, e, c in
                                            zip(res.start.tolist(), res.end.tolist(), count_measure.tolist())]))
    else:
        cols.update(start_ms=res.start, end_ms=res.end)
    cols.update(count=ow.count, state=np.where(ow.pending, "pending", "emitted"))
    names = [c for c, _ in aggregation_columns(aggregations)]
    values = iter(names)
    for fn, v in zip(aggregations, res.values):       # the aggregates, named as the stage's output columns
        width = len(fn.spark_columns(fn.name))
        arr = v if isinstance(v, np.ndarray) else object_array(list(v))
        for j in range(width):
            name = next(values)
            col = arr[:, j] if width > 1 and arr.ndim == 2 else (
                object_array([x[j] if x is not None else None for x in arr]) if width > 1 else arr)
            cols["value_" + name if name in ROW_COLUMNS else name] = col
    return pd.DataFrame(cols, index=pd.RangeIndex(n))
