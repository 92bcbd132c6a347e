"""Windowed joins: Flink's window join, Beam's CoGroupByKey per window, with the Dataflow Model's
triggers and accumulation modes on the joined panes (Akidau et al., VLDB 2015, §2.2-2.4).

Rows of both sides with the same key and window are joined (:mod:`joins.cogroup`): tumbling
and sliding windows per row, **sessions across both sides** (a left and a right row less than
the gap apart are in one session). The windowing, triggers, allowed lateness and garbage
collection are :class:`watermarks.TriggerDriver`'s, run over the co-group; a pane's value is
the tuple of joined rows (:class:`~joins.spec.Pair`), in a deterministic order. How the panes of
a window relate (§2.3), such that folding a window's panes (:func:`fold`) always gives its
current result:

``"accumulating"``
    every pane holds the window's whole join result so far; it replaces the previous one.
``"accumulating_and_retracting"``
    as accumulating, and before a refinement the previous pane comes again with
    ``is_retraction=True`` (watermarks' convention): an early pane of a left outer join
    ``(l, None)`` is retracted and corrected to ``(l, r)`` when the right row arrives late
    (within the allowed lateness).
``"discarding"``
    a pane holds the joined rows new since the previous pane; rows an outer join must take
    back (``(l, None)`` once ``r`` arrived) come first in a retraction pane holding just those.

Panes without rows are not emitted. A merged session retracts the panes of the sessions it
replaced (every mode, as the driver does). State is freed when the watermark (the minimum over
both sides) passes a window's end plus the allowed lateness; a row no window takes is dropped
and reported (:class:`~joins.spec.JoinDropped`, reason ``late`` or ``closed``).

>>> from dataflow_kafka.windowing import TumblingWindow
>>> from dataflow_kafka.watermarks import AfterCount, AfterWatermark
>>> from dataflow_kafka.joins import WindowJoin, Row, SidePunctuation
>>> join = WindowJoin(TumblingWindow(10), how="left_outer", accumulation_mode="accumulating_and_retracting",
...                   trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)), allowed_lateness_ms=20)
>>> engine = join.engine()
>>> [p.value for p in engine.process([Row("left", "k", 3, "l")]).panes]          # early: no right row yet
[(Pair(left=(3, 'l'), right=None),)]
>>> out = engine.process([Row("right", "k", 7, "r")], [SidePunctuation("left", 12), SidePunctuation("right", 12)])
>>> for p in out.panes:                        # corrected early; the on-time pane then replaces it
...     print(p.timing.name, "retract" if p.is_retraction else "emit", p.value)
EARLY retract (Pair(left=(3, 'l'), right=None),)
EARLY emit (Pair(left=(3, 'l'), right=(7, 'r')),)
EARLY retract (Pair(left=(3, 'l'), right=(7, 'r')),)
ON_TIME emit (Pair(left=(3, 'l'), right=(7, 'r')),)
"""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from collections import Counter
from typing import Any, Iterable, NamedTuple

from dataflow_kafka.joins.cogroup import CoGroupCombiner, incremental_for
from dataflow_kafka.joins.spec import JoinDropped, JoinError, JoinType, Pair, SidePunctuation, Row, Side, TwoInputWatermark
from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, TimestampCombiner
from dataflow_kafka.watermarks.driver import TriggerDriver
from dataflow_kafka.watermarks.triggers import DefaultTrigger, Trigger
from dataflow_kafka.watermarks.windows import IntervalWindow, compile_window_fn
from dataflow_kafka.windowing import Window

__all__ = ["WindowJoin", "WindowJoinEngine", "JoinOutput", "fold"]


