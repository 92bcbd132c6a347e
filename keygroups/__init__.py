"""Key groups: the unit of state and of (future) load balancing (Enorm, sections 4 and 5).

Stateful processors are keyed by *key group*, not by key: many keys share one group, each
processor call handles a whole group (vectorised), and per-key state lives inside the group's
state. Punctuations and modification punctuations must reach every key group, so
:func:`with_key_groups` replicates them to all groups (data-trace types, section 4: a hash
splitter sends every synchronization marker to all output channels).

>>> from keygroups import with_key_groups                            # doctest: +SKIP
>>> grouped = with_key_groups(source_df, "key", num_key_groups=8)
>>> grouped.groupBy("key_group").transformWithStateInPandas(...)     # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

from keygroups.processor import KeyGroupBatch, PunctuatedKeyGroupProcessor, deferred

__all__ = ["with_key_groups", "KEY_GROUP_COLUMN", "PunctuatedKeyGroupProcessor", "KeyGroupBatch", "deferred"]

KEY_GROUP_COLUMN = "key_group"


def with_key_groups(df, keys: str | Sequence[str], num_key_groups: int, column: str = KEY_GROUP_COLUMN):
    """Add ``column``: data rows → ``pmod(xxhash64(keys), num_key_groups)``; punctuation and
    modification rows → one copy per key group; error rows → key group 0 (kept, never dropped).
    Also adds ``event_time_ms``, ``punctuation_ms`` and ``processing_time_ms`` for those of the
    source's timestamp columns present (epoch ms, computed in the JVM, so processors never depend
    on the session time zone).

    ``keys``: column name(s) or SQL expression(s) identifying the key of a data row.
    """
    from pyspark.sql import functions as F

    if not isinstance(num_key_groups, int) or num_key_groups < 1:
        raise ValueError(f"num_key_groups must be a positive int, got {num_key_groups!r}")
    key_cols = [F.expr(keys)] if isinstance(keys, str) else [F.expr(k) for k in keys]
    if not key_cols:
        raise ValueError("keys must name at least one column or expression")
    n = F.lit(num_key_groups)
    data_group = F.pmod(F.xxhash64(*key_cols), n).cast("int")
    every_group = F.sequence(F.lit(0), F.lit(num_key_groups - 1))
    groups = (F.when(F.col("kind") == "data", F.array(data_group))
              .when(F.col("kind").isin("punctuation", "modification"), every_group)
              .otherwise(F.array(F.lit(0))))
    out = df.withColumn(column, F.explode(groups))
    for ts in ("event_time", "punctuation", "processing_time"):
        if ts in df.columns:
            out = out.withColumn(f"{ts}_ms", F.unix_millis(ts))
    return out
