"""Property tests of the driver against the model's invariants and a brute-force batch reference.

Elements are ``((id, value), event_time)`` with unique ids, aggregated with ``ToList`` so
that every pane says exactly which elements it covers. A pane is *attributed* to a final pane
``F`` when its window lies inside ``F``'s window and its ids are among ``F``'s ids; a final pane
is a pane never retracted afterwards (in ACCUMULATING_AND_RETRACTING mode).
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.watermarks import (
    AfterAny, AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, DefaultTrigger, OrFinally, Repeatedly,
    TriggerDriver,
)
from dataflow_kafka.windowing import END_OF_TIME_MS, SessionWindow, SlidingWindow, TumblingWindow
from dataflow_kafka.watermarks import _codec
from dataflow_kafka.watermarks.transcript import run_transcript
from dataflow_kafka.watermarks.windows import SessionWindowFn, compile_window_fn, windows_of

from tests.suite import examples

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

WINDOW_FNS = [TumblingWindow(20), TumblingWindow(15, 5), SlidingWindow(30, 10), SessionWindow(12)]
#: Triggers that never finish, so no element is dropped because its window closed.
OPEN_TRIGGERS = [
    DefaultTrigger(),
    Repeatedly(AfterCount(2)),
    AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
    AfterWatermark(early=AfterProcessingTime(7), late=AfterCount(2)),
    Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(5))),
    AfterEach(OrFinally(Repeatedly(AfterProcessingTime(4)), AfterWatermark()), Repeatedly(AfterWatermark())),
]
NO_DROPS = 10**6

elements = st.lists(
    st.tuples(st.integers(1, 9), st.integers(0, 199), st.sampled_from(["a", "b"])), min_size=1, max_size=25
)
advances = st.lists(st.tuples(st.one_of(st.just(0), st.integers(0, 10)), st.integers(0, 15)),
                    min_size=25, max_size=25)


def steps_for(elems, adv):
    """Arrivals in order, each after a processing-time and (maybe) a watermark advance; arrivals
    of one key with no time advance between them are one bundle (one ``add``)."""
    steps, now, wm = [], 0, 0
    for i, ((value, t, key), (dp, dw)) in enumerate(zip(elems, adv)):
        now += dp
        last = steps[-1] if steps else None
        if dp == 0 and last is not None and last[0] == "add" and last[2] == key:
            last[1].append(((i, value), t))
        else:
            steps += [("processing", now), ("add", [((i, value), t)], key)]
        if dw:
            wm += dw
            steps.append(("watermark", wm))
    return steps + [("watermark", END_OF_TIME_MS)]


def make(window_fn, trigger, mode, lateness):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TriggerDriver(window_fn, trigger, mode, allowed_lateness_ms=lateness)


def panes(window_fn, trigger, mode, lateness, steps):
    d = make(window_fn, trigger, mode, lateness)
    return [p for _, p in run_transcript(d, steps)], d


def ids(pane):
    return [i for i, _ in pane.value]


def total(pane):
    return sum(v for _, v in pane.value)


def finals(retracting_panes):
    retracted = {(p.key, p.window, p.index) for p in retracting_panes if p.is_retraction}
    return [p for p in retracting_panes if not p.is_retraction and (p.key, p.window, p.index) not in retracted]


def attributed(pane, final):
    return (pane.key == final.key and final.start_ms <= pane.start_ms and pane.end_ms <= final.end_ms
            and set(ids(pane)) <= set(ids(final)))


def reference(window_fn, elems):
    """Batch answer: (key, window) -> sorted ids, by AssignWindows + MergeWindows to a fixpoint."""
    out = defaultdict(list)
    for key in {k for _, _, k in elems}:
        mine = [(i, t) for i, (_, t, k) in enumerate(elems) if k == key]
        merged = windows_of(window_fn, [t for _, t in mine])
        for i, t in mine:
            for w in compile_window_fn(window_fn).assign_windows(t):
                final = next(m for m in merged if m.start_ms <= w.start_ms and w.end_ms <= m.end_ms)
                out[(key, final)].append(i)
    return {k: sorted(v) for k, v in out.items()}


def signed(panes_):
    """Multiset of element ids of ``panes_``, retractions subtracted."""
    out = Counter()
    for p in panes_:
        (out.subtract if p.is_retraction else out.update)(ids(p))
    assert all(n >= 0 for n in out.values())
    return +out


def fold_latest(panes_):
    """Accumulating readings: the latest pane per (key, window), a retraction deleting it."""
    out = {}
    for p in panes_:
        if p.is_retraction:
            assert out.pop((p.key, p.window)) == total(p)
        else:
            out[(p.key, p.window)] = total(p)
    return out


def fold_sum(panes_):
    """The discarding reading: the sum of a window's panes, a retraction deleting the window."""
    out = {}
    for p in panes_:
        if p.is_retraction:
            assert out.pop((p.key, p.window)) == total(p)    # it carries the window's total
        else:
            out[(p.key, p.window)] = out.get((p.key, p.window), 0) + total(p)
    return out


@settings(max_examples=examples(150), deadline=None)
@given(elements, advances, st.sampled_from(WINDOW_FNS), st.sampled_from(OPEN_TRIGGERS),
       st.sampled_from([0, 25, NO_DROPS]))
