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

:func:`json_field` reads one field of a JSON record value, the common first-stage key: on Spark
it is computed in the JVM (``from_json``, its :attr:`Computed.sql`: no Python step before the
shuffle), in ``run_local`` and after the first operator by one vectorised ``pyarrow.json`` pass
over the values; both give the same values::

    SlicerStage(key={"auction": json_field("auction")}, ...)

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
>>> json_field("a")(pd.DataFrame({"value": [b'{"a": 3, "b": "x"}', b'{"a": "3"}', b'not json', None]})).tolist()
[3, None, None, None]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["Computed", "json_field", "fanout", "json_field_source", "json_fields_by_column", "json_fields_of_arrow", "arrow_type_of",
           "json_object", "computed_inputs", "evaluate"]


@dataclass(frozen=True)
class Computed:
    """An input computed from the upstream rows: ``fn(frame) -> values`` (a Series, array or list,
    one value per row; picklable: a module-level function, a lambda is fine for Spark's
    cloudpickle), typed ``type`` (a Spark DDL type: ``string``, ``bigint``, ``double``, ...).
    ``columns``: the upstream columns it reads, for readers of the pipeline (optional).
    ``sql``: optionally, the same value as a Spark SQL expression over the upstream rows; a first
    operator on Spark then computes the input in the JVM instead of a ``mapInPandas`` step
    (``run_local`` and later operators call ``fn``). Give it only where both agree on every row
    (:func:`json_field` does)."""

    fn: Callable[[pd.DataFrame], Any]
    type: str = "string"
    columns: tuple = ()
    sql: str | None = None

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
    """``fn`` of :func:`json_object` (a class, so it pickles by reference): the text of every row
    built column by column, integers and booleans formatted by numpy in one pass, other values
    by ``json.dumps`` one by one (the same text as ``json.dumps`` of the row's dict)."""

    def __init__(self, columns: tuple) -> None:
        self.columns = columns

    def __call__(self, frame: pd.DataFrame) -> list:
        if not len(frame):
            return []
        out = np.full(len(frame), "{", dtype=object)
        for i, c in enumerate(self.columns):
            out = out + (("," if i else "") + json.dumps(c) + ":") + _json_texts(frame[c])
        return (out + "}").tolist()

    def __repr__(self) -> str:
        return f"json_object{self.columns!r}"


def _json_texts(col: pd.Series) -> np.ndarray:
    """The JSON text of every value of ``col`` (``null`` where missing), an object array: integers,
    booleans and finite floats (also in an object column) formatted by numpy in one pass (its
    float text is Python's shortest ``repr``, as ``json.dumps`` writes it), other values by
    ``json.dumps`` one by one."""
    missing = col.isna().to_numpy(bool)
    kind = col.dtype.kind
    if kind == "O":
        inferred = pd.api.types.infer_dtype(col, skipna=True)
        kind = {"integer": "i", "boolean": "b", "floating": "f"}.get(inferred, "O")
        if kind != "O" and missing.all():
            kind = "O"
    if kind in "iu":
        ints = col.to_numpy(dtype=np.uint64 if col.dtype.kind == "u" else np.int64, na_value=0)
        out = ints.astype(str).astype(object)
    elif kind == "b":
        out = np.where(col.to_numpy(dtype=bool, na_value=False), "true", "false").astype(object)
    elif kind == "f" and np.isfinite(floats := col.to_numpy(dtype=np.float64, na_value=0.0)).all():
        out = floats.astype(str).astype(object)
    else:
        out = np.array([None if m else json.dumps(_plain(v), separators=(",", ":"), default=str)
                        for v, m in zip(col.to_numpy(dtype=object), missing)], dtype=object)
    if missing.any():
        out[missing] = "null"
    return out


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


