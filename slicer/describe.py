"""The slicer's state for people: queries, slices and open windows (:func:`keygroups.state_view.read_state`).

Rows (:func:`keygroups.state_view.state_item`) per key group, for both forms of
:class:`~slicer.stage.SlicerStage`'s state (the keyed table, one engine per key) and for
:class:`balancing.compute.PaneCompute`'s key groups:

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
  lateness may still update it), ``count`` records and ``value`` the current aggregates. Windows already
  final are not listed, so a sliding window of many instances costs what its open ones do. A count
  window's bounds are ``positions``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.slicer.keyed import KeyedSlicingOperator
from dataflow_kafka.slicer.operator import SlicingWindowOperator
from dataflow_kafka.slicer.results import OpenWindows, Slices

__all__ = ["describe_keyed", "describe_engine", "describe_queries"]


def describe_keyed(op: KeyedSlicingOperator, **extra: Any) -> list[dict]:
    """Rows of a :class:`~slicer.keyed.KeyedSlicingOperator` (every key of a key group);
    ``extra``: fields added to every row's detail."""
    rows = []
    for i, qid in enumerate(op.query_ids):
        rows.append(state_item("query", query_id=qid, start_ms=op.coverage_start(qid), window=op.specs[i],
                               fresh=bool(op.fresh[i]) or None, **extra))
        for key in op.key_start[i]:
            rows.append(state_item("coverage", key=key, query_id=qid, start_ms=op.coverage_start(qid, key), **extra))
    return rows + _slice_rows(op.slices(), None, extra) + _window_rows(op.open_windows(), None, extra)


def describe_engine(key: Any, op: SlicingWindowOperator, template: SlicingWindowOperator | None = None,
                    **extra: Any) -> list[dict]:
    """Rows of key ``key``'s :class:`~slicer.SlicingWindowOperator`; its queries' coverage starts
    where they differ from ``template``'s (the queries every key runs, listed once)."""
    rows = []
    for qid in op.query_ids:
        start = op.coverage_start(qid)
        if template is None or qid not in template.query_ids or start != template.coverage_start(qid):
            rows.append(state_item("coverage", key=key, query_id=qid, start_ms=start, **extra))
    for sl in op.slices():
        rows += _slice_rows(sl, key, extra)
    return rows + _window_rows(op.open_windows(), key, extra)


def describe_queries(op: SlicingWindowOperator, **extra: Any) -> list[dict]:
    """``query`` rows of a per-key operator's queries (the template every key starts from)."""
    return [state_item("query", query_id=qid, start_ms=op.coverage_start(qid), window=op.window(qid), **extra)
            for qid in op.query_ids]


def _slice_rows(sl: Slices, key: Any, extra: dict) -> list[dict]:
    keys = sl.keys.tolist() if sl.keys is not None else [key] * len(sl.start)
    oldest = sl.oldest.tolist() if sl.oldest is not None else [None] * len(sl.start)
    if sl.measure == "count":                   # bounds are record positions: times as the span of its records
        return [state_item("slice", key=k, start_ms=lo, end_ms=hi + 1, count=n, measure="count", positions=(s, e),
                           **extra)
                for k, s, e, n, lo, hi in zip(keys, sl.start.tolist(), sl.end, sl.count.tolist(), oldest,
                                              sl.newest.tolist())]
    return [state_item("slice", key=k, start_ms=s, end_ms=e, count=n, oldest_ms=lo, newest_ms=hi, **extra)
            for k, s, e, n, lo, hi in zip(keys, sl.start.tolist(), sl.end, sl.count.tolist(), oldest,
                                          sl.newest.tolist())]


def _window_rows(ow: OpenWindows, key: Any, extra: dict) -> list[dict]:
    res = ow.results
    keys = ow.keys.tolist() if ow.keys is not None else [key] * len(res)
    values = [_column(v) for v in res.values]
    rows = []
    for i, (k, qid, m, s, e, n, p) in enumerate(zip(keys, res.query_id.tolist(), res.measure.tolist(),
                                                     res.start.tolist(), res.end.tolist(), ow.count.tolist(),
                                                     ow.pending.tolist())):
        aggs = {name: col[i] for name, col in zip(res.names, values)}
        if m == "count":
            rows.append(state_item("window", key=k, query_id=qid, count=n, measure="count", positions=(s, e),
                                   state="pending" if p else "emitted", value=aggs, **extra))
        else:
            rows.append(state_item("window", key=k, query_id=qid, start_ms=s, end_ms=e, count=n,
                                   state="pending" if p else "emitted", value=aggs, **extra))
    return rows


def _column(values: Any) -> list:
    """An aggregate column as plain values (M4: a tuple per window)."""
    if isinstance(values, np.ndarray):
        return [tuple(x) if isinstance(x, list) else x for x in values.tolist()]
    return [tuple(x.tolist()) if isinstance(x, np.ndarray) else x.item() if isinstance(x, np.generic) else x
            for x in values]
