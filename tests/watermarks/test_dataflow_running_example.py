"""The paper's running example (§2.4, Figures 6 to 14) as transcripts with hand-derived panes.

Times are seconds after 12:00:00 (see ``watermarks.running_example`` for the derivation of the
event and processing times). Rows: (seen, window start, window end, value, timing, index, flags)
with flags F first, L last, R retraction; ``G`` is the global window.
"""

from __future__ import annotations

import pytest

from dataflow_kafka.watermarks import (
    GLOBAL_WINDOW, AccumulationMode, AfterCount, AfterProcessingTime, AfterWatermark, TriggerDriver,
)
from dataflow_kafka.windowing import END_OF_TIME_MS, Sum, TumblingWindow
from dataflow_kafka.watermarks.running_example import ELEMENTS, EXAMPLES, MINUTE, streaming_steps
from dataflow_kafka.watermarks.transcript import run_transcript

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")

S = 1000
G0, G1 = GLOBAL_WINDOW


def _rows(driver, steps):
    return [(seen // S, *p.brief()) for seen, p in run_transcript(driver, steps)]


def _ex(name):
    _, make, steps = EXAMPLES[name]
    driver = make()
    return driver, _rows(driver, steps())


def w(a, b):
    return (a * S, b * S)


EXPECTED = {
    "classic batch": [(600, G0, G1, 51, "ON_TIME", 0, "FL")],
    "global windows, AtPeriod, accumulating": [
        (240, G0, G1, 12, "EARLY", 0, "F"),
        (300, G0, G1, 22, "EARLY", 1, ""),
        (360, G0, G1, 30, "EARLY", 2, ""),
        (420, G0, G1, 42, "EARLY", 3, ""),
        (540, G0, G1, 51, "EARLY", 4, ""),
    ],
    "global windows, AtPeriod, discarding": [
        (240, G0, G1, 12, "EARLY", 0, "F"),
        (300, G0, G1, 10, "EARLY", 1, ""),
        (360, G0, G1, 8, "EARLY", 2, ""),
        (420, G0, G1, 12, "EARLY", 3, ""),
        (540, G0, G1, 9, "EARLY", 4, ""),
    ],
    # Figure 9: five panes, each the sum of two data adjacent in processing time.
    "global windows, AtCount, discarding": [
        (205, G0, G1, 12, "EARLY", 0, "F"),
        (265, G0, G1, 7, "EARLY", 1, ""),
        (310, G0, G1, 11, "EARLY", 2, ""),
        (415, G0, G1, 12, "EARLY", 3, ""),
        (485, G0, G1, 9, "EARLY", 4, ""),
    ],
    "fixed windows, batch": [
        (600, *w(0, 120), 14, "ON_TIME", 0, "FL"),
        (600, *w(120, 240), 22, "ON_TIME", 0, "FL"),
        (600, *w(240, 360), 3, "ON_TIME", 0, "FL"),
        (600, *w(360, 480), 12, "ON_TIME", 0, "FL"),
    ],
    # Figure 12: one pane per window at the watermark, the late 9 refines the first window.
    "fixed windows, streaming": [
        (240, *w(0, 120), 5, "ON_TIME", 0, "F"),
        (330, *w(120, 240), 22, "ON_TIME", 0, "F"),
        (370, *w(0, 120), 14, "LATE", 1, ""),
        (400, *w(240, 360), 3, "ON_TIME", 0, "F"),
        (500, *w(360, 480), 12, "ON_TIME", 0, "F"),
    ],
    "fixed windows, streaming, no allowed lateness": [
        (240, *w(0, 120), 5, "ON_TIME", 0, "FL"),
        (330, *w(120, 240), 22, "ON_TIME", 0, "FL"),
        (400, *w(240, 360), 3, "ON_TIME", 0, "FL"),
        (500, *w(360, 480), 12, "ON_TIME", 0, "FL"),
    ],
    # Figure 13: early panes at each minute boundary, the on-time pane (always, as Beam), late.
    "fixed windows, streaming, partial": [
        (240, *w(0, 120), 5, "EARLY", 0, "F"),
        (240, *w(120, 240), 7, "EARLY", 0, "F"),
        (240, *w(0, 120), 5, "ON_TIME", 1, ""),
        (300, *w(120, 240), 14, "EARLY", 1, ""),
        (300, *w(240, 360), 3, "EARLY", 0, "F"),
        (330, *w(120, 240), 22, "ON_TIME", 2, ""),
        (370, *w(0, 120), 14, "LATE", 2, ""),
        (400, *w(240, 360), 3, "ON_TIME", 1, ""),
        (420, *w(360, 480), 3, "EARLY", 0, "F"),
        (500, *w(360, 480), 12, "ON_TIME", 1, ""),
    ],
    # Figure 14, as the paper narrates it: 5 and 7, then 10; the 8 joins 7 and 10 into 25
    # (retract 7, retract 10, 25); the late 9 joins 5 and 25 (retract both, 39); 3 becomes 12.
    "sessions, retracting": [
        (240, *w(70, 130), 5, "EARLY", 0, "F"),
        (240, *w(130, 190), 7, "EARLY", 0, "F"),
        (300, *w(200, 310), 10, "EARLY", 0, "F"),
        (330, *w(130, 190), 7, "EARLY", 0, "FR"),
        (330, *w(200, 310), 10, "EARLY", 0, "FR"),
        (330, *w(130, 310), 25, "ON_TIME", 1, ""),
        (370, *w(70, 130), 5, "EARLY", 0, "FR"),
        (370, *w(130, 310), 25, "ON_TIME", 1, "R"),
        (370, *w(70, 310), 39, "LATE", 2, ""),
        (420, *w(410, 470), 3, "EARLY", 0, "F"),
        (500, *w(410, 470), 3, "EARLY", 0, "FR"),
        (500, *w(380, 480), 12, "ON_TIME", 1, ""),
    ],
}


def test_the_data_sum_to_51_and_are_observed_after_they_happen():
    assert [v for v, _, _ in ELEMENTS] == [5, 7, 3, 4, 3, 8, 9, 3, 8, 1]
    assert sum(v for v, _, _ in ELEMENTS) == 51
    assert all(seen >= event for _, event, seen in ELEMENTS)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_running_example(name):
    driver, rows = _ex(name)
    assert rows == EXPECTED[name]


def test_every_example_is_checked():
    assert set(EXPECTED) == set(EXAMPLES)


def test_without_allowed_lateness_the_late_9_is_dropped_and_counted():
    driver, _ = _ex("fixed windows, streaming, no allowed lateness")
    assert (driver.dropped_late, driver.dropped_closed) == (1, 0)


def test_final_panes_sum_to_the_batch_total():
    for name in ("fixed windows, streaming", "fixed windows, streaming, partial"):
        _, rows = _ex(name)
        last = {(r[1], r[2]): r[3] for r in rows}
        assert sum(last.values()) == 51
    _, rows = _ex("sessions, retracting")
    assert sum(-r[3] if "R" in r[6] else r[3] for r in rows) == 51


def test_beam_spelling_of_figure_13_gives_the_same_panes():
    beam = TriggerDriver(
        TumblingWindow(2 * MINUTE), AfterWatermark(early=AfterProcessingTime(align_ms=MINUTE), late=AfterCount(1)),
        AccumulationMode.ACCUMULATING, allowed_lateness_ms=5 * MINUTE, combiner=Sum(),
    )
    assert _rows(beam, streaming_steps()) == EXPECTED["fixed windows, streaming, partial"]


def test_the_streaming_timeline_ends_the_input():
    steps = streaming_steps()
    assert steps[-1] == ("watermark", END_OF_TIME_MS)
    assert sum(1 for s in steps if s[0] == "add") == 10


def test_the_docs_show_the_panes_the_driver_prints():
    from pathlib import Path

    from dataflow_kafka.watermarks.running_example import format_pane

    doc = (Path(__file__).resolve().parents[2] / "docs" / "dataflow_running_example.md").read_text()
    for name, (_, make, steps) in EXAMPLES.items():
        printed = "\n".join(format_pane(seen, p) for seen, p in run_transcript(make(), steps()))
        assert printed in doc, name
