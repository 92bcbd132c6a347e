"""Keeping, before the shuffle, only the rows that decide a Dataflow stage's windows.

Beam's runners lift a combiner's first steps to before the shuffle (each worker combines the
values of a key it read, the Dataflow Model, Akidau et al., VLDB 2015, §2.3: ``GroupByKey``
followed by a combine), as Spark's partial aggregation does. A :class:`WindowingStage` with
``select_before_shuffle=True`` does the part of that which keeps the stage's panes exactly: when
each of its aggregations is decided by the highest (or lowest) value of one column
(:meth:`windowing.AggregateFunction.selection`: ``Max``, ``Min``, NEXMark's ``ArgMax``), the
source's tasks (``keyGroupPacking``) send, per key and window, only the rows at the task's
highest (lowest) value, ties all kept; the operator then computes the same accumulators from
fewer rows (NEXMark Q7: one operator, a few rows per task and window crossing the shuffle).

Why the panes stay the same. The operator adds a micro-batch's rows before it folds the
batch's punctuations into its watermark, so the watermark a row meets is at most a punctuation
of an earlier batch; a source punctuation is a partition's newest data event time less
``watermarkDelayMs``, at most ``bound_ms``, the newest data event time the source read before
the batch over every partition (the offset log's ``p``, so a replay selects the same rows). A
window ending after ``bound_ms`` therefore gets the row on time, its pane not yet fired, and an
aggregation decided by its top rows ends with the same accumulator; no early trigger is allowed
(``AfterCount`` would count rows), the pane timestamp is the window's end, and window commands
adding a window are refused (the element history then holds the selected rows only). A row
dropped here is in no window ending at or before ``bound_ms`` (those rows all go on: late
panes, drops and their counts stay per row); rows with a null key, value or event time go on as
well (the stage counts them). The one case this does not cover: punctuations a producer writes
(``PUNCTUATION_HEADER``) running ahead of every data event time the source has read; a row
then dropped here could meet a watermark past its window, which the operator would have taken
as a late pane. What does change: the stage's ``rows_in`` metric counts the rows that crossed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.watermarks.windows import window_copies

__all__ = ["RowSelection", "row_selection"]


@dataclass(frozen=True)
class RowSelection:
    """Which of a task's payload rows to send (module docstring): a picklable step the source's
    tasks run (:meth:`keygroups.stage.StageLogic.before_shuffle`).

    ``keys``, ``values``: the payload columns of the stage's key and value; ``grids``: per window
    of the stage ``(size, slide, offset)``, or None for the global window; ``picks``: per
    aggregation ``("max" | "min", value column index)``."""

    keys: tuple
    values: tuple
    grids: tuple
    picks: tuple

    def __call__(self, payload, kinds: np.ndarray, bound_ms: int | None) -> np.ndarray | None:
        """A bool per row of ``payload`` (a ``pyarrow.Table``): True to send it; None: send all."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if bound_ms is None:
            return None
        data = np.asarray(kinds) == "data"
        cols = [payload.column(c) for c in ("event_time_ms", *self.keys, *self.values)]
        null = np.zeros(payload.num_rows, bool)
        for c in cols:                               # null, or NaN (which the stage counts as null)
            null |= pc.is_null(c, nan_is_null=True).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(data & ~null)          # the candidates: data rows with every field
        if rows.size < 2:
            return None
        taken = pa.array(rows)
        picked = {}
        for _, i in self.picks:
            if i not in picked:
                col = payload.column(self.values[i]).take(taken)
                if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
                    return None                       # ordered otherwise than numbers: all go on
                picked[i] = col.to_numpy(zero_copy_only=False)
        key = _codes([payload.column(k).take(taken) for k in self.keys], pc)
        times = payload.column("event_time_ms").take(taken).to_numpy(zero_copy_only=False).astype(np.int64)
        send = np.zeros(rows.size, bool)
        for grid in self.grids:
            elem, start, end = _windows(times, grid)
            due = end <= bound_ms                      # a window the watermark may have passed: every row
            _, group = np.unique(np.stack([key[elem], start]), axis=1, return_inverse=True)
            group = group.ravel()
            keep = due.copy()
            for how, i in self.picks:
                v = picked[i][elem]
                keep |= v == _extreme(v, group, how)[group]
            send[elem[keep]] = True
        keep_rows = np.ones(payload.num_rows, bool)
        keep_rows[rows[~send]] = False
        return keep_rows


