"""The running example of the Dataflow Model (Akidau et al., VLDB 2015, §2.4 Examples, Figures 5
to 14) as data.

Ten integers, 5, 7, 3, 4, 3, 8, 9, 3, 8, 1, in the order the pipeline observes them, summed per
key. The paper's text, not its drawings, is what these are read from: the event and processing times
below are derived from what the text says about Figures 5 to 14 (times are ms after 12:00:00):

* fixed two-minute windows hold 5+9 = 14, 7+3+4+8 = 22, 3 and 3+8+1 = 12 (Figures 10 to 12);
* the 9 lands in the first window after the watermark, having seen the 5, passed its end (Fig. 12);
* with one-minute sessions, 5 and 7 are singleton sessions at the first minute boundary, 3, 4, 3
  form a session of 10 by the second, the 8 joins the 7 and the 10 into 25 before the watermark
  passes that session, the late 9 joins the 5 and the 25 into 39, and a session of 3 grows into
  3+8+1 = 12 (Figure 14);
* events are observed after they happen (processing time >= event time) and the watermark never
  passes an on-time datum before it arrives.

``python -m dataflow_kafka.watermarks.running_example`` prints every example's panes (docs/dataflow_running_example.md).
"""

from __future__ import annotations

from collections.abc import Callable

from dataflow_kafka.watermarks.accumulation import AccumulationMode, OnTimeBehavior
from dataflow_kafka.watermarks.driver import TriggerDriver
from dataflow_kafka.watermarks.transcript import clock, run_transcript
from dataflow_kafka.watermarks.triggers import (
    AfterCount, AfterEach, AfterProcessingTime, AfterWatermark, DefaultTrigger, OrFinally, Repeatedly,
)
from dataflow_kafka.windowing import END_OF_TIME_MS, GlobalWindow, SessionWindow, Sum, TumblingWindow

__all__ = ["ELEMENTS", "WATERMARK", "MINUTE", "streaming_steps", "batch_steps", "EXAMPLES", "main"]

MINUTE = 60_000
_S = 1_000

#: (value, event time, processing time) in the order the pipeline observes them.
ELEMENTS = [
    (5, 70 * _S, 190 * _S),   # event 12:01:10, seen 12:03:10
    (7, 130 * _S, 205 * _S),  # event 12:02:10, seen 12:03:25
    (3, 200 * _S, 250 * _S),  # event 12:03:20, seen 12:04:10
    (4, 220 * _S, 265 * _S),  # event 12:03:40, seen 12:04:25
    (3, 250 * _S, 280 * _S),  # event 12:04:10, seen 12:04:40
    (8, 170 * _S, 310 * _S),  # event 12:02:50, seen 12:05:10
    (9, 100 * _S, 370 * _S),  # event 12:01:40, seen 12:06:10: behind the watermark (late)
    (3, 410 * _S, 415 * _S),  # event 12:06:50, seen 12:06:55
    (8, 380 * _S, 482 * _S),  # event 12:06:20, seen 12:08:02
    (1, 420 * _S, 485 * _S),  # event 12:07:00, seen 12:08:05
]

#: (processing time, watermark): the heuristic watermark of Figure 5, ending with end of input.
WATERMARK = [
    (240 * _S, 120 * _S),  # 12:04:00 -> 12:02:00
    (300 * _S, 165 * _S),  # 12:05:00 -> 12:02:45
    (330 * _S, 320 * _S),  # 12:05:30 -> 12:05:20
    (400 * _S, 360 * _S),  # 12:06:40 -> 12:06:00
    (500 * _S, 480 * _S),  # 12:08:20 -> 12:08:00
    (600 * _S, END_OF_TIME_MS),  # 12:10:00: the input has ended
]


def streaming_steps() -> list[tuple]:
    """The streaming timeline: minute ticks of processing time, arrivals, watermark advances.

    At equal processing times the clock advances first, then the watermark.
    """
    events = [(t, 0, ("processing", t)) for t in range(4 * MINUTE, 10 * MINUTE + 1, MINUTE)]
    for value, event_time, seen in ELEMENTS:
        events.append((seen, 0, ("processing", seen)))
        events.append((seen, 1, ("add", [(value, event_time)])))
    for p, w in WATERMARK:
        events += [(p, 0, ("processing", p)), (p, 2, ("watermark", w))]
    steps = [step for _, _, step in sorted(events, key=lambda e: (e[0], e[1]))]
    return [s for i, s in enumerate(steps) if s != steps[i - 1] or i == 0]


