"""Routing: the one function from a key to its key group, and the one marker fan-out.

A data row with key ``k`` belongs to key group ``pmod(xxhash64(k), n)``: Spark's own
``xxhash64`` (XXH64, seed 42; several key columns chain, each column's hash seeding the next),
so the routing can run in the JVM (:func:`with_key_groups`, on columns) or in Python
(:func:`key_group_of`, on values, e.g. for a key computed by a Python function) and give the same
group. Punctuation and modification rows go to **every** key group (data-trace types §4: a hash
splitter sends every synchronization marker to all output channels); any other row (``error``,
``dropped`` reports, ``metrics``) goes to the first key group (0 unless ``group_ids`` says
otherwise), which passes it on.

Python values hash as the Spark column they would be in: ``str`` as string, ``bytes`` as
binary, ``int`` as bigint (:func:`hash_key` takes ``int_width=4`` for an int column), ``float``
as double, ``bool`` as boolean, ``None`` as null (skipped, as Spark does), a tuple as several
key columns.

>>> key_group_of("user-17", 8) == key_group_of(b"user-17", 8)
True
>>> key_group_of(("a", 1), 4) in range(4)
True
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Sequence

import numpy as np
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["KEY_GROUP_COLUMN", "SEED", "hash_key", "key_group_of", "key_groups_of", "with_key_groups",
           "MARKER_KINDS"]

KEY_GROUP_COLUMN = "key_group"
SEED = 42                      # Spark's xxhash64 seed
MARKER_KINDS = ("punctuation", "modification")   # rows every key group receives

_MASK = (1 << 64) - 1
_INT = struct.Struct("<i")
_LONG = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")


def _xxh64():
    import xxhash

    return xxhash.xxh64_intdigest


def _hash_one(value: Any, seed: int, int_width: int, xxh) -> int:
    """Unsigned XXH64 of one column value as Spark's ``XxHash64Function`` computes it."""
    if value is None:
        return seed
    if isinstance(value, (bool, np.bool_)):
        return xxh(_INT.pack(1 if value else 0), seed)
    if isinstance(value, (int, np.integer)):
        return xxh((_INT if int_width == 4 else _LONG).pack(int(value)), seed)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if v != v:
            v = float("nan")          # Spark normalises NaN
        elif v == 0.0:
            v = 0.0                   # and -0.0
        return xxh(_DOUBLE.pack(v), seed)
    if isinstance(value, str):
        return xxh(value.encode("utf-8"), seed)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return xxh(bytes(value), seed)
    raise ArgumentTypeError(f"cannot route a key of type {type(value).__name__} ({value!r}): "
                    "use str, bytes, int, float, bool, None or a tuple of these")


def hash_key(key: Any, int_width: int = 8) -> int:
    """Spark's ``xxhash64(key columns...)`` of ``key`` as a signed 64-bit int (a tuple is several
    columns). ``int_width``: 8 (bigint) or 4 (int) for Python ints."""
    xxh = _xxh64()
    h = SEED
    for v in (key if isinstance(key, tuple) else (key,)):
        h = _hash_one(v, h, int_width, xxh)
    return h - (1 << 64) if h >= 1 << 63 else h


def key_group_of(key: Any, n: int, int_width: int = 8) -> int:
    """The key group of ``key`` among ``n``: ``pmod(xxhash64(key), n)``, as :func:`with_key_groups`."""
    return hash_key(key, int_width) % n


def key_groups_of(columns: Sequence[Iterable[Any]], n: int, int_widths: Sequence[int] | None = None) -> np.ndarray:
    """Key groups of rows given column-wise (``columns[j][i]``: key column ``j`` of row ``i``)."""
    xxh = _xxh64()
    widths = list(int_widths) if int_widths is not None else [8] * len(columns)
    cols = [list(c) for c in columns]
    rows = len(cols[0]) if cols else 0
    out = np.empty(rows, np.int64)
    for i in range(rows):
        h = SEED
        for c, w in zip(cols, widths):
            h = _hash_one(c[i], h, w, xxh)
        out[i] = (h - (1 << 64) if h >= 1 << 63 else h) % n
    return out


def with_key_groups(df, keys: str | Sequence[str] | None, num_key_groups: int, column: str = KEY_GROUP_COLUMN,
                    group_ids: Sequence[int] | None = None):
    """``df`` with ``column`` (int): data rows → ``pmod(xxhash64(keys), n)``; punctuation and
    modification rows → one copy per key group; other rows → the first key group. ``keys=None``:
    data rows already carry ``column`` (routed in Python by :func:`key_group_of`).

    Adds ``event_time_ms``, ``punctuation_ms`` and ``processing_time_ms`` (epoch ms, computed in
    the JVM, so processors never depend on the session time zone) for those of the source's
    timestamp columns present and not converted yet.

    ``keys``: column name(s) or SQL expression(s) identifying the key of a data row.
    ``group_ids``: the grouping values when they are not ``0..n-1`` (slots,
    ``keygroups.PythonRouter.group_ids``; needs ``keys=None``): markers go to each of them,
    other rows to the first.
    """
    from pyspark.sql import functions as F

    if not isinstance(num_key_groups, int) or isinstance(num_key_groups, bool) or num_key_groups < 1:
        raise InvalidArgumentError(f"num_key_groups must be a positive int, got {num_key_groups!r}")
    if keys is None:
        if column not in df.columns:
            raise InvalidArgumentError(f"keys=None needs a precomputed {column!r} column; columns: {df.columns}")
        data_group = F.col(column).cast("int")
    else:
        key_cols = [F.expr(keys)] if isinstance(keys, str) else [F.expr(k) for k in keys]
        if not key_cols:
            raise InvalidArgumentError("keys must name at least one column or expression")
        data_group = F.pmod(F.xxhash64(*key_cols), F.lit(num_key_groups)).cast("int")
    if group_ids is None:
        every_group, lead = F.sequence(F.lit(0), F.lit(num_key_groups - 1)), 0
    else:
        if keys is not None or not group_ids:
            raise InvalidArgumentError("group_ids needs keys=None (rows routed in Python) and at least one id")
        every_group, lead = F.array(*[F.lit(int(g)) for g in group_ids]), int(group_ids[0])
    groups = (F.when(F.col("kind") == "data", F.array(data_group))
              .when(F.col("kind").isin(*MARKER_KINDS), every_group)
              .otherwise(F.array(F.lit(lead))))
    out = df.withColumn(column, F.explode(groups))
    for ts in ("event_time", "punctuation", "processing_time"):
        if ts in df.columns and f"{ts}_ms" not in df.columns:
            out = out.withColumn(f"{ts}_ms", F.unix_millis(ts))
    return out
