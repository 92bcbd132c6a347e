"""Every trigger and composite as a transcript: inputs, time advances, hand-derived panes.

Rows are ``(start, end, value, timing, index, flags)`` (``Pane.brief()``), flags F first, L last,
R retraction. Unless said otherwise: TumblingWindow(10), sums, no allowed lateness.
"""

from __future__ import annotations

import pickle
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.watermarks import (
    GLOBAL_WINDOW, AfterAll, AfterAny, AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, DefaultTrigger,
    OrFinally, Repeatedly, TriggerDriver,
)
from dataflow_kafka.windowing import END_OF_TIME_MS, GlobalWindow, SessionWindow, Sum, TumblingWindow
from dataflow_kafka.watermarks.transcript import run_transcript
from dataflow_kafka.watermarks.triggers import finishes

from tests.suite import examples

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

G0, G1 = GLOBAL_WINDOW


def driver(trigger, mode="accumulating", window_fn=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TriggerDriver(window_fn or TumblingWindow(10), trigger, mode, combiner=Sum(), **kw)


def _per_step(d, steps):
    return [[p.brief() for _, p in run_transcript(d, [s])] for s in steps]


def add(*pairs):
    return ("add", list(pairs))


def test_after_watermark_fires_once_at_the_end_of_the_window_then_drops_late_data():
    d = driver(AfterWatermark())
    assert _per_step(d, [add((1, 2), (2, 5)), ("watermark", 9), ("watermark", 10), add((4, 3))]) == [
        [], [], [(0, 10, 3, "ON_TIME", 0, "FL")], []
    ]
    assert d.dropped_late == 1 and d.windows() == []


def test_after_watermark_without_late_firings_closes_the_window_within_the_lateness():
    d = driver(AfterWatermark(), allowed_lateness_ms=5)
    steps = [add((1, 2)), ("watermark", 10), add((4, 3)), ("watermark", 14), ("watermark", 15)]
    assert _per_step(d, steps) == [[], [(0, 10, 1, "ON_TIME", 0, "FL")], [], [], []]
    assert (d.dropped_late, d.dropped_closed) == (0, 1)
    assert d.windows() == []  # garbage collected at end + lateness


def test_after_watermark_early_count():
    d = driver(AfterWatermark(early=AfterCount(2)))
    steps = [add((1, 1)), add((2, 2)), add((3, 3)), ("watermark", 10)]
    assert _per_step(d, steps) == [
        [], [(0, 10, 3, "EARLY", 0, "F")], [], [(0, 10, 6, "ON_TIME", 1, "L")]
    ]


def test_after_watermark_early_processing_time_and_late_count_discarding():
    d = driver(AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)), "discarding",
               allowed_lateness_ms=20)
    steps = [("processing", 0), add((1, 1)), ("processing", 4), ("processing", 5), add((2, 2)),
             ("watermark", 10), ("processing", 20), add((4, 3)), add((8, 4)), ("watermark", 30)]
    assert _per_step(d, steps) == [
        [], [], [], [(0, 10, 1, "EARLY", 0, "F")], [],
        [(0, 10, 2, "ON_TIME", 1, "")],
        [],  # the early deadline (10) was reset by the on-time firing
        [(0, 10, 4, "LATE", 2, "")], [(0, 10, 8, "LATE", 3, "")],
        [],  # garbage collected with nothing new
    ]
    assert d.windows() == []


def test_after_count_fires_once_and_closes_the_window():
    d = driver(AfterCount(3), "discarding")
    steps = [add((1, 1), (2, 2)), add((3, 3)), add((4, 5)), ("watermark", 10)]
    assert _per_step(d, steps) == [[], [(0, 10, 6, "EARLY", 0, "FL")], [], []]
    assert d.dropped_closed == 1


