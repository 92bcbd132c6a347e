"""What the windowing stages share on the stage layer: key specs, result columns, commands.

Both windowing stages (:class:`slicer.stage.SlicerStage`, :class:`watermarks.stage.WindowingStage`)
emit one output row per window result with the same column names: the key column(s), then
``query_id``, ``window_start_ms``, ``window_end_ms``, the stage's own columns, and one column
per aggregation named after it (:func:`aggregation_columns`); the row's ``event_time_ms`` is the
window's last instant (``window_end_ms - 1``), as Beam's default output timestamp.

Window commands on the control topic reach every stage; one with a ``"stage"`` field is applied
only by the stage of that name (:func:`window_command`)::

    {"op": "add_window", "stage": "page_windows", "id": "15s",
     "window": {"type": "sliding", "size_ms": 15000, "slide_ms": 5000}}
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

import numpy as np
import pandas as pd

from dataflow_kafka.windowing.aggregations import AggregateFunction
from dataflow_kafka.windowing.commands import WindowCommand, parse_command
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["key_specs", "distinct_keys", "plain_value", "aggregation_list", "aggregation_columns", "window_command", "output_watermark", "OUTPUT_WATERMARKS",
           "RESULT_COLUMNS"]

#: How a windowing stage sets its output low watermark (see :func:`output_watermark`).
OUTPUT_WATERMARKS = ("complete", "input")

#: Columns of every window result row after the key columns.
RESULT_COLUMNS = [("query_id", "string"), ("window_start_ms", "bigint"), ("window_end_ms", "bigint")]


def output_watermark(mode: str, watermark_ms: int | None, allowed_lateness_ms: int) -> int | None:
    """A windowing stage's output low watermark for its input watermark.

    ``"complete"`` (default): ``watermark - allowed_lateness``, the earliest end of a window the
    stage may still emit or update: nothing it emits later is behind it, so the next stage sees
    no late data from it, at the cost of a watermark that trails by the allowed lateness (Beam
    holds its output watermark for late panes the same way). ``"input"``: the input watermark:
    updates from records within the allowed lateness reach the next stage as late data, for its
    own allowed lateness to decide (lower latency downstream; the Dataflow model's late panes).
    """
    if mode not in OUTPUT_WATERMARKS:
        raise InvalidArgumentError(f"output_watermark={mode!r}: expected one of {OUTPUT_WATERMARKS}")
    if watermark_ms is None:
        return None
    return watermark_ms - allowed_lateness_ms if mode == "complete" else watermark_ms


def key_specs(key: Any, reserved: Sequence[str] = ()) -> list[tuple[str, Any]]:
    """``(output column name, SQL expression or keygroups.Computed)`` per key column: a plain column
    keeps its name, an expression (or a computed input) is ``key`` (``key_<i>`` with several); a
    dict ``{name: expression}`` names them."""
    def expr(e: Any) -> Any:
        return e if callable(e) and not isinstance(e, str) else str(e)     # a Computed stays one

    if isinstance(key, dict):
        specs = [(str(n), expr(e)) for n, e in key.items()]
    else:
        exprs = [key] if isinstance(key, str) or callable(key) else list(key)
        specs = []
        for i, e in enumerate(exprs):
            m = None if callable(e) else re.match(r"^`?([A-Za-z_][A-Za-z0-9_]*)`?$", str(e).strip())
            specs.append((m.group(1) if m else ("key" if len(exprs) == 1 else f"key_{i}"), expr(e)))
    if not specs:
        raise InvalidArgumentError("key must name at least one column or expression")
    names = [n for n, _ in specs]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"key columns {names}: names must be distinct (pass a dict name -> expression)")
    clash = set(names) & set(reserved)
    if clash:
        raise InvalidArgumentError(f"key column name(s) {sorted(clash)} clash with output columns; pass a dict "
                         "{name: expression} to rename them")
    return specs


def aggregation_list(owner: str, aggregations: Any, default: AggregateFunction | None = None) -> list:
    """A stage's ``aggregations=``: a non-empty list of :mod:`windowing` aggregations (``default``,
    if given, when none); a bare aggregation or anything else is refused naming it."""
    if aggregations is None or (isinstance(aggregations, (list, tuple)) and not aggregations):
        if default is None:
            raise InvalidArgumentError(f"{owner}: at least one aggregation (aggregations=[...])")
        return [default]
    if isinstance(aggregations, AggregateFunction):
        raise ArgumentTypeError(f"{owner}: aggregations={aggregations!r}: expected a list, e.g. "
                                f"aggregations=[{aggregations!r}]")
    out = list(aggregations)
    for fn in out:
        if not isinstance(fn, AggregateFunction):
            raise ArgumentTypeError(f"{owner}: aggregations: {fn!r} is not a windowing aggregation "
                                    "(an AggregateFunction or Combiner)")
    return out


def aggregation_columns(aggregations: Sequence[AggregateFunction]) -> list[tuple[str, str]]:
    """``(column, Spark DDL type)`` per aggregation output, as each declares them
    (:meth:`~windowing.aggregations.AggregateFunction.spark_columns`: numeric built-ins as double,
    Count as bigint, M4 as four doubles, a quantile list as array<double>, anything else as JSON
    text); names from ``aggregation.name`` (non-alphanumerics as ``_``), duplicates suffixed ``_1``, ..."""
    cols: list[tuple[str, str]] = []
    for fn in aggregations:
        cols += fn.spark_columns(re.sub(r"[^0-9A-Za-z]+", "_", fn.name).strip("_") or "value")
    seen: dict[str, int] = {}
    out = []
    for name, t in cols:
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.append((name if n == 0 else f"{name}_{n}", t))
    return out


def distinct_keys(frame: Any, names: Sequence[str]) -> tuple[list, np.ndarray]:
    """``(keys, codes)`` of a batch's rows keyed by the columns ``names``: the distinct keys in
    order of first appearance (a value for one column, a tuple for several; numpy scalars as
    Python values; every kind of null, ``None``/``NaN``/``NA``, one ``None``) and each row's index
    into them. Vectorised: each column is factorised once, several columns' codes are combined
    into one integer per row and factorised again; Python touches each distinct value and key
    once, not each row."""
    if not names:
        raise InvalidArgumentError("distinct_keys: no key columns")
    per_column = []
    for name in names:
        codes, uniques = pd.factorize(frame[name], use_na_sentinel=False)
        codes = np.asarray(codes, np.int64)
        values = uniques.tolist()                  # Python scalars (numbers, str), NaN or NA for a null
        if uniques.dtype == object or uniques.hasnans:
            position: dict = {}
            merged = np.array([position.setdefault(plain_value(u), len(position)) for u in values], np.int64)
            codes, values = (merged[codes] if len(merged) else codes), list(position)
        per_column.append((codes, values))
    if len(names) == 1:
        codes, values = per_column[0]
        return values, codes
    combined = per_column[0][0]
    for codes, values in per_column[1:]:
        size = len(values)
        if combined.size and int(combined.max()) >= (1 << 62) // max(size, 1):
            combined = pd.factorize(combined)[0].astype(np.int64)      # keep the product in int64
        combined = combined * size + codes
    codes, _ = pd.factorize(combined)
    codes = np.asarray(codes, np.int64)
    first = np.unique(codes, return_index=True)[1]     # each key's first row, in code order
    columns = [[values[i] for i in c[first].tolist()] for c, values in per_column]
    return list(zip(*columns)), codes


def plain_value(v: Any) -> Any:
    """A value of a stage's frame as Python has it: every kind of null (``None``, ``NaN``, ``NA``)
    as ``None``, numpy scalars as Python scalars."""
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return None
    return v.item() if isinstance(v, np.generic) else v


def json_value(v: Any) -> str:
    """A result value as JSON text (tuples as arrays; numpy scalars as numbers; else its repr)."""
    try:
        return _ENCODE(v.tolist() if isinstance(v, np.ndarray) else v)
    except (TypeError, ValueError):
        return json.dumps(repr(v))


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError


#: ``json.dumps(v, default=_plain, allow_nan=True)`` without building an encoder per call (what
#: ``json.dumps`` does for any non-default argument): the same text, one encoder for every pane
_ENCODE = json.JSONEncoder(default=_plain, allow_nan=True).encode


def window_command(text: str, stage_name: str | None) -> tuple[WindowCommand | None, str | None]:
    """``(command, error)`` of a modification's text for the stage ``stage_name``: the window
    command (or None: another op, or addressed to another stage) and a message when it is
    malformed (the stage reports it as an ``error`` row and goes on: a replay meets it again)."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        return None, f"modification {text[:120]!r} is not JSON: {e}"
    if not isinstance(obj, dict):
        return None, f"modification {text[:120]!r} is not a JSON object"
    target = obj.pop("stage", None)
    if target is not None and target != stage_name:
        return None, None
    try:
        return parse_command(obj), None
    except ValueError as e:
        return None, f"stage {stage_name!r}: malformed window command {text[:200]}: {e}"
