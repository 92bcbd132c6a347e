"""KeyedSlicingOperator (all keys at once) against one SlicingWindowOperator per key, driven the way
slicer.stage.SlicerStage drives them, for random keyed streams and watermarks (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.slicer import SlicingWindowOperator
from dataflow_kafka.windowing import M4, Count, Max, Mean, Median, Min, SessionWindow, SlidingWindow, Sum, TumblingWindow
from dataflow_kafka.slicer.keyed import KeyedSlicingOperator

from tests.suite import examples

_AGGS = [Sum, Count, Min, Max, Mean, M4]


def _template(windows, aggs, lateness) -> SlicingWindowOperator:
    op = SlicingWindowOperator(allowed_lateness_ms=lateness, emission="compact",   # as the stage
                               drop_before_watermark=False)
    for a in aggs:
        op.add_aggregation(a())
    for w in windows:
        op.add_window(w)
    return op


def per_key_batch(engines: dict, template, records, prev_wm, wm) -> tuple[dict, dict]:
    """One micro-batch through per-key operators, as SlicerStage.process does: ``({key: the
    engine's WindowResult rows}, {key: late drops})``."""
    touched: dict = {}
    for key in dict.fromkeys(k for k, _, _ in records):
        op = engines.get(key)
        if op is None:
            op = engines[key] = SlicingWindowOperator.from_bytes(template.to_bytes(include_config=False), like=template)
            if prev_wm is not None:
                op.process_watermark_columns(prev_wm)
        v = np.array([r[1] for r in records if r[0] == key], np.float64)
        t = np.array([r[2] for r in records if r[0] == key], np.int64)
        before = op.dropped_late
        op.process_elements(v, t)
        touched[key] = op.dropped_late - before
    rows = {}
    if wm is not None:
        advanced = prev_wm is None or wm > prev_wm
        for key in (list(engines) if advanced else list(touched)):
            got = engines[key].process_watermark(wm)
            if got:
                rows[key] = got
    return rows, {k: d for k, d in touched.items() if d}


def _reference_batch(engines: dict, template, records, prev_wm, wm):
    rows, drops = per_key_batch(engines, template, records, prev_wm, wm)
    flat_rows = [(key, r.query_id, r.start, r.end, r.update, flat(r.values)) for key, rs in rows.items() for r in rs]
    return sorted(flat_rows, key=repr), drops


def feed(op, records) -> dict:
    """``(key, value, time)`` records into a keyed table (by key code, as the stage feeds it);
    returns the late drops per key."""
    keys = [k for k, _, _ in records]
    uniq = list(dict.fromkeys(keys))
    codes = op.codes_of(uniq)
    per_row = codes[[uniq.index(k) for k in keys]] if keys else np.zeros(0, np.int64)
    dropped = op.process_elements(per_row, np.array([r[1] for r in records], np.float64),
                                  np.array([r[2] for r in records], np.int64))
    return {k: int(dropped[c]) for k, c in zip(uniq, codes.tolist()) if dropped[c]}


def _keyed_batch(op: KeyedSlicingOperator, records, wm):
    drops = feed(op, records)
    rows = []
    if wm is not None:
        ks, res = op.process_watermark(wm)
        cols = [np.asarray(v, np.float64) for v in res.values]
        for i in range(len(res)):
            rows.append((ks[i], str(res.query_id[i]), int(res.start[i]), int(res.end[i]), bool(res.update[i]),
                         flat(tuple(c[i] for c in cols))))
    return sorted(rows, key=repr), drops


def flat(values) -> tuple:
    """Aggregate values as one flat tuple of floats (M4 gives four)."""
    return tuple(float(x) for v in values for x in np.atleast_1d(np.asarray(v, np.float64)))


def _as_tracker_gives(wm, prev):
    """The processor's watermarks come from a PunctuationTracker: None until the first one,
    then never None again and never lower."""
    if wm is None or prev is None:
        return wm if wm is not None else prev
    return max(wm, prev)


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        x[:5] == y[:5] and all(math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-9) for p, q in zip(x[5], y[5]))
        for x, y in zip(a, b))