def test_after_processing_time_delay_and_alignment():
    d = driver(AfterProcessingTime(10), window_fn=GlobalWindow())
    steps = [("processing", 100), add((1, 1)), ("processing", 109), ("processing", 110)]
    assert _per_step(d, steps) == [[], [], [], [(G0, G1, 1, "EARLY", 0, "FL")]]

    d = driver(Repeatedly(AfterProcessingTime(align_ms=60)), window_fn=GlobalWindow())
    steps = [("processing", 61), add((1, 1)), ("processing", 119), ("processing", 120),
             add((2, 2)),  # arrives exactly on a boundary: belongs to the next period
             ("processing", 179), ("processing", 180)]
    assert _per_step(d, steps) == [
        [], [], [], [(G0, G1, 1, "EARLY", 0, "F")], [], [], [(G0, G1, 3, "EARLY", 1, "")]
    ]


def test_repeatedly_count_discarding_then_final_pane_at_garbage_collection():
    d = driver(Repeatedly(AfterCount(2)), "discarding", window_fn=GlobalWindow())
    steps = [add((v, v)) for v in (1, 2, 3, 4, 5)] + [("watermark", END_OF_TIME_MS)]
    assert _per_step(d, steps) == [
        [], [(G0, G1, 3, "EARLY", 0, "F")], [], [(G0, G1, 7, "EARLY", 1, "")], [],
        [(G0, G1, 5, "ON_TIME", 2, "L")],
    ]


def test_after_each_runs_children_in_sequence():
    d = driver(AfterEach(AfterCount(2), AfterCount(3)), window_fn=TumblingWindow(100))
    steps = [add((v, v)) for v in (1, 2, 3, 4, 5, 6)]
    assert _per_step(d, steps) == [
        [], [(0, 100, 3, "EARLY", 0, "F")], [], [], [(0, 100, 15, "EARLY", 1, "L")], []
    ]
    assert d.dropped_closed == 1


def test_after_any_fires_on_the_first_ready_child():
    d = driver(AfterAny(AfterCount(3), AfterProcessingTime(10)), "discarding", window_fn=TumblingWindow(100))
    assert _per_step(d, [("processing", 0), add((1, 1)), ("processing", 10)]) == [
        [], [], [(0, 100, 1, "EARLY", 0, "FL")]
    ]
    d = driver(Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(10))), "discarding",
               window_fn=TumblingWindow(100))
    steps = [("processing", 0), add((1, 1)), ("processing", 10), ("processing", 11),
             add((2, 2)), add((3, 3)), add((4, 4)), ("processing", 21)]
    assert _per_step(d, steps) == [
        [], [], [(0, 100, 1, "EARLY", 0, "F")], [], [], [], [(0, 100, 9, "EARLY", 1, "")],
        [],  # the processing-time child restarted with the count firing
    ]


def test_after_all_waits_for_every_child():
    d = driver(Repeatedly(AfterAll(AfterCount(2), AfterProcessingTime(10))), "discarding",
               window_fn=TumblingWindow(100))
    steps = [("processing", 0), add((1, 1)), ("processing", 10), add((2, 2)),
             ("processing", 12), add((3, 3)), add((4, 4)), ("processing", 21), ("processing", 22)]
    assert _per_step(d, steps) == [
        [], [], [], [(0, 100, 3, "EARLY", 0, "F")], [], [], [], [], [(0, 100, 7, "EARLY", 1, "")]
    ]


def test_or_finally_fires_a_last_time_when_until_fires():
    d = driver(OrFinally(Repeatedly(AfterCount(1)), AfterCount(3)), window_fn=TumblingWindow(100))
    steps = [add((v, v)) for v in (1, 2, 3, 4)]
    assert _per_step(d, steps) == [
        [(0, 100, 1, "EARLY", 0, "F")], [(0, 100, 3, "EARLY", 1, "")],
        [(0, 100, 6, "EARLY", 2, "L")], [],
    ]
    assert d.dropped_closed == 1


def test_default_trigger_fires_at_the_watermark_and_for_each_late_datum():
    d = driver(DefaultTrigger(), allowed_lateness_ms=10)
    steps = [add((1, 1)), ("watermark", 10), add((2, 2)), add((3, 3)), ("watermark", 15),
             ("watermark", 20), add((5, 5))]
    assert _per_step(d, steps) == [
        [], [(0, 10, 1, "ON_TIME", 0, "F")], [(0, 10, 3, "LATE", 1, "")],
        [(0, 10, 6, "LATE", 2, "")], [], [], [],
    ]
    assert d.windows() == [] and d.dropped_late == 1


