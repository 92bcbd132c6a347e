"""KeyedSessionOperator (all keys' sessions in one table) against one SlicingWindowOperator per key,
driven the way slicer.stage.SlicerStage drives them, for random keyed streams and watermarks
(hypothesis): the same rows (retractions, sessions, updates, values) in the same order per key,
the same late drops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from dataflow_kafka.slicer import SlicingWindowOperator
from dataflow_kafka.slicer.describe import describe_engines, describe_sessions
from dataflow_kafka.slicer.keyed_sessions import KeyedSessionOperator
from dataflow_kafka.windowing import M4, Count, Max, Mean, Median, Min, SessionWindow, Sum, TumblingWindow
from dataflow_kafka.windowing import AddWindow, RemoveWindow
from tests.slicer.test_slicer_keyed import feed, flat, per_key_batch
from tests.suite import examples

_AGGS = [Sum, Count, Min, Max, Mean]


def _template(gap, aggs, lateness) -> SlicingWindowOperator:
    op = SlicingWindowOperator(allowed_lateness_ms=lateness, emission="compact", drop_before_watermark=False)
    for a in aggs:
        op.add_aggregation(a())
    op.add_window(SessionWindow(gap), "s")
    return op


def _reference_batch(engines: dict, template, records, prev_wm, wm):
    """Rows per key in the per-key engine's order, and the late drops."""
    rows, drops = per_key_batch(engines, template, records, prev_wm, wm)
    return {k: [(r.query_id, r.start, r.end, r.update, r.retraction, flat(r.values)) for r in rs]
            for k, rs in rows.items()}, drops


def _table_batch(op: KeyedSessionOperator, records, wm):
    drops = feed(op, records)
    rows: dict = {}
    if wm is not None:
        ks, res = op.process_watermark(wm)
        cols = [np.asarray(v, np.float64) for v in res.values]
        for i in range(len(res)):
            rows.setdefault(ks[i], []).append((str(res.query_id[i]), int(res.start[i]), int(res.end[i]),
                                               bool(res.update[i]), bool(res.retraction[i]),
                                               flat(tuple(c[i] for c in cols))))
    return rows, drops


def _same(got: dict, want: dict) -> bool:
    if got.keys() != want.keys():
        return False
    for k in want:
        a, b = got[k], want[k]
        if len(a) != len(b) or any(x[:5] != y[:5] or not all(math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-9)
                                                               for p, q in zip(x[5], y[5])) for x, y in zip(a, b)):
            return False
    return True


def _run(gap, aggs, lateness, batches, roundtrip=False):
    template = _template(gap, aggs, lateness)
    assert KeyedSessionOperator.supports(template)
    table, engines, prev = KeyedSessionOperator(template), {}, None
    seen = 0
    for records, wm in batches:
        if wm is not None and prev is not None:
            wm = max(wm, prev)                     # as a PunctuationTracker gives them
        elif wm is None:
            wm = prev
        want = _reference_batch(engines, template, records, prev, wm)
        got = _table_batch(table, records, wm)
        assert got[1] == want[1]
        assert _same(got[0], want[0]), (got[0], want[0])
        seen += sum(len(v) for v in want[0].values())
        if wm is not None:
            prev = wm
        if roundtrip:
            table = KeyedSessionOperator.from_bytes(table.to_bytes(), template)
    return seen


_record = st.tuples(st.sampled_from(["a", "b", "c", 7, ("x", 1)]), st.integers(-50, 50), st.integers(0, 300))
_batch = st.tuples(st.lists(_record, max_size=25), st.one_of(st.none(), st.integers(0, 360)))


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 40), st.lists(st.sampled_from(_AGGS), min_size=1, max_size=3), st.integers(0, 60),
       st.lists(_batch, min_size=1, max_size=8), st.booleans())
def test_table_equals_one_operator_per_key(gap, aggs, lateness, batches, roundtrip):
    _run(gap, aggs, lateness, batches, roundtrip)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(0, 30),
       st.lists(st.tuples(st.lists(st.tuples(st.sampled_from("abcd"), st.floats(-1e6, 1e6), st.integers(0, 300)),
                                   max_size=25), st.one_of(st.none(), st.integers(0, 320))), min_size=1, max_size=6))