#: Types :func:`json_field` reads: DDL -> (Python check of a parsed value, conversion).
_JSON_TYPES: dict[str, tuple[Callable[[Any], bool], Callable[[Any], Any]]] = {
    "bigint": (lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63, int),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31, int),
    "double": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), float),
    "boolean": (lambda v: isinstance(v, bool), bool),
    "string": (lambda v: True, lambda v: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))),
}


class _JsonField:
    """``fn`` of :func:`json_field` (a class: pickles by reference): field ``name`` of each JSON
    object value, parsed for the whole frame in one ``pyarrow.json`` pass; a frame that pass cannot
    take (a null or multi-line value, a value not of the type, not JSON) is parsed per row, with
    the same rule: the field's value when it has the declared type, else null."""

    def __init__(self, name: str, type_: str, column: str) -> None:
        self.name, self.type, self.column = name, type_, column

    def __call__(self, frame: pd.DataFrame) -> Any:
        values = frame[self.column].tolist()
        if not values:
            return pd.Series([], dtype=object)
        try:
            return self._vectorised(values)
        except (TypeError, ValueError, pa.ArrowInvalid):
            return self._per_row(values)

    def _vectorised(self, values: list) -> Any:
        return _json_fields_vectorised(values, {self.name: self.type})[self.name]

    def _per_row(self, values: list) -> list:
        ok, convert = _JSON_TYPES[self.type]
        out = []
        for v in values:
            try:
                obj = json.loads(v) if v is not None else None
            except (ValueError, UnicodeDecodeError):
                obj = None
            x = obj.get(self.name) if isinstance(obj, dict) else None
            out.append(convert(x) if x is not None and ok(x) else None)
        return out

    def __repr__(self) -> str:
        return f"json_field({self.name!r}, {self.type!r})"


def _json_fields_vectorised(values: list, fields: dict[str, str]) -> dict[str, Any]:
    """``{field: its value per row}`` of the JSON objects ``values`` (texts or bytes, one per row),
    every field of ``fields`` (name -> DDL type) from one ``pyarrow.json`` pass
    (:func:`json_fields_of_arrow`); raises (TypeError, ValueError, ``ArrowInvalid``) where that pass
    cannot take the values, which are then parsed per row (:meth:`_JsonField._per_row`)."""
    raw = pa.array(values, pa.binary())          # texts encoded as UTF-8 by Arrow, no Python loop
    out = {}
    for name, col in json_fields_of_arrow(raw, fields).items():
        out[name] = pd.Series(col.to_pylist(), dtype=object) if fields[name] == "string" or col.null_count \
            else col.to_numpy()
    return out


def json_fields_of_arrow(values, fields: dict[str, str]) -> dict[str, Any]:
    """:func:`json_field`'s values of ``fields`` (name -> DDL type) for an Arrow binary or string
    array without nulls, as Arrow arrays of those types, from one ``pyarrow.json`` pass over the
    array's own buffer (no Python object per value); raises (TypeError, ValueError,
    ``ArrowInvalid``) where :func:`json_field` would parse row by row (a null, empty or multi-line
    value, one not of a field's type, not JSON), for the caller to take that path."""
    import pyarrow.compute as pc
    import pyarrow.json as pajson

    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if arr.null_count:
        raise ArgumentTypeError("a null value: parsed per row")
    if not len(arr):
        return {name: pa.array([], _ARROW_OF[t]) for name, t in fields.items()}
    lines = pc.binary_join_element_wise(arr.cast(pa.binary()), pa.scalar(b"", pa.binary()), b"\n")
    offsets = np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1, lines.offset * 4)
    buf = lines.buffers()[2][int(offsets[0]):int(offsets[-1])]
    if int((np.frombuffer(buf, np.uint8) == 10).sum()) != len(arr):
        raise InvalidArgumentError("a value spans lines: parsed per row")
    table = pajson.read_json(pa.BufferReader(buf), read_options=pajson.ReadOptions(use_threads=False),
                             parse_options=pajson.ParseOptions(
                                 explicit_schema=pa.schema([(n, _ARROW_OF[t]) for n, t in fields.items()]),
                                 unexpected_field_behavior="ignore"))
    if table.num_rows != len(arr):
        raise InvalidArgumentError("an empty value: parsed per row")
    return {name: table.column(name).combine_chunks() for name in fields}