def test_repeat_at_watermark_behaves_as_the_default_trigger():
    steps = [add((1, 1)), ("watermark", 10), add((2, 2)), ("watermark", 20), add((3, 3))]
    a = run_transcript(driver(DefaultTrigger(), allowed_lateness_ms=15), steps)
    b = run_transcript(driver(Repeatedly(AfterWatermark()), allowed_lateness_ms=15), steps)
    assert a == b and len(a) == 3


def test_on_time_pane_fires_always_by_default_and_can_be_skipped():
    steps = [add((1, 1)), ("watermark", 10)]
    t = AfterWatermark(early=AfterCount(1))
    assert _per_step(driver(t, "discarding"), steps) == [
        [(0, 10, 1, "EARLY", 0, "F")], [(0, 10, 0, "ON_TIME", 1, "L")]
    ]
    assert _per_step(driver(t, "discarding", on_time_behavior="fire_if_non_empty"), steps) == [
        [(0, 10, 1, "EARLY", 0, "F")], []
    ]


def test_counts_merge_when_sessions_merge():
    d = driver(Repeatedly(AfterCount(3)), window_fn=SessionWindow(10))
    steps = [add((1, 0)), add((2, 20)), add((3, 5)), add((4, 12))]
    # [0,10) and [5,15) merge (count 2); [12,22) bridges [0,15) and [20,30): 2 + 1 + 1 = 4 >= 3
    assert _per_step(d, steps) == [[], [], [], [(0, 30, 10, "EARLY", 0, "F")]]


def test_a_processing_time_deadline_merges_to_the_earliest():
    d = driver(Repeatedly(AfterProcessingTime(10)), window_fn=SessionWindow(10))
    steps = [("processing", 0), add((1, 0)), ("processing", 5), add((2, 15)),  # deadlines 10, 15
             ("processing", 6), add((4, 7)),  # bridges [0,10) and [15,25): deadline min(10, 15)
             ("processing", 10)]
    assert _per_step(d, steps) == [[], [], [], [], [], [], [(0, 25, 7, "EARLY", 0, "F")]]


def test_a_session_extended_past_the_watermark_fires_on_time_again_at_its_new_end():
    d = driver(AfterWatermark(early=AfterCount(5), late=AfterCount(5)), window_fn=SessionWindow(10),
               allowed_lateness_ms=100)
    steps = [add((1, 0)), ("watermark", 10), add((2, 8)), ("watermark", 17), ("watermark", 18)]
    assert _per_step(d, steps) == [
        [], [(0, 10, 1, "ON_TIME", 0, "F")],
        [],  # [8,18) merges into [0,18): its end is ahead of the watermark again
        [], [(0, 10, 1, "ON_TIME", 0, "FR"), (0, 18, 3, "ON_TIME", 1, "")],   # [0, 10) retracted first
    ]


def test_late_data_merging_into_a_session_behind_the_watermark_stay_in_the_late_phase():
    d = driver(AfterWatermark(late=AfterCount(2)), window_fn=SessionWindow(10), allowed_lateness_ms=100)
    steps = [add((1, 0)), ("watermark", 20), add((2, 5)), add((4, 3))]
    assert _per_step(d, steps) == [
        [], [(0, 10, 1, "ON_TIME", 0, "F")],
        [],  # [0,15) is still behind the watermark: the late count (1 of 2) decides
        [(0, 10, 1, "ON_TIME", 0, "FR"), (0, 15, 7, "LATE", 1, "")],      # [0, 10) retracted first
    ]


