"""The trigger driver: GroupAlsoByWindow with triggers, panes, lateness and accumulation.

``TriggerDriver`` runs the Dataflow Model (Akidau et al., VLDB 2015, §2.2 Windowing to §2.4
Examples) for one window function, trigger and accumulation mode over keyed elements, without Spark.
It is both the tool for reasoning about semantics (feed it a transcript, read the panes) and the
core that the Spark operator runs inside a stateful processor.

One call of ``add`` is one **bundle**, as in Beam's ``ReduceFnRunner.processElements``: per
element, AssignWindows; drop copies whose window is past the allowed lateness (counted in
``dropped_late``; the first such drop warns once, :class:`LateDataDropped`); MergeWindows for
merging window functions (the merged windows' state merges: accumulators via the combiner,
trigger slots by their declared merge, emitted panes are kept to be retracted); fold the value
into the window with the combiner; tell the trigger. Only then, once per window the bundle
touched (by window end, then start), ask the trigger and fire if it says so: an
``AfterCount(2)`` given three elements in one call fires once, after all three. On Spark a
micro-batch is the bundle (one ``add`` per key and batch). ``advance_watermark`` and
``advance_processing_time`` move time forward and fire every window whose trigger is ready; when
the watermark passes ``end + allowed_lateness_ms`` a window is garbage collected, with a final
pane if it holds data not yet emitted.

Output timestamps (``EARLIEST`` / ``LATEST``) follow Beam's watermark holds (§2.2.2: any timestamp
at or after the earliest element is valid): a pane's timestamp is the earliest (latest) event time
among the elements added since the window's previous pane that were not behind the output
watermark when their bundle began, or the window's last instant ``end_ms - 1`` if there are none.
An element is behind when its event time is below the key's output watermark (the input watermark,
held back by the key's pending holds) or its window already ended at the input watermark (a late
element). So a late element cannot pull a pane's timestamp behind the watermark. Beam computes the
output watermark over every key of a step; here it is per key, so how keys are grouped (key
groups on Spark) does not change a timestamp.

Merging windows (sessions) that change after they emitted say so in every accumulation mode
(the Dataflow Model's retractions, §2.3): a window a merge replaces has its last pane retracted
(an ``is_retraction`` copy; in ``discarding`` mode carrying the window's total, the sum of its
panes) before the merged window's next pane, and in ``discarding`` mode that pane carries
everything the merged window holds (a new window to a consumer summing panes per window). An
element whose session would merge into a session already garbage collected (emitted and past its
allowed lateness: its state is gone, so it cannot be retracted) is dropped as late and counted in
``dropped_late``, whatever the allowed lateness: a late element never changes an emitted session
without a retraction.

A firing emits a pane only when the window received data (or merged) since its previous pane,
except the first firing after the watermark passed the end of the window under
``OnTimeBehavior.FIRE_ALWAYS``. A trigger that finishes closes its window: later data for it
(or data whose session would merge into it) are dropped and counted in ``dropped_closed``.

Times are integer milliseconds. Processing time and watermark only move forward (smaller values
are ignored). Advance processing time before adding the elements that arrive at it.

Example: fixed two-minute windows with the default trigger, one late datum (Figure 12)

>>> from dataflow_kafka.watermarks import DefaultTrigger, AccumulationMode
>>> from dataflow_kafka.windowing import Sum, TumblingWindow
>>> d = TriggerDriver(TumblingWindow(120_000), DefaultTrigger(), AccumulationMode.ACCUMULATING,
...                   allowed_lateness_ms=300_000, combiner=Sum())
>>> d.add([(5, 70_000)])
[]
>>> d.advance_watermark(120_000)
[Pane([0, 120000) value=5 ON_TIME #0 first ts=119999)]
>>> d.add([(9, 100_000)])
[Pane([0, 120000) value=14 LATE #1 ts=119999)]
>>> restored = TriggerDriver.from_bytes(d.to_bytes(), TumblingWindow(120_000), DefaultTrigger(),
...     AccumulationMode.ACCUMULATING, allowed_lateness_ms=300_000, combiner=Sum())
>>> restored.advance_watermark(420_000)  # end + allowed lateness: state garbage collected
[]
>>> restored.windows(), restored.add([(1, 60_000)]), restored.dropped_late
([], [], 1)
"""

from __future__ import annotations

import dataclasses
import warnings
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from dataflow_kafka.watermarks import _codec
from dataflow_kafka.watermarks._trigger_runtime import Layout, build, late_phase_slot
from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from dataflow_kafka.watermarks.history import elements_per_key
from dataflow_kafka.watermarks.triggers import ANYTIME, AT_WATERMARK, DefaultTrigger, Trigger, counts_only, finishes
from dataflow_kafka.watermarks.windows import (
    BEGINNING_OF_TIME_MS, END_OF_TIME_MS, IntervalWindow, SessionWindowFn, WindowFn, compile_window_fn, extent_ms,
)
from dataflow_kafka.windowing import AggregateFunction, ToList, Window
from dataflow_kafka.windowing.aggregations import combine_fn
from dataflow_kafka.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["TriggerDriver", "LateDataDropped", "WindowState", "warn_late"]