_window = st.one_of(
    st.builds(lambda size, off: TumblingWindow(size, off % size), st.integers(1, 40), st.integers(0, 20)),
    st.builds(lambda size, slide, off: SlidingWindow(size, slide, off % slide),
              st.integers(1, 60), st.integers(1, 25), st.integers(0, 20)),
)
_record = st.tuples(st.sampled_from(["a", "b", "c", 7, ("x", 1)]), st.integers(-50, 50), st.integers(0, 300))
_batch = st.tuples(st.lists(_record, max_size=25), st.one_of(st.none(), st.integers(0, 320)))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_window, min_size=1, max_size=4), st.lists(st.sampled_from(_AGGS), min_size=1, max_size=3),
       st.integers(0, 60), st.lists(_batch, min_size=1, max_size=8), st.booleans())
def test_keyed_equals_one_operator_per_key(windows, aggs, lateness, batches, roundtrip):
    template = _template(windows, aggs, lateness)
    assert KeyedSlicingOperator.supports(template)
    keyed = KeyedSlicingOperator(template)
    engines: dict = {}
    prev = None
    for records, wm in batches:
        wm = _as_tracker_gives(wm, prev)
        want = _reference_batch(engines, template, records, prev, wm)
        got = _keyed_batch(keyed, records, wm)
        assert got[1] == want[1]
        assert _same(got[0], want[0]), (got[0], want[0])
        if wm is not None:
            prev = wm if prev is None else max(prev, wm)
        if roundtrip:
            keyed = KeyedSlicingOperator.from_bytes(keyed.to_bytes(), template)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(_window, min_size=1, max_size=3), st.integers(0, 30),
       st.lists(st.tuples(st.lists(st.tuples(st.sampled_from("abcd"), st.floats(-1e6, 1e6), st.integers(0, 300)),
                                   max_size=25), st.one_of(st.none(), st.integers(0, 320))), min_size=1, max_size=6))
def test_keyed_equals_per_key_with_real_valued_sums(windows, lateness, batches):
    template = _template(windows, [Sum, Mean, Min], lateness)
    keyed, engines, prev = KeyedSlicingOperator(template), {}, None
    for records, wm in batches:
        wm = _as_tracker_gives(wm, prev)
        want = _reference_batch(engines, template, records, prev, wm)
        got = _keyed_batch(keyed, records, wm)
        assert got[1] == want[1] and len(got[0]) == len(want[0])
        for x, y in zip(got[0], want[0]):
            assert x[:5] == y[:5]
            assert all(math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-3) for p, q in zip(x[5], y[5]))
        if wm is not None:
            prev = wm if prev is None else max(prev, wm)


def test_state_forgets_keys_without_slices():
    template = _template([TumblingWindow(10)], [Sum], 5)
    op = KeyedSlicingOperator(template)
    codes = op.codes_of(["a", "b"])
    op.process_elements(codes, np.array([1.0, 2.0]), np.array([3, 50]))
    keys, res = op.process_watermark(30)
    assert list(keys) == ["a"] and res.start.tolist() == [0] and res.values[0].tolist() == [1.0]
    assert op.keys == ["b"]                       # "a" has no slice left: forgotten
    keys, res = op.process_watermark(100)
    assert list(keys) == ["b"] and op.keys == [] and op.kc.size == 0


@pytest.mark.parametrize("build", [
    lambda: _template([SessionWindow(10)], [Sum], 0),
    lambda: _template([TumblingWindow(10)], [Median], 0),
    lambda: _template([TumblingWindow(10, measure="count")], [Sum], 0),
])
def test_unsupported_workloads_are_refused(build):
    template = build()
    assert not KeyedSlicingOperator.supports(template)
    with pytest.raises(ValueError, match="KeyedSlicingOperator: needs"):
        KeyedSlicingOperator(template)


