"""The slicing engine as a Spark Structured Streaming operator (issue 3, Scotty §4-9 on Spark).

:func:`slice_windows` turns a streaming DataFrame from ``format("dataflow-kafka")`` into a
streaming DataFrame of window aggregates, for many concurrent window queries per key at the
cost of one slice update per record::

    from windowing import M4, SlidingWindow, Sum, TumblingWindow
    from slicer.spark import slice_windows

    src = spark.readStream.format("dataflow-kafka").option("subscribe", "sensors") ... .load()
    out = slice_windows(src, key="CAST(key AS STRING)",
                        windows=[SlidingWindow(60_000, 10_000), TumblingWindow(5_000)],
                        aggregations=[Sum(), M4()],
                        value="get_json_object(CAST(value AS STRING), '$.amount')",
                        allowed_lateness_ms=30_000)
    out.writeStream.format("dataflow-kafka").option("topic", "windows") ...

How it runs
-----------
``with_key_groups`` hashes every data row to one of ``num_key_groups`` key groups and replicates
the source's punctuation and modification rows to every group; ``pack_key_groups`` then packs,
per Spark task, each group's rows into one Arrow IPC blob (a ``mapInArrow`` step), so the shuffle
and pyspark's ``transformWithStateInPandas`` worker handle a few rows per key group instead of one
per record (the worker regroups its input row by row). A
:class:`~keygroups.packed.PackedKeyGroupProcessor` subclass (:class:`SlicingProcessor`) is called
once per key group and micro-batch (``timeMode="None"``); it unpacks the blobs with pyarrow,
sorted by (topic, partition, offset), so a replayed batch sees the same rows in the same order.
Per call the processor factorises the keys of the batch with pandas. Then:

* when every window is a time ``TumblingWindow`` or ``SlidingWindow`` and every
  aggregation is ``Sum``, ``Count``, ``Mean``, ``Min``, ``Max`` or ``M4`` (the usual case), all keys of
  the group share one :class:`~slicer.keyed.KeyedSlicingOperator`: one table of (key, slice)
  partial aggregates, a fixed number of numpy calls per batch whatever the number of keys, and
  the group's state is that table;
* otherwise (sessions, count windows, holistic or user-defined aggregations, ...) each key has
  its own :class:`~slicer.SlicingWindowOperator` (about 1 ms of Python per key and batch): the
  rows are stable-sorted by key (each key keeps its arrival order: topic, partition, offset),
  with one ``process_elements`` call per key and batch, then one ``process_watermark_columns``
  call per key whose windows can have changed; the state is one blob of engine states per key.

Both give the same results (``tests/slicer/test_slicer_keyed.py``). Results are assembled
column-wise (no row loop).

Event-time progress is the source's punctuations: ``batch.low_watermark_ms``, the minimum over
Kafka partitions of their newest punctuation (:class:`watermarks.PunctuationTracker`; idle
partitions: ``idle_timeout_ms``). A key seen for the first time starts at the group's current
watermark, so its records are late by the same rule as everyone else's.

Why not Spark's watermark (``withWatermark``)? Spark's watermark is a single global value
(max event time seen by the whole query minus a delay, one batch behind), and in
``timeMode="EventTime"`` Spark drops rows behind it *before* the processor sees them, so
records later than the lateness would only show up in Spark's aggregate
``numRowsDroppedByWatermark`` metric and not per key, and the result would depend on how
partitions interleave in a micro-batch. The punctuations are per partition, recorded in the
offsets, and give the same result on replay. Users who want "max event time minus a delay"
semantics get it from the source: ``watermarkDelayMs`` (punctuation = newest event time minus
the watermark delay) together with ``allowed_lateness_ms`` here.

Output columns
--------------
* the key column(s) (named after the key columns, or ``key``/``key_<i>`` for expressions; Spark
  types preserved);
* ``kind``: ``"window"`` for a window aggregate, ``"dropped"`` for a per-key report of records
  this micro-batch did not aggregate (only emitted when there were some);
* ``query_id`` (string: the index in a ``windows`` list, or the key of a ``windows`` dict), ``measure`` (``"time"``/``"count"``), ``window_start``,
  ``window_end`` (``[start, end)``, epoch ms for time windows, record positions for count
  windows), ``update`` (``True``: a window emitted before, re-emitted because late records
  within the allowed lateness changed it; keep the latest pane per window);
* one column per aggregation (``sum``, ``count``, ``min``, ``max``, ``mean``, ``median``,
  ``quantile_<q>``; M4 gives ``m4_min``, ``m4_max``, ``m4_first``, ``m4_last``; user-defined:
  ``fn.name``, Spark type ``fn.spark_type`` or double); duplicate names get ``_<i>`` suffixes;
* ``late_records``: on ``"dropped"`` rows, records of the key that arrived later than
  ``allowed_lateness_ms`` behind the watermark (counted, never silently dropped);
  ``null_records``: records whose value or event time was null (e.g. a JSON field missing).
  Both are null on ``"window"`` rows.

Windows without records are not emitted (as Spark's ``groupBy(window(...))``).
"""