# 2: per-window watermark hold (Beam's element hold); 3: + what a window showed, gone sessions;
# 4: each key's windows encoded on their own, with their earliest end (built when first looked at)
_FORMAT = 4
_READS = (2, 3, 4)
_EARLY, _ON_TIME, _LATE = PaneTiming.EARLY, PaneTiming.ON_TIME, PaneTiming.LATE


class _Ctx:
    __slots__ = ("watermark", "now", "end")


class LateDataDropped(UserWarning):
    """Data were dropped because their window was past ``end + allowed_lateness_ms`` (warned once
    per driver; every drop is counted in ``dropped_late``)."""


class WindowState(NamedTuple):
    """One live window of a key, as :meth:`TriggerDriver.window_states` shows it: ``panes`` fired
    so far, ``new_data`` (elements not yet in a pane), ``closed`` (its trigger finished: later
    elements are dropped), ``past_end`` (a pane fired at or after its end), ``hold_ms`` (the next
    pane's timestamp when it is not the window's end), ``expires_ms`` (the watermark that garbage
    collects it: end plus the allowed lateness), ``waiting`` (what its trigger waits for, as
    text), ``accumulator`` (the combiner's; ``None`` once closed)."""

    key: Any
    window: IntervalWindow
    panes: int
    new_data: bool
    closed: bool
    past_end: bool
    hold_ms: int | None
    expires_ms: int
    waiting: str
    accumulator: Any


def warn_late(key: Any, w: IntervalWindow, t: int, watermark_ms: int, allowed_lateness_ms: int,
              stacklevel: int) -> None:
    """The :class:`LateDataDropped` warning (given once per driver) for the first dropped copy."""
    warnings.warn(
        f"dropped late data: key {key!r}, window [{w.start_ms}, {w.end_ms}), event time {t} ms, at "
        f"watermark {watermark_ms} ms, past the window's end plus "
        f"allowed_lateness_ms={allowed_lateness_ms}. Such drops are counted in dropped_late and "
        "not warned again; raise allowed_lateness_ms (with late firings) to keep windows open for late data.",
        LateDataDropped, stacklevel=stacklevel,
    )


class _WindowState:
    """Everything the driver keeps for one live window of one key.

    ``hold``: Beam's element hold, the output timestamp the next pane gets (None: no element
    since the last pane counts; the pane then gets ``end_ms - 1``). ``cand``: the current
    bundle's contribution, folded into ``hold`` when the bundle ends (empty between calls).
    ``emitted``: panes to retract with the next pane (retracting mode: every pane not yet
    retracted; merging windows in the other modes: the last pane of each extent, of which those
    of another extent are retracted). ``shown``: discarding mode, merging windows: the
    accumulator of everything emitted (a retraction's value; folded back into ``acc`` when the
    window's extent changes).
    """

    __slots__ = ("acc", "hold", "cand", "dirty", "after_end", "closed", "next_index", "trig", "emitted", "shown")

    def __init__(self, acc: Any, trig: list) -> None:
        self.acc, self.trig = acc, trig
        self.hold = self.cand = self.shown = None
        self.dirty = self.after_end = self.closed = False
        self.next_index = 0
        self.emitted: list[Pane] = []