def json_fields_by_column(computed: dict[str, Computed]) -> dict[str, dict[str, tuple[str, str]]]:
    """The :func:`json_field` inputs among ``computed`` by the column they read: ``{column: {input:
    (field, type)}}``, for one parse per column; a column one field of which is read as two types
    is left out (its inputs parse alone)."""
    by_column: dict[str, dict[str, tuple[str, str]]] = {}
    for name, c in computed.items():
        src = json_field_source(c)
        if src is not None:
            by_column.setdefault(src[0], {})[name] = (src[1], c.type)
    return {column: inputs for column, inputs in by_column.items()
            if len(dict(inputs.values())) == len(set(inputs.values()))}


def _shared_json_fields(rows: pd.DataFrame, computed: dict[str, Computed]) -> dict[str, Any]:
    """The values of the :func:`json_field` inputs that read several fields of one column, from one
    ``pyarrow.json`` pass over that column (what each would compute alone: a pass gives a field the
    same values whatever other fields it reads); none for a column whose values that pass cannot take."""
    out: dict[str, Any] = {}
    for column, inputs in json_fields_by_column(computed).items():
        if len(inputs) < 2 or not len(rows):
            continue
        try:
            parsed = _json_fields_vectorised(rows[column].tolist(), dict(inputs.values()))
        except (TypeError, ValueError, pa.ArrowInvalid):
            continue
        out.update({name: parsed[field] for name, (field, _) in inputs.items()})
    return out


def arrow_type_of(ddl: str) -> pa.DataType:
    """The Arrow type :func:`json_fields_of_arrow` parses a field of Spark DDL type ``ddl`` as."""
    return _ARROW_OF[ddl]


def _arrow_types() -> dict:
    return {"bigint": pa.int64(), "int": pa.int32(), "double": pa.float64(), "boolean": pa.bool_(),
            "string": pa.string()}


_ARROW_OF = _arrow_types()


def json_field(name: str, type: str = "bigint", column: str = "value") -> Computed:
    """A stage input: field ``name`` of the JSON object in column ``column`` (the record's value),
    of Spark type ``type`` (``bigint``, ``int``, ``double``, ``boolean`` or ``string``): the field's
    value where it holds that type, else null (not JSON, no such field, another type: as Spark's
    ``from_json``); a ``string`` field of another JSON value is its JSON text (as ``from_json``, but
    numbers re-written by Python: ``1.50`` becomes ``1.5``). On Spark a first operator computes it in
    the JVM (:attr:`Computed.sql`)."""
    if type not in _JSON_TYPES:
        raise InvalidArgumentError(f"json_field(type={type!r}): expected one of {sorted(_JSON_TYPES)}")
    if not name or "`" in name or "'" in name:
        raise InvalidArgumentError(f"json_field(name={name!r}): expected a field name without quotes or backticks")
    sql = f"from_json(CAST(`{column}` AS STRING), '`{name}` {type.upper()}').`{name}`"
    return Computed(_JsonField(name, type, column), type, (column,), sql)


def _bucket_keys(n: int) -> np.ndarray:
    """Bucket ``i``'s key value for :func:`fanout`: the smallest integer >= 0 whose key group among
    ``n`` is ``i`` (``keygroups.routing.key_groups_of``, a bigint key), so that ``n`` buckets on a
    stage of ``n`` key groups give each key group one."""
    from dataflow_kafka.keygroups.routing import key_groups_of

    size = 64 * n
    while True:
        groups, first = np.unique(key_groups_of([np.arange(size, dtype=np.int64)], n, [8]), return_index=True)
        if len(groups) == n:                  # every group hit: ``first[i]``, the first integer in group i
            return first.astype(np.int64)
        size *= 2