def batch_steps() -> list[tuple]:
    """Classic batch at 12:10: all data, then the watermark jumps from the beginning to the end."""
    return [("processing", 10 * MINUTE), ("add", [(v, e) for v, e, _ in ELEMENTS]),
            ("watermark", END_OF_TIME_MS)]


def _driver(window_fn, trigger, mode, **kw) -> Callable[[], TriggerDriver]:  # type: ignore[no-untyped-def]
    return lambda: TriggerDriver(window_fn, trigger, mode, combiner=Sum(), **kw)


_ACC, _DIS = AccumulationMode.ACCUMULATING, AccumulationMode.DISCARDING
#: The paper's AtPeriod(MINUTE): periodic processing-time boundaries.
_AT_PERIOD = AfterProcessingTime(align_ms=MINUTE)
#: The paper's SequenceOf(RepeatUntil(AtPeriod(1 min), AtWatermark()), Repeat(AtWatermark())).
_PARTIAL = AfterEach(OrFinally(Repeatedly(_AT_PERIOD), AfterWatermark()), Repeatedly(AfterWatermark()))
_LATENESS = 5 * MINUTE

#: name -> (figure, driver factory, steps)
EXAMPLES: dict[str, tuple[str, Callable[[], TriggerDriver], Callable[[], list]]] = {
    "classic batch": ("Figure 6", _driver(GlobalWindow(), DefaultTrigger(), _ACC), batch_steps),
    "global windows, AtPeriod, accumulating": (
        "Figure 7", _driver(GlobalWindow(), Repeatedly(_AT_PERIOD), _ACC), streaming_steps),
    "global windows, AtPeriod, discarding": (
        "Figure 8", _driver(GlobalWindow(), Repeatedly(_AT_PERIOD), _DIS), streaming_steps),
    "global windows, AtCount, discarding": (
        "Figure 9", _driver(GlobalWindow(), Repeatedly(AfterCount(2)), _DIS), streaming_steps),
    "fixed windows, batch": (
        "Figure 10", _driver(TumblingWindow(2 * MINUTE), DefaultTrigger(), _ACC), batch_steps),
    "fixed windows, streaming": (
        "Figure 12", _driver(TumblingWindow(2 * MINUTE), DefaultTrigger(), _ACC, allowed_lateness_ms=_LATENESS),
        streaming_steps),
    "fixed windows, streaming, no allowed lateness": (
        "Figure 12 variant", _driver(TumblingWindow(2 * MINUTE), DefaultTrigger(), _ACC), streaming_steps),
    "fixed windows, streaming, partial": (
        "Figure 13", _driver(TumblingWindow(2 * MINUTE), _PARTIAL, _ACC, allowed_lateness_ms=_LATENESS),
        streaming_steps),
    "sessions, retracting": (
        "Figure 14",
        _driver(SessionWindow(MINUTE), _PARTIAL, AccumulationMode.ACCUMULATING_AND_RETRACTING,
                allowed_lateness_ms=_LATENESS, on_time_behavior=OnTimeBehavior.FIRE_IF_NON_EMPTY),
        streaming_steps),
}


def format_pane(seen_ms: int, pane) -> str:  # type: ignore[no-untyped-def]
    """One printed line: when it fired, the window, the value, timing, index and flags."""
    w = pane.window
    window = "global" if w.end_ms == END_OF_TIME_MS else f"[{clock(w.start_ms)}, {clock(w.end_ms)})"
    sign = "retract " if pane.is_retraction else ""
    flags = " first" * pane.is_first + " last" * pane.is_last
    return f"{clock(seen_ms)}  {window:<20}  {sign}{pane.value:<3}  {pane.timing.name:<7} #{pane.index}{flags}"


def main() -> None:
    for name, (figure, make, steps) in EXAMPLES.items():
        driver = make()
        print(f"## {name} ({figure}): {driver.trigger!r}, {driver.accumulation_mode.name}")
        for seen, pane in run_transcript(driver, steps()):
            print("   ", format_pane(seen, pane))
        print(f"    dropped_late={driver.dropped_late} dropped_closed={driver.dropped_closed}\n")


if __name__ == "__main__":
    main()
