"""Joins as stages of the stage layer: two named inputs, one query (:mod:`keygroups`).

:class:`WindowJoinStage` runs a :class:`~joins.WindowJoin` and :class:`IntervalJoinStage` an
:class:`~joins.IntervalJoin` per key group. Each side is a :class:`JoinInput`: its name, its join
key and the columns it carries into the joined rows, and which upstream rows it takes
(``select``/``where``). A join stage is a multi-input :class:`keygroups.Stage`
(:mod:`keygroups.fan_in`): both inputs' rows are unioned with an ``input`` column and routed by
the join key with the one routing function, and the stage gets each input's low watermark (the
minimum over that input's senders), which it gives the engine as that side's punctuation. So the
join's watermark is the minimum over every sender of both inputs: a slow input holds the join
back, and nothing is dropped because the other side ran ahead.

Where the inputs come from (:meth:`keygroups.Pipeline.join`, Beam's ``{tag: pcoll} |
CoGroupByKey()``):

* one source whose rows are split: ``Pipeline([stage]).apply(source)``, each side's
  ``select={"topic": ...}`` (a ``select`` on ``topic`` also gives the side its partitions' punctuations);
* one source per side: ``Pipeline([stage]).apply({"persons": p_df, "auctions": a_df})``;
* other pipelines' outputs: ``Pipeline.join(stage, persons=..., auctions=...)``.

Output rows, one per joined row: the key column(s) (named after the left input's key), the
window's ``window_start_ms``, ``window_end_ms`` and the pane's ``pane_index``, ``timing``,
``is_first``, ``is_last``, ``is_retraction`` (windowed join only), then each side's columns and
``<input>_event_time_ms``, ``None`` for the side an outer join pads. ``event_time_ms``: the pane's
timestamp (windowed; end of window - 1 by default), the later of the two rows (interval).

>>> from dataflow_kafka.joins.stage import JoinInput, WindowJoinStage
>>> from dataflow_kafka.windowing import TumblingWindow
>>> q8 = WindowJoinStage(JoinInput("persons", key="id", columns=["name"], select={"topic": "persons"}),
...                      JoinInput("auctions", key="seller", columns=["reserve"], select={"topic": "auctions"}),
...                      window=TumblingWindow(10_000))
>>> [c for c, _ in q8.output_columns()][:3], [c for c, _ in q8.output_columns()][-4:]
(['id', 'window_start_ms', 'window_end_ms'], ['name', 'persons_event_time_ms', 'reserve', 'auctions_event_time_ms'])
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.joins.interval_join import IntervalJoin, IntervalJoinEngine
from dataflow_kafka.joins.spec import LEFT, RIGHT, JoinError, Pair, SidePunctuation, Row
from dataflow_kafka.joins.window_join import WindowJoin, WindowJoinEngine, fold
from dataflow_kafka.keygroups import Dropped, Stage, StageInput, StageOutput
from dataflow_kafka.keygroups.stage import INPUT_COLUMN, Input
from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from dataflow_kafka.watermarks.triggers import DefaultTrigger, Trigger
from dataflow_kafka.watermarks.windows import IntervalWindow
from dataflow_kafka.windowing import Window
from dataflow_kafka.windowing.rows import key_specs, output_watermark, plain_value

__all__ = ["JoinInput", "WindowJoinStage", "IntervalJoinStage", "current_joins", "WINDOW_PANE_COLUMNS"]

#: Columns of a windowed join's rows after the key columns.
WINDOW_PANE_COLUMNS = [("window_start_ms", "bigint"), ("window_end_ms", "bigint"), ("pane_index", "bigint"),
                       ("timing", "string"), ("is_first", "boolean"), ("is_last", "boolean"),
                       ("is_retraction", "boolean")]
_INTEGRAL = ("tinyint", "smallint", "int", "bigint", "long")
_FLOATING = ("double", "float")


@dataclasses.dataclass(frozen=True)
class JoinInput:
    """One side of a join stage.

    ``name``: the input's name (``apply({name: source})``, ``Pipeline.join(stage, name=...)``,
    the ``<name>_event_time_ms`` column). ``key``: the join key, as a windowing stage's key
    (column name(s), SQL expression(s), a dict ``{name: expression}``, ``keygroups.Computed``);
    the left input's key names the output key columns, the right's is matched to it by position
    (and must have the same types). ``columns``: what this side carries into the joined rows,
    column names or ``{name: expression}``. ``select``/``where``: which upstream data rows this
    side takes (:class:`keygroups.Input`), e.g. ``select={"topic": "persons"}``.
    """

    name: str
    key: Any
    columns: Any = ()
    select: Mapping[str, Any] | None = None
    where: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise JoinError(f"JoinInput name={self.name!r}: expected an identifier (it names columns)")
        cols = self.columns
        if isinstance(cols, str):
            cols = [cols]
        if not isinstance(cols, Mapping):
            cols = {str(c): str(c) for c in cols}
        object.__setattr__(self, "columns", dict(cols))
        object.__setattr__(self, "_keys", key_specs(self.key))

    @property
    def key_specs(self) -> list[tuple[str, Any]]:
        return list(self._keys)            # type: ignore[attr-defined]

    @property
    def time_column(self) -> str:
        return f"{self.name}_event_time_ms"


@dataclasses.dataclass(eq=False)
class _JoinStage(Stage):
    """What both join stages share: the two inputs, routing, binding, rows to the engine."""

    left: JoinInput = None                  # type: ignore[assignment]
    right: JoinInput = None                 # type: ignore[assignment]
    num_key_groups: int = 4
    name: str | None = None
    types: dict = dataclasses.field(default_factory=dict)     # bound: {column: DDL type}

    def _validate(self) -> None:
        for side in ("left", "right"):
            if not isinstance(getattr(self, side), JoinInput):
                raise JoinError(f"{side}={getattr(self, side)!r}: expected a joins.stage.JoinInput")
        if self.left.name == self.right.name:
            raise JoinError(f"both inputs are named {self.left.name!r}: name them apart (they name the inputs)")
        if len(self.left.key_specs) != len(self.right.key_specs):
            raise JoinError(f"input {self.left.name!r} has {len(self.left.key_specs)} key columns, "
                            f"{self.right.name!r} {len(self.right.key_specs)}: the keys are matched by position")
        taken: dict[str, str] = {k: "the key" for k in self._key_names()}
        for c, _ in self._fixed_columns():
            taken[c] = "a column of the join's rows"
        for inp in (self.left, self.right):
            for c in list(inp.columns) + [inp.time_column]:
                if c in taken:
                    raise JoinError(f"input {inp.name!r}: column {c!r} clashes with {taken[c]}; rename it "
                                    "(columns={'new_name': 'expression'})")
                taken[c] = f"a column of input {inp.name!r}"

    def _fixed_columns(self) -> list[tuple[str, str]]:
        return []

    # -- input ------------------------------------------------------------------------------------
    def stage_inputs(self) -> tuple[Input, ...]:
        names = self._key_names()
        return tuple(Input(inp.name, {**{n: e for n, (_, e) in zip(names, inp.key_specs)}, **inp.columns},
                           inp.select, inp.where) for inp in (self.left, self.right))

    def inputs(self) -> dict[str, Any]:
        return {c: e for inp in self.stage_inputs() for c, e in inp.columns.items()}

    def routing(self) -> list[str]:
        return self._key_names()

    def _key_names(self) -> list[str]:
        """The output key columns: the left input's key names (the right's are matched by position)."""
        return [n for n, _ in self.left.key_specs]

    def bind(self, input_types: dict[str, str]) -> "_JoinStage":
        s = copy.copy(self)
        s.types = dict(input_types)
        return s

    # -- output -----------------------------------------------------------------------------------
    def output_columns(self) -> list[tuple[str, str]]:
        t = self.types
        keys = [(k, t.get(k, "string")) for k in self._key_names()]
        sides = [(c, t.get(c, "string")) for inp in (self.left, self.right)
                 for c in [*inp.columns, inp.time_column]]
        sides = [(c, "bigint") if c.endswith("_event_time_ms") and c not in t else (c, ty) for c, ty in sides]
        return keys + self._fixed_columns() + sides

    def output_key_columns(self) -> list[str]:
        return self._key_names()

    # -- rows to the engine -------------------------------------------------------------------------
    def _rows(self, data: pd.DataFrame | None) -> tuple[list[Row], list[Dropped]]:
        """Data rows as engine rows (left input first, then right, each in offset order); rows
        with a null key are dropped (reason ``null``: a null key equals nothing, as in SQL)."""
        rows: list[Row] = []
        nulls: Counter = Counter()
        if data is None or not len(data):
            return rows, []
        for side, inp in ((LEFT, self.left), (RIGHT, self.right)):
            part = data[(data[INPUT_COLUMN] == inp.name).to_numpy(bool)]
            if not len(part):
                continue
            keys = _keys(part, self._key_names())
            values = list(zip(*(_column(part[c], self.types.get(c)) for c in inp.columns))) if inp.columns \
                else [()] * len(part)
            for k, ts, v in zip(keys, part["event_time_ms"].astype("int64").tolist(), values):
                if k is None or (isinstance(k, tuple) and None in k):
                    nulls[k] += 1
                    continue
                rows.append(Row(side, k, ts, v))
        return rows, [Dropped(k, "null", n) for k, n in nulls.items()]

    def _punctuations(self, batch: StageInput) -> list[SidePunctuation]:
        marks = batch.input_watermarks or {}
        return [SidePunctuation(side, marks[inp.name]) for side, inp in ((LEFT, self.left), (RIGHT, self.right))
                if marks.get(inp.name) is not None]

    def _side_values(self, inp: JoinInput, row: tuple | None) -> list:
        if row is None:
            return [None] * (len(inp.columns) + 1)
        return [*row[1], row[0]]

    def _dropped(self, engine_dropped: Iterable, reports: list[Dropped]) -> dict:
        """The engine's dropped rows as the stage's (and per input, for the metrics row)."""
        per: dict[str, Counter] = {}
        for d in engine_dropped:
            reports.append(Dropped(d.key, d.reason, d.count))
            per.setdefault(self.left.name if d.side == LEFT else self.right.name, Counter())[d.reason] += d.count
        return {n: dict(c) for n, c in per.items()}

    def _key_values(self, key: Any) -> tuple:
        return key if len(self._key_names()) > 1 else (key,)

    # -- results --------------------------------------------------------------------------------------
    def current_results(self, frames: Sequence[pd.DataFrame], kind: str = "data") -> pd.DataFrame:
        """One row per current joined pair (``dataflow_kafka.current_results``), repeated when a pair
        joined several times: the key column(s), a window join's ``window_start_ms`` and
        ``window_end_ms`` (its panes folded per accumulation mode, :func:`current_joins`), each
        input's columns and ``<input>_event_time_ms`` (``None`` for the side an outer join pads);
        sorted by those columns."""
        windows = [c for c, _ in self._fixed_columns()][:2]          # a window join's start and end
        names = [*self._key_names(), *windows,
                 *(c for inp in (self.left, self.right) for c in [*inp.columns, inp.time_column])]
        rows = []
        for ident, pairs in current_joins(frames, self, kind=kind).items():
            key, window = ident if windows else (ident, ())
            head = [*self._key_values(key), *window]
            for (lt, rt), n in pairs.items():
                rows += [head + self._side_values(self.left, lt) + self._side_values(self.right, rt)] * n
        out = pd.DataFrame(rows, columns=names, dtype=object)        # a padded side's values stay None
        return out.sort_values(names, kind="stable", na_position="first").reset_index(drop=True)

    # -- state: the engine of one key group ----------------------------------------------------------
    def new_state(self) -> WindowJoinEngine | IntervalJoinEngine:
        return self._join.engine()

    def dump_state(self, state: WindowJoinEngine | IntervalJoinEngine) -> bytes:
        return state.to_bytes()

    def load_state(self, blob: bytes) -> WindowJoinEngine | IntervalJoinEngine:
        return type(self._join.engine()).from_bytes(self._join, blob)

    def _input_watermarks(self, engine: WindowJoinEngine | IntervalJoinEngine) -> list[dict]:
        """``watermark`` rows: each input's punctuation as the engine holds it."""
        return [state_item("watermark", start_ms=engine.watermark.side_ms(side), input=inp.name)
                for side, inp in ((LEFT, self.left), (RIGHT, self.right))]


