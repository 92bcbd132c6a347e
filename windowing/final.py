"""The current result per window from a windowing stage's output rows (no Spark import at load).

Both windowing stages emit a row per window each time its result changes: the slicer
(:class:`slicer.stage.SlicerStage`) an update row (``update=True``) when late records change an
emitted window, the Dataflow stage (:class:`watermarks.stage.WindowingStage`) a pane per
firing; and when a window's extent changes after it was emitted (sessions extended or merged by
a late record, a punctuation window cut), a **retraction** row (``is_retraction=True``) takes
the old window back before its replacement comes (the Dataflow Model's retractions,
Akidau et al., VLDB 2015, §2.3). The current result is then the fold of the rows in emission
order: per window (key columns, ``query_id``, ``window_start_ms``, ``window_end_ms``) the latest
row, a window whose latest row is a retraction deleted. Only a window's last row in a batch
counts, so applying a batch twice (a replayed micro-batch) gives the same table.

That reading holds for the slicer and for Dataflow panes in the ``accumulating`` and
``accumulating_and_retracting`` modes; ``discarding`` panes are deltas (their sum is the
window's value), so :class:`WindowFold` refuses that stage.

* pandas: :func:`current_results` (frames -> table; the one final-results helper of every stage,
  ``dk.current_results``: a windowing stage's table is :func:`current_windows`'s, a join's one row
  per joined pair), :meth:`WindowFold.apply` (one batch into a table);
* Spark: :class:`UpsertWindows`, a ``foreachBatch`` function that upserts each micro-batch into
  a table keyed by window (retracted windows deleted).

Example
-------
>>> import pandas as pd
>>> rows = pd.DataFrame({"kind": "data", "k": "a", "query_id": "s", "window_start_ms": [1000, 1000, 1000],
...                      "window_end_ms": [11000, 11000, 15000], "count": [1, 1, 2],
...                      "is_retraction": [False, True, False]})
>>> current_windows([rows], key_columns=["k"])[["k", "window_start_ms", "window_end_ms", "count"]].values.tolist()
[['a', 1000, 15000, 2]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["WindowFold", "current_results", "current_windows", "UpsertWindows", "WINDOW_COLUMNS"]

#: The columns that, after the key columns, name a window.
WINDOW_COLUMNS = ["query_id", "window_start_ms", "window_end_ms"]
_RETRACTION = "is_retraction"
_ORDER = "__fold_order"
# contract columns that say nothing about a window's result (keygroups.contract)
_NOT_RESULT = ("kind", "topic", "partition", "offset", "punctuation_ms", "modification", "control_offset", "error",
               "dropped_key", "dropped_reason", "dropped_count", "metrics", "key_group", _RETRACTION)


@dataclass(frozen=True)
class WindowFold:
    """How to fold one stage's rows: the stage's key columns and which rows are its output.

    ``stage``: a windowing stage (its ``output_key_columns()`` and ``name``; a Dataflow stage in
    ``discarding`` mode is refused), or give ``key_columns`` directly. ``kind``: ``"data"`` (the
    pipeline's last stage) or ``"result"`` (a stage kept with :meth:`keygroups.Pipeline.emit`,
    whose rows also carry ``topic`` = the stage's name).
    """

    key_columns: tuple = ()
    kind: str = "data"
    topic: str | None = None

    @classmethod
    def of(cls, stage: Any = None, *, key_columns: Sequence[str] | None = None, kind: str = "data") -> "WindowFold":
        if kind not in ("data", "result"):
            raise InvalidArgumentError(f"kind={kind!r}: expected 'data' or 'result'")
        if stage is None and key_columns is None:
            raise InvalidArgumentError("WindowFold: give the stage or key_columns")
        mode = getattr(stage, "accumulation_mode", None)
        if mode is not None and getattr(mode, "name", str(mode)).upper() == "DISCARDING":
            raise InvalidArgumentError(f"stage {getattr(stage, 'name', None)!r} runs in discarding mode: its panes are deltas "
                             "(their sum is the window's value), not results to keep; use 'accumulating' or "
                             "'accumulating_and_retracting' to fold them per window")
        keys = tuple(key_columns if key_columns is not None else stage.output_key_columns() or ())
        return cls(keys, kind, getattr(stage, "name", None) if kind == "result" else None)

    @property
    def window_columns(self) -> list[str]:
        """The columns naming a window: the key columns, then :data:`WINDOW_COLUMNS`."""
        return [*self.key_columns, *WINDOW_COLUMNS]

    def rows(self, frame: pd.DataFrame) -> pd.DataFrame:
        """This stage's window rows of ``frame`` (rows of the contract), in emission order."""
        mask = frame["kind"] == self.kind if "kind" in frame.columns else pd.Series(True, index=frame.index)
        if self.topic is not None and "topic" in frame.columns:
            mask &= frame["topic"] == self.topic
        rows = frame[mask.to_numpy(bool)]
        if "offset" in rows.columns and "partition" in rows.columns and rows["offset"].notna().all():
            rows = rows.sort_values(["partition", "offset"], kind="stable")   # a key group's rows in order
        return rows

    def apply(self, table: pd.DataFrame | None, frame: pd.DataFrame) -> pd.DataFrame:
        """``table`` (the current windows, or None) with one batch of rows folded in: per window the
        batch's last row replaces the table's, or deletes it when it is a retraction. The table
        keeps the rows' window, data, ``event_time_ms`` and ``processing_time_ms`` columns."""
        rows = self.rows(frame)
        cols = self.window_columns
        if table is None:
            table = rows.iloc[:0].drop(columns=list(_NOT_RESULT), errors="ignore")
        if not len(rows):
            return table
        last = rows.assign(**{_ORDER: np.arange(len(rows))}).groupby(cols, dropna=False, sort=False).tail(1)
        # object columns (rows collected with toPandas) hold True/False/None: None is not a retraction
        drop = np.array([v is True or v == 1 for v in last[_RETRACTION]], bool) if _RETRACTION in last.columns \
            else np.zeros(len(last), bool)
        merged = pd.concat([table.assign(**{_ORDER: -1}), last[~drop]], ignore_index=True)
        gone = _index_of(merged, cols).isin(_index_of(last[drop], cols)) if drop.any() else np.zeros(len(merged), bool)
        merged = merged[~np.asarray(gone, bool)]
        out = merged.sort_values(_ORDER, kind="stable").groupby(cols, dropna=False, sort=False).tail(1)
        out = out.drop(columns=[_ORDER, *_NOT_RESULT], errors="ignore")
        return out.sort_values(cols, kind="stable").reset_index(drop=True)


def _index_of(frame: pd.DataFrame, cols: list[str]) -> pd.MultiIndex:
    return pd.MultiIndex.from_frame(frame[cols].astype(object).where(frame[cols].notna(), None))


def current_windows(frames: pd.DataFrame | Iterable[pd.DataFrame], stage: Any = None, *,
                    key_columns: Sequence[str] | None = None, kind: str = "data") -> pd.DataFrame:
    """The current result per window after the output ``frames`` of a pipeline (one per batch,
    in order; e.g. :meth:`keygroups.Pipeline.run_local`'s): see the module docstring and
    :class:`WindowFold` for the arguments. Returns one row per window, sorted by window."""
    fold = WindowFold.of(stage, key_columns=key_columns, kind=kind)
    table = None
    for frame in [frames] if isinstance(frames, pd.DataFrame) else frames:
        table = fold.apply(table, frame)
    if table is None:
        raise InvalidArgumentError("current_windows: no frames")
    return table


def current_results(frames: pd.DataFrame | Iterable[pd.DataFrame], stage: Any = None, *,
                    key_columns: Sequence[str] | None = None, kind: str = "data") -> pd.DataFrame:
    """The current results after a pipeline's output ``frames`` (one per batch, in order), for any
    stage that has results to fold: one row per result, sorted, a pandas frame of the stage's
    output columns (pane bookkeeping dropped). The stage says how its rows fold
    (:meth:`keygroups.Stage.current_results`): a windowing stage (slicer, Dataflow) gives one row
    per window (:func:`current_windows`), a join one row per joined pair (repeated when a pair
    joined several times; a window join's panes folded per accumulation mode). Without a stage,
    ``key_columns`` names the key columns of window rows. ``kind="result"``: the rows of a stage
    kept with :meth:`keygroups.Pipeline.emit`.

    >>> import pandas as pd
    >>> rows = pd.DataFrame({"kind": "data", "k": "a", "query_id": "s", "window_start_ms": [0, 0],
    ...                      "window_end_ms": [10, 10], "count": [1, 2]})
    >>> current_results([rows], key_columns=["k"])[["k", "window_start_ms", "count"]].values.tolist()
    [['a', 0, 2]]
    """
    if stage is None:
        return current_windows(frames, key_columns=key_columns, kind=kind)
    if key_columns is not None:
        raise InvalidArgumentError("current_results: give the stage or key_columns, not both")
    frames = [frames] if isinstance(frames, pd.DataFrame) else list(frames)
    return stage.current_results(frames, kind=kind)


class UpsertWindows:
    """A ``foreachBatch`` function that keeps a table equal to the current result per window of
    ``stage``'s rows: each micro-batch is folded in (the latest row per window upserted, retracted
    windows deleted; :class:`WindowFold`); a replayed batch changes nothing.

    The table is a Spark table named ``table`` (``saveAsTable``) or Parquet files at ``path``.
    The batch's window rows and the table go through the driver as pandas frames and the table
    is rewritten each batch: meant for result tables of modest size (one row per live or final
    window).

    >>> out.writeStream.foreachBatch(UpsertWindows("page_windows", stage)).start()   # doctest: +SKIP
    """

    def __init__(self, table: str | None = None, stage: Any = None, *, path: str | None = None,
                 key_columns: Sequence[str] | None = None, kind: str = "data") -> None:
        if (table is None) == (path is None):
            raise InvalidArgumentError("UpsertWindows: give a table name or a path, not both")
        self.table, self.path = table, path
        self.fold = WindowFold.of(stage, key_columns=key_columns, kind=kind)

    def _current(self, spark):
        if self.table is not None:
            return spark.table(self.table) if spark.catalog.tableExists(self.table) else None
        from pathlib import Path

        return spark.read.parquet(self.path) if Path(self.path).exists() else None

    def __call__(self, df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        spark = df.sparkSession
        mask = F.col("kind") == self.fold.kind
        if self.fold.topic is not None:
            mask &= F.col("topic") == self.fold.topic
        rows = df.where(mask)
        current = self._current(spark)
        keep = [c for c in rows.columns if c not in _NOT_RESULT]
        schema = current.schema if current is not None else rows.select(*keep).schema
        order = [c for c in ("partition", "offset") if c in rows.columns]
        batch = rows.select(*keep, *order, _RETRACTION).toPandas()
        new = self.fold.apply(current.toPandas() if current is not None else None,
                              batch.assign(kind=self.fold.kind, topic=self.fold.topic))
        sel = new[[f.name for f in schema.fields]]
        out = spark.createDataFrame(sel.astype(object).where(sel.notna(), None).values.tolist(), schema)
        writer = out.write.mode("overwrite")
        if self.table is not None:
            writer.saveAsTable(self.table)
        else:
            writer.parquet(self.path)
