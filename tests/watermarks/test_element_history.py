"""The multi-query driver's element history held as columns (``watermarks.history``) against the
per-key lists it replaced: the same elements, key order and retractions after any sequence of
operations, through an encode/decode at any point; and a state written with the lists' form
(format 2) still loads."""

from __future__ import annotations

import doctest
import importlib
import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.watermarks import _codec
from dataflow_kafka.watermarks.history import ElementHistory
from dataflow_kafka.watermarks.multi import MultiQueryDriver
from dataflow_kafka.watermarks.triggers import DefaultTrigger
from dataflow_kafka.windowing import Sum, TumblingWindow


class _Lists:
    """The reference: per-key lists in a dict, as MultiQueryDriver held them before."""

    def __init__(self):
        self.h: dict = {}
        self.floor = None

    def append(self, keys, rows, values, times):
        per = {}
        for r, v, t in zip(rows, values, times):
            if self.floor is None or t >= self.floor:
                per.setdefault(r, []).append((v, t))
        for i, k in enumerate(keys):
            if i in per:
                self.h.setdefault(k, []).extend(per[i])

    def trim(self, floor):
        self.floor = floor if self.floor is None else max(self.floor, floor)
        for k in list(self.h):
            kept = [e for e in self.h[k] if e[1] >= floor]
            if kept:
                self.h[k] = kept
            else:
                del self.h[k]

    def retract(self, key, elements):
        hist = self.h.get(key)
        for e in elements if hist is not None else ():
            if e in hist:
                hist.remove(e)
        if hist is not None and not hist:
            del self.h[key]


KEYS = st.one_of(st.integers(0, 5), st.sampled_from(["a", "b", ("a", 1)]))
VALUES = st.one_of(st.integers(-3, 3), st.integers(2**40, 2**40 + 3), st.text(max_size=3), st.none(),
                   st.tuples(st.integers(0, 2), st.text(max_size=2)))
TIMES = st.integers(-5, 40)
BATCH = st.lists(KEYS, min_size=1, max_size=4, unique=True).flatmap(
    lambda keys: st.tuples(st.just(keys), st.lists(st.tuples(st.integers(0, len(keys) - 1), VALUES, TIMES),
                                                   max_size=8)))
OPS = st.lists(st.one_of(st.tuples(st.just("append"), BATCH), st.tuples(st.just("trim"), TIMES),
                         st.tuples(st.just("retract"), KEYS, st.lists(st.tuples(VALUES, TIMES), max_size=3)),
                         st.tuples(st.just("roundtrip")),
                         st.tuples(st.just("log"), st.sampled_from(["stay", "read", "deferred", "attach"])),
                         st.tuples(st.just("look"))),
                max_size=25)