@dataclasses.dataclass(eq=False)
class WindowJoinStage(_JoinStage):
    """A windowed join (Flink's window join, Beam's CoGroupByKey per window) as a stage.

    ``left``, ``right``: the inputs (:class:`JoinInput`); ``window``, ``how``, ``trigger``,
    ``accumulation_mode``, ``allowed_lateness_ms``, ``timestamp_combiner``, ``on_time_behavior``:
    as :class:`joins.WindowJoin` (one row per joined row of each pane; an
    ``accumulating_and_retracting`` pane's retraction rows have ``is_retraction``). Output
    watermark (``output_watermark``): ``"complete"``, the input watermark minus the allowed
    lateness (no pane it may still emit is behind it), or ``"input"`` (late panes reach the next
    stage as late data), as :class:`watermarks.stage.WindowingStage`. State is freed when the
    watermark passes a window's end plus the allowed lateness; later rows are dropped rows
    (``late``; ``closed`` when the window's trigger had finished; ``null`` for a null key).
    """

    window: Window = None                   # type: ignore[assignment]
    how: Any = "inner"
    trigger: Trigger = dataclasses.field(default_factory=DefaultTrigger)
    accumulation_mode: Any = AccumulationMode.DISCARDING
    allowed_lateness_ms: int = 0
    timestamp_combiner: Any = TimestampCombiner.END_OF_WINDOW
    on_time_behavior: Any = OnTimeBehavior.FIRE_ALWAYS
    output_watermark: str = "complete"

    def __post_init__(self) -> None:
        self._validate()
        output_watermark(self.output_watermark, None, 0)
        self._join = WindowJoin(self.window, self.how, self.trigger, self.accumulation_mode, self.allowed_lateness_ms,
                                self.timestamp_combiner, self.on_time_behavior)
        self.how, self.accumulation_mode = self._join.how, self._join.accumulation_mode

    def _fixed_columns(self) -> list[tuple[str, str]]:
        return list(WINDOW_PANE_COLUMNS)

    def describe_state(self, engine: WindowJoinEngine) -> list[dict]:
        """Each input's watermark, and per key every live window (not yet garbage collected:
        ``end + allowed_lateness_ms`` beyond the watermark): ``count`` rows held, per input, panes
        fired, what its trigger waits for (``next``), ``expires_ms``."""
        rows = self._input_watermarks(engine)
        for w in engine.driver.window_states():
            lefts, rights = w.accumulator[:2] if w.accumulator is not None else ((), ())
            rows.append(state_item("window", key=w.key, start_ms=w.window.start_ms, end_ms=w.window.end_ms,
                                   count=len(lefts) + len(rights), **{self.left.name: len(lefts), self.right.name: len(rights)},
                                   panes=w.panes, new_data=w.new_data, closed=w.closed or None, next=w.waiting,
                                   expires_ms=w.expires_ms))
        return rows

    def process(self, engine: WindowJoinEngine, batch: StageInput) -> StageOutput:
        rows, dropped = self._rows(batch.data)
        out = engine.process(rows, self._punctuations(batch), batch.processing_time_ms)
        per_input = self._dropped(out.dropped, dropped)
        hold = output_watermark(self.output_watermark, batch.watermark_ms, self.allowed_lateness_ms)
        floor = None if self.output_watermark != "complete" else output_watermark(
            self.output_watermark, batch.previous_watermark_ms, self.allowed_lateness_ms)
        live = engine.live_windows()
        metrics = {"windows": sum(len(w) for w in live.values()), "dropped": per_input,
                   "watermarks": batch.input_watermarks}
        return StageOutput(self._frame(out.panes, floor), hold, dropped, metrics)

    def _frame(self, panes: list[Pane], floor: int | None) -> pd.DataFrame:
        names = [c for c, _ in self.output_columns()] + ["event_time_ms"]
        rows = []
        for p in panes:
            head = [*self._key_values(p.key), p.start_ms, p.end_ms, p.index, p.timing.name, p.is_first, p.is_last,
                    p.is_retraction]
            ts = p.timestamp_ms if floor is None else max(p.timestamp_ms, floor)
            for pair in p.value:
                rows.append(head + self._side_values(self.left, pair.left) + self._side_values(self.right, pair.right)
                            + [ts])
        return pd.DataFrame(rows, columns=names) if rows else pd.DataFrame({c: [] for c in names})


