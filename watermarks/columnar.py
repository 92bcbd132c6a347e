"""The trigger driver for every key of a key group at once, vectorised, for the common cases.

:class:`~watermarks.TriggerDriver` runs the Dataflow Model (seed ``dataflow-model.txt`` §2.2 to
§2.4) element by element: per element AssignWindows, a Python object per window, the trigger's
state machine per element copy. On Spark that is most of a windowing stage's CPU (NEXMark Q5:
58% of the Python workers). For the combinations most queries use, :class:`ColumnarDriver` gives
**exactly the same panes** (window, value, timing, index, first and last flags, timestamp, in
the same order) from one table of live windows for all keys, a fixed number of numpy calls per
bundle and per watermark:

* windows: fixed (``TumblingWindow``) or sliding (``SlidingWindow``): AssignWindows is arithmetic
  on the event times (§2.2.1);
* trigger: ``DefaultTrigger()`` or ``AfterWatermark(early=..., late=...)`` with ``early`` and
  ``late`` each absent or an ``AfterCount(n)`` (repeated, as Beam: §2.4's early / on-time /
  late firings); per window the trigger state is a few integers (the early and late element
  counts since the last firing, whether the on-time firing happened);
* accumulation: discarding or accumulating (no retractions: windows never merge here);
  timestamp combiner: end of window;
* aggregation: one whose ``vectorised`` form (:class:`~windowing.aggregations.Vectorised`) names
  components among ``count``, ``sum``, ``min``, ``max`` (:mod:`windowing.components`)
  (Count for any value; Sum, Min, Max, Mean when the values are integers, so that a sum is exact
  in any order): the window's accumulator is those components. Or any other (a user's
  :class:`~windowing.Combiner`, ``ToList``, ``Quantile``, ...): the window's accumulator
  is the combiner's own, held in an object column, and each window's values of a bundle are
  folded by one ``add_inputs`` call in arrival order (the per-element driver's fold); the
  windows, triggers and firing stay vectorised.

:meth:`ColumnarDriver.supports` says whether a configuration qualifies; everything else runs
the per-element driver (:class:`~watermarks.MultiQueryDriver` chooses per query). The bundle
rule is the per-element driver's: :meth:`ColumnarDriver.add_batch` takes a micro-batch of many
keys as one bundle per key (every element of the key folded, then each touched window's trigger
asked once), as the stage's one ``add`` call per key does. Tested against the per-element driver
with hypothesis (``tests/watermarks/test_columnar_driver.py``).

State: :meth:`ColumnarDriver.to_bytes` (a versioned header, the configuration's fingerprint and
numpy arrays); :meth:`ColumnarDriver.load_bytes` also reads the per-element driver's state of
the same configuration, so a checkpoint written before this path existed carries on.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from dataflow_kafka.watermarks._trigger_runtime import Layout, build
from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior, Pane, PaneTiming, TimestampCombiner
from dataflow_kafka.watermarks.driver import TriggerDriver, WindowState, warn_late
from dataflow_kafka.watermarks.triggers import AfterCount, DefaultTrigger, Trigger, counts_only
from dataflow_kafka.watermarks.windows import (
    BEGINNING_OF_TIME_MS, END_OF_TIME_MS, FixedWindowFn, IntervalWindow, SlidingWindowFn, WindowFn, window_copies,
)
from dataflow_kafka.windowing import AggregateFunction
from dataflow_kafka.errors import ArgumentTypeError, CapacityError, InvalidArgumentError

__all__ = ["ColumnarDriver", "PaneColumns", "object_array"]

_MAGIC = b"DFC1"
_COMPONENTS = frozenset(("count", "sum", "min", "max"))
_I64 = np.iinfo(np.int64)
#: the table: key code, window start, components, the driver's per-window flags and counters,
#: the trigger's early / late element counts and on-time bit
_COLUMNS = ("kc", "start", "cnt", "sum", "min", "max", "dirty", "after_end", "closed", "index", "early", "late",
            "on_time")
_EARLY, _ON_TIME, _LATE = PaneTiming.EARLY.value, PaneTiming.ON_TIME.value, PaneTiming.LATE.value


@dataclass
class PaneColumns:
    """Panes as columns (what the stage turns into rows without a loop per pane): the key of each
    pane as an index into ``keys``, its window, value (a list), output timestamp, timing
    (:class:`~watermarks.PaneTiming` values), index and flags. ``query`` (set by
    :class:`~watermarks.MultiQueryDriver`, an object array) holds each pane's query id."""

    keys: list
    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    value: list
    timestamp: np.ndarray
    timing: np.ndarray
    index: np.ndarray
    first: np.ndarray
    last: np.ndarray
    retraction: np.ndarray | None = None
    query: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.key.size)

    def panes(self) -> list[Pane]:
        """The :class:`~watermarks.Pane` objects."""
        timings = list(PaneTiming)
        qs = [None] * len(self) if self.query is None else self.query.tolist()
        retr = [False] * len(self) if self.retraction is None else self.retraction.tolist()
        return [Pane(self.keys[k], IntervalWindow(s, e), v, ts, timings[t], i, f, la, r, q)
                for k, s, e, v, ts, t, i, f, la, r, q in zip(
                    self.key.tolist(), self.start.tolist(), self.end.tolist(), self.value, self.timestamp.tolist(),
                    self.timing.tolist(), self.index.tolist(), self.first.tolist(), self.last.tolist(), retr, qs)]

    @staticmethod
    def of_panes(panes: list[Pane], keys: list | None = None, position: dict | None = None) -> "PaneColumns":
        """Columns of ``panes``; their keys index ``keys`` (``position``: key -> its index), or by
        default a list of each pane's key."""
        if keys is None:
            keys, key = [p.key for p in panes], np.arange(len(panes), dtype=np.int64)
        else:
            key = np.array([position[p.key] for p in panes], np.int64)
        return PaneColumns(keys, key,
                           np.array([p.start_ms for p in panes], np.int64), np.array([p.end_ms for p in panes], np.int64),
                           [p.value for p in panes], np.array([p.timestamp_ms for p in panes], np.int64),
                           np.array([p.timing.value for p in panes], np.int8), np.array([p.index for p in panes], np.int64),
                           np.array([p.is_first for p in panes], bool), np.array([p.is_last for p in panes], bool),
                           np.array([p.is_retraction for p in panes], bool), object_array([p.query_id for p in panes]))

    def take(self, idx: np.ndarray) -> "PaneColumns":
        pick = idx.tolist()
        return PaneColumns(self.keys, self.key[idx], self.start[idx], self.end[idx], [self.value[i] for i in pick],
                           self.timestamp[idx], self.timing[idx], self.index[idx], self.first[idx], self.last[idx],
                           None if self.retraction is None else self.retraction[idx],
                           None if self.query is None else self.query[idx])

    @staticmethod
    def concat(keys: list, parts: list["PaneColumns"]) -> "PaneColumns":
        """One batch of ``parts`` (their ``key`` indices already into ``keys``)."""
        if not parts:
            z = np.zeros(0, np.int64)
            return PaneColumns(keys, z, z, z, [], z, np.zeros(0, np.int8), z, np.zeros(0, bool), np.zeros(0, bool),
                               np.zeros(0, bool), np.zeros(0, object))

        def cat(name, empty):
            return np.concatenate([getattr(p, name) if getattr(p, name) is not None else empty(len(p)) for p in parts])

        return PaneColumns(keys, cat("key", None), cat("start", None), cat("end", None),
                           [v for p in parts for v in p.value], cat("timestamp", None), cat("timing", None),
                           cat("index", None), cat("first", None), cat("last", None),
                           cat("retraction", lambda n: np.zeros(n, bool)), cat("query", lambda n: np.full(n, None, object)))


    @staticmethod
    def join(parts: list["PaneColumns"]) -> "PaneColumns":
        """``parts`` one after the other, each with its own key list: one batch over their keys
        joined (the parts' key indices are shifted in place)."""
        keys: list = []
        for p in parts:
            p.key = p.key + len(keys)
            keys += list(p.keys)
        return PaneColumns.concat(keys, parts)


