"""Low watermark from per-source timestamp punctuations (Enorm, section 6.2).

Every Kafka partition ("source", Enorm's *connection*) sends timestamp punctuations: "no more
records from this source with event time below T". A component stores the newest punctuation per
source and its low watermark is the **minimum over sources**; every window that ends at or below
it is complete.

Idle-source policy
------------------
A source that stops producing holds the minimum back forever (Enorm's rule, and the safe
default: ``idle_timeout_ms=None``). With ``idle_timeout_ms=N`` a source whose end offset has not
moved for ``N`` ms of *batch processing time* (the time the source records in its offsets, so a
replay decides the same) is left out of the minimum until it moves again. When every source is
idle the watermark holds. The watermark this tracker reports never decreases, so records of a
source that wakes up behind it are late and must be handled by the operator's lateness policy.

A punctuation of ``None`` means "no guarantee yet" (the source has seen no data) and holds the
minimum at ``None`` while that source is not idle. A source the tracker has not heard from does
not hold the minimum back, unless it is listed in ``expected`` (the senders known in advance, e.g.
an upstream operator's key groups): those hold it at ``None`` until they punctuate.

Several inputs
--------------
A multi-input operator (a join) keeps one tracker per input (:class:`InputWatermarks`): its low
watermark is the minimum over every sender of every input, ``None`` until **every input** has
one (an input whose senders have not spoken yet cannot be ahead of anything), and each input's
own watermark is known (``per_input``).

The watermark is evaluated when read, and clamped to never decrease: apply all punctuations of a
micro-batch (the dataflow-kafka source emits one per partition per batch) before reading it, or a
source not yet seen cannot hold it back.

Example
-------
>>> t = PunctuationTracker()
>>> t.update("p0", 100, end_offset=5, processing_time_ms=0)
>>> t.update("p1", 40, end_offset=3, processing_time_ms=0)
>>> t.low_watermark_ms  # read after the batch's punctuations of every source are applied
40
>>> t.update("p1", 150, end_offset=9, processing_time_ms=10)
>>> t.low_watermark_ms
100
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["PunctuationTracker", "InputWatermarks"]


@dataclass
class _Source:
    punctuation_ms: int | None
    end_offset: int | None
    last_moved_ms: int | None        # None: expected, not heard from (no update seen yet)


class PunctuationTracker:
    """Combine per-source punctuations into a monotone low watermark (min over sources)."""

    def __init__(self, idle_timeout_ms: int | None = None, expected: Iterable[str] = ()) -> None:
        if idle_timeout_ms is not None and idle_timeout_ms < 0:
            raise InvalidArgumentError(f"idle_timeout_ms must be >= 0 or None, got {idle_timeout_ms!r}")
        self.idle_timeout_ms = idle_timeout_ms
        # expected senders wait at None; their idle clock starts at the first update the tracker sees
        self._sources: dict[str, _Source] = {str(s): _Source(None, None, None) for s in expected}
        self._now_ms: int | None = None
        self._low_ms: int | None = None

    def update(
        self,
        source: str,
        punctuation_ms: int | None,
        end_offset: int | None = None,
        processing_time_ms: int = 0,
    ) -> None:
        """Record a punctuation of ``source``; punctuations only move forward per source."""
        if self._now_ms is None:
            for waiting in self._sources.values():
                if waiting.last_moved_ms is None:
                    waiting.last_moved_ms = processing_time_ms
        s = self._sources.get(source)
        if s is None:
            self._sources[source] = _Source(punctuation_ms, end_offset, processing_time_ms)
        else:
            if punctuation_ms is not None and (s.punctuation_ms is None or punctuation_ms > s.punctuation_ms):
                s.punctuation_ms = punctuation_ms
            if end_offset is not None and end_offset != s.end_offset:
                s.end_offset = end_offset
                s.last_moved_ms = processing_time_ms
        if self._now_ms is None or processing_time_ms > self._now_ms:
            self._now_ms = processing_time_ms

    def _recompute(self) -> None:
        active = [
            s for s in self._sources.values()
            if self.idle_timeout_ms is None
            or self._now_ms is None
            or s.last_moved_ms is None
            or self._now_ms - s.last_moved_ms < self.idle_timeout_ms
        ]
        if not active:
            return
        if any(s.punctuation_ms is None for s in active):
            return
        candidate = min(s.punctuation_ms for s in active)  # type: ignore[type-var]
        if self._low_ms is None or candidate > self._low_ms:
            self._low_ms = candidate

    @property
    def low_watermark_ms(self) -> int | None:
        """The low watermark in ms, or ``None`` while some active source gave no guarantee."""
        self._recompute()
        return self._low_ms

    def source_punctuations(self) -> dict[str, int | None]:
        """The newest punctuation per source."""
        return {k: s.punctuation_ms for k, s in self._sources.items()}

    def to_bytes(self) -> bytes:
        """Compact serialisation, for Spark state."""
        return json.dumps(
            [self.idle_timeout_ms, self._now_ms, self._low_ms,
             {k: [s.punctuation_ms, s.end_offset, s.last_moved_ms] for k, s in self._sources.items()}],
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "PunctuationTracker":
        idle, now, low, sources = json.loads(data)
        t = cls(idle)
        t._now_ms, t._low_ms = now, low
        t._sources = {k: _Source(*v) for k, v in sources.items()}
        return t


class InputWatermarks:
    """The low watermark of a multi-input operator: one :class:`PunctuationTracker` per input,
    the minimum over all of them, ``None`` until every input has a watermark (module docstring).

    ``expected``: ``{input: senders}`` known in advance (they hold their input at ``None`` until
    they punctuate). Monotone, as each tracker is.

    >>> w = InputWatermarks(["persons", "auctions"])
    >>> w.update("persons", "p-0", 5_000)
    >>> w.low_watermark_ms is None       # auctions has said nothing yet: it cannot be ahead
    True
    >>> w.update("auctions", "a-0", 3_000)
    >>> w.low_watermark_ms, w.per_input()
    (3000, {'persons': 5000, 'auctions': 3000})
    """

    def __init__(self, inputs: Iterable[str], idle_timeout_ms: int | None = None,
                 expected: Mapping[str, Iterable[str]] | None = None) -> None:
        expected = expected or {}
        self.trackers = {str(n): PunctuationTracker(idle_timeout_ms, expected.get(n, ())) for n in inputs}
        if not self.trackers:
            raise InvalidArgumentError("InputWatermarks needs at least one input")
        self._low_ms: int | None = None

    def update(self, input: str, source: str, punctuation_ms: int | None, end_offset: int | None = None,
               processing_time_ms: int = 0) -> None:
        """A punctuation of ``source`` on ``input`` (:meth:`PunctuationTracker.update`)."""
        tracker = self.trackers.get(input)
        if tracker is None:
            raise InvalidArgumentError(f"punctuation for input {input!r}: the operator's inputs are {sorted(self.trackers)}")
        tracker.update(source, punctuation_ms, end_offset, processing_time_ms)

    def per_input(self) -> dict[str, int | None]:
        """Each input's own low watermark (``None``: no guarantee from it yet)."""
        return {n: t.low_watermark_ms for n, t in self.trackers.items()}

    @property
    def low_watermark_ms(self) -> int | None:
        """The minimum of the inputs' low watermarks (monotone), or ``None`` until every input has one."""
        marks = list(self.per_input().values())
        if None not in marks and (self._low_ms is None or min(marks) > self._low_ms):
            self._low_ms = min(marks)
        return self._low_ms

    def to_bytes(self) -> bytes:
        """Compact serialisation, for Spark state: the low watermark and each input's tracker."""
        return json.dumps([self._low_ms, {n: t.to_bytes().decode() for n, t in self.trackers.items()}],
                          separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "InputWatermarks":
        low, trackers = json.loads(data)
        w = cls.__new__(cls)
        w._low_ms = low
        w.trackers = {n: PunctuationTracker.from_bytes(t.encode()) for n, t in trackers.items()}
        return w