@dataclasses.dataclass(frozen=True)
class WindowJoin:
    """A windowed join (see the module docstring); :meth:`engine` builds its runtime.

    Parameters
    ----------
    window : windowing.Window
        ``TumblingWindow``, ``SlidingWindow``, ``SessionWindow`` (across both
        sides), ``GlobalWindow``.
    how : str or JoinType
        ``"inner"``, ``"left_outer"``, ``"right_outer"``, ``"full_outer"`` (Spark's names).
    trigger, accumulation_mode, allowed_lateness_ms, timestamp_combiner, on_time_behavior :
        as :class:`watermarks.TriggerDriver` (default: Beam's default trigger, discarding, 0).
    """

    window: Window
    how: JoinType | str = JoinType.INNER
    trigger: Trigger = dataclasses.field(default_factory=DefaultTrigger)
    accumulation_mode: AccumulationMode | str = AccumulationMode.DISCARDING
    allowed_lateness_ms: int = 0
    timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW
    on_time_behavior: OnTimeBehavior | str = OnTimeBehavior.FIRE_ALWAYS

    def __post_init__(self) -> None:
        if not isinstance(self.window, Window):
            raise JoinError(f"window={self.window!r}: expected a windowing window (TumblingWindow, SlidingWindow, "
                            "SessionWindow, GlobalWindow)")
        compile_window_fn(self.window)                       # time windows only
        if not isinstance(self.trigger, Trigger):
            raise JoinError(f"trigger={self.trigger!r}: expected a watermarks trigger (AfterWatermark(...), ...)")
        if isinstance(self.allowed_lateness_ms, bool) or not isinstance(self.allowed_lateness_ms, int) \
                or self.allowed_lateness_ms < 0:
            raise JoinError(f"allowed_lateness_ms={self.allowed_lateness_ms!r}: expected an integer >= 0 (ms)")
        set_ = object.__setattr__
        set_(self, "how", JoinType.parse(self.how))
        set_(self, "accumulation_mode", AccumulationMode.parse(self.accumulation_mode, "accumulation_mode"))
        set_(self, "timestamp_combiner", TimestampCombiner.parse(self.timestamp_combiner, "timestamp_combiner"))
        set_(self, "on_time_behavior", OnTimeBehavior.parse(self.on_time_behavior, "on_time_behavior"))
        self._driver(warn=True)          # a trigger that can drop data warns here, once

    def _driver(self, warn: bool = False, incremental: bool = True) -> TriggerDriver:
        """The trigger driver over the co-group. Discarding panes are computed from accumulated
        ones: by the engine's difference with what it emitted, or, where
        :func:`~joins.cogroup.incremental_for` allows it (and ``incremental``), by the co-group,
        which outputs only the pairs new since its previous output."""
        mode = self.accumulation_mode
        discarding = mode is AccumulationMode.DISCARDING
        if discarding:
            mode = AccumulationMode.ACCUMULATING
        window_fn = compile_window_fn(self.window)
        combiner = CoGroupCombiner(self.how, incremental and incremental_for(self.how, discarding, window_fn.is_merging))
        with warnings.catch_warnings():
            if not warn:
                warnings.simplefilter("ignore")
            return TriggerDriver(self.window, self.trigger, mode, self.allowed_lateness_ms, self.timestamp_combiner,
                                 combiner, self.on_time_behavior)

    def engine(self) -> "WindowJoinEngine":
        return WindowJoinEngine(self)


class JoinOutput(NamedTuple):
    """What one call of a join engine produced: panes (windowed join) and dropped-row reports."""

    panes: list
    dropped: list