def test_modes_agree_discarding_and_retractions_sum_to_the_final_pane(elems, adv, window_fn, trigger, lateness):
    steps = steps_for(elems, adv)
    dis, d_dis = panes(window_fn, trigger, "discarding", lateness, steps)
    acc, d_acc = panes(window_fn, trigger, "accumulating", lateness, steps)
    ret, d_ret = panes(window_fn, trigger, "accumulating_and_retracting", lateness, steps)
    assert d_dis.dropped_late == d_acc.dropped_late == d_ret.dropped_late
    # the same panes; retracting also retracts every refinement, accumulating merged-away windows only
    assert [p for p in ret if not p.is_retraction] == [p for p in acc if not p.is_retraction]
    assert all(p in ret for p in acc if p.is_retraction)
    fin = finals(ret)
    for f in fin:
        mine = [p for p in dis if p.value and attributed(p, f)]
        assert signed(mine) == Counter(ids(f))
        assert sum(-total(p) if p.is_retraction else total(p) for p in mine) == total(f)
        signed_total = sum(-total(p) if p.is_retraction else total(p) for p in ret if attributed(p, f))
        assert signed_total == total(f)
    for p in dis:  # every delta belongs to exactly one final pane
        assert not p.value or sum(attributed(p, f) for f in fin) == 1
    # folding per window gives the final panes in every mode (no window left behind)
    want = {(f.key, f.window): total(f) for f in fin}
    assert fold_latest(ret) == fold_latest(acc) == fold_sum(dis) == want
    if lateness == NO_DROPS:
        assert d_acc.dropped_late == 0
        assert {(f.key, f.window): sorted(ids(f)) for f in fin} == reference(window_fn, elems)


@settings(max_examples=examples(100), deadline=None)
@given(elements, advances, st.sampled_from(WINDOW_FNS), st.sampled_from(OPEN_TRIGGERS), st.randoms())
def test_final_panes_do_not_depend_on_arrival_order(elems, adv, window_fn, trigger, rnd):
    shuffled = list(enumerate(elems))
    rnd.shuffle(shuffled)
    results = []
    for order in (list(enumerate(elems)), shuffled):
        steps = steps_for([e for _, e in order], adv)
        # keep the original ids so both orders describe the same elements
        for s in steps:
            if s[0] == "add":
                s[1][:] = [((order[pos][0], v), t) for (pos, v), t in s[1]]
        out, _ = panes(window_fn, trigger, "accumulating_and_retracting", NO_DROPS, steps)
        results.append({(f.key, f.window): (sorted(ids(f)), total(f)) for f in finals(out)})
    assert results[0] == results[1]
    assert {k: v[0] for k, v in results[0].items()} == reference(window_fn, elems)


@settings(max_examples=examples(100), deadline=None)
@given(elements, advances, st.sampled_from(WINDOW_FNS), st.sampled_from(OPEN_TRIGGERS + [AfterCount(2)]),
       st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]),
       st.sampled_from([0, 25]), st.integers(0, 10**6))
def test_state_bytes_round_trip_mid_stream_changes_nothing(elems, adv, window_fn, trigger, mode, lateness, cut):
    steps = steps_for(elems, adv)
    cut %= len(steps)
    straight = make(window_fn, trigger, mode, lateness)
    expected = run_transcript(straight, steps)
    first = make(window_fn, trigger, mode, lateness)
    got = run_transcript(first, steps[:cut])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        second = TriggerDriver.from_bytes(first.to_bytes(), window_fn, trigger, mode, allowed_lateness_ms=lateness)
    got += run_transcript(second, steps[cut:])
    assert got == expected
    assert (second.dropped_late, second.dropped_closed) == (straight.dropped_late, straight.dropped_closed)
    assert second.to_bytes() == straight.to_bytes()


def test_reference_self_check():
    """The reference itself on hand examples (one key; event times 0, 5, 30)."""
    elems = [(1, 0, "a"), (1, 5, "a"), (1, 30, "a")]
    assert sorted(reference(SessionWindow(12), elems).values()) == [[0, 1], [2]]
    sliding = reference(SlidingWindow(30, 10), elems)
    assert {(w.start_ms, w.end_ms): v for (_, w), v in sliding.items()} == {
        (-20, 10): [0, 1], (-10, 20): [0, 1], (0, 30): [0, 1], (10, 40): [2], (20, 50): [2], (30, 60): [2],
    }


class _SessionsMergedInFull(SessionWindowFn):
    """Sessions through the driver's general merge path: every live window of the key handed to
    ``merge_windows`` (no shortcut for an element inside one session or extending one)."""

    merges_overlapping_only = False


#: elements close together, so that many land inside a session
dense_elements = st.lists(st.tuples(st.integers(1, 9), st.integers(0, 40), st.sampled_from(["a", "b"])),
                          min_size=1, max_size=25)


@settings(max_examples=examples(150), deadline=None)
@given(dense_elements, advances, st.sampled_from(OPEN_TRIGGERS + [AfterCount(2)]),
       st.sampled_from(["discarding", "accumulating", "accumulating_and_retracting"]),
       st.sampled_from([0, 25, NO_DROPS]), st.integers(3, 15))
def test_sessions_shortcuts_equal_the_general_merge(elems, adv, trigger, mode, lateness, gap):
    """An element inside one session or extending one (the shortcuts) and a bundle's chain of
    merges (renames followed once) give the panes, drops and state bytes of the general path."""
    steps = steps_for(elems, adv)
    fast, general = make(SessionWindowFn(gap), trigger, mode, lateness), make(_SessionsMergedInFull(gap), trigger,
                                                                             mode, lateness)
    for step in steps:                  # after every step (the last one collects every window)
        assert run_transcript(fast, [step]) == run_transcript(general, [step])
        assert (fast.dropped_late, fast.dropped_closed) == (general.dropped_late, general.dropped_closed)
        # the state but the configuration's fingerprint (the window functions' classes differ)
        _, _, *state = _codec.decode(fast.to_bytes())
        _, _, *general_state = _codec.decode(general.to_bytes())
        assert state == general_state