def test_triggers_are_immutable_values_with_readable_repr():
    t = AfterWatermark(early=Repeatedly(AfterProcessingTime(5_000)), late=AfterCount(1))
    same = AfterWatermark(early=Repeatedly(AfterProcessingTime(5_000)), late=AfterCount(1))
    assert t == same and hash(t) == hash(same) and len({t, same}) == 1
    assert t != AfterWatermark(early=Repeatedly(AfterProcessingTime(5_001)), late=AfterCount(1))
    assert repr(t) == "AfterWatermark(early=Repeatedly(AfterProcessingTime(delay_ms=5000)), late=AfterCount(1))"
    assert repr(AfterAny(AfterCount(2), DefaultTrigger())) == "AfterAny(AfterCount(2), DefaultTrigger())"
    assert pickle.loads(pickle.dumps(t)) == t
    with pytest.raises(AttributeError):
        t.early = None


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: AfterCount(0), "AfterCount count must be an integer >= 1, got 0"),
        (lambda: AfterProcessingTime(-1), "delay_ms must be an integer >= 0, got -1"),
        (lambda: AfterProcessingTime(align_ms=0), "align_ms must be a positive integer or None, got 0"),
        (lambda: Repeatedly(3), "trigger must be a Trigger, got 3"),
        (lambda: AfterEach(), "AfterEach needs at least one trigger"),
        (lambda: AfterAny(AfterCount(1), "x"), "AfterAny argument 1 must be a Trigger, got 'x'"),
    ],
)
def test_bad_triggers_are_rejected_naming_the_value(make, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


@pytest.mark.parametrize(
    "trigger, kind",
    [
        (AfterWatermark(), "at the watermark"),
        (AfterWatermark(late=AfterCount(1)), "never"),
        (DefaultTrigger(), "never"),
        (AfterCount(1), "before the watermark"),
        (Repeatedly(AfterCount(1)), "never"),
        (OrFinally(Repeatedly(AfterProcessingTime(align_ms=1)), AfterWatermark()), "at the watermark"),
        (AfterEach(OrFinally(Repeatedly(AfterProcessingTime(align_ms=1)), AfterWatermark()), Repeatedly(AfterWatermark())),
         "never"),
        (AfterAny(AfterWatermark(), AfterCount(3)), "before the watermark"),
        (AfterAll(AfterWatermark(), AfterCount(3)), "at the watermark"),
    ],
)
def test_finishes(trigger, kind):
    assert finishes(trigger) == kind


_TREES = [
    DefaultTrigger(), AfterCount(2), AfterProcessingTime(5), AfterWatermark(),
    AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
    AfterWatermark(early=AfterProcessingTime(7), late=AfterCount(2)),
    Repeatedly(AfterAny(AfterCount(3), AfterProcessingTime(5))),
    AfterEach(OrFinally(Repeatedly(AfterProcessingTime(4)), AfterWatermark()), Repeatedly(AfterWatermark())),
    AfterAll(AfterCount(2), AfterWatermark(late=AfterCount(1))),
]


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from(_TREES),
       st.lists(st.tuples(st.sampled_from(["element", "fire", "reset"]), st.integers(0, 30), st.integers(0, 30)),
                max_size=12),
       st.integers(0, 30), st.integers(0, 30))
def test_merging_with_a_fresh_window_equals_the_general_merge(trigger, steps, watermark, end):
    """``Layout.merge_fresh`` (a session taking an element inside it or extending it) gives, slot by
    slot and type by type, what the general merge with the new element's fresh window gives, for
    trigger states reached by elements, firings and resets at any time."""
    from types import SimpleNamespace

    from dataflow_kafka.watermarks._trigger_runtime import Layout, build

    layout = Layout()
    root = build(trigger, layout)
    s, ctx = layout.fresh(), SimpleNamespace(watermark=0, now=0, end=0)
    for op, wm, e in steps:
        ctx.watermark, ctx.end, ctx.now = wm, e, ctx.now + 1
        if op == "element":
            root.on_element(s, ctx)
        elif op == "fire":
            if root.should_fire(s, ctx):
                root.fire(s, ctx)
        else:
            root.reset(s)
    ctx.watermark, ctx.end = watermark, end
    fast, general = layout.merge_fresh(s, ctx), layout.merge([s, layout.defaults], ctx)
    assert [(type(v), v) for v in fast] == [(type(v), v) for v in general]