def _codes(columns: list, pc) -> np.ndarray:
    """One int64 code per row for the combination of ``columns``' values (Arrow arrays, no nulls)."""
    code = np.zeros(len(columns[0]) if columns else 0, np.int64)
    for c in columns:
        enc = pc.dictionary_encode(c.combine_chunks() if hasattr(c, "combine_chunks") else c)   # one dictionary
        idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        code = np.unique(code * (len(enc.dictionary) + 1) + idx, return_inverse=True)[1].ravel()   # stays small
    return code


def _windows(times: np.ndarray, grid: tuple | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(element, window start, window end)``, one entry per window each element belongs to."""
    if grid is None:                                   # the global window: one, never due
        n = times.size
        return np.arange(n), np.zeros(n, np.int64), np.full(n, np.iinfo(np.int64).max)
    size, slide, offset = grid
    elem, start = window_copies(times, size, slide, offset)
    return elem, start, start + size


def _extreme(v: np.ndarray, group: np.ndarray, how: str) -> np.ndarray:
    """The highest (``"max"``) or lowest value of each group."""
    n = int(group.max()) + 1 if group.size else 0
    if how == "max":
        out = np.full(n, -np.inf if v.dtype.kind == "f" else np.iinfo(v.dtype).min, v.dtype)
        np.maximum.at(out, group, v)
    else:
        out = np.full(n, np.inf if v.dtype.kind == "f" else np.iinfo(v.dtype).max, v.dtype)
        np.minimum.at(out, group, v)
    return out


def row_selection(stage) -> RowSelection:
    """The :class:`RowSelection` of a :class:`~watermarks.stage.WindowingStage` with
    ``select_before_shuffle=True``; an :class:`~dataflow_kafka.errors.InvalidArgumentError` naming
    what keeps the stage's panes from being computed from the selected rows."""
    from dataflow_kafka.watermarks.accumulation import TimestampCombiner
    from dataflow_kafka.watermarks.triggers import AfterWatermark, DefaultTrigger
    from dataflow_kafka.windowing import GlobalWindow

    why = f"WindowingStage(name={stage.name!r}, select_before_shuffle=True)"
    values = tuple(stage._value_inputs())
    picks = []
    for a in stage.aggregations:
        pick = a.selection(len(values))
        if pick is None:
            raise InvalidArgumentError(f"{why}: aggregation {a!r} is not decided by the highest or lowest value of a "
                                       f"column (AggregateFunction.selection: Max, Min, ...); every row may change it")
        picks.append(pick)
    trigger = stage.trigger
    if not (isinstance(trigger, DefaultTrigger) or (isinstance(trigger, AfterWatermark) and trigger.early is None)):
        raise InvalidArgumentError(f"{why}: trigger {trigger!r} fires before the watermark; only AfterWatermark "
                                   "without early firings (late ones allowed) and DefaultTrigger fire panes that "
                                   "the selected rows decide")
    if stage.timestamp_combiner != TimestampCombiner.END_OF_WINDOW:
        raise InvalidArgumentError(f"{why}: timestamp_combiner={stage.timestamp_combiner!r} takes the rows' event "
                                   "times; only END_OF_WINDOW keeps the pane timestamps of the selected rows")
    if stage.select:
        raise InvalidArgumentError(f"{why}: select={stage.select!r}: give one or the other")
    grids = []
    for wid, w in stage._queries().items():
        if isinstance(w, GlobalWindow):
            grids.append(None)
        elif w.grid is not None and w.measure == "time":
            grids.append(tuple(int(x) for x in w.grid))
        else:
            raise InvalidArgumentError(f"{why}: window {wid!r} ({w!r}) is not a tumbling, sliding or global window "
                                       "of event time, whose bounds a task knows without the other tasks' rows")
    return RowSelection(tuple(n for n, _ in stage._keys), values, tuple(grids), tuple(picks))