def _append_or_trim(h: ElementHistory, ref: _Lists, op: tuple) -> bool:
    """Apply an ``append`` or ``trim`` op to both; False for any other op."""
    if op[0] == "append":
        keys, elems = op[1]
        rows, values, times = [e[0] for e in elems], [e[1] for e in elems], [e[2] for e in elems]
        h.append(keys, rows, values, times)
        ref.append(keys, rows, values, times)
    elif op[0] == "trim":
        h.trim(op[1])
        ref.trim(op[1])
    else:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_columns_hold_what_the_per_key_lists_held(ops):
    """Also written as a log at any point (``log``: a ``log_delta`` into a store of segments, then,
    if drawn, the history read back from its header and the store, as after a restart: at once,
    deferred (its elements read from the store when needed), or deferred and given a copy of the
    store as a later batch's log): the same history, and the store holds exactly the segments
    the header names."""
    h, ref, store = ElementHistory(), _Lists(), {}
    for op in ops:
        if _append_or_trim(h, ref, op):
            pass
        elif op[0] == "retract":
            h.retract(op[1], op[2])
            ref.retract(op[1], op[2])
        elif op[0] == "log":
            new, dropped = h.log_delta()
            assert not set(new) & set(store) and set(dropped) <= set(store)
            for i in dropped:
                del store[i]
            store.update({i: _codec.encode(seg) for i, seg in new.items()})
            header = _codec.decode(_codec.encode(h.log_header()))
            assert sorted(i for i, _ in header[2]) == sorted(store)
            if op[1] != "stay":
                decoded = {i: _codec.decode(b) for i, b in store.items()}
                h = ElementHistory.from_log(header, decoded if op[1] == "read" else (lambda d=decoded: d),
                                            deferred=op[1] != "read")
                if op[1] == "attach":
                    h.attach(lambda: {i: _codec.decode(b) for i, b in store.items()})   # the store as it is then
        elif op[0] == "roundtrip":
            h = ElementHistory.decode(_codec.decode(_codec.encode(h.encode())))
            store = {}                        # a decoded history writes itself whole at its next log_delta
        # a deferred history's key order and latest times, without reading its elements
        keys, *_, latest = h.log_header()
        assert pickle.loads(keys) == list(ref.h)
        assert np.frombuffer(latest, np.int64).tolist() == [max(t for _, t in e) for e in ref.h.values()]
        if op[0] == "look":               # the elements (a deferred history reads them here)
            assert h.per_key() == ref.h
            assert list(h.per_key()) == list(ref.h)          # the key order too
            assert len(h) == sum(map(len, ref.h.values()))
    assert h.per_key() == ref.h and list(h.per_key()) == list(ref.h)


def test_a_state_written_with_per_key_lists_loads():
    args = ([TumblingWindow(10)], DefaultTrigger(), "accumulating")
    d = MultiQueryDriver(*args, allowed_lateness_ms=10, combiner=Sum())
    d.add([(1, 5), (2, 25), (4, 41)], key="k")
    d.add([(7, 30)], key="j")
    d.advance_watermark(33)
    fields = list(_codec.decode(d.to_bytes()))
    assert fields[0] == 4
    fields[0], fields[10] = 2, list(d.history().items())       # format 2: (key, [(value, time)]) items
    old = MultiQueryDriver.from_bytes(_codec.encode(tuple(fields)), *args, allowed_lateness_ms=10, combiner=Sum())
    assert old.history() == d.history() == {"k": [(2, 25), (4, 41)], "j": [(7, 30)]}
    assert old.to_bytes() == d.to_bytes()
    fields = list(_codec.decode(d.to_bytes()))
    fields[0], fields[10] = 3, fields[10][1][:7]               # format 3: the columns, untagged, no floor
    three = MultiQueryDriver.from_bytes(_codec.encode(tuple(fields)), *args, allowed_lateness_ms=10, combiner=Sum())
    assert three.to_bytes() == d.to_bytes()


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("dataflow_kafka.watermarks.history"))
    assert result.attempted > 0 and result.failed == 0


def _through_log(h: ElementHistory, store: dict) -> ElementHistory:
    new, dropped = h.log_delta()
    for i in dropped:
        del store[i]
    store.update(new)
    return ElementHistory.from_log(h.log_header(), dict(store))


def test_a_key_forgotten_and_back_keeps_its_place_through_the_log():
    """``a``'s only element is trimmed (``a`` forgotten) while the segment holding it stays (``b``'s
    element is newer); ``a`` comes back after ``b``: read from the log, ``b`` still comes first."""
    h, store = ElementHistory(), {}
    h.append(["a", "b"], [0, 1], [1, 2], [1, 50])
    _through_log(h, store)
    h.trim(10)
    h.append(["a"], [0], [3], [60])
    back = _through_log(h, store)
    assert list(back.per_key()) == list(h.per_key()) == ["b", "a"]
    assert back.per_key() == h.per_key() == {"b": [(2, 50)], "a": [(3, 60)]}


def test_a_segment_is_deleted_only_when_all_its_elements_are_below_the_floor():
    h, store = ElementHistory(), {}
    h.append(["a"], [0, 0], [1, 2], [5, 10])
    _through_log(h, store)
    h.trim(10)                         # the segment's latest element is at the floor: still held
    assert _through_log(h, store).per_key() == {"a": [(2, 10)]}
    h.trim(11)
    new, dropped = h.log_delta()
    assert new == {} and dropped == [0]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.lists(st.integers(0, 599), max_size=200))