class WindowJoinEngine:
    """The runtime of a :class:`WindowJoin` for the keys of one key group (pure, no Spark)."""

    def __init__(self, spec: WindowJoin, incremental: bool = True) -> None:
        self.spec = spec
        self._discarding = spec.accumulation_mode is AccumulationMode.DISCARDING
        self.driver = spec._driver(incremental=incremental)
        self._combiner: CoGroupCombiner = self.driver.combiner
        #: the co-group outputs new pairs only (CoGroupCombiner's incremental form): no difference to take
        self._incremental = self._combiner.incremental
        self.watermark = TwoInputWatermark()
        #: discarding: per (key, window) the joined rows emitted so far (their repr -> (row, count))
        self._emitted: dict[tuple, dict[str, list]] = {}

    # -- one micro-batch ----------------------------------------------------------------------------
    def process(self, rows: Iterable[Row | tuple] = (), punctuations: Iterable[SidePunctuation | tuple] = (),
                processing_time_ms: int | None = None) -> JoinOutput:
        """Processing time first, then ``rows`` (one bundle per key, keys in order of first
        appearance), then the punctuations: the watermark moves to the minimum over both sides."""
        panes: list[Pane] = []
        if processing_time_ms is not None:
            panes += self._panes(self.driver.advance_processing_time(int(processing_time_ms)))
        dropped: list[JoinDropped] = []
        for key, batch in _by_key(rows).items():
            panes += self._add(key, batch, dropped)
        for p in punctuations:
            self.watermark.update(SidePunctuation(*p))
        wm = self.watermark.low_watermark_ms
        if wm is not None:
            panes += self._panes(self.driver.advance_watermark(wm))
            self._forget(wm)
        return JoinOutput(panes, dropped)

    def _add(self, key: Any, batch: list[tuple], dropped: list[JoinDropped]) -> list[Pane]:
        driver = self.driver
        late, closed = driver.dropped_late, driver.dropped_closed
        taken: list = []
        self._combiner.taken = taken
        try:
            panes = driver.add([((side, i, value), ts) for i, (side, ts, value) in enumerate(batch)], key=key)
        finally:
            self._combiner.taken = None
        missed = set(range(len(batch))) - set(taken)
        if missed:
            counts: Counter = Counter()
            for i in sorted(missed):
                counts[(batch[i][0], self._reason(batch[i][1], late != driver.dropped_late,
                                                  closed != driver.dropped_closed))] += 1
            dropped += [JoinDropped(Side.LEFT if side == 0 else Side.RIGHT, key, reason, n)
                        for (side, reason), n in sorted(counts.items())]
        return self._panes(panes)

    def _reason(self, ts: int, any_late: bool, any_closed: bool) -> str:
        """Why no window took a row of a bundle: the driver counted late or closed copies (both:
        ``late`` when every window of the row is past the allowed lateness)."""
        if not any_closed:
            return "late"
        if not any_late:
            return "closed"
        bar = self.driver.watermark_ms - self.spec.allowed_lateness_ms
        windows = self.driver.window_fn.assign_windows(ts)
        return "late" if all(bar >= w.end_ms for w in windows) else "closed"

    # -- panes ----------------------------------------------------------------------------------------
    def _panes(self, panes: list[Pane]) -> list[Pane]:
        if not self._discarding or self._incremental:
            return [p for p in panes if p.value]
        out = []
        for p in panes:
            w = (p.key, p.window)
            before = self._emitted.pop(w, {})
            if p.is_retraction:            # a merged session replaced this window: take back what it showed
                if before:
                    out.append(dataclasses.replace(p, value=_rows(before)))
                continue
            now = _counted(p.value)
            minus = {k: [r, n - now.get(k, (r, 0))[1]] for k, (r, n) in before.items() if n > now.get(k, (r, 0))[1]}
            plus = {k: [r, n - before.get(k, (r, 0))[1]] for k, (r, n) in now.items() if n > before.get(k, (r, 0))[1]}
            if minus:
                out.append(dataclasses.replace(p, value=_rows(minus), is_retraction=True))
            if plus:
                out.append(dataclasses.replace(p, value=_rows(plus)))
            if not p.is_last:
                self._emitted[w] = now
        return out

    def _forget(self, watermark_ms: int) -> None:
        """Discarding: drop what was emitted for windows the driver garbage collected."""
        bar = watermark_ms - self.spec.allowed_lateness_ms
        for w in [w for w in self._emitted if w[1].end_ms <= bar]:
            del self._emitted[w]

    # -- state ----------------------------------------------------------------------------------------
    def live_windows(self) -> dict[Any, list[IntervalWindow]]:
        """Windows with state, per key (freed at end + allowed lateness)."""
        return {k: self.driver.windows(k) for k in self.driver.keys()}

    def to_bytes(self) -> bytes:
        return pickle.dumps((self.driver.to_bytes(), self.watermark.to_bytes(), self._emitted, self._incremental),
                            protocol=5)

    @classmethod
    def from_bytes(cls, spec: WindowJoin, data: bytes) -> "WindowJoinEngine":
        """The engine of ``to_bytes``' state; a state written before the incremental co-group
        (three items) goes on with the difference it was written with."""
        driver, watermark, emitted, *incremental = pickle.loads(data)
        engine = cls(spec, incremental=bool(incremental and incremental[0]))
        engine._emitted = emitted
        engine.driver.load_bytes(driver)
        engine.watermark = TwoInputWatermark.from_bytes(watermark)
        return engine


def _by_key(rows: Iterable) -> dict[Any, list[tuple]]:
    """``{key: [(side 0/1, ts_ms, value)]}`` in order of first appearance."""
    out: dict[Any, list[tuple]] = {}
    for r in rows:
        side, key, ts, value = r
        if isinstance(ts, bool) or not isinstance(ts, int):
            try:
                ts = int(ts)
            except (TypeError, ValueError):
                raise JoinError(f"row {tuple(r)!r}: ts_ms must be an integer (ms)") from None
        out.setdefault(key, []).append((0 if Side.parse(side) is Side.LEFT else 1, ts, value))
    return out


def _counted(pairs: tuple) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in pairs:
        e = out.setdefault(repr(p), [p, 0])
        e[1] += 1
    return out


def _rows(counted: dict[str, list]) -> tuple[Pair, ...]:
    return tuple(sorted((r for r, n in counted.values() for _ in range(n)), key=Pair.sort_key))


def fold(panes: Iterable[Pane], accumulation_mode: AccumulationMode | str) -> dict[tuple, tuple[Pair, ...]]:
    """The current result per ``(key, window)`` from a join's panes: accumulating, the latest pane
    (a retraction removes it); otherwise the sum of the panes with retractions subtracted.
    Windows without rows are left out."""
    mode = AccumulationMode.parse(accumulation_mode, "accumulation_mode")
    state: dict[tuple, dict[str, list]] = {}
    for p in panes:
        w = (p.key, p.window)
        if mode is AccumulationMode.ACCUMULATING:
            if p.is_retraction:
                state.pop(w, None)
            else:
                state[w] = _counted(p.value)
            continue
        cur = state.setdefault(w, {})
        for k, (r, n) in _counted(p.value).items():
            e = cur.setdefault(k, [r, 0])
            e[1] += -n if p.is_retraction else n
            if e[1] < 0:
                raise JoinError(f"fold: window {w!r} retracts {r!r} more often than it emitted it")
    return {w: _rows({k: e for k, e in c.items() if e[1]}) for w, c in state.items()
            if any(e[1] for e in c.values())}
