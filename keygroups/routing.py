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
key columns. :func:`key_groups_of` hashes an integer or boolean key column in numpy
(:func:`xxhash64_ints`, XXH64 of one 8- or 4-byte lane), any other column value by value.

>>> key_group_of("user-17", 8) == key_group_of(b"user-17", 8)
True
>>> key_group_of(("a", 1), 4) in range(4)
True
"""

from __future__ import annotations

import struct
import sys
from typing import Any, Iterable, Sequence

import numpy as np
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["KEY_GROUP_COLUMN", "SEED", "hash_key", "key_group_of", "key_groups_of", "with_key_groups",
           "MARKER_KINDS", "xxhash64_ints"]

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


# XXH64's primes (xxhash.h, XXH_PRIME64_1..5).
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_LOW32 = np.uint64(0xFFFFFFFF)
_INT32_RANGE = (-(1 << 31), (1 << 31) - 1)


def _rotl(x: np.ndarray, r: int, tmp: np.ndarray) -> None:
    """``x`` rotated left by ``r`` bits, in place (``tmp``: scratch of ``x``'s shape)."""
    np.right_shift(x, np.uint64(64 - r), out=tmp)
    np.left_shift(x, np.uint64(r), out=x)
    x |= tmp


def xxhash64_ints(values: Any, seed: Any = SEED, width: int = 8) -> np.ndarray:
    """Unsigned XXH64 (uint64 array) of each int of ``values`` as one little-endian lane:
    ``xxhash.xxh64_intdigest(struct.pack("<q" if width == 8 else "<i", v), seed)``, vectorised.

    ``values``: an integer or boolean array (or anything ``np.asarray`` makes one), taken
    modulo ``2**64`` (width 8) or ``2**32`` (width 4), i.e. as its two's-complement bytes; ``seed``:
    an int or an array broadcasting against ``values`` (one seed per value), modulo ``2**64``.
    Spark's ``xxhash64`` hashes a bigint as width 8, an int (and a boolean as 0/1) as width 4.
    """
    if width not in (4, 8):
        raise InvalidArgumentError(f"width must be 4 or 8 bytes, got {width!r}")
    v, s = np.asarray(values), np.asarray(seed)
    for name, a in (("values", v), ("seed", s)):
        if a.dtype.kind not in "iub":
            raise ArgumentTypeError(f"xxhash64_ints needs integer {name}, got dtype {a.dtype}")
    lane = v.view(np.uint64) if v.dtype == np.int64 else v.astype(np.uint64)
    shape = np.broadcast_shapes(v.shape, s.shape)
    h, tmp = np.empty(shape, np.uint64), np.empty(shape, np.uint64)     # in place: big arrays cost to allocate
    with np.errstate(over="ignore"):
        if width == 8:
            np.multiply(lane, _P2, out=h)                  # k1 = rotl31(lane * PRIME2) * PRIME1
            _rotl(h, 31, tmp)
            h *= _P1
        else:
            np.bitwise_and(lane, _LOW32, out=h)            # u32 * PRIME1
            h *= _P1
        np.add(s.astype(np.uint64), _P5 + np.uint64(width), out=tmp)      # acc = seed + PRIME5 + len
        h ^= tmp
        if width == 8:
            _rotl(h, 27, tmp)                              # acc = rotl27(acc) * PRIME1 + PRIME4
            h *= _P1
            h += _P4
        else:
            _rotl(h, 23, tmp)                              # acc = rotl23(acc) * PRIME2 + PRIME3
            h *= _P2
            h += _P3
        for shift, prime in ((33, _P2), (29, _P3), (32, None)):   # avalanche
            np.right_shift(h, np.uint64(shift), out=tmp)
            h ^= tmp
            if prime is not None:
                h *= prime
    return h


def _in_range(a: np.ndarray, lo: int, hi: int) -> bool:
    return a.size == 0 or (int(a.min()) >= lo and int(a.max()) <= hi)


def _int_lane(a: np.ndarray, width: int) -> np.ndarray | None:
    """``a`` (1-d integer array) as int64 when every value packs as ``width`` bytes, else None."""
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and not _in_range(a, 0, (1 << 63) - 1):
        return None
    a = a.astype(np.int64, copy=False)
    return a if width == 8 or _in_range(a, *_INT32_RANGE) else None


def _list_lane(values: list, width: int) -> tuple[np.ndarray | None, np.ndarray | None] | None:
    """``(lane, nulls)`` of a list whose non-None values are all ints (bool excluded) that pack as
    ``width`` bytes, or all bools (``lane`` then bool); ``lane`` None: every value is None;
    None: hash the list value by value."""
    types = set(map(type, values))
    nulls = None
    if type(None) in types:
        types.discard(type(None))
        if not types:
            return None, None
        nulls = np.array([v is None for v in values], dtype=bool)
        values = [0 if v is None else v for v in values]
    if all(issubclass(t, (bool, np.bool_)) for t in types):
        return np.array([bool(v) for v in values], dtype=bool), nulls
    if not all(issubclass(t, (int, np.integer)) and not issubclass(t, (bool, np.bool_)) for t in types):
        return None                    # not all ints (a bool among ints hashes as a 4-byte boolean)
    try:
        lane = np.array(values if types == {int} else [int(v) for v in values], dtype=np.int64)
    except OverflowError:
        return None                    # outside bigint: the value-by-value path reports it
    return (lane, nulls) if width == 8 or _in_range(lane, *_INT32_RANGE) else None


def _key_column(column: Any, width: int) -> tuple[str, Any, np.ndarray | None]:
    """A key column as ``("ints" | "bools", lane, nulls)`` for :func:`xxhash64_ints`, ``("nulls",
    values, None)`` when every value is null, or ``("values", list, None)`` for :func:`_hash_one`.
    ``nulls``: a bool mask (None: no nulls). A numpy masked array's masked values and a pandas
    column's missing values (``pd.NA``) are nulls; in a list, ``None`` is."""
    nulls = None
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(column, (pd.Series, pd.Index, pd.api.extensions.ExtensionArray)) \
            and getattr(column.dtype, "kind", "O") in "iub":
        kind = column.dtype.kind
        nulls = np.asarray(column.isna(), dtype=bool)
        column = column.to_numpy(dtype={"i": np.int64, "u": np.uint64, "b": np.bool_}[kind],
                                 na_value=False if kind == "b" else 0)
    elif isinstance(column, np.ma.MaskedArray):
        nulls, column = np.ma.getmaskarray(column), np.ma.getdata(column)
        if column.ndim != 1 or column.dtype.kind not in "iub":
            return "values", [None if m else v for v, m in zip(list(column), nulls.tolist())], None
    if isinstance(column, np.ndarray) and column.ndim == 1 and column.dtype.kind in "iub":
        nulls = nulls if nulls is not None and nulls.any() else None
        if column.dtype.kind == "b":
            return "bools", column, nulls
        lane = _int_lane(column, width)
        if lane is not None:
            return "ints", lane, nulls
        values = list(column)
        return "values", values if nulls is None else [None if m else v for v, m in zip(values, nulls)], None
    values = list(column)
    found = _list_lane(values, width)
    if found is None:
        return "values", values, None
    lane, nulls = found
    if lane is None:
        return "nulls", values, None
    return ("bools" if lane.dtype == np.bool_ else "ints"), lane, nulls


def _hash_values(values: Sequence[Any], seeds: np.ndarray, int_width: int, xxh) -> np.ndarray:
    """:func:`_hash_one` of each value with its row's seed (uint64 in and out)."""
    out = np.broadcast_to(seeds, (len(values),)).tolist()
    for i, v in enumerate(values):
        if v is not None:
            out[i] = _hash_one(v, out[i], int_width, xxh)
    return np.array(out, dtype=np.uint64)


def key_groups_of(columns: Sequence[Iterable[Any]], n: int, int_widths: Sequence[int] | None = None) -> np.ndarray:
    """Key groups of rows given column-wise (``columns[j][i]``: key column ``j`` of row ``i``):
    ``pmod(xxhash64(columns...), n)`` per row, as :func:`key_group_of` of each row's tuple.

    A column is a list (or any iterable) of values, ``None`` for null, or a numpy array or pandas
    column (a numpy masked array's masked values and pandas' missing values are null); an
    integer or boolean column hashes in numpy, any other value by value. ``int_widths[j]``: 8
    (bigint, the default) or 4 (int) for column ``j``'s ints.
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)) or not 0 < n < 1 << 63:
        raise InvalidArgumentError(f"the number of key groups must be a positive int, got {n!r}")
    widths = list(int_widths) if int_widths is not None else [8] * len(columns)
    cols = [_key_column(c, 4 if w == 4 else 8) for c, w in zip(columns, widths)]
    if cols:
        rows = len(cols[0][1])
    else:
        rows = len(list(columns[0])) if len(columns) else 0
    seeds = np.asarray(SEED, dtype=np.uint64)          # every row's, until a column is hashed
    xxh = None
    for j, ((kind, values, nulls), w) in enumerate(zip(cols, widths)):
        if len(values) < rows:
            raise InvalidArgumentError(f"key column {j} has {len(values)} values, column 0 has {rows}")
        if kind == "nulls":
            continue
        values = values[:rows]           # a longer column's extra values are not read
        if kind == "values":
            xxh = xxh or _xxh64()
            seeds = _hash_values(values, seeds, w, xxh)
            continue
        hashed = xxhash64_ints(values, seeds, 4 if kind == "bools" or w == 4 else 8)
        if nulls is not None:
            np.copyto(hashed, seeds, where=nulls[:rows])     # a null leaves its row's hash as it was
        seeds = hashed
    return np.mod(np.broadcast_to(seeds, (rows,)).view(np.int64), np.int64(n))


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