@dataclasses.dataclass(eq=False)
class IntervalJoinStage(_JoinStage):
    """An interval join (Flink's ``between``, SQL's ``a.ts BETWEEN b.ts - x AND b.ts + y``) as a stage.

    A left row ``l`` and a right row ``r`` of one key join when ``l.ts + lower_bound_ms <= r.ts
    <= l.ts + upper_bound_ms``; with ``a`` left and ``b`` right, the SQL form is
    :meth:`between` ``(-y, x)``. Each pair is emitted once, when its later row arrives; outer
    joins emit a row that can no longer match, padded, when its state is freed (the watermark
    minus ``allowed_lateness_ms`` passed its interval). Output watermark: the input watermark
    minus the allowed lateness, and minus how far back a padded row can lie (``upper_bound_ms``
    for left rows, ``-lower_bound_ms`` for right rows, of the outer sides), so that no row it
    emits later is behind it.
    """

    lower_bound_ms: int = 0
    upper_bound_ms: int = 0
    how: Any = "inner"
    allowed_lateness_ms: int = 0

    def __post_init__(self) -> None:
        self._validate()
        self._join = IntervalJoin(self.lower_bound_ms, self.upper_bound_ms, self.how, self.allowed_lateness_ms)
        self.how = self._join.how

    @classmethod
    def between(cls, left: JoinInput, right: JoinInput, lower_bound_ms: int, upper_bound_ms: int,
                **options: Any) -> "IntervalJoinStage":
        """Flink's ``between(lower, upper)``: right rows with ``ts`` in ``[l.ts + lower, l.ts + upper]``."""
        return cls(left=left, right=right, lower_bound_ms=lower_bound_ms, upper_bound_ms=upper_bound_ms, **options)

    def describe_state(self, engine: IntervalJoinEngine) -> list[dict]:
        """Each input's watermark, and per key and input the rows held (``held``: ``[start_ms,
        end_ms)`` their event times, ``count``, ``matched``; ``expires_ms``: the watermark that
        frees the oldest, when no row still to come can match it)."""
        rows = self._input_watermarks(engine)
        late, lower, upper = self.allowed_lateness_ms, self.lower_bound_ms, self.upper_bound_ms
        for key, per_side in engine.held_rows().items():
            for side, inp, reach in ((LEFT, self.left, upper), (RIGHT, self.right, -lower)):
                ts, _, matched = per_side[side]
                if len(ts):
                    rows.append(state_item("held", key=key, start_ms=ts[0], end_ms=ts[-1] + 1, count=len(ts),
                                           input=inp.name, matched=int(matched.sum()),
                                           expires_ms=int(ts[0]) + reach + late + 1))
        return rows

    def hold_ms(self, watermark_ms: int | None) -> int | None:
        """The output watermark for an input watermark (class docstring)."""
        if watermark_ms is None:
            return None
        how, back = self._join.how, 0
        if how.keeps_left:
            back += max(self.upper_bound_ms, 0)
        if how.keeps_right:
            back += max(-self.lower_bound_ms, 0)
        return watermark_ms - self.allowed_lateness_ms - back

    def process(self, engine: IntervalJoinEngine, batch: StageInput) -> StageOutput:
        rows, dropped = self._rows(batch.data)
        out = engine.process(rows, self._punctuations(batch), batch.processing_time_ms)
        per_input = self._dropped(out.dropped, dropped)
        held = engine.buffered()
        metrics = {"held": {self.left.name: held[LEFT], self.right.name: held[RIGHT]}, "dropped": per_input,
                   "watermarks": batch.input_watermarks}
        names = [c for c, _ in self.output_columns()] + ["event_time_ms"]
        frame = pd.DataFrame([[*self._key_values(j.key), *self._side_values(self.left, j.left),
                               *self._side_values(self.right, j.right), j.ts_ms] for j in out.rows], columns=names) \
            if out.rows else pd.DataFrame({c: [] for c in names})
        return StageOutput(frame, self.hold_ms(batch.watermark_ms), dropped, metrics)