def test_table_equals_per_key_with_real_valued_sums(gap, lateness, batches):
    template = _template(gap, [Sum, Mean, Min], lateness)
    table, engines, prev = KeyedSessionOperator(template), {}, None
    for records, wm in batches:
        wm = prev if wm is None else (wm if prev is None else max(wm, prev))
        want = _reference_batch(engines, template, records, prev, wm)
        got = _table_batch(table, records, wm)
        assert got[1] == want[1] and got[0].keys() == want[0].keys()
        for k in want[0]:
            for x, y in zip(got[0][k], want[0][k], strict=True):
                assert x[:5] == y[:5]
                assert all(math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-3) for p, q in zip(x[5], y[5]))
        if wm is not None:
            prev = wm


def test_late_records_extend_and_fuse_emitted_sessions():
    """Transcript (gap 10, lateness 50): two sessions emitted; a late record fuses them at the same
    watermark (both retracted, the fused one an update); late records extend the fused session
    past the watermark (retracted at once, replaced by an update at the next watermark)."""
    batches = [([("k", 1, 10), ("k", 1, 30), ("j", 5, 12)], 60),
               ([("k", 1, 20)], 60),
               ([("k", 1, 38), ("k", 1, 47), ("k", 1, 55)], 60),
               ([], 100)]
    want = [{"k": [("s", 10, 20, False, False, (1.0, 1.0)), ("s", 30, 40, False, False, (1.0, 1.0))],
             "j": [("s", 12, 22, False, False, (1.0, 5.0))]},
            {"k": [("s", 10, 20, True, True, (1.0, 1.0)), ("s", 30, 40, True, True, (1.0, 1.0)),
                   ("s", 10, 40, True, False, (3.0, 3.0))]},
            {"k": [("s", 10, 40, True, True, (3.0, 3.0))]},
            {"k": [("s", 10, 65, True, False, (6.0, 6.0))]}]
    table = KeyedSessionOperator(_template(10, [Count, Sum], 50))
    assert [_table_batch(table, r, wm)[0] for r, wm in batches] == want
    assert _run(10, [Count, Sum], 50, batches) == 8


def test_records_exactly_the_gap_apart_join():
    assert _run(5, [Count], 0, [([("k", 1, 0), ("k", 1, 5), ("k", 1, 11)], 100)]) == 2


def test_keys_without_sessions_are_forgotten():
    op = KeyedSessionOperator(_template(10, [Count], 5))
    op.process_elements(op.codes_of(["a", "b"]), np.array([1.0, 1.0]), np.array([3, 50]))
    keys, res = op.process_watermark(30)
    assert list(keys) == ["a"] and res.start.tolist() == [3] and res.end.tolist() == [13]
    assert op.keys == ["b"]
    keys, res = op.process_watermark(100)
    assert list(keys) == ["b"] and op.keys == []


@pytest.mark.parametrize("build", [
    lambda: _template(10, [Median], 0),
    lambda: _template(10, [M4], 0),
    lambda: SlicingWindowOperator({"s": SessionWindow(10), "t": TumblingWindow(5)}, [Sum()]),
    lambda: SlicingWindowOperator({"s": SessionWindow(10)}, [Sum()], stream_order="in_order"),
    lambda: SlicingWindowOperator({"t": TumblingWindow(5)}, [Sum()]),
])
def test_unsupported_workloads_are_refused(build):
    template = build()
    assert not KeyedSessionOperator.supports(template)
    with pytest.raises(ValueError, match="KeyedSessionOperator: needs one SessionWindow"):
        KeyedSessionOperator(template)


def test_runtime_commands():
    op = KeyedSessionOperator(_template(10, [Count], 5))
    with pytest.raises(ValueError, match="runs the session query it was built with"):
        op.apply(AddWindow(TumblingWindow(5), "t"))
    op.process_elements(op.codes_of(["a"]), np.array([1.0]), np.array([3]))
    assert op.apply(RemoveWindow("s")) and op.query_ids == [] and op.keys == []
    op.process_elements(op.codes_of(["a"]), np.array([1.0]), np.array([4]))
    assert len(op.process_watermark(100)[1]) == 0
    assert not op.apply(RemoveWindow("s")) and op.ignored_commands == 1


def test_stage_picks_the_session_table():
    from dataflow_kafka.slicer.stage import SlicerStage

    table = SlicerStage(key="k", value="v", windows={"s": SessionWindow(10)}, aggregations=[Count()], name="w")
    per_key = SlicerStage(key="k", value="v", windows={"s": SessionWindow(10)}, aggregations=[Median()], name="w")
    assert table.keyed and table.state_kind == b"S" and not per_key.keyed
    state = table.load_state(table.dump_state(table.new_state()))
    assert isinstance(state, KeyedSessionOperator)
    with pytest.raises(ValueError, match="holds the keyed session slicing state, this configuration needs the other"):
        per_key.load_state(table.dump_state(state))


