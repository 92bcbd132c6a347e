"""Transcripts and API behaviour of the slicing engine (hand-computed expectations)."""

from __future__ import annotations

import numpy as np
import pytest

from dataflow_kafka.slicer import ContextFreeWindow, FixedBandWindow, PunctuationWindow, SlideByTupleWindow, SlicingWindowOperator
from dataflow_kafka.windowing import M4, Count, Mean, Measure, SessionWindow, SlidingWindow, Sum, TumblingWindow
from dataflow_kafka.windowing import AggregateFunction


def make(*windows, aggs=(Sum(),), lateness=1000, **kw):
    op = SlicingWindowOperator(allowed_lateness_ms=lateness, **kw)
    for w in windows:
        op.add_window(w)
    for a in aggs:
        op.add_aggregation(a)
    return op


def feed(op, pairs):
    for v, t in pairs:
        op.process_element(v, t)


def spans(results):
    return [(r.query_id, r.start, r.end, r.value, r.update) for r in results]


class TestSessionsOutOfOrder:
    """Figure 9 / Algorithm 3 cases, gap 10, plus a tumbling window of 30 (Figure 12)."""

    def setup_method(self):
        self.op = make(SessionWindow(10), TumblingWindow(30))
        feed(self.op, [(1, 0), (1, 5), (1, 40), (1, 45), (1, 80)])  # sessions [0,15) [40,55) [80,..)

    def sessions(self, wm=1000):
        return [(r.start, r.end, r.value) for r in self.op.process_watermark(wm) if r.query_id == "0"]

    def test_in_order_sessions(self):
        assert self.sessions() == [(0, 15, 2.0), (40, 55, 2.0), (80, 90, 1.0)]

    def test_insert_into_session_and_extend_end(self):  # cases 1.1 and 1.2
        feed(self.op, [(10, 3), (10, 52)])
        assert self.sessions() == [(0, 15, 12.0), (40, 62, 12.0), (80, 90, 1.0)]

    def test_extend_session_at_start(self):  # case 1.3, inside the fixed slice [30, 40)
        feed(self.op, [(10, 32)])
        assert self.sessions() == [(0, 15, 2.0), (32, 55, 12.0), (80, 90, 1.0)]

    def test_fuse_sessions(self):  # case 2
        feed(self.op, [(10, 13), (10, 22), (10, 31)])
        assert self.sessions() == [(0, 55, 34.0), (80, 90, 1.0)]

    def test_new_session_in_gap(self):  # case 3: split inside a gap, no records needed
        feed(self.op, [(10, 62)])
        assert self.sessions() == [(0, 15, 2.0), (40, 55, 2.0), (62, 72, 10.0), (80, 90, 1.0)]
        assert not self.op.stores_records and self.op._time.tuples is None

    def test_tumbling_unaffected(self):
        feed(self.op, [(10, 62)])
        tumbling = [(r.start, r.end, r.value) for r in self.op.process_watermark(1000) if r.query_id == "1"]
        assert tumbling == [(0, 30, 2.0), (30, 60, 2.0), (60, 90, 11.0)]


def test_late_updates_and_drops_are_counted():
    op = make(TumblingWindow(100), lateness=50)
    op.process_elements(np.array([1.0, 2.0]), np.array([10, 120]))
    assert spans(op.process_watermark(100)) == [("0", 0, 100, 1.0, False)]
    op.process_elements(np.array([5.0, 7.0]), np.array([60, 40]))  # 60 within lateness; 40 is not
    assert op.dropped_late == 1
    assert spans(op.process_watermark(150)) == [("0", 0, 100, 6.0, True)]
    assert spans(op.process_watermark(250)) == [("0", 100, 200, 2.0, False)]


def test_decision_tree():
    def reasons(*ws, aggs=(Sum(),), order="out_of_order"):
        return make(*ws, aggs=aggs, stream_order=order).record_reasons()

    class Concat(AggregateFunction):
        commutative = False

        def lift(self, v):
            return str(v)

        def combine(self, a, b):
            return a + b

    assert reasons(TumblingWindow(10), SessionWindow(5)) == []
    assert reasons(TumblingWindow(10), aggs=(Concat(),), order="in_order") == []
    assert reasons(TumblingWindow(10), aggs=(Concat(),)) != []
    # in order too: a punctuation's window [p, next) may take records of time p that came before it
    assert "earlier records may share" in reasons(PunctuationWindow(punctuation=1), order="in_order")[0]
    assert reasons(PunctuationWindow(punctuation=1)) != []
    assert reasons(SlideByTupleWindow(10), order="in_order") != []


def test_queries_added_and_removed_while_running():
    op = make(TumblingWindow(100))
    op.process_elements(np.ones(3), np.array([10, 150, 250]))
    q2 = op.add_window(TumblingWindow(50))        # every cut falls between records: covers all
    assert q2 == "1" and op.coverage_start(q2) is None
    op.process_elements(np.ones(3), np.array([260, 310, 360]))
    out = spans(op.process_watermark(400))
    assert [r for r in out if r[0] == q2] == [(q2, 0, 50, 1.0, False), (q2, 50, 100, None, False),
                                              (q2, 100, 150, None, False), (q2, 150, 200, 1.0, False),
                                              (q2, 200, 250, None, False),     # Scotty's empty windows
                                              (q2, 250, 300, 2.0, False), (q2, 300, 350, 1.0, False),
                                              (q2, 350, 400, 1.0, False)]
    op.remove_window("0")
    op.process_elements(np.ones(1), np.array([420]))
    assert [r.query_id for r in op.process_watermark(600)] == [q2]


