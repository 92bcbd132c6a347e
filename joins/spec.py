"""The vocabulary of two-input joins: sides, join types, input rows, punctuations, output.

Names follow what Spark, Flink and Beam users know: join types are Spark's ``"inner"``,
``"left_outer"``, ``"right_outer"``, ``"full_outer"`` (Spark's aliases ``"left"``, ``"outer"``,
``"full"``, ... are accepted); the two inputs are the **left** and the **right** side (Spark's
``df.join(other)``, Flink's ``stream.join(other)``); a join's state per key and window is Beam's
CoGroupByKey result (:class:`joins.cogroup.CoGroup`).

Engine input (pure data, one micro-batch is one call): :class:`Row` ``(side, key, ts_ms, value)``
and :class:`SidePunctuation` ``(side, ts_ms)`` ("no more rows of this side below ``ts_ms``"); the
join's low watermark is the minimum over both sides (:class:`TwoInputWatermark`), so a slow input
holds the join back and nothing is dropped because the other side ran ahead.
"""

from __future__ import annotations

import enum
from collections import namedtuple
from typing import Any, Hashable, NamedTuple

from dataflow_kafka.keygroups.punctuation import PunctuationTracker
from dataflow_kafka.errors import JoinError

__all__ = ["Side", "LEFT", "RIGHT", "JoinType", "Row", "SidePunctuation", "Pair", "Joined", "JoinDropped",
           "TwoInputWatermark"]


class _Named(str, enum.Enum):
    """A string enum that prints as ``Class.NAME`` and compares equal to its string."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    __str__ = str.__str__


class Side(_Named):
    """Which input a row or punctuation belongs to."""

    LEFT = "left"
    RIGHT = "right"

    @classmethod
    def parse(cls, value: Any) -> "Side":
        try:
            return cls(value)
        except ValueError:
            raise JoinError(f"side={value!r}: expected 'left' or 'right'") from None


LEFT, RIGHT = Side.LEFT, Side.RIGHT

#: Spark's spellings (case and underscores ignored, as Spark does)
_ALIASES = {"inner": "inner", "left": "left_outer", "leftouter": "left_outer", "right": "right_outer",
            "rightouter": "right_outer", "outer": "full_outer", "full": "full_outer", "fullouter": "full_outer"}


class JoinType(_Named):
    """Spark's join type names: which unmatched rows are kept, padded with ``None``."""

    INNER = "inner"
    LEFT_OUTER = "left_outer"
    RIGHT_OUTER = "right_outer"
    FULL_OUTER = "full_outer"

    @classmethod
    def parse(cls, value: Any) -> "JoinType":
        """A member, or a Spark name (``"inner"``, ``"left_outer"``, ``"left"``, ``"outer"``, ... any case)."""
        if isinstance(value, cls):
            return value
        name = _ALIASES.get(value.lower().replace("_", "")) if isinstance(value, str) else None
        if name is None:
            raise JoinError(f"how={value!r}: expected one of inner, left_outer, right_outer, full_outer "
                            "(or Spark's aliases left, right, outer, full)")
        return cls(name)

    @property
    def keeps_left(self) -> bool:
        """Unmatched left rows are kept (padded with ``None`` on the right)."""
        return self in (JoinType.LEFT_OUTER, JoinType.FULL_OUTER)

    @property
    def keeps_right(self) -> bool:
        return self in (JoinType.RIGHT_OUTER, JoinType.FULL_OUTER)


class Row(NamedTuple):
    """An input row: its ``side``, join ``key``, event time (ms) and ``value``."""

    side: Side
    key: Hashable
    ts_ms: int
    value: Any


class SidePunctuation(NamedTuple):
    """"No more rows of ``side`` with event time below ``ts_ms``" (one input's low watermark)."""

    side: Side
    ts_ms: int


class _JoinedRow:
    """What :class:`Pair` and :class:`Joined` share: ``left`` and ``right`` are ``(ts_ms, value)``,
    or ``None`` where an outer join kept a row without a match."""

    __slots__ = ()

    @property
    def ts_ms(self) -> int:
        """The joined row's event time: the later of its two rows' (Flink's rule)."""
        return max(x[0] for x in (self.left, self.right) if x is not None)   # type: ignore[attr-defined]

    def sort_key(self) -> tuple:
        """A deterministic order: by key (:class:`Joined`), left row, right row (padding last)."""
        head = (repr(self.key),) if isinstance(self, Joined) else ()
        return head + tuple((0, x[0], repr(x[1])) if x is not None else (1, 0, "")
                            for x in (self.left, self.right))                 # type: ignore[attr-defined]


class Pair(_JoinedRow, namedtuple("Pair", ["left", "right"])):
    """One joined row of a window's pane (the pane has the key)."""

    __slots__ = ()


class Joined(_JoinedRow, namedtuple("Joined", ["key", "left", "right"])):
    """One joined row of an interval join, with its key."""

    __slots__ = ()


class JoinDropped(NamedTuple):
    """Rows of ``side`` and ``key`` a join did not use, and why: ``late`` (their window, or their
    join interval, was past the allowed lateness when they arrived) or ``closed`` (their window's
    trigger had finished)."""

    side: Side
    key: Hashable
    reason: str
    count: int


class TwoInputWatermark:
    """The low watermark of a two-input operator: the minimum over both sides' punctuations
    (:class:`keygroups.PunctuationTracker`), ``None`` until both sides have sent one."""

    def __init__(self) -> None:
        self.tracker = PunctuationTracker()
        for side in Side:
            self.tracker.update(side.value, None)

    def update(self, punctuation: SidePunctuation) -> None:
        self.tracker.update(Side.parse(punctuation.side).value, int(punctuation.ts_ms))

    @property
    def low_watermark_ms(self) -> int | None:
        return self.tracker.low_watermark_ms

    def side_ms(self, side: Side) -> int | None:
        return self.tracker.source_punctuations()[Side.parse(side).value]

    def to_bytes(self) -> bytes:
        return self.tracker.to_bytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> "TwoInputWatermark":
        w = cls.__new__(cls)
        w.tracker = PunctuationTracker.from_bytes(data)
        return w