def test_kept_values_are_the_masked_ones(size, prefix, holes):
    """``_kept`` (a slice and a few deletions, or ``compress``) against item-by-item indexing."""
    import numpy as np

    from dataflow_kafka.watermarks.history import _kept

    n = size + prefix
    keep = np.ones(n, bool)
    keep[:prefix] = False
    keep[[h for h in holes if h < n]] = False
    values = [("v", i) for i in range(n)]
    assert _kept(values, keep) == [values[i] for i in np.flatnonzero(keep).tolist()]
    assert len(values) == n                          # the input list is left alone


def test_a_log_whose_header_names_other_keys_than_its_segments_is_refused():

    import pytest

    from dataflow_kafka.errors import InvalidArgumentError

    h = ElementHistory()
    h.log_delta()
    h.append(["a", "b"], [0, 1, 0], [10, 20, 30], [5, 6, 7])
    segments, _ = h.log_delta()
    keys, floor, live, nxt, _ = h.log_header()
    assert ElementHistory.from_log((keys, floor, live, nxt), segments).per_key() == h.per_key()   # no latest times
    for named in (["a"], ["a", "b", "c"], ["a", "c"]):
        with pytest.raises(InvalidArgumentError, match="other keys than its header names"):
            ElementHistory.from_log((pickle.dumps(named), floor, live, nxt), segments)
        latest = np.zeros(len(named), np.int64).tobytes()
        deferred = ElementHistory.from_log((pickle.dumps(named), floor, live, nxt, latest), segments, deferred=True)
        with pytest.raises(InvalidArgumentError, match="other keys than its header names"):
            deferred.per_key()                                 # refused when the segments are read
    with pytest.raises(InvalidArgumentError, match="other keys than its header names"):   # "b" trimmed away
        ElementHistory.from_log((keys, 7, live, nxt), segments)
    with pytest.raises(InvalidArgumentError, match=r"segments \[0\] .* are not in the state store"):
        ElementHistory.from_log(h.log_header(), {}, deferred=True).per_key()


DEFERRED_OPS = st.lists(st.one_of(st.tuples(st.just("append"), BATCH), st.tuples(st.just("trim"), TIMES),
                                  st.tuples(st.just("log")), st.tuples(st.just("attach"))), max_size=12)


@settings(max_examples=400, deadline=None)
@given(OPS, DEFERRED_OPS)
def test_a_deferred_history_reads_what_it_would_have_held(before, after):
    """A history read back from its log deferred, then appended to, trimmed and logged (each
    ``log`` a ``log_delta`` into the store; ``attach``: the store as a later batch's log) without
    its elements being read: the key order and latest times of its header all along, and its
    elements when read at the end, are those of the reference."""
    h, ref, store = ElementHistory(), _Lists(), {}
    for op in before:                    # the history as it was written (appends and trims)
        _append_or_trim(h, ref, op)

    def log():
        new, dropped = h.log_delta()
        for i in dropped:
            del store[i]
        store.update({i: _codec.encode(seg) for i, seg in new.items()})

    log()
    snapshot = {i: _codec.decode(b) for i, b in store.items()}
    h = ElementHistory.from_log(_codec.decode(_codec.encode(h.log_header())), lambda: snapshot, deferred=True)
    for op in after:
        if _append_or_trim(h, ref, op):
            pass
        elif op[0] == "log":
            log()
        else:
            h.attach(lambda: {i: _codec.decode(b) for i, b in store.items()})
        keys, *_, latest = h.log_header()
        assert h._reader is not None                          # nothing read yet
        assert pickle.loads(keys) == list(ref.h)
        assert np.frombuffer(latest, np.int64).tolist() == [max(t for _, t in e) for e in ref.h.values()]
    assert h.per_key() == ref.h and list(h.per_key()) == list(ref.h)