def test_in_order_promise_is_checked():
    op = make(TumblingWindow(10), stream_order="in_order")
    op.process_elements(np.ones(2), np.array([5, 7]))
    with pytest.raises(ValueError, match="out of order"):
        op.process_element(1.0, 6)


@pytest.mark.parametrize("build, match", [
    (lambda: TumblingWindow(0), "size_ms=0"),
    (lambda: SlidingWindow(10, -1), "slide_ms=-1"),
    (lambda: TumblingWindow(10, measure="days"), "measure='days'"),
    (lambda: SlideByTupleWindow(0), "size_ms=0"),
    (lambda: FixedBandWindow(0, 10, measure="rows"), "measure='rows'"),
    (lambda: SlicingWindowOperator(allowed_lateness_ms=-5), "allowed_lateness_ms=-5"),
    (lambda: SlicingWindowOperator(stream_order="sorted"), "stream_order='sorted'"),
])
def test_validation_messages_quote_the_value(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_count_windows_shift_on_out_of_order_record():
    op = make(TumblingWindow(2, measure="count"), aggs=(M4(),))
    op.process_elements(np.array([1.0, 2.0, 3.0, 4.0]), np.array([10, 20, 30, 40]))
    assert [(r.start, r.end, r.value) for r in op.process_watermark(35)] == [
        (0, 2, (1.0, 2.0, 1.0, 2.0))]
    op.process_element(9.0, 15)  # now 1, 9, 2, 3, 4: positions from 1 shift
    assert [(r.start, r.end, r.value, r.update) for r in op.process_watermark(36)] == [
        (0, 2, (1.0, 9.0, 1.0, 9.0), True), (2, 4, (2.0, 3.0, 2.0, 3.0), False)]


class EveryHundred(ContextFreeWindow):
    """User-defined context-free window: [100k, 100k + 30) only through next_edge etc."""

    measure = "time"

    def next_edge(self, ts):
        k, r = divmod(ts, 100)
        return k * 100 + 30 if r < 30 else (k + 1) * 100

    def windows_ending_between(self, lo, hi):
        ends = np.arange((lo - 30) // 100 * 100 + 30, hi + 1, 100)
        ends = ends[(ends > lo) & (ends <= hi)]
        return ends - 30, ends

    def earliest_open_start(self, horizon):
        return horizon - 30


def test_user_defined_context_free_window():
    op = make(EveryHundred(), aggs=(Count(), Mean()))
    ts = np.array([5, 29, 30, 99, 100, 129, 150, 210])
    op.process_elements(np.arange(8.0), ts)
    out = [(r.start, r.end, r.values) for r in op.process_watermark(1000)]
    assert out == [(0, 30, (2, 0.5)), (100, 130, (2, 4.5)), (200, 230, (1, 7.0))]


def test_state_size_is_flat_as_the_rate_grows():
    sizes = []
    for rate in (1_000, 20_000):
        n = rate * 30
        ts = np.arange(n) * 1000 // rate
        op = make(*(TumblingWindow(s) for s in (1000, 2000, 5000)), SessionWindow(500),
                  FixedBandWindow(0, 10_000))
        for i in range(0, n, 10_000):
            op.process_elements(np.ones(min(10_000, n - i)), ts[i:i + 10_000])
            op.process_watermark(int(ts[i:i + 10_000].max()))
        sizes.append(len(op.to_bytes(include_config=False)))
    assert sizes[1] <= sizes[0] * 1.1, sizes


def test_eager_and_lazy_agree_on_many_windows():
    rng = np.random.default_rng(3)
    ts = 300 + np.sort(rng.integers(0, 5000, 3000)) - np.where(rng.random(3000) < 0.3, rng.integers(0, 300, 3000), 0)
    ws = [SlidingWindow(700, 100), TumblingWindow(250), SessionWindow(40)]
    vals = rng.random(3000)
    outs = []
    for store in ("lazy", "eager"):
        op = make(*ws, aggs=(Sum(), M4()), store=store)
        op.process_elements(vals, ts)
        outs.append([(r.query_id, r.start, r.end, r.values[0], tuple(r.values[1]))
                     for r in op.process_watermark(10_000)])
    assert len(outs[0]) > 50
    assert all(a[:3] == b[:3] and np.isclose(a[3], b[3]) and np.allclose(a[4], b[4]) for a, b in zip(*outs))


# --------------------------------------------------------------------------- Scotty's constructor shapes
def test_a_fixed_band_window_in_scottys_shape_counts_as_ours():
    """Scotty's measure-first shape (``dataflow_kafka.compat.scotty``) builds the same window the
    slicer runs (the shapes themselves: tests/test_compat.py)."""
    from dataflow_kafka.compat.scotty import FixedBandWindow as ScottyBand
    from dataflow_kafka.compat.scotty import WindowMeasure

    assert ScottyBand(WindowMeasure.Time, 100, 50) == FixedBandWindow(100, 50) == FixedBandWindow(start_ms=100, size_ms=50)
    assert ScottyBand("Count", 3, 4) == FixedBandWindow(3, 4, measure="count") == FixedBandWindow(3, 4, measure=Measure.COUNT)
    with pytest.raises(ValueError, match="size_ms=0"):
        ScottyBand(WindowMeasure.Time, 0, 0)
    op = make(ScottyBand(WindowMeasure.Time, 10, 20), aggs=(Count(),), emission="compact")
    op.process_elements(np.array([1.0, 2.0, 3.0]), np.array([5, 10, 29]))
    assert [(r.start, r.end, r.value) for r in op.process_watermark(40)] == [(10, 30, 2)]