class _Fanout:
    """``fn`` of :func:`fanout` (a class: pickles by reference): bucket ``column % n`` of each row
    as its key value, ``keys[bucket]`` (null where the column is)."""

    def __init__(self, n: int, column: str) -> None:
        self.n, self.column, self.keys = n, column, _bucket_keys(n)

    def __call__(self, frame: pd.DataFrame) -> Any:
        col = frame[self.column]
        missing = col.isna().to_numpy(bool)
        keys = self.keys[np.mod(col.to_numpy(np.int64, na_value=0), self.n)]
        return keys if not missing.any() else [None if m else int(k) for m, k in zip(missing.tolist(), keys.tolist())]

    def __repr__(self) -> str:
        return f"fanout({self.n!r}, column={self.column!r})"


def fanout(n: int, column: str = "offset") -> Computed:
    """A first stage's key that spreads one global aggregation over ``n`` keys: each record's
    bucket ``column % n`` (default: its Kafka offset, so consecutive records take turns; the same
    bucket on every replay), as a key value that puts bucket ``i`` in key group ``i`` of a stage
    with ``num_key_groups=n``. The stage aggregates per bucket and window; a next stage keyed by
    the window merges the ``n`` partial results (its aggregation must merge them, as a Combiner's
    ``merge_accumulators`` does). Beam's ``Combine.globally(...).withFanout(n)``; enorm §4.3's
    compute / consolidate (Spark's own aggregations pre-aggregate per task before their shuffle,
    within one batch; here the buckets keep their windows' state across batches)::

        WindowingStage(key={"fan": fanout(4)}, ..., num_key_groups=4).then(
            WindowingStage(key={"w": "window_end_ms"}, ...))

    On Spark the JVM computes the same values (:attr:`Computed.sql`) where Python does not."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgumentError(f"fanout(n={n!r}): expected an int >= 1, the number of keys to spread over")
    if not column or "`" in column:
        raise InvalidArgumentError(f"fanout(column={column!r}): expected an integer column's name without backticks")
    fn = _Fanout(n, column)
    table = ", ".join(f"CAST({v} AS BIGINT)" for v in fn.keys.tolist())
    pick = f"element_at(array({table}), CAST(pmod(`{column}`, {n}) AS INT) + 1)"
    return Computed(fn, "bigint", (column,), f"IF(`{column}` IS NULL, CAST(NULL AS BIGINT), {pick})")


def json_object(*columns: str) -> Computed:
    """A JSON object text of these columns per row, ``{"a":1,"b":"x"}`` (as Spark's
    ``to_json(named_struct('a', a, 'b', b))`` writes it for integers and strings; nulls as
    ``null``)."""
    if not columns:
        raise InvalidArgumentError("json_object: name at least one column")
    return Computed(_JsonObject(tuple(columns)), "string", tuple(columns))


def json_field_source(c: Computed) -> tuple[str, str] | None:
    """``(column, field name)`` of a :func:`json_field` input, None for any other ``Computed``: the
    Spark plan parses several fields of one column with one ``from_json``."""
    fn = c.fn
    return (fn.column, fn.name) if isinstance(fn, _JsonField) else None


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
    shared = _shared_json_fields(rows, computed)
    for name, c in computed.items():
        if not len(rows):              # no data rows: the function is not called (it may need columns they lack)
            values = []
        else:
            values = (pd.Series(shared[name]) if name in shared else c(rows)).to_numpy(dtype=object)
        typed = conform([pd.DataFrame({name: values})], [(name, c.type)])
        values = typed[name]
        if mask is None:
            cols[name] = values.set_axis(frame.index)
        else:
            base = (frame[name] if name in frame.columns
                    else pd.Series([None] * len(frame), index=frame.index, dtype=values.dtype))
            full = base.astype(values.dtype) if base.dtype != values.dtype else base.copy()
            full[mask] = values.array       # not to_numpy(): an Int64 beside a null would go through float64
            cols[name] = full
    return frame.assign(**cols)
