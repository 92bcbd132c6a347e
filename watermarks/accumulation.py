"""Panes and how they relate: accumulation modes, pane timing, output timestamps (§2.3).

A trigger can fire several times for one window; every firing emits a **pane**. The *accumulation
mode* says how the panes of a window relate (the Dataflow Model, Akidau et al., VLDB 2015, §2.3
Triggers & Incremental Processing):

``DISCARDING``
    a pane holds only what arrived since the previous pane; panes are independent deltas and
    their sum is the window's total.
``ACCUMULATING``
    a pane holds everything the window has seen; each pane refines (replaces) the previous one.
``ACCUMULATING_AND_RETRACTING``
    as accumulating, but before a refinement the previous pane is **retracted**: a copy of it
    with ``is_retraction=True`` is emitted first. When session windows merge, the last pane of
    every merged window is retracted before the merged window's pane (Figure 14). Summing
    values with retractions negated gives the window's current total at every point.

Each pane says when it fired relative to the watermark (:class:`PaneTiming`): ``EARLY`` before
the watermark passed the end of the window, ``ON_TIME`` for the first firing after it, ``LATE``
after that. ``index`` counts the panes of the window (a merged window continues from the
highest index of the windows merged into it), ``is_first`` means no earlier pane covered any of
its data, ``is_last`` that the window is closed (its trigger finished or its state was garbage
collected).

The output timestamp of a pane follows a :class:`TimestampCombiner`: the end of the window
(``end_ms - 1``, the last instant inside it, as Beam), or the earliest or latest event time among
the elements in the pane.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from dataflow_kafka.watermarks.windows import IntervalWindow
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["AccumulationMode", "TimestampCombiner", "OnTimeBehavior", "PaneTiming", "Pane"]


class _ParsedEnum(enum.Enum):
    @classmethod
    def parse(cls, value: Any, option: str) -> Any:
        """Accept a member or its name (any case); a bad value names the option and choices."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        allowed = ", ".join(cls.__members__)
        raise InvalidArgumentError(f"{option} must be one of {allowed}, got {value!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class AccumulationMode(_ParsedEnum):
    """How the panes of one window relate (§2.3)."""

    DISCARDING = 0
    ACCUMULATING = 1
    ACCUMULATING_AND_RETRACTING = 2


class TimestampCombiner(_ParsedEnum):
    """Output timestamp of a pane."""

    END_OF_WINDOW = 0
    EARLIEST = 1
    LATEST = 2


class OnTimeBehavior(_ParsedEnum):
    """Whether the first firing after the watermark passes the window end always emits a pane.

    ``FIRE_ALWAYS`` (Beam's default) emits it even when nothing arrived since the last early pane,
    so every window gets one ON_TIME pane; ``FIRE_IF_NON_EMPTY`` skips such a repeat. Other
    firings emit a pane only when the window received data (or merged) since its last pane.
    """

    FIRE_ALWAYS = 0
    FIRE_IF_NON_EMPTY = 1


class PaneTiming(_ParsedEnum):
    """When a pane fired relative to the watermark and the end of its window."""

    EARLY = 0
    ON_TIME = 1
    LATE = 2


@dataclass(frozen=True, slots=True)
class Pane:
    """One output of a window's trigger firing (or the retraction of an earlier one).

    A retraction is an exact copy of the retracted pane with ``is_retraction=True``.
    """

    key: Any
    window: IntervalWindow
    value: Any
    timestamp_ms: int
    timing: PaneTiming
    index: int
    is_first: bool
    is_last: bool
    is_retraction: bool = False
    #: The window query's id (``MultiQueryDriver``); ``None`` from a single-query ``TriggerDriver``.
    query_id: str | None = None

    @property
    def start_ms(self) -> int:
        return self.window.start_ms

    @property
    def end_ms(self) -> int:
        return self.window.end_ms

    def retraction(self) -> Pane:
        return Pane(
            self.key, self.window, self.value, self.timestamp_ms, self.timing, self.index,
            self.is_first, self.is_last, True, self.query_id,
        )

    def brief(self) -> tuple:
        """``(start_ms, end_ms, value, timing name, index, flags)``: a compact transcript row.

        ``flags`` is a string of ``F`` (first), ``L`` (last) and ``R`` (retraction).
        """
        flags = ("F" if self.is_first else "") + ("L" if self.is_last else "")
        flags += "R" if self.is_retraction else ""
        return (self.window.start_ms, self.window.end_ms, self.value, self.timing.name, self.index, flags)

    def __repr__(self) -> str:
        key = "" if self.key is None else f"key={self.key!r} "
        key = key if self.query_id is None else f"query={self.query_id!r} {key}"
        sign = "RETRACT " if self.is_retraction else ""
        flags = " first" * self.is_first + " last" * self.is_last
        return (
            f"Pane({sign}{key}[{self.window.start_ms}, {self.window.end_ms}) value={self.value!r} "
            f"{self.timing.name} #{self.index}{flags} ts={self.timestamp_ms})"
        )
