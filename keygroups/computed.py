"""Stage inputs computed in Python, the same way by both runners (Spark and ``run_local``).

A stage names its inputs (:meth:`keygroups.Stage.inputs`) as column names, SQL expressions
(Spark evaluates them; ``run_local`` cannot) or :class:`Computed` values: a picklable function
of the upstream rows (a pandas frame, any of its columns) returning one value per row, with the
Spark type of the result. Both runners evaluate a ``Computed`` input with the same Python code on
the same rows, so a pipeline gives the same result on Spark and without it:

* a stage after another operator (re-keyed): the upstream operator computes the input on its
  outgoing data rows, inside its ``transformWithStateInPandas`` processor (no extra Spark step);
* a stage fused after another: when the rows are handed over (:mod:`keygroups.operator`);
* the first stage: a ``mapInPandas`` step over the source rows on Spark, the frame itself in
  ``run_local``.

:func:`json_object` is the common case of Q5-style pipelines, the form of Spark's
``to_json(named_struct('auction', auction, 'count', count))``::

    SlicerStage(...).then(WindowingStage(key={"w": "window_end_ms"},
                                         value=json_object("auction", "count"), ...))

>>> import pandas as pd
>>> f = pd.DataFrame({"auction": [7, 8], "count": [3, 1]})
>>> json_object("auction", "count")(f).tolist()
['{"auction":7,"count":3}', '{"auction":8,"count":1}']
>>> Computed(lambda df: df["count"] * 2, "bigint")(f).tolist()
[6, 2]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["Computed", "json_object", "computed_inputs", "evaluate"]


@dataclass(frozen=True)
class Computed:
    """An input computed from the upstream rows: ``fn(frame) -> values`` (a Series, array or list,
    one value per row; picklable: a module-level function, a lambda is fine for Spark's
    cloudpickle), typed ``type`` (a Spark DDL type: ``string``, ``bigint``, ``double``, ...).
    ``columns``: the upstream columns it reads, for readers of the pipeline (optional)."""

    fn: Callable[[pd.DataFrame], Any]
    type: str = "string"
    columns: tuple = ()

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ArgumentTypeError(f"Computed(fn={self.fn!r}): expected a function of the upstream frame")
        if not isinstance(self.type, str) or not self.type.strip():
            raise InvalidArgumentError(f"Computed(type={self.type!r}): expected a Spark DDL type such as 'string' or 'bigint'")

    def __call__(self, frame: pd.DataFrame) -> pd.Series:
        values = self.fn(frame)
        if not isinstance(values, pd.Series):
            values = pd.Series(values if isinstance(values, np.ndarray) else list(values), dtype=None
                               if isinstance(values, np.ndarray) else object)
        out = values
        if len(out) != len(frame):
            raise InvalidArgumentError(f"Computed input {self.fn!r} returned {len(out)} values for {len(frame)} rows")
        return out.set_axis(frame.index)


class _JsonObject:
    """``fn`` of :func:`json_object` (a class, so it pickles by reference)."""

    def __init__(self, columns: tuple) -> None:
        self.columns = columns

    def __call__(self, frame: pd.DataFrame) -> list:
        cols = [frame[c].astype(object).where(frame[c].notna(), None).tolist() for c in self.columns]
        return [json.dumps(dict(zip(self.columns, (_plain(v) for v in row))), separators=(",", ":"),
                           default=str) for row in zip(*cols)]

    def __repr__(self) -> str:
        return f"json_object{self.columns!r}"


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def json_object(*columns: str) -> Computed:
    """A JSON object text of these columns per row, ``{"a":1,"b":"x"}`` (as Spark's
    ``to_json(named_struct('a', a, 'b', b))`` writes it for integers and strings; nulls as
    ``null``)."""
    if not columns:
        raise InvalidArgumentError("json_object: name at least one column")
    return Computed(_JsonObject(tuple(columns)), "string", tuple(columns))


def computed_inputs(inputs: dict) -> dict[str, Computed]:
    """The :class:`Computed` entries of a stage's ``inputs()``."""
    return {name: e for name, e in inputs.items() if isinstance(e, Computed)}


def evaluate(frame: pd.DataFrame, computed: dict[str, Computed], data_only: bool = True) -> pd.DataFrame:
    """``frame`` with each ``computed`` input as a column of its declared type, computed on the
    data rows (``kind == 'data'``; all rows if ``data_only`` is false or there is no ``kind``),
    null on the others (or their value, where the column exists)."""
    if not computed or frame is None:
        return frame
    from dataflow_kafka.keygroups.contract import conform

    rows = frame
    mask = None
    if data_only and "kind" in frame.columns:
        mask = (frame["kind"] == "data").to_numpy(bool)
        rows = frame[mask]
    cols = {}
    for name, c in computed.items():
        typed = conform([pd.DataFrame({name: c(rows).to_numpy(dtype=object) if len(rows) else []})], [(name, c.type)])
        values = typed[name]
        if mask is None:
            cols[name] = values.set_axis(frame.index)
        else:
            base = (frame[name] if name in frame.columns
                    else pd.Series([None] * len(frame), index=frame.index, dtype=values.dtype))
            full = base.astype(values.dtype) if base.dtype != values.dtype else base.copy()
            full[mask] = values.to_numpy()
            cols[name] = full
    return frame.assign(**cols)