# -- helpers ----------------------------------------------------------------------------------------------

def _keys(part: pd.DataFrame, names: Sequence[str]) -> list:
    cols = [[plain_value(v) for v in part[n].tolist()] for n in names]
    return cols[0] if len(cols) == 1 else list(zip(*cols))


def _column(col: pd.Series, ddl: str | None) -> list:
    """A value column as plain Python values of its declared type (nulls as None), so that rows
    read from Spark (Arrow) and from pandas frames compare and sort alike."""
    values = [plain_value(v) for v in col.tolist()]
    t = (ddl or "").lower()
    if t in _INTEGRAL:
        return [None if v is None else int(v) for v in values]
    if t in _FLOATING:
        return [None if v is None else float(v) for v in values]
    return values


def current_joins(frames: Iterable[pd.DataFrame], stage: WindowJoinStage | IntervalJoinStage,
                  kind: str = "data") -> dict:
    """The current joined rows from a join stage's output frames (in order), in the engines' form
    (the references of the tests compare with it; ``dataflow_kafka.current_results`` gives them
    as a frame): ``{(key, (start, end)): Counter of ((left ts, left values) or None, (right ts,
    right values) or None)}`` for a windowed join (its panes folded as :func:`joins.fold` does,
    per accumulation mode), ``{key: Counter}`` for an interval join (every pair once).
    ``kind="result"``: the rows of the stage kept with ``Pipeline.emit``."""
    windowed = isinstance(stage, WindowJoinStage)
    keys = stage._key_names()
    panes: list[Pane] = []
    joined: dict = {}
    for frame in frames:
        mask = frame["kind"] == kind
        if kind == "result" and "topic" in frame.columns:
            mask &= frame["topic"] == stage.name
        data = frame[mask.to_numpy(bool)]
        if not len(data):
            continue
        key_vals = _keys(data, keys)
        lefts = _side_rows(data, stage.left)
        rights = _side_rows(data, stage.right)
        if not windowed:
            for k, lt, rt in zip(key_vals, lefts, rights):
                joined.setdefault(k, Counter())[(lt, rt)] += 1
            continue
        cur: dict = {}
        for k, s, e, i, t, f, la, r, lt, rt in zip(key_vals, *(data[c].tolist() for c, _ in WINDOW_PANE_COLUMNS),
                                                   lefts, rights):
            ident = (k, int(s), int(e), int(i), bool(r), t)
            if ident not in cur:
                cur[ident] = Pane(k, IntervalWindow(int(s), int(e)), [], 0, PaneTiming[t], int(i), bool(f), bool(la),
                                  bool(r))
                panes.append(cur[ident])
            cur[ident].value.append(Pair(lt, rt))
    if not windowed:
        return joined
    panes = [dataclasses.replace(p, value=tuple(p.value)) for p in panes]
    return {(k, (w.start_ms, w.end_ms)): Counter(rows)
            for (k, w), rows in fold(panes, stage.accumulation_mode).items()}


def _side_rows(data: pd.DataFrame, inp: JoinInput) -> list:
    times = [plain_value(v) for v in data[inp.time_column].tolist()]
    values = list(zip(*(_column(data[c], None) for c in inp.columns))) if inp.columns else [()] * len(data)
    return [None if t is None else (int(t), tuple(v)) for t, v in zip(times, values)]