class TriggerDriver:
    """Windows, triggers and accumulation for keyed elements; returns panes as they fire.

    Parameters
    ----------
    window_fn : windowing.Window or WindowFn
        Where in event time elements are grouped (``TumblingWindow``, ``SessionWindow``, ...; or
        a custom :class:`WindowFn`).
    trigger : Trigger
        When panes are emitted (``AfterWatermark(early=..., late=...)``, ...).
    accumulation_mode : AccumulationMode or str
        How panes of a window relate: discarding, accumulating, accumulating and retracting.
    allowed_lateness_ms : int
        Milliseconds after the end of a window during which late data are still accepted.
    timestamp_combiner : TimestampCombiner or str
        Output timestamp of a pane: end of window (``end_ms - 1``), earliest or latest event time
        of the pane's new elements that were not behind the output watermark (module docstring).
    combiner : windowing.AggregateFunction
        The aggregation (``Sum()``, ..., a user-defined lift / combine / lower or Beam-style
        ``Combiner``), run through its Beam view (:func:`~windowing.aggregations.combine_fn`);
        default ``ToList()`` (panes list their values).
    on_time_behavior : OnTimeBehavior or str
        ``FIRE_ALWAYS`` (default, as Beam) or ``FIRE_IF_NON_EMPTY``.
    """

    def __init__(
        self,
        window_fn: Window | WindowFn,
        trigger: Trigger,
        accumulation_mode: AccumulationMode | str = AccumulationMode.DISCARDING,
        allowed_lateness_ms: int = 0,
        timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW,
        combiner: AggregateFunction | None = None,
        on_time_behavior: OnTimeBehavior | str = OnTimeBehavior.FIRE_ALWAYS,
    ) -> None:
        window_fn = compile_window_fn(window_fn)
        if not isinstance(trigger, Trigger):
            raise ArgumentTypeError(f"trigger must be a Trigger, got {trigger!r}")
        if not isinstance(allowed_lateness_ms, int) or allowed_lateness_ms < 0:
            raise InvalidArgumentError(f"allowed_lateness_ms={allowed_lateness_ms!r}: expected an integer >= 0 (milliseconds)")
        self.window_fn, self.trigger, self.allowed_lateness_ms = window_fn, trigger, allowed_lateness_ms
        self.accumulation_mode = AccumulationMode.parse(accumulation_mode, "accumulation_mode")
        self.timestamp_combiner = TimestampCombiner.parse(timestamp_combiner, "timestamp_combiner")
        self.on_time_behavior = OnTimeBehavior.parse(on_time_behavior, "on_time_behavior")
        self.combiner = combiner if combiner is not None else ToList()
        if not isinstance(self.combiner, AggregateFunction):
            raise ArgumentTypeError(f"combiner must be a windowing aggregation (AggregateFunction or Combiner), got {combiner!r}")
        self._beam = combine_fn(self.combiner)          # Beam's CombineFn methods, per element
        self._timestamped = bool(getattr(self.combiner, "timestamped", False))
        self._holds = self.timestamp_combiner is not TimestampCombiner.END_OF_WINDOW
        self._earliest = self.timestamp_combiner is TimestampCombiner.EARLIEST
        self._warned_late = False  # the LateDataDropped warning was given (or dropped_late > 0)
        self._layout = Layout()
        self._root = build(trigger, self._layout)
        self._discarding = self.accumulation_mode is AccumulationMode.DISCARDING
        self._retracting = self.accumulation_mode is AccumulationMode.ACCUMULATING_AND_RETRACTING
        self._merging = self.window_fn.is_merging
        #: merging windows: per key, the latest end of a garbage-collected window (module docstring)
        self._gone: dict[Any, int] = {}
        self._fire_always = self.on_time_behavior is OnTimeBehavior.FIRE_ALWAYS
        self._counts_only = counts_only(trigger)    # then moving processing time fires nothing
        self._ctx = _Ctx()
        self._ctx.watermark = self._ctx.now = BEGINNING_OF_TIME_MS
        #: per key, its live windows; None: not built yet from the key's entry in ``_rows`` (a
        #: loaded state builds a key's windows when a path first looks at them, :meth:`_windows_of`)
        self._keys: dict[Any, dict[IntervalWindow, _WindowState] | None] = {}
        #: per key, ``(earliest window end, the windows encoded)`` as to_bytes writes them, while
        #: the key's state is unchanged (every path that changes a key's windows drops its entry:
        #: _ingest, add_keyed, _check), so a batch encodes and decodes only the keys it changed
        self._rows: dict[Any, tuple[int, bytes]] = {}
        #: Element copies dropped because their window was past the allowed lateness.
        self.dropped_late = 0
        #: Element copies dropped because their window's trigger had finished (window closed).
        self.dropped_closed = 0
        self._warn_if_lossy()

    def _warn_if_lossy(self) -> None:
        kind = finishes(self.trigger)
        if kind == ANYTIME:
            warnings.warn(
                f"trigger {self.trigger!r} can finish before the watermark passes the end of the "
                "window; data arriving for a window after its trigger finished are dropped "
                "(counted in dropped_closed). Wrap it in Repeatedly(...) to keep windows open.",
                stacklevel=3,
            )
        elif kind == AT_WATERMARK and self.allowed_lateness_ms > 0:
            warnings.warn(
                f"trigger {self.trigger!r} finishes when the watermark passes the end of the window, "
                f"so allowed_lateness_ms={self.allowed_lateness_ms} is never used: late data are "
                "dropped (counted in dropped_closed). Add late firings, e.g. "
                "AfterWatermark(late=AfterCount(1)).",
                stacklevel=3,
            )

    # -- public surface -----------------------------------------------------------------------

    @property
    def watermark_ms(self) -> int:
        return self._ctx.watermark

    @property
    def processing_time_ms(self) -> int:
        return self._ctx.now

    def keys(self) -> list:
        """Keys with live window state."""
        return list(self._keys)

    def windows(self, key: Any = None) -> list[IntervalWindow]:
        """Live windows of ``key`` (not yet garbage collected), by start."""
        return sorted(self._windows_of(key) if key in self._keys else ())

    def window_states(self) -> list[WindowState]:
        """Every live window of every key (keys in first-seen order, windows by start), as
        :class:`WindowState`; reads the state only."""
        ctx = _Ctx()
        ctx.watermark, ctx.now = self._ctx.watermark, self._ctx.now
        out = []
        for key in self._keys:
            ws = self._windows_of(key)
            for w in sorted(ws):
                st = ws[w]
                ctx.end = w.end_ms
                out.append(WindowState(key, w, st.next_index, st.dirty, st.closed, st.after_end, st.hold,
                                       self._gc_time(w), "finished" if st.closed else self._root.waiting(st.trig, ctx),
                                       st.acc))
        return out

    def add(self, elements: Iterable[tuple[Any, int]], key: Any = None) -> list[Pane]:
        """Add ``(value, event_time_ms)`` pairs for ``key``; returns the panes that fired."""
        return self._ingest(elements, key, self._beam.add_input, self._beam.add_inputs)

    def add_retractions(self, elements: Iterable[tuple[Any, int]], key: Any = None) -> list[Pane]:
        """Take back earlier ``(value, event_time_ms)`` inputs with the combiner's ``uncombine``.

        For consuming the retractions of an upstream ACCUMULATING_AND_RETRACTING stage (§2.3).
        Merged sessions do not shrink when an element is retracted.
        """
        if getattr(self._beam, "uncombine", None) is None:
            raise ArgumentTypeError(f"combiner {self.combiner!r} has no uncombine; it cannot apply retractions")
        return self._ingest(elements, key, self._beam.uncombine)

    def add_keyed(self, keys: list, rows: np.ndarray, values: Sequence[Any], times: np.ndarray,
                  integral_values: bool = False) -> tuple[list[Pane], np.ndarray, np.ndarray]:
        """One :meth:`add` per key of ``keys``, in that order, from columns: each element's key as an
        index into ``keys`` (``rows``), its value and event time, in arrival order. Returns the
        panes those calls give, in order, and per key the copies dropped as late and for a closed
        window. ``integral_values``: the values are integers (Sum, Min, Max, Mean are then exact
        in any order).

        Sessions are taken a run at a time where that gives the same panes (:meth:`_sessions_at_once`):
        a key's elements are sorted by event time and cut where two are ``gap_ms`` or more apart
        (their windows do not overlap), and each run, a window spanning it, merges once (§2.2.2,
        MergeWindows) and takes its values with one ``add_inputs`` instead of a merge per element.
        A key with a run that reaches past a window whose on-time firing is done takes its elements
        one at a time (:meth:`_straddles_a_fired_window`)."""
        n = len(keys)
        late, closed = np.zeros(n, np.int64), np.zeros(n, np.int64)
        rows, times = np.asarray(rows, np.int64), np.asarray(times, np.int64)
        if not len(rows):
            return [], late, closed

        def add_one_key(i: int, elems: list) -> list[Pane]:      # add, with the key's drops counted
            before = self.dropped_late, self.dropped_closed
            out = self.add(elems, key=keys[i])
            late[i] += self.dropped_late - before[0]
            closed[i] += self.dropped_closed - before[1]
            return out

        if not self._sessions_at_once(integral_values, times):
            panes: list[Pane] = []
            for i, elems in enumerate(elements_per_key(n, rows, values, times)):
                if elems:
                    panes += add_one_key(i, elems)
            return panes, late, closed
        ctx, root, gap = self._ctx, self._root, self.window_fn.gap_ms
        # AssignWindows and the late rule of _ingest, for every element at once
        kept = times + gap > ctx.watermark - self.allowed_lateness_ms
        if ctx.watermark >= END_OF_TIME_MS:
            kept[:] = False
        if self._gone:
            gone = np.array([self._gone.get(k, BEGINNING_OF_TIME_MS) for k in keys], np.int64)
            kept &= times >= gone[rows]
        if not kept.all():
            dropped = np.flatnonzero(~kept)
            late += np.bincount(rows[dropped], minlength=n)
            self.dropped_late += len(dropped)
            if not self._warned_late:               # the copy add would drop first: by key, then arrival
                first = dropped[np.lexsort((dropped, rows[dropped]))[0]]
                t = int(times[first])
                self._warn_late(keys[int(rows[first])], IntervalWindow(t, t + gap), t)
            idx = np.flatnonzero(kept)
        else:
            idx = np.arange(len(rows))
        if not len(idx):
            return [], late, closed
        order = idx[np.lexsort((idx, times[idx], rows[idx]))]       # by key, event time, arrival
        r, t = rows[order], times[order]
        cut = np.flatnonzero((r[1:] != r[:-1]) | (t[1:] - t[:-1] >= gap)) + 1
        starts = np.concatenate(([0], cut))
        ends = np.append(starts[1:], len(order))
        vals = [values[i] for i in order.tolist()]
        fold_many = self._beam.add_inputs
        panes = []
        key_of, lo, hi = r[starts].tolist(), t[starts].tolist(), (t[ends - 1] + gap).tolist()
        runs = list(zip(key_of, lo, hi, starts.tolist(), ends.tolist()))
        late_slot = late_phase_slot(root)
        i = 0
        while i < len(runs):
            k = runs[i][0]
            key = keys[k]
            ws = self._live(key)
            if (late_slot is not None and runs[i][1] < ctx.watermark     # a fired window ends by the watermark
                    and self._straddles_a_fired_window(ws, late_slot, runs, i)):
                # element by element here: an element's own window may merge into the fired one only
                # after the element, and then its late count is not taken (a run would take it)
                j = i
                while j < len(runs) and runs[j][0] == k:
                    j += 1
                mine = np.sort(order[runs[i][3]:runs[j - 1][4]])       # arrival order
                panes += add_one_key(k, [(values[e], int(times[e])) for e in mine.tolist()])
                i = j
                continue
            self._rows.pop(key, None)
            touched: dict[IntervalWindow, None] = {}
            renames: dict[IntervalWindow, IntervalWindow] = {}
            while i < len(runs) and runs[i][0] == k:
                _, s, e, a, b = runs[i]
                w = IntervalWindow(s, e)
                st = ws.get(w)
                if st is None:
                    w = self._merge_new(ws, w, renames)     # never None: no window closes (_sessions_at_once)
                    st = ws[w]
                st.acc = fold_many(st.acc, vals[a:b])
                st.dirty = True
                ctx.end = w.end_ms
                root.on_elements(st.trig, ctx, b - a)
                touched[w] = None
                i += 1
            panes += self._end_bundle(key, ws, touched, renames)
        return panes, late, closed

    @staticmethod
    def _straddles_a_fired_window(ws: dict, on_time: int, runs: list, i: int) -> bool:
        """Whether a run of the key whose runs start at ``runs[i]`` overlaps a window whose on-time
        firing is done without lying inside it: element by element, an element whose own window
        does not overlap that window counts toward no late trigger, even when a later element of
        the run merges the two (a run inside the window gives each element's count either way)."""
        fired = [w for w, st in ws.items() if st.trig[on_time]]
        if not fired:
            return False
        k = runs[i][0]
        while i < len(runs) and runs[i][0] == k:
            s, e = runs[i][1], runs[i][2]
            for w in fired:
                if w.start_ms < e and s < w.end_ms and not (w.start_ms <= s and e <= w.end_ms):
                    return True
            i += 1
        return False

    def _sessions_at_once(self, integral_values: bool, times: np.ndarray) -> bool:
        """Whether :meth:`add_keyed` may take a key's sessions a run at a time: it gives the panes of
        element-by-element merging when the windows are sessions (not restricted to a coverage
        start), no trigger finishes or fires early (so a window never closes, and the only trigger
        state a run's order could change is a late count: while the on-time firing is pending, that
        firing resets it; once it is done, :meth:`add_keyed` takes the key one element at a time
        where a run reaches past such a window), the output timestamp is the window's end, and the combiner's
        result does not depend on the order of inputs and merges (Count; Sum, Min, Max, Mean of
        integers)."""
        if type(self.window_fn) is not SessionWindowFn or self._holds or self._timestamped:
            return False
        trig = self.trigger
        if not self._counts_only or not (type(trig) is DefaultTrigger or (trig.early is None and trig.late is not None)):
            return False
        form = getattr(self.combiner, "vectorised", None)
        parts = frozenset(form.components) if form is not None else frozenset()
        if not parts or not parts <= {"count", "sum", "min", "max"} or (parts != {"count"} and not integral_values):
            return False
        return int(times.max()) + self.window_fn.gap_ms < END_OF_TIME_MS

    def advance_watermark(self, watermark_ms: int) -> list[Pane]:
        """Move the event-time watermark forward; fire and garbage collect windows."""
        if watermark_ms <= self._ctx.watermark:
            return []
        self._ctx.watermark = watermark_ms
        out = self._check_all(gc=True)
        if self._gone:      # an accepted element's window ends after watermark - lateness
            reach = watermark_ms - self.allowed_lateness_ms - extent_ms(self.window_fn)
            self._gone = {k: e for k, e in self._gone.items() if e > reach}
        return out

    def advance_processing_time(self, now_ms: int) -> list[Pane]:
        """Move processing time forward; fire windows whose processing-time triggers are due (none
        for a trigger of counts only, :func:`~watermarks.triggers.counts_only`: no window is asked)."""
        if now_ms <= self._ctx.now:
            return []
        self._ctx.now = now_ms
        return [] if self._counts_only else self._check_all(gc=False)

    # -- GroupAlsoByWindow --------------------------------------------------------------------

    def _gc_time(self, window: IntervalWindow) -> int:
        return min(window.end_ms + self.allowed_lateness_ms, END_OF_TIME_MS)

    def _windows_of(self, key: Any) -> dict[IntervalWindow, _WindowState]:
        """``key``'s live windows (a key of the state), built from its rows if not built yet."""
        ws = self._keys[key]
        if ws is None:
            ws = self._keys[key] = _windows_from_rows(key, _codec.decode_part(self._rows[key][1]))
        return ws

    def _live(self, key: Any) -> dict[IntervalWindow, _WindowState]:
        """``key``'s live windows, an empty dict added for a key without any."""
        if key in self._keys:
            return self._windows_of(key)
        ws = self._keys[key] = {}
        return ws

    def _fresh(self) -> _WindowState:
        return _WindowState(self._beam.create_accumulator(), self._layout.fresh())

    def _ingest(self, elements: Iterable[tuple[Any, int]], key: Any, fold: Callable,
                fold_many: Callable | None = None) -> list[Pane]:
        """One bundle: add every element, then evaluate each touched window's trigger once.
        ``fold_many``: the combiner's ``add_inputs``; with a window function that does not merge,
        each window's values are folded with one call after the loop (in arrival order: what the
        per-element folds give, as nothing in the loop reads an accumulator)."""
        ws = self._live(key)
        self._rows.pop(key, None)
        ctx, root = self._ctx, self._root
        holds, earliest = self._holds, self._earliest
        out_wm = self._output_watermark(ws) if holds else 0
        touched: dict[IntervalWindow, None] = {}
        renames: dict[IntervalWindow, IntervalWindow] = {}
        # late: the watermark is at or past min(end + allowed lateness, END_OF_TIME_MS) (_gc_time)
        bar, all_late = ctx.watermark - self.allowed_lateness_ms, ctx.watermark >= END_OF_TIME_MS
        gone = self._gone.get(key, BEGINNING_OF_TIME_MS) if self._merging else BEGINNING_OF_TIME_MS
        batched: dict[IntervalWindow, list] | None = {} if fold_many is not None and not self._merging else None
        for value, t in elements:
            for w in self.window_fn.assign_windows(t):
                if bar >= w.end_ms or all_late or w.start_ms < gone:    # gone: would merge into a collected session
                    self.dropped_late += 1
                    if not self._warned_late:
                        self._warn_late(key, w, t)
                    continue
                st = ws.get(w)
                if st is None:
                    if self.window_fn.is_merging:
                        w = self._merge_new(ws, w, renames)
                        if w is None:
                            self.dropped_closed += 1
                            continue
                        st = ws[w]
                    else:
                        st = ws[w] = self._fresh()
                if st.closed:
                    self.dropped_closed += 1
                    continue
                if batched is None:
                    st.acc = fold(st.acc, (value, t) if self._timestamped else value)
                else:
                    vs = batched.get(w)
                    if vs is None:
                        vs = batched[w] = []
                    vs.append((value, t) if self._timestamped else value)
                if holds and t >= out_wm:
                    c = st.cand
                    if c is None or (t < c if earliest else t > c):
                        st.cand = t
                st.dirty = True
                ctx.end = w.end_ms
                root.on_element(st.trig, ctx)
                touched[w] = None
        if batched:
            for w, vs in batched.items():
                st = ws[w]
                st.acc = fold_many(st.acc, vs)
        return self._end_bundle(key, ws, touched, renames)

    def _end_bundle(self, key: Any, ws: dict, touched: dict, renames: dict) -> list[Pane]:
        """The end of a bundle: each window it touched (``renames``: merged later in the bundle) folds
        its hold candidate and is asked once, by end."""
        out: list[Pane] = []
        if touched:
            earliest, watermark = self._earliest, self._ctx.watermark
            if renames:  # windows merged later in the bundle: evaluate the window they became
                touched = dict.fromkeys(w if w in ws else _resolve(w, ws, renames) for w in touched)
            for w in sorted(touched, key=_by_end) if len(touched) > 1 else touched:
                st = ws[w]
                if st.cand is not None:
                    if w.end_ms > watermark:  # a window already ended takes no hold (late data)
                        h = st.hold
                        st.hold = st.cand if h is None else (min(h, st.cand) if earliest else max(h, st.cand))
                    st.cand = None
                out += self._check(key, ws, w, st, gc=False)   # the window's one trigger evaluation
        if not ws:
            del self._keys[key]
        return out

    def _output_watermark(self, ws: dict) -> int:
        """The key's output watermark: the input watermark, held back by the windows' holds."""
        wm = self._ctx.watermark
        for st in ws.values():
            if st.hold is not None and st.hold < wm:
                wm = st.hold
        return wm

    def _warn_late(self, key: Any, w: IntervalWindow, t: int) -> None:
        self._warned_late = True
        warn_late(key, w, t, self._ctx.watermark, self.allowed_lateness_ms, stacklevel=5)

    def _merge_new(self, ws: dict, new: IntervalWindow, renames: dict) -> IntervalWindow | None:
        """MergeWindows with a new window; returns the window it ended up in, None if closed.
        Records each merged-away window's result in ``renames``."""
        target = new
        existing = ws.keys()
        if self.window_fn.merges_overlapping_only:
            existing = [w for w in existing if w.start_ms < new.end_ms and new.start_ms < w.end_ms]
            if len(existing) == 1:
                w = existing[0]
                if w.start_ms <= new.start_ms and new.end_ms <= w.end_ms:
                    return self._merge_inside(ws, w, new, renames)
                return self._merge_one(ws, w, new, renames)
        for group, result in self.window_fn.merge_windows([*existing, new]) if existing else ():
            if any(g != new and ws[g].closed for g in group):
                if new in group:
                    return None
                continue  # closed windows are final; never merge them
            olds = [g for g in group if g != new]
            states = [ws.pop(g) for g in olds]
            if self._discarding:        # a window that changes extent is new to the consumer: all of it
                for g, st in zip(olds, states):
                    if g != result and st.shown is not None:
                        st.acc = self._beam.merge_accumulators([st.shown, st.acc])
                        st.shown = None
            for g in group:
                if g != result:
                    renames[g] = result
            if new in group:
                target = result
            ws[result] = self._merge_states(states, result, with_new=new in group)
        if target not in ws:
            ws[target] = self._fresh()
        return target

    def _merge_inside(self, ws: dict, w: IntervalWindow, new: IntervalWindow, renames: dict) -> IntervalWindow | None:
        """:meth:`_merge_new` when ``new`` lies inside one live window ``w`` (an element inside a
        session): the merge's result is ``w``, so the general path's steps reduce to these (the
        same state, dict order and renames, without sorting and spanning the windows)."""
        if w == new:
            return w                       # one window: nothing merges
        st = ws[w]
        if st.closed:
            return None
        renames[new] = w
        del ws[w]
        ws[w] = st                         # the merged window goes last, as the general path puts it
        self._ctx.end = w.end_ms
        st.trig = self._layout.merge_fresh(st.trig, self._ctx)
        st.after_end = st.after_end and self._ctx.watermark >= w.end_ms
        return w

    def _merge_one(self, ws: dict, w: IntervalWindow, new: IntervalWindow, renames: dict) -> IntervalWindow | None:
        """:meth:`_merge_new` when ``new`` overlaps one live window ``w`` and reaches beyond it (an
        element extending a session): the general path's steps for the one group ``{w, new}``,
        without sorting and sweeping the windows."""
        st = ws[w]
        if st.closed:
            return None
        result = w.span(new)
        del ws[w]
        if self._discarding and st.shown is not None:   # w changes extent (result != w)
            st.acc = self._beam.merge_accumulators([st.shown, st.acc])
            st.shown = None
        renames[w] = result
        if new != result:
            renames[new] = result
        ws[result] = self._merge_states([st], result, with_new=True)
        return result

    def _merge_states(self, states: list[_WindowState], result: IntervalWindow, with_new: bool) -> _WindowState:
        """GroupAlsoByWindow's state merge; ``with_new``: the new element's (empty) window joins."""
        ctx = self._ctx
        ctx.end = result.end_ms
        if len(states) == 1:  # one window grows by the new element's window: keep its state
            merged = states[0]
            merged.trig = (self._layout.merge_fresh(merged.trig, ctx) if with_new
                           else self._layout.merge([merged.trig], ctx))
        else:
            trigs = [s.trig for s in states] + ([self._layout.defaults] if with_new else [])
            merged = _WindowState(self._beam.merge_accumulators([s.acc for s in states]),
                                  self._layout.merge(trigs, ctx))
            pick = min if self._earliest else max  # Beam merges element holds by the combiner
            for slot in ("hold", "cand"):
                times = [getattr(s, slot) for s in states if getattr(s, slot) is not None]
                setattr(merged, slot, pick(times) if times else None)
            merged.dirty = any(s.dirty for s in states)
            merged.next_index = max(s.next_index for s in states)
            merged.emitted = sorted((p for s in states for p in s.emitted), key=lambda p: (p.window, p.index))
            merged.shown = next((s.shown for s in states if s.shown is not None), None)   # the one kept its extent
            merged.after_end = any(s.after_end for s in states)
        # it fired after the end of the *merged* window only if that end is behind the watermark
        # (every earlier firing happened at or before the current watermark)
        merged.after_end = merged.after_end and ctx.watermark >= result.end_ms
        return merged

    def _check_all(self, gc: bool) -> list[Pane]:
        """Ask every window (by key, then end) and garbage collect if ``gc``. A trigger of counts
        only is ready before the window's end only right after an element, when it was asked: the
        windows ending after the watermark are skipped (but at the end of time, which collects all)."""
        out: list[Pane] = []
        wm = self._ctx.watermark
        skip_ahead = self._counts_only and wm < END_OF_TIME_MS
        for key in list(self._keys):
            ws = self._keys[key]
            if ws is None:
                if skip_ahead and self._rows[key][0] > wm:     # its earliest end is ahead
                    continue
                ws = self._windows_of(key)
            due = [w for w in ws if w.end_ms <= wm] if skip_ahead else ws
            if not due:
                continue
            for w in sorted(due, key=_by_end) if len(due) > 1 else list(due):
                out += self._check(key, ws, w, ws[w], gc and wm >= self._gc_time(w))
            if not ws:
                del self._keys[key]
        return out

    def _check(self, key: Any, ws: dict, w: IntervalWindow, st: _WindowState, gc: bool) -> list[Pane]:
        """Fire the window if its trigger is ready; garbage collect it if ``gc``."""
        self._rows.pop(key, None)
        ctx, root = self._ctx, self._root
        ctx.end = w.end_ms
        fired = not st.closed and root.should_fire(st.trig, ctx)
        finished = fired and root.fire(st.trig, ctx)
        out: list[Pane] = []
        if fired or (gc and not st.closed):
            past_end = ctx.watermark >= w.end_ms
            timing = _EARLY if not past_end else (_LATE if st.after_end else _ON_TIME)
            st.after_end = st.after_end or past_end
            if st.dirty or (fired and timing is _ON_TIME and self._fire_always):
                out = self._emit(key, w, st, timing, last=finished or gc)
        if gc:
            del ws[w]
            if self._merging:
                self._gone[key] = max(self._gone.get(key, w.end_ms), w.end_ms)
        elif finished:
            st.closed, st.acc, st.emitted, st.dirty = True, None, [], False
        return out

    def _emit(self, key: Any, w: IntervalWindow, st: _WindowState, timing: PaneTiming, last: bool) -> list[Pane]:
        ts = w.end_ms - 1 if st.hold is None else st.hold
        st.hold = None  # every pane releases the hold (Beam's WatermarkHold.extractAndRelease)
        pane = Pane(key, w, self._beam.extract_output(st.acc), ts, timing, st.next_index,
                    st.next_index == 0, last)
        st.next_index += 1
        st.dirty = False
        out = []
        if self._retracting:
            out = [p.retraction() for p in st.emitted]
            st.emitted = [pane]
        elif self._merging:        # retract the panes of extents this window replaced (module docstring)
            out = [p.retraction() for p in st.emitted if p.window != w]
            st.emitted = [pane]
            if self._discarding:
                st.shown = st.acc if st.shown is None else self._beam.merge_accumulators([st.shown, st.acc])
                st.emitted = [dataclasses.replace(pane, value=self._beam.extract_output(st.shown))]
        out.append(pane)
        if self._discarding:
            st.acc = self._beam.create_accumulator()
        return out

    # -- state as bytes -----------------------------------------------------------------------

    def _fingerprint(self) -> int:
        config = (self.window_fn, self.trigger, self.accumulation_mode, self.allowed_lateness_ms,
                  self.timestamp_combiner, self.on_time_behavior, type(self.combiner).__qualname__)
        return zlib.crc32(repr(config).encode())

    def to_bytes(self) -> bytes:
        """All state (every key's windows, times, counters) as compact deterministic bytes."""
        keys = []
        cached = self._rows
        for key, ws in self._keys.items():
            entry = cached.get(key)          # always there for a key whose windows are not built
            if entry is None:
                entry = cached[key] = (min((w.end_ms for w in ws), default=END_OF_TIME_MS),
                                       _codec.encode([_row(w, st) for w, st in ws.items()]))
            keys.append((key, *entry))
        return _codec.encode((_FORMAT, self._fingerprint(), self._ctx.watermark, self._ctx.now,
                              self.dropped_late, self.dropped_closed, keys, list(self._gone.items())))

    def load_bytes(self, data: bytes) -> None:
        """Replace this driver's state with state written by ``to_bytes`` of an equal driver."""
        fmt, fingerprint, wm, now, dropped_late, dropped_closed, keys, *gone = _codec.decode(data)
        if fmt not in _READS or fingerprint != self._fingerprint():
            raise InvalidArgumentError(f"driver state was written by a driver with a different format or configuration "
                             f"(state format {fmt}, this driver reads {_FORMAT}; or another window_fn, trigger, "
                             "mode, lateness, combiner)")
        self._ctx.watermark, self._ctx.now = wm, now
        self.dropped_late, self.dropped_closed = dropped_late, dropped_closed
        self._warned_late = dropped_late > 0
        self._gone = {k: e for k, e in gone[0]} if gone else {}
        if fmt >= 4:        # a key's windows are built when a path first looks at them: a batch touches few keys
            self._rows = {key: (end, rows) for key, end, rows in keys}
            self._keys = dict.fromkeys(self._rows)
        else:
            self._rows = {}
            self._keys = {key: _windows_from_rows(key, rows) for key, rows in keys}

    def key_rows(self) -> list[tuple[Any, list]]:
        """Every key's windows as ``to_bytes`` writes them (a list of rows per key, keys in order):
        what :class:`~watermarks.columnar.ColumnarDriver` reads a per-element state from."""
        return [(key, _codec.decode_part(self._rows[key][1]) if ws is None else [_row(w, st) for w, st in ws.items()])
                for key, ws in self._keys.items()]

    @classmethod
    def from_bytes(cls, data: bytes, *args: Any, **kwargs: Any) -> TriggerDriver:
        """A driver built from the same arguments as the writer, with the written state."""
        driver = cls(*args, **kwargs)
        driver.load_bytes(data)
        return driver


