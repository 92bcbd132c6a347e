"""PunctuationTracker: min over sources of each source's newest punctuation; idle policy."""

from hypothesis import given, strategies as st

from dataflow_kafka.keygroups.punctuation import PunctuationTracker

batches = st.lists(st.dictionaries(st.sampled_from(["p0", "p1", "p2"]), st.integers(0, 10_000), min_size=1),
                   min_size=1, max_size=20)


@given(batches)
def test_low_watermark_is_min_of_newest_per_source_and_monotone(bs):
    t = PunctuationTracker()
    newest: dict[str, int] = {}
    previous = None
    for i, batch in enumerate(bs):
        for src, value in batch.items():
            t.update(src, value, end_offset=i, processing_time_ms=i)
            newest[src] = max(newest.get(src, value), value)
        wm = t.low_watermark_ms
        expected = min(newest.values()) if previous is None else max(previous, min(newest.values()))
        assert wm == expected
        previous = wm
        t = PunctuationTracker.from_bytes(t.to_bytes())       # state round trip every batch
    assert t.source_punctuations() == newest


def test_source_without_guarantee_holds_the_watermark():
    t = PunctuationTracker()
    t.update("p0", 100, 1, 0)
    t.update("p1", None, 0, 0)
    assert t.low_watermark_ms is None
    t.update("p1", 50, 3, 10)
    assert t.low_watermark_ms == 50


def test_idle_source_is_left_out_after_timeout_and_rejoins():
    t = PunctuationTracker(idle_timeout_ms=1000)
    t.update("p0", 100, end_offset=5, processing_time_ms=0)
    t.update("p1", 10, end_offset=5, processing_time_ms=0)
    assert t.low_watermark_ms == 10
    for now in (500, 999):
        t.update("p0", 200 + now, end_offset=6 + now, processing_time_ms=now)
        t.update("p1", 10, end_offset=5, processing_time_ms=now)     # offset does not move
        assert t.low_watermark_ms == 10
    t.update("p0", 2000, end_offset=9999, processing_time_ms=1000)
    t.update("p1", 10, end_offset=5, processing_time_ms=1000)
    assert t.low_watermark_ms == 2000                               # p1 idle for 1000 ms
    t.update("p1", 20, end_offset=6, processing_time_ms=1100)       # p1 wakes up behind
    assert t.low_watermark_ms == 2000                               # never decreases
    t.update("p0", 3000, end_offset=10_000, processing_time_ms=1200)
    t.update("p1", 2500, end_offset=7, processing_time_ms=1200)
    assert t.low_watermark_ms == 2500


def test_hold_policy_never_excludes():
    t = PunctuationTracker()
    t.update("p0", 100, 1, 0)
    t.update("p1", 10, 1, 0)
    t.update("p0", 10_000, 2, 10**9)
    assert t.low_watermark_ms == 10