@pytest.mark.parametrize("aggs", [[Count, Mean], [Sum, Min, Max]])
def test_a_state_written_before_the_component_registry_still_loads(aggs):
    """Header ``SLS1``: session and emitted tables with the fixed columns ``cnt``, ``sum``, ``min``
    and ``max`` whatever the aggregations (checked once against the code that wrote them: a state
    of Count and Mean restored, the next watermark's 6 rows equal). Restored into the registry's
    components, the operator continues exactly as the new one."""
    import pickle

    template = _template(10, aggs, 30)
    op = KeyedSessionOperator(template)
    rng = np.random.default_rng(7)

    def batch(lo):
        return list(zip(rng.choice(["a", "b", "c"], 30).tolist(), rng.integers(-9, 9, 30).tolist(),
                        rng.integers(lo, lo + 60, 30).tolist()))

    for b in range(3):
        feed(op, batch(b * 40))
        op.process_watermark(b * 40 + 40)
    state = pickle.loads(op.to_bytes()[4:])
    for name in ("sessions", "emitted"):
        table = state[name]
        table["cnt"] = table.pop("count")
        for c in ("sum", "min", "max"):
            table.setdefault(c, np.full(table["cnt"].size, np.nan))
    old = KeyedSessionOperator.from_bytes(b"SLS1" + pickle.dumps(state), template)
    assert set(old._sessions) == set(op._sessions)
    records = batch(120)
    for table in (op, old):
        feed(table, records)
    (k1, r1), (k2, r2) = op.process_watermark(200), old.process_watermark(200)
    assert k1.tolist() == k2.tolist() and len(k1) > 3
    assert (r1.start.tolist(), r1.end.tolist()) == (r2.start.tolist(), r2.end.tolist())
    assert all(np.allclose(np.asarray(a, float), np.asarray(b, float)) for a, b in zip(r1.values, r2.values))


def _described(frame, item: str, keep=None):
    """The rows of one item (``keep``: those of them it says), without the fields none has."""
    rows = frame[frame["item"] == item]
    if keep is not None and len(rows):
        rows = rows[keep(rows)]
    rows = rows.dropna(axis=1, how="all")
    rows = rows[sorted(rows.columns)]                  # the order of concatenation is no part of the state
    keys = [c for c in ("key", "start_ms", "end_ms") if c in rows]
    return rows.sort_values(keys, key=lambda c: c.map(repr) if c.dtype == object else c).reset_index(drop=True)


@settings(max_examples=examples(150), deadline=None)
@given(st.integers(1, 40), st.lists(st.sampled_from(_AGGS), min_size=1, max_size=3, unique=True), st.integers(0, 60),
       st.lists(_batch, min_size=1, max_size=8), st.booleans())
@example(10, [Sum], 5, [([("k", 1, 10)], 20)], False)            # a session ending at the watermark: pending
@example(10, [Count], 50, [([("k", 1, 10), ("k", 1, 30)], 60), ([("k", 1, 20)], 60)], True)    # fused late
def test_table_describes_as_one_operator_per_key(gap, aggs, lateness, batches, roundtrip):
    """:func:`slicer.describe.describe_sessions` of the table equals :func:`describe_engines` of one
    operator per key fed alike (small times: sessions often end exactly at the watermark): the
    query, every open session as a window row (pending or emitted, count, aggregates), a slice
    per session; the per-key operators may also hold slices of final sessions, which the table
    has dropped."""
    template = _template(gap, aggs, lateness)
    table, engines, prev = KeyedSessionOperator(template), {}, None
    for records, wm in batches:
        wm = prev if wm is None else (wm if prev is None else max(wm, prev))
        per_key_batch(engines, template, records, prev, wm)
        _table_batch(table, records, wm)
        if wm is not None:
            prev = wm
        if roundtrip:
            table = KeyedSessionOperator.from_bytes(table.to_bytes(), template)
    got, want = describe_sessions(table), describe_engines(template, engines)
    horizon = -math.inf if prev is None else prev - lateness
    held = _described(want, "slice", keep=lambda rows: rows["newest_ms"] + gap >= horizon)
    for item, expected in (("query", _described(want, "query")), ("window", _described(want, "window")),
                           ("slice", held)):
        shown = _described(got, item)
        if len(shown) or len(expected):
            assert_frame_equal(shown, expected, check_exact=False, rtol=1e-9, check_dtype=False)   # Int64 or float