from __future__ import annotations

import os
import pickle
import re
from collections import OrderedDict
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from keygroups import KEY_GROUP_COLUMN, KeyGroupBatch, deferred, with_key_groups
from keygroups.packed import PackedKeyGroupProcessor, pack_key_groups
from slicer.compile import is_builtin
from slicer.keyed import KeyedSlicingOperator
from slicer.operator import SlicingWindowOperator
from slicer.results import object_array
from windowing import M4, AggregateFunction, Count, Quantile

__all__ = ["slice_windows", "SlicingProcessor", "output_columns"]

_VALUE = "slicer_value"
# Columns of the source that split_batch needs, besides key_group and the epoch-ms columns.
# ``timestamp`` (only used to tell modification commands apart) is sent as epoch ms on
# modification rows and null elsewhere (see slice_windows): less to pack and shuffle.
_CONTROL = ["kind", "topic", "partition", "offset", "timestamp", "modification",
            "punctuation_ms", "processing_time_ms", "event_time_ms"]
_STATE_MAGIC = b"SKG2"          # {key: engine bytes}, one SlicingWindowOperator per key
_KEYED_MAGIC = b"SKK1"          # one KeyedSlicingOperator for all keys of the group
_TOKEN = 16
# Engines of recently dumped key-group states, by the state's token (a Python worker that gets
# the same key group again skips deserialising it). See SlicingProcessor.load.
_CACHE: "OrderedDict[bytes, dict]" = OrderedDict()
_CACHE_SIZE = 64


def _agg_columns(aggregations: Sequence[AggregateFunction]) -> list[tuple[str, str]]:
    """``(column name, Spark DDL type)`` for every output column of ``aggregations``."""
    cols: list[tuple[str, str]] = []
    for fn in aggregations:
        name = re.sub(r"[^0-9A-Za-z]+", "_", fn.name).strip("_")
        if isinstance(fn, M4):
            cols += [(f"{name}_{c}", "double") for c in fn.components]
        elif isinstance(fn, Count):
            cols.append((name, "long"))
        elif isinstance(fn, Quantile):
            cols.append((name, "double" if np.isscalar(fn.q) else "array<double>"))
        elif is_builtin(fn):
            cols.append((name, "double"))
        else:
            cols.append((name, getattr(fn, "spark_type", "double")))
    seen: dict[str, int] = {}
    out = []
    for name, t in cols:
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.append((name if n == 0 else f"{name}_{n}", t))
    return out


def output_columns(key_columns: Sequence[tuple[str, str]], aggregations) -> list[tuple[str, str]]:
    """The output schema of :func:`slice_windows` as ``(name, DDL type)`` pairs."""
    return (list(key_columns)
            + [("kind", "string"), ("query_id", "string"), ("measure", "string"), ("window_start", "long"),
               ("window_end", "long"), ("update", "boolean")]
            + _agg_columns(aggregations)
            + [("late_records", "long"), ("null_records", "long")])