@pytest.mark.parametrize("windows", [[TumblingWindow(1)], [SlidingWindow(4, 1)]])
def test_lateness_boundary_matches_per_key(windows):
    """A record at exactly watermark - lateness is kept and updates the windows ending just after
    it; one ms earlier is dropped (the edge hypothesis rarely reaches)."""
    template = _template(windows, [Sum, Count], 5)
    keyed, engines, prev = KeyedSlicingOperator(template), {}, None
    for records, wm in [([("k", 1, 99)], 100), ([("k", 2, 95), ("k", 4, 94), ("j", 8, 95)], 100),
                        ([("k", 16, 96)], 101)]:
        want = _reference_batch(engines, template, records, prev, wm)
        got = _keyed_batch(keyed, records, wm)
        assert got == want
        prev = wm
    assert want[0] and any(r[4] for r in want[0])


def test_slice_start_is_the_latest_edge_in_chunks(monkeypatch):
    import dataflow_kafka.slicer.keyed as keyed
    template = _template([SlidingWindow(30, 7, 3), TumblingWindow(11, 7)], [Sum], 0)
    op = KeyedSlicingOperator(template)
    ts = np.arange(-200, 400, 3, dtype=np.int64)
    edges = sorted({e for w in template.windows.queries.values()
                    for k in range(-100, 100) for e in (k * w.window.slide + w.window.offset,
                                                        k * w.window.slide + w.window.offset + w.window.size)})
    want = np.array([max(e for e in edges if e <= t) for t in ts.tolist()])
    assert np.array_equal(op.slice_start(ts), want)
    monkeypatch.setattr(keyed, "_PAIRS_PER_CHUNK", 10)      # several chunks
    assert np.array_equal(op.slice_start(ts), want)


def test_stage_refuses_a_state_of_the_other_path():
    """A checkpoint written by one engine per key is refused (clearly) by the keyed path and the
    other way round, e.g. after the windows or aggregations of a query changed."""
    from dataflow_kafka.slicer.stage import SlicerStage

    keyed = SlicerStage(key="k", value="v", windows=[TumblingWindow(10)], aggregations=[Sum()], name="w")
    per_key = SlicerStage(key="k", value="v", windows=[SessionWindow(10)], aggregations=[Median()], name="w")
    assert keyed.keyed and not per_key.keyed
    with pytest.raises(ValueError, match="holds the per-key slicing state, this configuration needs the other"):
        keyed.load_state(per_key.dump_state(per_key.new_state()))
    with pytest.raises(ValueError, match="holds the keyed slicing state, this configuration needs the other"):
        per_key.load_state(keyed.dump_state(keyed.new_state()))


def test_a_state_written_before_the_component_registry_still_loads():
    """Header ``SLK2``: the table's fixed columns (``cnt``, ``sum``, ``min``, ``max``, and M4's
    ``fv ft fs lv lt ls``) as the previous layout wrote them (checked once against that code):
    restored into the registry's components, the operator continues exactly as the new one."""
    import pickle

    template = _template([TumblingWindow(10), SlidingWindow(20, 5)], [Sum, Mean, M4], 50)
    op = KeyedSlicingOperator(template)
    rng = np.random.default_rng(5)
    for b in range(3):
        op.process_elements(op.codes_of(["a", "b"])[rng.integers(0, 2, 30)], rng.integers(-9, 9, 30).astype(float),
                            rng.integers(b * 10, b * 10 + 30, 30))
        op.process_watermark(b * 10 + 10)
    state = pickle.loads(op.to_bytes()[4:])
    parts = state.pop("parts")
    state["table"].update(cnt=parts["count"], sum=parts["sum"], min=parts["min"], max=parts["max"])
    for name, c in (("first", "f"), ("last", "l")):
        state["table"].update({c + "v": parts[name][0], c + "t": parts[name][1], c + "s": parts[name][2]})
    old = KeyedSlicingOperator.from_bytes(b"SLK2" + pickle.dumps(state), template)
    batch = (op.codes_of(["a", "b"])[rng.integers(0, 2, 30)], rng.integers(-9, 9, 30).astype(float),
             rng.integers(30, 70, 30))
    for keyed in (op, old):
        keyed.process_elements(*batch)
    (k1, r1), (k2, r2) = op.process_watermark(90), old.process_watermark(90)
    assert k1.tolist() == k2.tolist() and len(k1) > 5
    assert all(np.allclose(np.asarray(a, float), np.asarray(b, float)) for a, b in zip(r1.values, r2.values))
