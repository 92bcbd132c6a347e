"""The element history of a multi-query driver, held and encoded as columns.

:class:`~watermarks.MultiQueryDriver` keeps, per key, every input ``(value, event_time_ms)`` of
the last ``history_ms`` of event time, so that a window query added while running (a
modification punctuation, enorm §3.2) can be computed from it (module docstring of
:mod:`watermarks.multi`). On Spark the driver's state is decoded and encoded once per key group
and micro-batch, so the history (about ``history_ms`` of a key group's input: three micro-batches
of NEXMark Q5 at 50,000 records each) is read and written whole every batch. Held as per-key
lists of tuples and encoded value by value, that was 20-30% of the Python workers' CPU of the
NEXMark Dataflow variants (py-spy, 2026-11-28). :class:`ElementHistory` holds it as columns
instead: each element's key (an index into the keys), event time and value, in arrival order,
and encodes them in a fixed number of calls (numpy buffers; the values and keys pickled as
lists, which pickle writes at C speed for plain values).

Semantics are the per-key lists': elements of a key in arrival order; keys in order of their
first element still held (a key whose elements are all dropped is forgotten, and comes last if
it comes again); :meth:`ElementHistory.retract` removes the first equal element. The history has
a floor (the highest :meth:`~ElementHistory.trim` so far): an element appended below it is not held.

**Written as a log** (:meth:`~ElementHistory.log_delta`, :meth:`~ElementHistory.from_log`): the
history is append-only but for trims and retractions, so a state store need not hold it in the
key group's one value, rewritten every batch (each element written about ``history_ms`` / batch
interval times: three to fifteen times in NEXMark's Dataflow forms). Instead each call gives the
elements appended since the previous one as a new *segment* (encoded like the whole history),
the ids of segments whose every element is below the floor (to delete) and, after a retraction,
one segment holding the whole history in place of all earlier ones. The part written with the
key group's value is :meth:`~ElementHistory.log_header` (the key order, the floor, the live
segments and each key's latest event time: small); the segments read back in id order, filtered
by the floor and put in the header's key order, are the same history. Read back ``deferred``
(:meth:`~ElementHistory.from_log`), the history runs appends, trims and ``log_delta`` on the
header alone (a trim forgets the keys whose latest element falls under the floor) and reads the
segments only when an element is needed: a query added while running, a retraction, the whole
history encoded.

>>> h = ElementHistory()
>>> h.append(["a", "b"], [0, 1, 0], [10, 20, 30], [5, 6, 7])
>>> h.per_key()
{'a': [(10, 5), (30, 7)], 'b': [(20, 6)]}
>>> h.trim(6); h.per_key()
{'a': [(30, 7)], 'b': [(20, 6)]}
>>> h.trim(7); list(h.per_key())
['a']
>>> ElementHistory.decode(h.encode()).per_key() == h.per_key()
True
>>> log = ElementHistory()
>>> segments, dropped = log.log_delta(); log.append(["a"], [0], [1], [5])
>>> new, dropped = log.log_delta(); segments.update(new); sorted(new), dropped
([0], [])
>>> log.append(["b"], [0], [2], [9]); log.trim(6)
>>> new, dropped = log.log_delta(); segments.update(new); sorted(new), dropped
([1], [0])
>>> for i in dropped: del segments[i]
>>> ElementHistory.from_log(log.log_header(), segments).per_key()
{'b': [(2, 9)]}
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["ElementHistory", "elements_per_key"]

_EMPTY = np.zeros(0, np.int64)
_I64_MIN = np.iinfo(np.int64).min


def elements_per_key(n: int, rows: np.ndarray, values: Sequence[Any], times: np.ndarray) -> list[list[tuple]]:
    """``[(value, time)]`` of each of ``n`` keys (``rows``: each element's key index), in arrival order."""
    order = np.argsort(rows, kind="stable")
    bounds = np.searchsorted(rows[order], np.arange(n + 1)).tolist()
    pairs = list(zip([values[i] for i in order.tolist()], times[order].tolist()))
    return [pairs[a:b] for a, b in zip(bounds, bounds[1:])]


class ElementHistory:
    """Per key, ``(value, event_time_ms)`` elements in arrival order, held as columns (module docstring)."""

    __slots__ = ("_keys", "_codes", "_kc", "_t", "_v", "_latest", "_floor", "_segments", "_unlogged", "_rewrite",
                 "_next", "_reader")

    def __init__(self) -> None:
        self._keys: list = []              # distinct keys, in order of their first element held
        self._codes: dict = {}             # key -> its index in _keys
        self._kc = _EMPTY                  # per element: its key's index
        self._t = _EMPTY                   # per element: event time (ms)
        self._v: list = []                 # per element: value
        self._latest = _EMPTY              # per key: its latest event time held
        self._floor: int | None = None     # the highest trim so far
        # the log (module docstring): segment id -> latest event time in it; the appends since the
        # last log_delta (None: not logging, the next log_delta writes the whole history); a
        # retraction since then (the next log_delta writes the whole history); the next segment's id
        self._segments: dict[int, int] = {}
        self._unlogged: list | None = None
        self._rewrite = False
        self._next = 0
        # deferred (from_log(..., deferred=True)): the elements are in the log's segments, not yet
        # read; this gives them ({id: encoded}) when an element is needed (_read_log)
        self._reader: Callable[[], Mapping[int, Sequence[Any]]] | None = None

    def __len__(self) -> int:
        self._read_log()
        return len(self._v)

    # -- adding and dropping ------------------------------------------------------------------
    def append(self, keys: Sequence[Any], rows: Sequence[int] | np.ndarray, values: Sequence[Any],
               times: Sequence[int] | np.ndarray) -> None:
        """Add elements in arrival order: element ``i`` has key ``keys[rows[i]]``, value
        ``values[i]`` and event time ``times[i]``. New keys are taken in the order of ``keys``
        (as adding each key's elements in that order would)."""
        rows = np.asarray(rows, np.int64)
        times = np.asarray(times, np.int64)
        if self._floor is not None and rows.size and int(times.min()) < self._floor:
            pick = np.flatnonzero(times >= self._floor)
            rows, times, values = rows[pick], times[pick], [values[i] for i in pick.tolist()]
        if rows.size == 0:
            return
        if self._unlogged is not None:
            self._unlogged.append((keys, rows, values, times))
        present = np.bincount(rows, minlength=len(keys)) > 0
        code_of = np.full(len(keys), -1, np.int64)
        for i in np.flatnonzero(present).tolist():
            k = keys[i]
            c = self._codes.get(k)
            if c is None:
                c = self._codes[k] = len(self._keys)
                self._keys.append(k)
            code_of[i] = c
        codes = code_of[rows]
        if len(self._keys) > self._latest.size:
            self._latest = np.concatenate([self._latest, np.full(len(self._keys) - self._latest.size, _I64_MIN)])
        np.maximum.at(self._latest, codes, times)
        if self._reader is not None:          # deferred: the log holds the elements, the appends are in _unlogged
            return
        self._kc = np.concatenate([self._kc, codes])
        self._t = np.concatenate([self._t, times])
        self._v.extend(values)

    def append_key(self, key: Any, elements: Iterable[tuple[Any, int]]) -> None:
        """Add ``(value, event_time_ms)`` elements of one key, in arrival order."""
        elements = list(elements)
        if elements:
            self.append([key], np.zeros(len(elements), np.int64), [v for v, _ in elements],
                        np.fromiter((t for _, t in elements), np.int64, len(elements)))

    def trim(self, floor_ms: int) -> None:
        """Drop the elements with event time before ``floor_ms`` (and the keys left with none); the
        floor (elements appended below it are not held) is the highest ``floor_ms`` so far."""
        if self._floor is not None and floor_ms <= self._floor:
            return
        self._floor = floor_ms
        if self._reader is not None:          # deferred: a key is forgotten when its latest element is below
            live = self._latest >= floor_ms
            if not live.all():
                self._forget(live)
            return
        if self._t.size == 0 or int(self._t.min()) >= floor_ms:
            return
        self._keep(self._t >= floor_ms)

    def retract(self, key: Any, elements: Iterable[tuple[Any, int]]) -> None:
        """Remove, for each ``(value, event_time_ms)`` of ``key``, its first equal element held."""
        code = self._codes.get(key)
        if code is None:
            return
        self._read_log()
        mine = np.flatnonzero(self._kc == code).tolist()
        gone: set[int] = set()
        for e in elements:
            for i in mine:
                if i not in gone and (self._v[i], int(self._t[i])) == e:
                    gone.add(i)
                    break
        if gone:
            keep = np.ones(len(self._v), bool)
            keep[list(gone)] = False
            self._keep(keep)
            self._latest = _latest_per_key(len(self._keys), self._kc, self._t)    # may be earlier now
            self._rewrite = True

    def _keep(self, keep: np.ndarray) -> None:
        idx = np.flatnonzero(keep)
        self._kc, self._t = self._kc[idx], self._t[idx]
        self._v = _kept(self._v, keep)
        live = np.bincount(self._kc, minlength=len(self._keys)) > 0
        if not live.all():                 # forget the keys left without elements, keeping the order
            self._kc = (np.cumsum(live) - 1)[self._kc]
            self._forget(live)

    def _forget(self, live: np.ndarray) -> None:
        """Keep the keys where ``live`` (a mask over the keys), in order (element codes: the caller's)."""
        self._keys = [k for k, u in zip(self._keys, live.tolist()) if u]
        self._codes = {k: i for i, k in enumerate(self._keys)}
        self._latest = self._latest[live]

    # -- reading ------------------------------------------------------------------------------
    def per_key(self) -> dict[Any, list[tuple[Any, int]]]:
        """``{key: [(value, event_time_ms), ...]}``: every key held, in order, its elements in
        arrival order (new lists)."""
        self._read_log()
        return dict(zip(self._keys, elements_per_key(len(self._keys), self._kc, self._v, self._t)))

    @classmethod
    def of_items(cls, items: Iterable[tuple[Any, Sequence[tuple[Any, int]]]]) -> "ElementHistory":
        """The history holding ``(key, [(value, event_time_ms), ...])`` items (the lists' form of
        a state written before this class)."""
        h = cls()
        for key, elements in items:
            h.append_key(key, elements)
        return h

    # -- bytes --------------------------------------------------------------------------------
    def encode(self) -> tuple:
        """The history as a tuple of plain values and bytes (for :mod:`watermarks._codec`):
        the keys and the values pickled as lists, each element's key index in the smallest
        unsigned type that holds it, event times as 32-bit offsets from the first when they fit."""
        self._read_log()
        kc = self._kc.astype(np.min_scalar_type(max(len(self._keys) - 1, 0)))
        base = int(self._t.min()) if self._t.size else 0
        span = int(self._t.max()) - base if self._t.size else 0
        t = (self._t - base).astype(np.uint32) if span < 2**32 else self._t
        return (pickle.dumps(self._keys, protocol=5), kc.dtype.str, kc.tobytes(), base, t.dtype.str, t.tobytes(),
                pickle.dumps(self._v, protocol=5), self._floor)

    @classmethod
    def decode(cls, encoded: Sequence[Any]) -> "ElementHistory":
        """The history :meth:`encode` wrote (not logging: its first :meth:`log_delta` writes it whole)."""
        h = cls()
        h._floor = encoded[7] if len(encoded) > 7 else None
        h._keys, h._kc, h._t, h._v = _columns(encoded)
        h._codes = {k: i for i, k in enumerate(h._keys)}
        h._latest = _latest_per_key(len(h._keys), h._kc, h._t)
        return h

    # -- as a log (module docstring) --------------------------------------------------------------
    def log_delta(self) -> tuple[dict[int, tuple], list[int]]:
        """The changes since the previous call: ``(new segments {id: encoded}, ids of segments to
        delete)``. The first call (or the first after a retraction, or after :meth:`decode`) gives
        the whole history as one segment and every earlier segment to delete; from then on the
        history records its appends for the next call."""
        if self._unlogged is None or self._rewrite:
            self._read_log()
            dropped, self._segments = sorted(self._segments), {}
            new = {self._next: self.encode()} if len(self) else {}
            if len(self):
                self._segments[self._next] = int(self._t.max())
        else:
            dropped = sorted(i for i, latest in self._segments.items()
                             if self._floor is not None and latest < self._floor)
            for i in dropped:
                del self._segments[i]
            part = ElementHistory()
            for chunk in self._unlogged:
                part.append(*chunk)
            part._floor = self._floor
            new = {self._next: part.encode()} if len(part) else {}
            if len(part):
                self._segments[self._next] = int(part._t.max())
            if new and self._reader is not None:    # deferred: the new segment is read from here until it is in the log
                self._reader = lambda read=self._reader, seg=new: {**read(), **seg}
        if new:
            self._next += 1
        self._unlogged, self._rewrite = [], False
        return new, dropped

    def log_header(self) -> tuple:
        """What :meth:`from_log` needs besides the segments (plain values and bytes, for
        :mod:`watermarks._codec`): the key order, the floor, the live segments, the next id, and
        each key's latest event time (what keeps a history read with ``deferred`` exact without
        its elements)."""
        return (pickle.dumps(self._keys, protocol=5), self._floor, sorted(self._segments.items()), self._next,
                self._latest.tobytes())

    @classmethod
    def from_log(cls, header: Sequence[Any], segments: Mapping[int, Sequence[Any]] | Callable[[], Mapping[int, Sequence[Any]]],
                 deferred: bool = False) -> "ElementHistory":
        """The history whose :meth:`log_header` is ``header``, from its live segments (``{id:
        encoded}`` as :meth:`log_delta` gave them, or a function giving them; others are ignored),
        logging on. ``deferred``: the segments are read only when an element is needed (a
        replay for a query added, a retraction, the whole history encoded); appends, trims and
        :meth:`log_delta` run on the header's keys and latest times alone. A header without
        latest times (written before them) is read at once."""
        keys, floor, live, nxt, *latest = header
        h = cls()
        h._keys = pickle.loads(keys)
        h._codes = {k: i for i, k in enumerate(h._keys)}
        h._floor, h._segments, h._next, h._unlogged = floor, dict(live), nxt, []
        h._reader = segments if callable(segments) else (lambda: segments)
        if latest:
            h._latest = np.frombuffer(latest[0], np.int64).copy()
        if not latest or not deferred:
            h._read_log()
        return h

    def attach(self, segments: Mapping[int, Sequence[Any]] | Callable[[], Mapping[int, Sequence[Any]]]) -> None:
        """Where a deferred history reads its segments from now on (the log as a later call sees
        it: the segments it wrote since are there); nothing for a history already read."""
        if self._reader is not None:
            self._reader = segments if callable(segments) else (lambda: segments)

    def _read_log(self) -> None:
        """A deferred history's elements: its live segments at or above the floor in id order, then
        the appends not yet logged, keys coded by the history's own key order."""
        if self._reader is None:
            return
        segments, self._reader = self._reader(), None
        missing = sorted(set(self._segments) - set(segments))
        if missing:
            raise InvalidArgumentError(f"element history: segments {missing[:5]} of {sorted(self._segments)[:5]}... are "
                                       "not in the state store (state written by another query or version?)")
        parts = [_columns(segments[i]) for i in sorted(self._segments)]
        parts += [([keys[i] for i in rows.tolist()], np.arange(len(rows)), times, list(values))
                  for keys, rows, values, times in (self._unlogged or ())]
        kcs, ts, values = [], [], []
        floor = self._floor
        for part_keys, kc, t, v in parts:   # each part's elements at or above the floor, in this history's codes
            if floor is not None and t.size and int(t.min()) < floor:
                keep = t >= floor
                kc, t, v = kc[keep], t[keep], _kept(v, keep)
            if t.size:
                kcs.append(np.fromiter(map(self._codes.get, part_keys, itertools.repeat(-1, len(part_keys))),
                                       np.int64, len(part_keys))[kc])
                ts.append(t)
                values += v
        if kcs:
            self._kc, self._t, self._v = np.concatenate(kcs), np.concatenate(ts), values
        if (self._kc.size and int(self._kc.min()) < 0) or not np.bincount(self._kc, minlength=len(self._keys)).all():
            raise InvalidArgumentError("element history: its segments hold other keys than its header names "
                                       f"({len(np.unique(self._kc))} held, {len(self._keys)} named)")
        self._latest = _latest_per_key(len(self._keys), self._kc, self._t)


def _latest_per_key(n: int, kc: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per key code of ``n``, the latest event time among the elements (``_I64_MIN`` for none)."""
    latest = np.full(n, _I64_MIN)
    np.maximum.at(latest, kc, t)
    return latest


def _columns(encoded: Sequence[Any]) -> tuple[list, np.ndarray, np.ndarray, list]:
    """The keys, key codes, event times and values of a history :meth:`ElementHistory.encode` wrote."""
    keys, kc_type, kc, base, t_type, t, values = encoded[:7]
    return (pickle.loads(keys), np.frombuffer(kc, np.dtype(kc_type)).astype(np.int64),
            np.frombuffer(t, np.dtype(t_type)).astype(np.int64) + base, pickle.loads(values))


_FEW = 64          # dropped elements past the first kept one that _kept deletes one by one


def _kept(values: list, keep: np.ndarray) -> list:
    """The items of ``values`` where ``keep`` (a bool mask) is true, as a new list. A trim by event
    time drops mostly a prefix (elements are in arrival order): a slice, and the few dropped
    after it deleted one by one; otherwise ``itertools.compress``: both in C, not item by item
    (docs/nexmark.md, "Q11's Dataflow state")."""
    drop = np.flatnonzero(~keep)
    mismatch = np.flatnonzero(drop != np.arange(drop.size))
    prefix = int(mismatch[0]) if mismatch.size else int(drop.size)
    rest = drop[prefix:]
    if rest.size <= _FEW:
        out = values[prefix:]
        for i in rest[::-1].tolist():
            del out[i - prefix]
        return out
    return list(itertools.compress(values, keep.tolist()))
