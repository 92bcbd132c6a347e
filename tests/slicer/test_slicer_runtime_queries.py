"""Window queries added and removed while the slicer runs (Scotty's addWindowFunction).

Property tests against the brute-force reference: a query added at some point reports exactly
the windows a fresh operator would compute from the records the slices still held (all accepted
records), from the coverage start the engine documents (slicer.coverage) on, emitting at its first
watermark like a fresh operator; a removed query emits nothing more; a round trip through bytes
anywhere changes nothing. Unit tests pin where the coverage starts.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dataflow_kafka.slicer import FixedBandWindow, PunctuationWindow, SlicingWindowOperator
from dataflow_kafka.windowing import SessionWindow, SlidingWindow, Sum, TumblingWindow
from dataflow_kafka.slicer.compile import compile_window
from dataflow_kafka.slicer.frames import ThresholdFrame
from dataflow_kafka.slicer.keyed import KeyedSlicingOperator
from dataflow_kafka.slicer.windows import COUNT, TIME, measure_of
from dataflow_kafka.windowing import AddWindow, Count, Max, Mean, Min, RemoveWindow, parse_command

from tests.slicer.slicer_reference import row_order, Reference, rows_of, same_rows
from tests.slicer.test_slicer_properties import (
    AGGS, EMISSIONS, at_origin, count_windows, make_aggs, streams, time_windows,
)
from tests.suite import examples

SETTINGS = settings(max_examples=examples(int(__import__("os").environ.get("RQ_EXAMPLES", "150"))), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scripts(draw, windows=None):
    """A stream with window commands and byte round trips at random points (before the flush)."""
    windows = st.one_of(time_windows(), count_windows()) if windows is None else windows
    events = draw(streams())
    for i in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(events) - 1))
        kind = draw(st.sampled_from(["add", "add", "remove", "bytes"]))
        op = (("add", f"r{i}", draw(windows)) if kind == "add"
              else ("remove", draw(st.integers(0, 5))) if kind == "remove" else ("bytes", draw(st.booleans())))
        events.insert(pos, op)
    return events


def _is_count(w) -> bool:
    return measure_of(compile_window(w)) is COUNT


def run_with_commands(op, ref, events, template):
    """Drive the engine and the reference; check every watermark's rows (as sets: query ids of
    added queries sort otherwise than their registration) and the coverage bounds."""
    for ev in events:
        if ev[0] == "rec":
            op.process_elements(np.array(ev[1], float), np.array(ev[2]))
            ref.records(ev[1], ev[2])
        elif ev[0] == "wm":
            got = rows_of(op.process_watermark(ev[1]))
            want = sorted(ref.watermark(ev[1]), key=row_order)
            assert same_rows(got, want), f"at watermark {ev[1]}:\n engine    {got}\n reference {want}"
        elif ev[0] == "add":
            held = op._time is not None and op._time.store.n > 0 and bool(op.windows.of_measure(TIME))
            try:
                assert op.apply(parse_command(AddWindow(ev[1], ev[2]).to_json()) if hasattr(ev[2], "to_json")
                                else AddWindow(ev[1], ev[2]))
            except ValueError as err:       # a window that needs records the operator did not keep
                assert "needs records that were not kept" in str(err) and op._time.tuples is None
                continue
            start = op.coverage_start(ev[1])
            ref.add_query(ev[1], ev[2], start)
            if held and op._time.tuples is not None and not _is_count(ev[2]) and ref.wm is not None and ref.recs:
                # records kept: every record that is not late yet is covered (sessions from a gap
                # later, punctuation windows from one ms later; a threshold frame from one ms after the
                # first such record when it passes the threshold: its frame may have begun at an
                # evicted record. See slicer.coverage)
                bound = ref.wm - ref.allowed_lateness_ms
                slack = ev[2].gap_ms if isinstance(ev[2], SessionWindow) else int(isinstance(ev[2], PunctuationWindow))
                if isinstance(ev[2], ThresholdFrame):
                    first = min((t for _, t, _ in ref.recs if t >= bound), default=None)
                    if first is not None and ev[2].passes(np.array([v for v, t, _ in ref.recs if t == first])).any():
                        bound = first + 1
                assert start is None or start <= bound + slack
        elif ev[0] == "remove":
            ids = op.query_ids
            if ids:
                qid = ids[ev[1] % len(ids)]
                assert op.apply(RemoveWindow(qid))
                ref.remove_query(qid)
        else:
            like = None if ev[1] else template
            op = SlicingWindowOperator.from_bytes(op.to_bytes(include_config=ev[1]), like=like)
    assert op.dropped_late == ref.dropped
    return op


def _operator(windows, names, lateness, keep, emission="scotty"):
    return SlicingWindowOperator(windows, make_aggs(names), allowed_lateness_ms=lateness, keep_records=keep,
                                 emission=emission)


@SETTINGS
@given(st.lists(st.one_of(time_windows(), count_windows()), min_size=1, max_size=3), AGGS,
       st.sampled_from([0, 40, 200]), st.sampled_from([None, True]), scripts(), EMISSIONS)
@example(windows=[TumblingWindow(5)], names=["sum"], lateness=0, keep=True, emission="scotty",   # found in CI:
         events=[("rec", [0], [-1]), ("wm", 0), ("rec", [0], [0]), ("wm", 0),                     # a threshold frame
                 ("add", "r0", ThresholdFrame(threshold=2)), ("wm", 2000)])                       # added after records
@example(windows=[TumblingWindow(5)], names=["sum"], lateness=200, keep=True, emission="scotty",
         events=[("rec", [0, 0, 9, 9, 6, 6, 0, 1, 0], [0, -18, 45, 85, 107, 147, 147, 160, 250]), ("wm", 250),
                 ("add", "r0", ThresholdFrame(threshold=2)), ("wm", 2250)])
def test_added_and_removed_queries_match_the_reference(windows, names, lateness, keep, events, emission):
    events = at_origin(events, emission)
    op = _operator(windows, names, lateness, keep, emission)
    template = _operator(windows, names, lateness, keep, emission)
    run_with_commands(op, Reference(windows, make_aggs(names), lateness, emission), events, template)


@SETTINGS
@given(st.lists(time_windows(), min_size=1, max_size=3), st.sampled_from([0, 100]),
       scripts(st.one_of(time_windows(), count_windows())), st.integers(0, 30), EMISSIONS)
def test_commands_are_deterministic_and_survive_bytes(windows, lateness, events, cut, emission):
    """Two operators fed the same stream and commands write the same bytes; a round trip in the
    middle gives the same output."""
    events = [e for e in at_origin(events, emission) if e[0] != "bytes"]
    cut = min(cut, len(events))

    def drive(op, evs):
        out = []
        for ev in evs:
            if ev[0] == "rec":
                op.process_elements(np.array(ev[1], float), np.array(ev[2]))
            elif ev[0] == "wm":
                out.append(rows_of(op.process_watermark(ev[1])))
            elif ev[0] == "add":
                try:
                    op.add_window(ev[2], ev[1])
                except ValueError:
                    pass
            elif op.query_ids:
                op.remove_window(op.query_ids[ev[1] % len(op.query_ids)])
        return out

    a, b = (_operator(windows, ["sum", "m4"], lateness, None, emission) for _ in range(2))
    head_a, head_b = drive(a, events[:cut]), drive(b, events[:cut])
    assert a.to_bytes() == b.to_bytes() and head_a == head_b
    b = SlicingWindowOperator.from_bytes(b.to_bytes())
    assert all(same_rows(x, y) for x, y in zip(drive(a, events[cut:]), drive(b, events[cut:])))


# --------------------------------------------------------------------------- coverage, by hand
def _fed(windows, keep=None, lateness=100):
    op = SlicingWindowOperator(windows, [Sum()], allowed_lateness_ms=lateness, keep_records=keep)
    op.process_elements(np.array([1.0, 2.0, 4.0, 8.0]), np.array([120, 180, 260, 390]))
    op.process_watermark(300)          # horizon 200: slices from 200 on are held
    return op


def test_edges_that_fall_on_held_slice_edges_cover_every_held_record():
    op = _fed([TumblingWindow(100)])
    assert op.add_window(TumblingWindow(200)) == "1"
    assert op.coverage_start("1") == 200             # the oldest held slice (older ones evicted)
    assert [(r.start, r.end, r.value) for r in op.process_watermark(1000) if r.query_id == "1"] == [(200, 400, 12.0)]


def test_an_edge_inside_a_slices_records_starts_coverage_after_it():
    op = _fed([TumblingWindow(100)])                 # held: [200, 300) = {260}, [300, 400) = {390}
    op.process_elements(np.array([16.0]), np.array([310]))       # [300, 400) now spans 310..390
    op.add_window(TumblingWindow(50), "half")        # 250 falls between records; 350 inside 310..390
    assert op.coverage_start("half") == 400          # the first window start after 350
    op.process_elements(np.array([32.0]), np.array([420]))
    rows = [(r.query_id, r.start, r.value) for r in op.process_watermark(1000)]
    assert [r for r in rows if r[0] == "half"] == [("half", 400, 32.0)]
    assert ("0", 300, 24.0) in rows and ("0", 400, 32.0) in rows


def test_kept_records_make_every_cut_exact():
    op = _fed([TumblingWindow(100)], keep=True)
    op.process_elements(np.array([16.0]), np.array([310]))
    op.add_window(TumblingWindow(30, 15), "odd")
    assert op.coverage_start("odd") == 200 and op.stores_records
    rows = {(r.start, r.end): r.value for r in op.process_watermark(1000) if r.query_id == "odd"}
    # Scotty's emission: the empty windows between the held records too, without a value
    assert rows == {(255, 285): 4.0, (285, 315): 16.0, (315, 345): None, (345, 375): None, (375, 405): 8.0}


def test_session_added_without_records_starts_after_the_last_slice_that_can_hide_a_gap():
    op = _fed([TumblingWindow(100)])                 # held: [200, 300) = {260}, [300, 400) = {390}
    op.process_elements(np.array([16.0]), np.array([310]))       # [300, 400) spans 310..390 > gap 50
    op.add_window(SessionWindow(50), "s")
    assert op.coverage_start("s") == 391
    op.process_elements(np.array([32.0, 64.0]), np.array([420, 520]))
    rows = [(r.start, r.end, r.value) for r in op.process_watermark(2000) if r.query_id == "s"]
    assert rows == [(520, 570, 64.0)]                # 420 belongs to the session of 390: not covered
    kept = _fed([TumblingWindow(100)], keep=True)
    kept.process_elements(np.array([16.0, 32.0]), np.array([310, 420]))
    kept.add_window(SessionWindow(50), "s")
    assert kept.coverage_start("s") == 250          # a record before 200 (evicted) could have joined
    assert [(r.start, r.end, r.value) for r in kept.process_watermark(2000) if r.query_id == "s"] == [
        (260, 360, 20.0), (390, 470, 40.0)]               # 260 and 310: exactly the gap apart, one session


def test_punctuation_window_needs_kept_records_on_out_of_order_streams():
    op = _fed([TumblingWindow(100)])
    with pytest.raises(ValueError, match="needs records that were not kept; construct the operator with keep_records"):
        op.add_window(PunctuationWindow(punctuation=7.0))
    assert op.query_ids == ["0"]
    kept = _fed([TumblingWindow(100)], keep=True)
    kept.add_window(PunctuationWindow(punctuation=4.0), "p")
    assert kept.coverage_start("p") == 200          # the held records: windows open at held punctuations
    kept.process_elements(np.array([4.0, 1.0]), np.array([450, 460]))
    assert [(r.start, r.end, r.value, r.update) for r in kept.process_watermark(1000) if r.query_id == "p"] == [
        (260, 450, 12.0, False)]                     # no first window: it opened at an evicted record


def test_first_count_query_counts_from_the_next_record():
    op = _fed([TumblingWindow(100)])
    op.add_window(TumblingWindow(2, measure="count"), "pairs")
    assert op.coverage_start("pairs") == 0
    op.process_elements(np.array([1.0, 2.0, 3.0]), np.array([500, 510, 505]))
    rows = [(r.start, r.end, r.value) for r in op.process_watermark(2000) if r.query_id == "pairs"]
    assert rows == [(0, 2, 4.0)]                     # 500 and 505 (event-time order); 510 waits


def test_removing_the_last_time_query_forgets_its_slices():
    op = _fed([TumblingWindow(100), TumblingWindow(3, measure="count")])
    op.remove_window("0")
    op.process_elements(np.array([1.0]), np.array([450]))
    op.add_window(TumblingWindow(100), "again")      # nothing held: from after the newest record
    assert op.coverage_start("again") == 451


def test_ids_and_commands():
    op = SlicingWindowOperator({"a": TumblingWindow(10)}, [Sum()])
    assert op.add_window(TumblingWindow(20)) == "0" and op.add_window(FixedBandWindow(0, 5)) == "1"
    with pytest.raises(ValueError, match="query_id='a': a query with this id exists"):
        op.add_window(TumblingWindow(5), "a")
    with pytest.raises(KeyError, match="remove_window\\('zz'\\): no such query"):
        op.remove_window("zz")
    assert not op.apply(RemoveWindow("zz")) and not op.apply(AddWindow("a", TumblingWindow(5)))
    assert op.ignored_commands == 2 and op.query_ids == ["a", "0", "1"]
    assert SlicingWindowOperator.from_bytes(op.to_bytes()).ignored_commands == 2
    assert SlicingWindowOperator([TumblingWindow(1), SlidingWindow(4, 2)]).query_ids == ["0", "1"]


# --------------------------------------------------------------------------- keyed
_KEYED_WINDOW = st.one_of(
    st.builds(lambda size, off: TumblingWindow(size, off % size), st.integers(1, 40), st.integers(0, 20)),
    st.builds(lambda size, slide, off: SlidingWindow(size, slide, off % slide),
              st.integers(1, 60), st.integers(1, 25), st.integers(0, 20)),
)
_KEYED_AGGS = st.lists(st.sampled_from(["sum", "count", "min", "max", "mean", "m4"]), min_size=1, max_size=3,
                       unique=True)
_RECORD = st.tuples(st.sampled_from(["a", "b", 7]), st.integers(-50, 50), st.integers(0, 300))


@st.composite
def keyed_scripts(draw):
    steps = []
    for i in range(draw(st.integers(1, 8))):
        steps.append(("batch", draw(st.lists(_RECORD, max_size=20)), draw(st.one_of(st.none(), st.integers(0, 320)))))
        if draw(st.integers(0, 3)) == 0:
            steps.append(("add", f"r{i}", draw(_KEYED_WINDOW)))
        if draw(st.integers(0, 5)) == 0:
            steps.append(("remove", draw(st.integers(0, 5))))
        if draw(st.booleans()):
            steps.append(("bytes",))
    return steps


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(_KEYED_WINDOW, min_size=1, max_size=3), _KEYED_AGGS, st.integers(0, 60), keyed_scripts())
def test_keyed_added_and_removed_queries_match_the_reference_per_key(windows, names, lateness, steps):
    """All keys at once; one reference per key (created when the key first shows up, at the
    group's watermark), each with the key's coverage start."""
    aggs = make_aggs(names)
    template = SlicingWindowOperator(windows, aggs, allowed_lateness_ms=lateness)
    op = KeyedSlicingOperator(template)          # compact, whatever the template's emission
    refs: dict = {}
    prev = None
    for step in steps:
        if step[0] == "add":
            assert op.apply(AddWindow(step[1], step[2]))
            for k, ref in refs.items():
                ref.add_query(step[1], step[2], op.coverage_start(step[1], key=k))
        elif step[0] == "remove":
            if op.query_ids:
                qid = op.query_ids[step[1] % len(op.query_ids)]
                op.remove_window(qid)
                for ref in refs.values():
                    ref.remove_query(qid)
        elif step[0] == "bytes":
            op = KeyedSlicingOperator.from_bytes(op.to_bytes(), template)
        else:
            records, wm = step[1], step[2]
            if wm is not None and prev is not None:
                wm = max(wm, prev)
            for k in dict.fromkeys(r[0] for r in records):
                if k not in refs:
                    refs[k] = _new_reference(op, k, aggs, lateness, prev)
            uniq = list(dict.fromkeys(r[0] for r in records))
            codes = op.codes_of(uniq)
            per_row = codes[[uniq.index(r[0]) for r in records]] if records else np.zeros(0, np.int64)
            dropped = op.process_elements(per_row, np.array([r[1] for r in records], float),
                                          np.array([r[2] for r in records], np.int64))
            for k in uniq:
                before = refs[k].dropped
                refs[k].records([r[1] for r in records if r[0] == k], [r[2] for r in records if r[0] == k])
                assert dropped[codes[uniq.index(k)]] == refs[k].dropped - before
            if wm is None:
                continue
            keys, res = op.process_watermark(wm)
            got: dict = {}
            for k, r in zip(keys, res.rows()):
                got.setdefault(k, []).append(r)
            for k, ref in refs.items():
                want = ref.watermark(wm)
                assert same_rows(rows_of(got.get(k, [])), want), (k, rows_of(got.get(k, [])), want)
            prev = wm


def _new_reference(op, key, aggs, lateness, prev):
    ref = Reference({}, aggs, lateness, "compact", drop_before_watermark=False)   # the keyed table, as the stage
    for i, qid in enumerate(op.query_ids):
        start = op.coverage_start(qid, key=key)
        if start is None and not op.fresh[i]:
            ref.queries[qid] = Reference({qid: op.specs[i]}, aggs, lateness, "compact").queries[qid]
        else:
            ref.add_query(qid, op.specs[i], start)
            ref.queries[qid].fresh = bool(op.fresh[i])
    ref.wm = prev
    return ref


def test_keyed_coverage_by_hand():
    template = SlicingWindowOperator([TumblingWindow(100)], [Sum(), Count(), Mean(), Min(), Max()],
                                     allowed_lateness_ms=100)
    op = KeyedSlicingOperator(template)
    codes = op.codes_of(["a", "b"])
    op.process_elements(codes[[0, 1, 0, 1]], np.array([1.0, 2.0, 4.0, 8.0]), np.array([120, 180, 260, 390]))
    op.process_watermark(300)
    assert op.add_window(TumblingWindow(200)) == "1" and op.coverage_start("1") == 200
    op.add_window(TumblingWindow(50), "half")        # 250 (a's 260) and 350 (b's 390) fall inside held slices
    assert (op.coverage_start("half"), op.coverage_start("half", key="a"), op.coverage_start("half", key="b")) == (
        200, 300, 400)
    keys, res = op.process_watermark(1000)
    rows = [(k, q, s, e, v) for k, q, s, e, v in zip(keys, res.query_id, res.start, res.end, res.values[0])]
    assert ("a", "1", 200, 400, 4.0) in rows and ("b", "1", 200, 400, 8.0) in rows
    assert all(q != "half" for _, q, _, _, _ in rows)
    with pytest.raises(ValueError, match="only time TumblingWindow / SlidingWindow"):
        op.add_window(SessionWindow(10))


def test_a_threshold_frame_added_after_records_covers_a_first_held_record_outside_any_frame():
    """A frame can have begun before the first held record only if that record passes the
    threshold; otherwise the new frame query covers every held record."""
    for first_value, want in ((0.0, 200), (5.0, 201)):
        op = SlicingWindowOperator(allowed_lateness_ms=0, keep_records=True)
        op.add_window(TumblingWindow(5))
        op.add_aggregation(Sum())
        op.process_elements(np.array([first_value]), np.array([199]))
        op.process_watermark(200)
        op.process_elements(np.array([first_value]), np.array([200]))
        op.process_watermark(200)
        assert op.apply(AddWindow("r0", ThresholdFrame(threshold=2)))
        assert op.coverage_start("r0") == want, first_value