def object_array(items: list) -> np.ndarray:
    """``items`` as a 1-d object array, each item one element (lists and tuples too, which
    ``np.array`` would make a dimension of)."""
    out = np.empty(len(items), object)
    for i, x in enumerate(items):
        out[i] = x
    return out


def _count_of(trigger: Trigger | None) -> int | None:
    """``n`` of an ``AfterCount(n)``; 0 for no trigger; None for anything else."""
    if trigger is None:
        return 0
    return trigger.count if type(trigger) is AfterCount else None


class ColumnarDriver:
    """The per-element driver's semantics for every key at once (module docstring); its public
    surface is :class:`~watermarks.TriggerDriver`'s plus :meth:`add_batch`. ``from_ms``: windows
    starting before it are not assigned (a query added while running,
    :class:`~watermarks.multi.CoveredWindowFn`); ``integral_values``: the values are integers
    (needed for Sum, Min, Max, Mean)."""

    def __init__(self, window_fn: WindowFn, trigger: Trigger, accumulation_mode: AccumulationMode | str,
                 allowed_lateness_ms: int = 0, timestamp_combiner: TimestampCombiner | str = TimestampCombiner.END_OF_WINDOW,
                 combiner: AggregateFunction | None = None,
                 on_time_behavior: OnTimeBehavior | str = OnTimeBehavior.FIRE_ALWAYS, *,
                 from_ms: int = BEGINNING_OF_TIME_MS, integral_values: bool = False) -> None:
        if not self.supports(window_fn, trigger, accumulation_mode, timestamp_combiner, combiner, integral_values):
            raise InvalidArgumentError(f"ColumnarDriver: {window_fn!r}, {trigger!r}, {accumulation_mode!r}, "
                                       f"{combiner!r} (integral values: {integral_values}) is not a configuration "
                                       "it runs; see ColumnarDriver.supports")
        with warnings.catch_warnings():        # validation and the configuration's fingerprint, as the driver's
            warnings.simplefilter("ignore")
            self._reference = TriggerDriver(window_fn, trigger, accumulation_mode, allowed_lateness_ms,
                                            timestamp_combiner, combiner, on_time_behavior)
        ref = self._reference
        self.window_fn, self.trigger, self.allowed_lateness_ms = ref.window_fn, trigger, allowed_lateness_ms
        self.accumulation_mode, self.combiner = ref.accumulation_mode, ref.combiner
        self.timestamp_combiner, self.on_time_behavior = ref.timestamp_combiner, ref.on_time_behavior
        self.size = int(window_fn.size_ms)
        self.period = int(getattr(window_fn, "period_ms", window_fn.size_ms))
        self.offset = int(window_fn.offset_ms)
        self.from_ms = int(from_ms)
        self._default = type(trigger) is DefaultTrigger
        self._early_n = 0 if self._default else _count_of(trigger.early)
        self._late_n = 0 if self._default else _count_of(trigger.late)
        self._discarding = self.accumulation_mode is AccumulationMode.DISCARDING
        self._fire_always = self.on_time_behavior is OnTimeBehavior.FIRE_ALWAYS
        comps = set(_components(self.combiner))
        self._needs = {c: c in comps for c in ("sum", "min", "max")}
        #: no vectorised form of these components: each window's accumulator is the combiner's
        #: own (column ``acc``)
        self._own_accs = _own_accumulators(self.combiner)
        self._beam = ref._beam
        self._columns = _COLUMNS + (("acc",) if self._own_accs else ())
        #: an empty accumulator's result differs from the components' (Min, Max: None; Mean: no division)
        self._empty_differs = bool(comps & {"min", "max"}) or comps == {"sum", "count"}
        self._empty_value = self._beam.extract_output(self._beam.create_accumulator())
        self._wm = self._now = BEGINNING_OF_TIME_MS
        self._keys: list = []
        self._codes: dict = {}
        self._seq = np.zeros(0, np.int64)         # per key code: when it got its first live window (-1: none)
        self._next_seq = 0
        self._t = {c: self._fresh_column(c, 0) for c in self._columns}
        #: Element copies dropped because their window was past the allowed lateness.
        self.dropped_late = 0
        #: Element copies dropped because their window's trigger had finished (window closed).
        self.dropped_closed = 0
        self._warned_late = False

    @staticmethod
    def supports(window_fn: Any, trigger: Any, accumulation_mode: Any, timestamp_combiner: Any = "END_OF_WINDOW",
                 combiner: Any = None, integral_values: bool = False) -> bool:
        """Whether this configuration runs here (module docstring)."""
        if type(window_fn) not in (FixedWindowFn, SlidingWindowFn):
            return False
        if not counts_only(trigger):
            return False
        try:
            mode = AccumulationMode.parse(accumulation_mode, "accumulation_mode")
            tc = TimestampCombiner.parse(timestamp_combiner, "timestamp_combiner")
        except ValueError:
            return False
        if mode is AccumulationMode.ACCUMULATING_AND_RETRACTING or tc is not TimestampCombiner.END_OF_WINDOW:
            return False
        if not isinstance(combiner, AggregateFunction) or getattr(combiner, "timestamped", False):
            return False
        if _own_accumulators(combiner):
            return True                  # the combiner's own accumulators, one object per window
        return _components(combiner) == {"count"} or integral_values

    # -- the per-element driver's surface ---------------------------------------------------------
    @property
    def watermark_ms(self) -> int:
        return self._wm

    @property
    def processing_time_ms(self) -> int:
        return self._now

    def keys(self) -> list:
        """Keys with live window state, in the order they got it."""
        live = np.flatnonzero(self._seq >= 0)
        return [self._keys[i] for i in live[np.argsort(self._seq[live], kind="stable")].tolist()]

    def windows(self, key: Any = None) -> list[IntervalWindow]:
        """Live windows of ``key`` (not yet garbage collected), by start."""
        code = self._codes.get(key)
        if code is None:
            return []
        starts = np.sort(self._t["start"][self._t["kc"] == code])
        return [IntervalWindow(s, s + self.size) for s in starts.tolist()]

    def window_states(self) -> list[WindowState]:
        """Every live window of every key, as :meth:`TriggerDriver.window_states` gives it for the
        same history (keys in the order they got live windows, windows by start): panes fired,
        new data, closed, past its end, ``hold_ms`` None (the end-of-window timestamp holds
        nothing), expiry, ``waiting`` (the per-element trigger runtime's text for the same trigger
        state) and the accumulator in the combiner's per-element form (None once closed). The
        columns are read at once; the text is made once per distinct trigger state. Read only."""
        t = self._t
        if t["kc"].size == 0:
            return []
        rows = np.lexsort((t["start"], self._seq[t["kc"]]))
        start = t["start"][rows]
        end = start + self.size
        closed = t["closed"][rows]
        expires = np.minimum(end + self.allowed_lateness_ms, END_OF_TIME_MS)
        keys = [self._keys[k] for k in t["kc"][rows].tolist()]
        return [WindowState(k, IntervalWindow(s, e), i, d, c, a, None, x, w, acc)
                for k, s, e, i, d, c, a, x, w, acc in zip(
                    keys, start.tolist(), end.tolist(), t["index"][rows].tolist(), t["dirty"][rows].tolist(),
                    closed.tolist(), t["after_end"][rows].tolist(), expires.tolist(), self._waiting(rows, end),
                    self._accumulators(rows))]

    def _waiting(self, rows: np.ndarray, end: np.ndarray) -> list[str]:
        """What the trigger of each window (table rows ``rows``, ending at ``end``) waits for: the
        per-element runtime's :meth:`waiting` of the same slots (early and late counts, on-time
        bit), asked once per distinct (end, counts, bit); ``finished`` once closed."""
        t = self._t
        layout = Layout()
        root = build(self.trigger, layout)
        slots = _trigger_slots(root)
        state = np.column_stack([end, t["early"][rows], t["late"][rows], t["on_time"][rows].astype(np.int64)])
        distinct, which = np.unique(state, axis=0, return_inverse=True)
        ctx = SimpleNamespace(watermark=self._wm, now=self._now, end=0)
        texts = []
        for e, early, late, on_time in distinct.tolist():
            s = layout.fresh()
            for slot, v in (("early", early), ("late", late), ("on_time", bool(on_time))):
                if slot in slots:
                    s[slots[slot]] = v
            ctx.end = e
            texts.append(root.waiting(s, ctx))
        out = np.array(texts, object)[which.reshape(-1)]
        out[t["closed"][rows]] = "finished"
        return out.tolist()

    def add(self, elements: Iterable[tuple[Any, int]], key: Any = None) -> list[Pane]:
        """Add ``(value, event_time_ms)`` pairs for ``key`` (one bundle); returns the panes."""
        elements = list(elements)
        values = [v for v, _ in elements]
        times = np.array([t for _, t in elements], np.int64)
        cols, _, _ = self.add_batch([key], np.zeros(times.size, np.int64), values, times)
        return cols.panes()

    def advance_watermark(self, watermark_ms: int) -> list[Pane]:
        """Move the event-time watermark forward; fire and garbage collect windows."""
        return self.advance_watermark_columns(watermark_ms).panes()

    def advance_processing_time(self, now_ms: int) -> list[Pane]:
        """Move processing time forward: no supported trigger reads it, and none is ready again
        before an element or the watermark reaches its window (:func:`~watermarks.triggers.counts_only`),
        so no window is asked, as in the per-element driver."""
        if now_ms > self._now:
            self._now = now_ms
        return []

    def advance_watermark_columns(self, watermark_ms: int) -> PaneColumns:
        """:meth:`advance_watermark` as :class:`PaneColumns` (keys: :meth:`key_list`)."""
        if watermark_ms <= self._wm:
            return self._no_panes()
        self._wm = watermark_ms
        return self._check_all(gc=True)

    def key_list(self) -> list:
        """The keys that :class:`PaneColumns` of :meth:`advance_watermark_columns` index."""
        return self._keys

    # -- one bundle per key -------------------------------------------------------------------------
    def add_retractions(self, elements: Iterable[tuple[Any, int]], key: Any = None) -> list[Pane]:
        """Take back earlier ``(value, event_time_ms)`` inputs (the combiner's ``uncombine``), as
        :meth:`TriggerDriver.add_retractions`."""
        if getattr(self._beam, "uncombine", None) is None:
            raise ArgumentTypeError(f"combiner {self.combiner!r} has no uncombine; it cannot apply retractions")
        elements = list(elements)
        times = np.array([t for _, t in elements], np.int64)
        cols, _, _ = self.add_batch([key], np.zeros(times.size, np.int64), [v for v, _ in elements], times, sign=-1)
        return cols.panes()

    def add_batch(self, keys: list, rows: np.ndarray, values: Any, times: np.ndarray, sign: int = 1
                  ) -> tuple[PaneColumns, np.ndarray, np.ndarray]:
        """One bundle per key: ``keys`` (in the order their bundles run), each element's key as an
        index into ``keys`` (``rows``), its value and event time, elements in arrival order.
        Returns the panes (keys indexing ``keys``; by bundle, then window end and start) and the
        element copies dropped as late and for a closed window, per key of ``keys``. ``sign=-1``:
        the elements are retractions (the combiner's ``uncombine``)."""
        rows = np.asarray(rows, np.int64)
        times = np.asarray(times, np.int64)
        n_keys = len(keys)
        codes = self._code(keys)
        vals = self._values(values, rows.size)
        elem, start = window_copies(times, self.size, self.period, self.offset)   # AssignWindows, every copy
        if self.from_ms != BEGINNING_OF_TIME_MS:
            keep = start >= self.from_ms
            elem, start = elem[keep], start[keep]
        bundle = rows[elem]
        end = start + self.size
        late = (self._wm - self.allowed_lateness_ms >= end) | (self._wm >= END_OF_TIME_MS)
        late_per_key = np.bincount(bundle[late], minlength=n_keys)
        closed_per_key = np.zeros(n_keys, np.int64)
        if late.any():
            self.dropped_late += int(late.sum())
            if not self._warned_late:
                i = int(np.flatnonzero(late)[np.argmin(bundle[late])])
                self._warn_late(keys[int(bundle[i])], int(start[i]), int(times[elem[i]]))
            ok = ~late
            elem, start, bundle = elem[ok], start[ok], bundle[ok]
        # the copies' windows in the table (new ones appended), closed ones dropped
        kc = codes[bundle]
        pos = self._find_or_add(kc, start)
        closed = self._t["closed"][pos]
        if closed.any():
            np.add.at(closed_per_key, bundle[closed], 1)
            self.dropped_closed += int(closed.sum())
            ok = ~closed
            elem, start, bundle, kc, pos = elem[ok], start[ok], bundle[ok], kc[ok], pos[ok]
        self._fold(pos, vals, elem, sign)
        live_before = self._seq[codes] >= 0
        touched = np.unique(pos)
        new_keys = np.unique(bundle)
        fresh = new_keys[~live_before[new_keys]]       # a key gets its place when its bundle adds a window
        self._seq[codes[fresh]] = self._next_seq + np.arange(fresh.size)
        self._next_seq += int(fresh.size)
        # each touched window's one trigger evaluation, by bundle, then end and start
        order = np.lexsort((self._t["start"][touched], self._bundle_of(touched, codes, n_keys)))
        out = self._check(touched[order], np.zeros(touched.size, bool))
        to_batch = np.full(len(self._keys), -1, np.int64)
        to_batch[codes] = np.arange(n_keys)
        out.key = to_batch[out.key]
        out.keys = keys
        return out, late_per_key, closed_per_key

    def _bundle_of(self, pos: np.ndarray, codes: np.ndarray, n_keys: int) -> np.ndarray:
        at = np.full(len(self._keys), -1, np.int64)
        at[codes] = np.arange(n_keys)
        return at[self._t["kc"][pos]]

    def _values(self, values: Any, n: int) -> Any:
        if self._own_accs:
            return values if isinstance(values, (list, np.ndarray)) else list(values)
        if not any(self._needs.values()):
            return None                                    # Count: the values are not read
        if n == 0:
            return np.zeros(0, np.int64)
        arr = np.asarray(values)
        if arr.dtype.kind not in "iub":
            if arr.dtype == object and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
                try:
                    arr = arr.astype(np.int64)
                except OverflowError:
                    raise CapacityError("ColumnarDriver: an integer value beyond int64") from None
            else:
                raise InvalidArgumentError(f"ColumnarDriver: integer values expected (integral_values=True), got "
                                           f"{arr.dtype} values")
        return arr.astype(np.int64, copy=False)

    def _code(self, keys: list) -> np.ndarray:
        out = np.empty(len(keys), np.int64)
        for i, k in enumerate(keys):
            c = self._codes.get(k)
            if c is None:
                c = self._codes[k] = len(self._keys)
                self._keys.append(k)
            out[i] = c
        if self._seq.size < len(self._keys):
            self._seq = np.concatenate([self._seq, np.full(len(self._keys) - self._seq.size, -1, np.int64)])
        return out

    def _find_or_add(self, kc: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Table row of each (key code, start), adding fresh windows for the missing ones."""
        t = self._t
        n_old = t["kc"].size
        both_kc = np.concatenate([t["kc"], kc])
        both_start = np.concatenate([t["start"], start])
        order = np.lexsort((np.concatenate([np.zeros(n_old, np.int8), np.ones(kc.size, np.int8)]), both_start, both_kc))
        skc, sst = both_kc[order], both_start[order]
        head = np.ones(order.size, bool)
        head[1:] = (skc[1:] != skc[:-1]) | (sst[1:] != sst[:-1])
        group = np.cumsum(head) - 1
        first = order[head]                       # the table row, or the first copy of a new window
        new = first >= n_old
        new_rows = np.full(first.size, -1, np.int64)
        new_rows[new] = n_old + np.arange(int(new.sum()))
        row_of_group = np.where(new, new_rows, first)
        if new.any():
            src = first[new] - n_old
            fresh = {"kc": kc[src], "start": start[src]}
            for c in self._columns:
                if c not in fresh:
                    fresh[c] = self._fresh_column(c, src.size)
            self._t = {c: np.concatenate([t[c], fresh[c]]) for c in self._columns}
        pos = np.empty(order.size, np.int64)
        pos[order] = row_of_group[group]
        return pos[n_old:]

    def _fresh_column(self, c: str, n: int) -> np.ndarray:
        if c == "acc":
            return object_array([self._beam.create_accumulator() for _ in range(n)])
        if c == "min":
            return np.full(n, _I64.max, np.int64)
        if c == "max":
            return np.full(n, _I64.min, np.int64)
        return np.zeros(n, bool if c in ("dirty", "after_end", "closed", "on_time") else np.int64)

    def _fold(self, pos: np.ndarray, vals: np.ndarray | None, elem: np.ndarray, sign: int) -> None:
        """CombineValues and the trigger's on_element for every copy (window rows ``pos``)."""
        t = self._t
        if pos.size == 0:
            return
        np.add.at(t["cnt"], pos, sign)
        if self._own_accs:
            self._fold_objects(pos, vals, elem, sign)
        elif vals is not None:
            v = vals[elem]
            if self._needs["sum"]:
                np.add.at(t["sum"], pos, v * sign)
            if self._needs["min"]:
                np.minimum.at(t["min"], pos, v)
            if self._needs["max"]:
                np.maximum.at(t["max"], pos, v)
        t["dirty"][pos] = True
        if self._default:
            return
        before_end = self._wm < t["start"][pos] + self.size
        if self._early_n:
            np.add.at(t["early"], pos[before_end], 1)
        if self._late_n:
            after = pos[~before_end]
            np.add.at(t["late"], after[t["on_time"][after]], 1)

    def _fold_objects(self, pos: np.ndarray, values: Any, elem: np.ndarray, sign: int) -> None:
        """The combiner's own fold of every copy: per window (table row), its values in arrival
        order, one ``add_inputs`` call (``uncombine`` per value for retractions), as the
        per-element driver folds a window's values of one bundle."""
        order = np.argsort(pos, kind="stable")
        rows = pos[order]
        cut = np.flatnonzero(rows[1:] != rows[:-1]) + 1
        firsts, lasts = np.concatenate([[0], cut]).tolist(), np.concatenate([cut, [rows.size]]).tolist()
        vs = [values[i] for i in elem[order].tolist()]
        acc, beam = self._t["acc"], self._beam
        for r, a, b in zip(rows[firsts].tolist(), firsts, lasts):
            if sign > 0:
                acc[r] = beam.add_inputs(acc[r], vs[a:b])
            else:
                x = acc[r]
                for v in vs[a:b]:
                    x = beam.uncombine(x, v)
                acc[r] = x

    # -- firing -----------------------------------------------------------------------------------
    def _check_all(self, gc: bool) -> PaneColumns:
        """Every live window, keys in their order, each key's windows by end and start."""
        t = self._t
        if t["kc"].size == 0:
            return self._no_panes()
        order = np.lexsort((t["start"], self._seq[t["kc"]]))
        end = t["start"][order] + self.size
        gc_at = np.minimum(end + self.allowed_lateness_ms, END_OF_TIME_MS)
        out = self._check(order, (self._wm >= gc_at) if gc else np.zeros(order.size, bool))
        return out

    def _check(self, rows: np.ndarray, gc: np.ndarray) -> PaneColumns:
        """The per-element driver's ``_check`` for table rows ``rows`` (in output order)."""
        t = self._t
        wm = self._wm
        end = t["start"][rows] + self.size
        closed = t["closed"][rows]
        before_end = wm < end
        on_time = t["on_time"][rows]
        if self._default:
            should = ~before_end
        else:
            early_ready = (t["early"][rows] >= self._early_n) if self._early_n else np.zeros(rows.size, bool)
            late_ready = (t["late"][rows] >= self._late_n) if self._late_n else np.zeros(rows.size, bool)
            should = np.where(before_end, early_ready, ~on_time | late_ready)
        fired = ~closed & should
        finished = np.zeros(rows.size, bool)
        if not self._default:
            first_on_time = fired & ~before_end & ~on_time
            t["early"][rows[fired & before_end]] = 0
            t["late"][rows[fired & ~before_end]] = 0
            t["early"][rows[first_on_time]] = 0
            t["on_time"][rows[first_on_time]] = True
            if not self._late_n:
                finished = first_on_time
        consider = fired | (gc & ~closed)
        after_end = t["after_end"][rows]
        timing = np.where(before_end, _EARLY, np.where(after_end, _LATE, _ON_TIME)).astype(np.int8)
        t["after_end"][rows[consider & ~before_end]] = True
        emit = consider & (t["dirty"][rows] | (fired & (timing == _ON_TIME) & self._fire_always))
        er = rows[emit]
        index = t["index"][er]
        out = PaneColumns(self._keys, t["kc"][er], t["start"][er], end[emit], self._extract(er), end[emit] - 1,
                          timing[emit], index, index == 0, (finished | gc)[emit])
        t["index"][er] += 1
        t["dirty"][er] = False
        if self._discarding:
            self._reset(er)
        done = rows[finished & ~gc]
        t["closed"][done] = True
        t["dirty"][done] = False
        self._reset(done, closed=True)
        if gc.any():
            self._drop(rows[gc])
        return out

    def _extract(self, rows: np.ndarray) -> list:
        t = self._t
        if rows.size == 0:
            return []
        if self._own_accs:
            extract, acc = self._beam.extract_output, t["acc"]
            return [extract(acc[r]) for r in rows.tolist()]
        cnt = t["cnt"][rows]
        full = cnt != 0 if self._empty_differs else np.ones(rows.size, bool)
        out = [self._empty_value] * int(rows.size)
        if full.any():
            r = rows[full]
            parts = {"count": cnt[full], "sum": t["sum"][r], "min": t["min"][r], "max": t["max"][r]}
            got = np.asarray(self.combiner.from_components(parts)).tolist()
            for i, v in zip(np.flatnonzero(full).tolist(), got):
                out[i] = v
        return out

    def _reset(self, rows: np.ndarray, closed: bool = False) -> None:
        """Empty accumulators in table rows ``rows`` (``closed``: the windows finished; a
        combiner's accumulator is then None, as the per-element driver drops it)."""
        t = self._t
        for c in ("cnt", "sum", "min", "max"):
            t[c][rows] = self._fresh_column(c, rows.size)
        if self._own_accs and rows.size:
            fresh = object_array([None] * rows.size) if closed else self._fresh_column("acc", rows.size)
            t["acc"][rows] = fresh

    def _drop(self, rows: np.ndarray) -> None:
        keep = np.ones(self._t["kc"].size, bool)
        keep[rows] = False
        self._t = {c: a[keep] for c, a in self._t.items()}
        live = np.zeros(len(self._keys), bool)
        live[self._t["kc"]] = True
        self._seq[~live] = -1

    def _no_panes(self) -> PaneColumns:
        return PaneColumns.concat(self._keys, [])

    def _warn_late(self, key: Any, start: int, t: int) -> None:
        self._warned_late = True
        warn_late(key, IntervalWindow(start, start + self.size), t, self._wm, self.allowed_lateness_ms, stacklevel=6)

    # -- state as bytes -----------------------------------------------------------------------
    def _forget_idle_keys(self) -> None:
        live = self._seq >= 0
        if live.all():
            return
        remap = np.cumsum(live) - 1
        self._t["kc"] = remap[self._t["kc"]]
        self._keys = [k for k, u in zip(self._keys, live.tolist()) if u]
        self._codes = {k: i for i, k in enumerate(self._keys)}
        self._seq = self._seq[live]

    def to_bytes(self) -> bytes:
        """All state (every key's windows, times, counters) as bytes; deterministic for equal
        histories of calls (a combiner's own accumulators as pickle writes them: objects shared
        within them are written once)."""
        self._forget_idle_keys()
        return _MAGIC + pickle.dumps((self._reference._fingerprint(), self._wm, self._now, self.dropped_late,
                                      self.dropped_closed, self._keys, self._seq, self._next_seq, self._t),
                                     protocol=5)

    def load_bytes(self, data: bytes) -> None:
        """Replace the state with state written by ``to_bytes`` of an equal driver, or by the
        per-element driver (:class:`~watermarks.TriggerDriver`) of the same configuration."""
        if data[:4] != _MAGIC:
            self._load_per_element(data)
            return
        fingerprint, self._wm, self._now, self.dropped_late, self.dropped_closed, keys, seq, nxt, table = \
            pickle.loads(data[4:])
        if fingerprint != self._reference._fingerprint():
            raise InvalidArgumentError("driver state was written by a driver with a different configuration "
                                       "(window_fn, trigger, mode, lateness, combiner)")
        self._keys, self._seq, self._next_seq, self._t = list(keys), seq, nxt, table
        self._codes = {k: i for i, k in enumerate(self._keys)}
        self._warned_late = self.dropped_late > 0

    def _load_per_element(self, data: bytes) -> None:
        """The per-element driver's state (any format it reads) as this table."""
        ref = self._reference
        ref.load_bytes(data)                                         # checks format and configuration
        keys = ref.key_rows()
        self._wm, self._now = ref.watermark_ms, ref.processing_time_ms
        self.dropped_late, self.dropped_closed = ref.dropped_late, ref.dropped_closed
        self._warned_late = self.dropped_late > 0
        layout = Layout()
        root = build(self.trigger, layout)
        slots = _trigger_slots(root)
        cols: dict[str, list] = {c: [] for c in self._columns}
        self._keys, self._codes = [], {}
        for code, (key, rows) in enumerate(keys):
            self._keys.append(key)
            self._codes[key] = code
            for start, _end, acc, _hold, flags, next_index, trig, _panes, *_ in rows:
                if self._own_accs:
                    cols["acc"].append(acc)
                    cnt, s, lo, hi = 0, 0, _I64.max, _I64.min
                else:
                    cnt, s, lo, hi = self._components_of(acc)
                for c, v in (("kc", code), ("start", start), ("cnt", cnt), ("sum", s), ("min", lo), ("max", hi),
                             ("dirty", bool(flags & 1)), ("after_end", bool(flags & 2)),
                             ("closed", bool(flags & 4)), ("index", next_index),
                             ("early", trig[slots["early"]] if "early" in slots else 0),
                             ("late", trig[slots["late"]] if "late" in slots else 0),
                             ("on_time", bool(trig[slots["on_time"]]) if "on_time" in slots else False)):
                    cols[c].append(v)
        self._t = {c: object_array(v) if c == "acc" else
                   np.array(v, bool if c in ("dirty", "after_end", "closed", "on_time") else np.int64)
                   for c, v in cols.items()}
        self._seq = np.arange(len(self._keys), dtype=np.int64)
        self._next_seq = len(self._keys)

    def _components_of(self, acc: Any) -> tuple[int, int, int, int]:
        """``(count, sum, min, max)`` of a per-element accumulator of this combiner (count > 0 when
        it is not empty)."""
        comps = set(_components(self.combiner))
        if acc is None:
            return 0, 0, _I64.max, _I64.min
        if comps == {"sum", "count"}:                  # Mean: (sum, count)
            return int(acc[1]), int(acc[0]), _I64.max, _I64.min
        if comps == {"count"}:
            return int(acc), 0, _I64.max, _I64.min
        if comps == {"sum"}:
            return 1, int(acc), _I64.max, _I64.min
        return 1, 0, int(acc), int(acc)                # Min, Max: the one value

    def _accumulators(self, rows: np.ndarray) -> list:
        """The accumulator of each window (table rows ``rows``) in the per-element driver's form
        for this combiner, the inverse of :meth:`_components_of`; ``None`` once closed."""
        comps = set(_components(self.combiner))
        t = self._t
        if self._own_accs:
            return [None if c else a for a, c in zip(t["acc"][rows].tolist(), t["closed"][rows].tolist())]
        cnt = t["cnt"][rows].tolist()
        if comps == {"sum", "count"}:                  # Mean: (sum, count)
            accs: list = list(zip(t["sum"][rows].tolist(), cnt))
        elif comps == {"count"}:
            accs = cnt
        elif comps == {"sum"}:
            accs = t["sum"][rows].tolist()
        else:                                          # Min, Max: the one value, None when empty
            one = t["min" if "min" in comps else "max"][rows].tolist()
            accs = [v if n else None for v, n in zip(one, cnt)]
        return [None if c else a for a, c in zip(accs, t["closed"][rows].tolist())]

    @classmethod
    def from_bytes(cls, data: bytes, *args: Any, **kwargs: Any) -> "ColumnarDriver":
        driver = cls(*args, **kwargs)
        driver.load_bytes(data)
        return driver


def _components(fn: AggregateFunction) -> frozenset[str]:
    """The components ``fn``'s vectorised form names (none without one)."""
    form = getattr(fn, "vectorised", None)
    return frozenset(form.components) if form is not None else frozenset()


def _own_accumulators(fn: AggregateFunction) -> bool:
    """Whether ``fn`` runs on its own accumulators here: its vectorised form (if any) names a
    component the table does not hold (``Quantile``'s sorted values) or none."""
    comps = _components(fn)
    return not comps or not comps <= _COMPONENTS


def _trigger_slots(root: Any) -> dict[str, int]:
    """Positions of the early and late counts and the on-time bit in the per-element driver's
    trigger state (:mod:`watermarks._trigger_runtime`)."""
    slots: dict[str, int] = {}
    if hasattr(root, "on_time"):
        slots["on_time"] = root.on_time
        if root.early is not None:
            slots["early"] = root.early.children[0].count
        if root.late is not None:
            slots["late"] = root.late.children[0].count
    return slots