class SlicingProcessor(PackedKeyGroupProcessor):
    """One key group: ``{key: engine state}`` in one blob; engines share one configured template.

    ``key_names``: the key columns of the input rows; ``columns``: the output schema
    (:func:`output_columns`).
    """

    def __init__(self, template: SlicingWindowOperator, key_names: Sequence[str],
                 columns: Sequence[tuple[str, str]], idle_timeout_ms: int | None = None) -> None:
        super().__init__(idle_timeout_ms)
        self.template = template
        self.key_names = list(key_names)
        self.columns = [c for c, _ in columns]
        self.agg_columns = _agg_columns(template.aggregations)
        # all keys in one table when the workload allows it (slicer.keyed), else one engine per key
        self.keyed = KeyedSlicingOperator.supports(template)

    # -- state ----------------------------------------------------------------------------------
    def load(self, blob: bytes | None) -> "dict | KeyedSlicingOperator":
        """The group's :class:`~slicer.keyed.KeyedSlicingOperator` (keyed path), or ``{key: engine
        or engine bytes}`` with engines restored lazily (see ``_engine``).

        The blob is ``magic, token, payload`` (payload: the keyed operator's bytes, or
        ``pickle({key: engine bytes})``) with a fresh random token per dump. If this Python worker dumped exactly that state (same token), its live engines are
        reused instead of being deserialised. The cache entry is *taken* (popped): an attempt
        that fails after mutating the engines leaves no entry behind, and a state that was dumped
        but never committed has a token the state store does not hold, so a retry or replay
        always starts from the committed bytes.
        """
        if blob is None:
            return KeyedSlicingOperator(self.template) if self.keyed else {}
        magic = _KEYED_MAGIC if self.keyed else _STATE_MAGIC
        if blob[:4] != magic:
            raise ValueError(f"SlicingProcessor: key group state has an unknown format ({bytes(blob[:4])!r}, "
                             f"expected {magic!r}; windows or aggregations changed against the checkpoint?)")
        cached = _CACHE.pop(blob[4:4 + _TOKEN], None)
        if cached is not None:
            return cached
        if self.keyed:
            return KeyedSlicingOperator.from_bytes(blob[4 + _TOKEN:], self.template)
        return pickle.loads(blob[4 + _TOKEN:])

    def dump(self, engines) -> bytes:
        if self.keyed:
            magic, payload = _KEYED_MAGIC, engines.to_bytes()
        else:
            magic = _STATE_MAGIC
            payload = pickle.dumps({k: (v if isinstance(v, bytes) else v.to_bytes(include_config=False))
                                    for k, v in engines.items()}, protocol=5)
        token = os.urandom(_TOKEN)
        _CACHE[token] = engines
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return magic + token + payload

    def _engine(self, engines: dict, key, watermark: int | None) -> SlicingWindowOperator:
        op = engines.get(key)
        if isinstance(op, SlicingWindowOperator):
            return op
        if op is None:
            op = SlicingWindowOperator.from_bytes(self._fresh_blob(), like=self.template)
            if watermark is not None:            # a new key starts at the group's watermark
                op.process_watermark_columns(watermark)
        else:
            op = SlicingWindowOperator.from_bytes(op, like=self.template)
        engines[key] = op
        return op

    def _fresh_blob(self) -> bytes:
        blob = getattr(self, "_fresh", None)
        if blob is None:
            blob = self._fresh = self.template.to_bytes(include_config=False)
        return blob

    # -- one micro-batch of one key group ---------------------------------------------------------
    def _columns(self, data: pd.DataFrame):
        """``(keys, codes, values, ts, bad)``: the batch's distinct keys (first-seen order), each
        row's index into them, values, event times, and rows with a null value or time."""
        if len(self.key_names) == 1:
            codes, uniques = pd.factorize(data[self.key_names[0]], use_na_sentinel=False)
            keys = [_none_if_na(k) for k in uniques]
        else:
            mi = pd.MultiIndex.from_frame(data[self.key_names])
            codes, uniques = pd.factorize(mi, use_na_sentinel=False)
            keys = [tuple(_none_if_na(x) for x in k) for k in uniques]
        values = pd.to_numeric(data[_VALUE], errors="coerce").to_numpy(np.float64, na_value=np.nan)
        ts_col = data["event_time_ms"]
        bad = np.isnan(values) | ts_col.isna().to_numpy()
        ts = ts_col.to_numpy(np.int64, na_value=0) if bad.any() else ts_col.to_numpy(np.int64)
        return keys, np.asarray(codes, np.int64), values, ts, bad

    def on_batch(self, engines, batch: KeyGroupBatch) -> Iterator[pd.DataFrame]:
        if self.keyed:
            yield from self._on_batch_keyed(engines, batch)
            return
        prev_wm, wm = batch.previous_low_watermark_ms, batch.low_watermark_ms
        data = batch.data
        touched: dict = {}            # key -> [late, null] for keys with records this batch
        if len(data):
            keys, codes, values, ts, bad = self._columns(data)
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(keys) + 1))
            values, ts, bad = values[order], ts[order], bad[order]
            any_bad = bool(bad.any())
            for i, key in enumerate(keys):
                lo, hi = bounds[i], bounds[i + 1]
                op = self._engine(engines, key, prev_wm)
                v, t = values[lo:hi], ts[lo:hi]
                nulls = 0
                if any_bad:
                    ok = ~bad[lo:hi]
                    nulls = int(hi - lo - ok.sum())
                    v, t = v[ok], t[ok]
                before = op.dropped_late
                if t.size:
                    op.process_elements(v, t)
                touched[key] = (op.dropped_late - before, nulls)
        parts: list[tuple[object, object]] = []
        if wm is not None:
            advanced = prev_wm is None or wm > prev_wm
            for key in (list(engines) if advanced else list(touched)):
                res = self._engine(engines, key, prev_wm).process_watermark_columns(wm)
                if len(res):
                    parts.append((key, res))
        frame = self._frame(parts, [(k, late, nulls) for k, (late, nulls) in touched.items() if late or nulls])
        if frame is not None:
            yield frame

    def _on_batch_keyed(self, op: KeyedSlicingOperator, batch: KeyGroupBatch) -> Iterator[pd.DataFrame]:
        """The same micro-batch for all keys at once (:mod:`slicer.keyed`). The group's watermark
        is every key's, so processing all keys on every watermark equals the per-key path's
        "all keys when it advanced, else the keys with records"."""
        prev_wm, wm = batch.previous_low_watermark_ms, batch.low_watermark_ms
        if op.watermark is None and prev_wm is not None:
            op.watermark = prev_wm                # new keys start at the group's watermark
        drops: list = []
        data = batch.data
        if len(data):
            keys, codes, values, ts, bad = self._columns(data)
            key_codes = op.codes_of(keys)
            nulls = np.bincount(codes[bad], minlength=len(keys))
            ok = ~bad
            dropped = op.process_elements(key_codes[codes[ok]], values[ok], ts[ok])
            late = dropped[key_codes]
            drops = [(keys[i], int(late[i]), int(nulls[i])) for i in np.flatnonzero(late + nulls).tolist()]
        parts = []
        if wm is not None:
            row_keys, res = op.process_watermark(wm)
            if len(res):
                parts.append((row_keys, res))
        frame = self._frame(parts, drops)
        if frame is not None:
            yield frame

    def _frame(self, parts, drops) -> pd.DataFrame | None:
        n_win, n_drop = sum(len(r) for _, r in parts), len(drops)
        if n_win + n_drop == 0:
            return None
        cols: dict[str, object] = {}
        # a part's key: one key for all its rows, or (keyed path) an object array, one per row
        row_keys = [k if isinstance(k, np.ndarray) else np.repeat(object_array([k]), len(r))
                    for k, r in parts]
        key_col = np.concatenate(row_keys + [object_array([k for k, _, _ in drops])])
        if len(self.key_names) == 1:
            cols[self.key_names[0]] = key_col
        else:
            for j, name in enumerate(self.key_names):
                cols[name] = object_array([k[j] for k in key_col.tolist()])

        def cat(arrays, pad_dtype, fill):
            pad = np.full(n_drop, fill, dtype=pad_dtype)
            return np.concatenate([*arrays, pad]) if arrays else pad

        # nullable columns as masked arrays: null on the "dropped" rows (or on the window rows)
        on_drops = np.concatenate([np.zeros(n_win, bool), np.ones(n_drop, bool)])

        def ints(arrays, dtype=np.int64):
            """Window-row values, then null on the dropped rows."""
            data = np.concatenate([*(np.asarray(a, dtype) for a in arrays), np.zeros(n_drop, dtype)])
            cls = pd.arrays.BooleanArray if dtype is bool else pd.arrays.IntegerArray
            return cls(data, on_drops.copy())

        def drop_counts(values):
            """Null on the window rows, then the dropped rows' counts."""
            data = np.concatenate([np.zeros(n_win, np.int64), np.asarray(values, np.int64)])
            return pd.arrays.IntegerArray(data, ~on_drops)

        res = [r for _, r in parts]
        cols["kind"] = np.repeat(np.array(["window", "dropped"], dtype=object), [n_win, n_drop])
        cols["query_id"] = cat([r.query_id.astype(object) for r in res], object, None)
        cols["measure"] = cat([r.measure.astype(object) for r in res], object, None)
        cols["window_start"] = ints([r.start for r in res])
        cols["window_end"] = ints([r.end for r in res])
        cols["update"] = ints([r.update for r in res], bool)
        c = 0
        for i, fn in enumerate(self.template.aggregations):
            vals = [r.values[i] for r in res]
            if isinstance(fn, M4):
                arr = np.concatenate(vals) if vals else np.zeros((0, 4))
                for j in range(4):
                    cols[self.agg_columns[c][0]] = np.concatenate([arr[:, j], np.full(n_drop, np.nan)])
                    c += 1
                continue
            name, typ = self.agg_columns[c]
            c += 1
            if isinstance(fn, Count):
                cols[name] = ints(vals)
            elif typ == "double" and all(isinstance(v, np.ndarray) for v in vals):
                flat = np.concatenate(vals) if vals else np.zeros(0)
                cols[name] = np.concatenate([flat.astype(np.float64), np.full(n_drop, np.nan)])
            else:
                flat = [x for v in vals for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
                if typ == "double":
                    cols[name] = np.array([np.nan if x is None else float(x) for x in flat] + [np.nan] * n_drop)
                    continue
                if typ.startswith("array"):
                    flat = [None if x is None else [float(y) for y in np.atleast_1d(x)] for x in flat]
                cols[name] = pd.Series(flat + [None] * n_drop, dtype=object)
        cols["late_records"] = drop_counts([d[1] for d in drops])
        cols["null_records"] = drop_counts([d[2] for d in drops])
        return pd.DataFrame({k: cols[k] for k in self.columns})


def _none_if_na(k):
    """Null keys are one key (``None``), whatever pandas made of them (NaN, NA)."""
    return None if k is None or k is pd.NA or (isinstance(k, float) and k != k) else k


def _key_specs(df, key) -> list[tuple[str, str]]:
    """``(output name, SQL expression)`` per key."""
    if isinstance(key, dict):
        return [(str(n), str(e)) for n, e in key.items()]
    exprs = [key] if isinstance(key, str) else list(key)
    if not exprs:
        raise ValueError("key must name at least one column or expression")
    names = set(df.columns)
    out = []
    for i, e in enumerate(exprs):
        bare = e.strip("`")
        if bare in names:
            out.append((bare, e))
        else:
            out.append(("key" if len(exprs) == 1 else f"key_{i}", e))
    if len({n for n, _ in out}) != len(out):
        raise ValueError(f"key columns {[n for n, _ in out]}: names must be distinct (pass a dict name -> expr)")
    return out


def slice_windows(df, key: str | Sequence[str] | dict, windows: Iterable | dict,
                  aggregations: Iterable[AggregateFunction], value="try_cast(CAST(value AS STRING) AS DOUBLE)",
                  num_key_groups: int = 8, allowed_lateness_ms: int = 1000, stream_order: str = "out_of_order",
                  store: str = "lazy", idle_timeout_ms: int | None = None,
                  processor_class: type | None = None):
    """Window aggregates per key of a ``format("dataflow-kafka")`` stream (see module docstring).

    Parameters
    ----------
    df : streaming DataFrame with the source's row contract (``kind``, ``event_time``, ...).
    key : column name, SQL expression, a list of them, or a dict ``{output name: expression}``.
    windows : window definitions (:mod:`windowing` windows, or slicer-only ones): a list
        (``query_id`` is the index as a string) or a dict ``{query_id: window}``.
    aggregations : :mod:`windowing` aggregations, all computed for every window.
    value : SQL expression (str) or Column giving the aggregated value; cast to double
        (unparseable values become null and are reported in ``null_records``).
    num_key_groups : stateful processor calls per micro-batch (and unit of state).
    allowed_lateness_ms : allowed lateness behind the punctuation watermark.
    stream_order, store : passed to :class:`~slicer.SlicingWindowOperator`.
    idle_timeout_ms : idle-partition policy of the punctuation tracker (``None``: never idle).
    processor_class : a :class:`SlicingProcessor` subclass to run instead, with the same
        constructor (``bench/slicer_spark.py`` runs one that computes nothing, to measure what
        the plan costs without any slicing).
    """
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    aggs = list(aggregations)
    wins = windows if isinstance(windows, dict) else list(windows)
    if not wins:
        raise ValueError("slice_windows: at least one window")
    if not aggs:
        raise ValueError("slice_windows: at least one aggregation")
    processor_class = processor_class or SlicingProcessor
    if not (isinstance(processor_class, type) and issubclass(processor_class, SlicingProcessor)):
        raise TypeError(f"slice_windows: processor_class must be a SlicingProcessor subclass, got {processor_class!r}")
    template = SlicingWindowOperator(wins, aggs, allowed_lateness_ms=allowed_lateness_ms,
                                     stream_order=stream_order, store=store)
    specs = _key_specs(df, key)
    reserved = _CONTROL + [KEY_GROUP_COLUMN, _VALUE] + [c for c, _ in output_columns([], aggs)]
    clash = {n for n, _ in specs} & set(reserved)
    if clash:
        raise ValueError(f"key column name(s) {sorted(clash)} clash with the source's columns; pass a dict")
    keyed = df.select("*", *[F.expr(e).alias(f"__slicer_key_{i}") for i, (_, e) in enumerate(specs)])
    val = value if isinstance(value, Column) else F.expr(value)
    keyed = keyed.withColumn(_VALUE, val.try_cast("double"))
    internal = [f"__slicer_key_{i}" for i in range(len(specs))]
    grouped = with_key_groups(keyed, internal, num_key_groups)
    control = [F.when(F.col("kind") == "modification", F.unix_millis("timestamp")).alias(c) if c == "timestamp"
               else F.col(c) for c in _CONTROL]
    slim = grouped.select(KEY_GROUP_COLUMN, *control, _VALUE,
                          *[F.col(c).alias(n) for c, (n, _) in zip(internal, specs)])
    key_types = [(n, slim.schema[n].dataType.simpleString()) for n, _ in specs]
    columns = output_columns(key_types, aggs)
    schema = ", ".join(f"`{n}` {t}" for n, t in columns)
    proc = processor_class(template, [n for n, _ in specs], columns, idle_timeout_ms)
    packed = pack_key_groups(slim, None, num_key_groups)
    return packed.groupBy(KEY_GROUP_COLUMN).transformWithStateInPandas(deferred(proc), schema, "Append", "None")