def _windows_from_rows(key: Any, rows: list) -> dict[IntervalWindow, _WindowState]:
    """One key's windows from the rows :func:`_row` wrote (by :meth:`TriggerDriver.to_bytes`)."""
    ws = {}
    for start, end, acc, hold, flags, next_index, trig, panes, *shown in rows:
        st = _WindowState(acc, trig)
        st.shown = shown[0] if shown else None
        st.hold, st.next_index = hold, next_index
        st.dirty, st.after_end, st.closed = bool(flags & 1), bool(flags & 2), bool(flags & 4)
        st.emitted = [Pane(key, IntervalWindow(s, e), v, ts, PaneTiming(tv), i, f, la)
                      for s, e, v, ts, tv, i, f, la in panes]
        ws[IntervalWindow(start, end)] = st
    return ws


def _row(w: IntervalWindow, st: _WindowState) -> tuple:
    """One window's state as :meth:`TriggerDriver.to_bytes` writes it."""
    panes = [(p.start_ms, p.end_ms, p.value, p.timestamp_ms, p.timing.value, p.index, p.is_first, p.is_last)
             for p in st.emitted]
    return (w.start_ms, w.end_ms, st.acc, st.hold, st.dirty | st.after_end << 1 | st.closed << 2,
            st.next_index, st.trig, panes, st.shown)


def _resolve(w: IntervalWindow, ws: dict, renames: dict) -> IntervalWindow:
    """The live window ``w`` was merged into (following merges within one bundle). Every window
    on the way is renamed to it (path compression), so a session grown by one element at a time
    is not walked again from each of its earlier extents."""
    path = []
    while w not in ws:
        path.append(w)
        w = renames[w]
    for p in path:
        renames[p] = w
    return w


def _by_end(w: IntervalWindow) -> tuple[int, int]:
    return w.end_ms, w.start_ms
