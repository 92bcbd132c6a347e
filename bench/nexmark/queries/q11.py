"""NEXMark Q11, user sessions: per bidder and session (gap 10 s), the number of bids, the
session's start (its first bid) and end (its last bid + the gap), as the Flink nexmark form
states it (``GROUP BY bidder, SESSION(dateTime, INTERVAL '10' SECOND)``).

One stage, keyed by bidder: the slicer (Scotty's sessions: a bid exactly the gap after the
session's last one joins it, as in Flink) or the Dataflow stage (Beam's session rule: exactly
the gap apart starts a new session; ``docs/semantics.md``), accumulating, a late pane per late
bid. A late bid can extend or fuse sessions already emitted: both engines then retract the old
sessions before the new one, so the folded rows (:func:`windowing.final.current_windows`) are
the final sessions. Result rows: ``(bidder, session_start_ms, session_end_ms, bid_count)``.
"""

from __future__ import annotations

from collections import defaultdict

from dataflow_kafka.keygroups import Pipeline, json_field
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, SessionWindow

from bench.nexmark.query import Query, Settings, window_rows

__all__ = ["Q11", "sessions"]

GAP_MS = 10_000


def sessions(times: list[int], gap_ms: int, join_at_gap: bool) -> list[tuple[int, int, int]]:
    """``(start, end, count)`` of the sessions of ``times``: a time at most ``gap_ms`` after the
    session's last one joins it (``join_at_gap``; else strictly less), ``end = last + gap``."""
    out: list[list[int]] = []
    for t in sorted(times):
        if out and (t - out[-1][1] <= gap_ms if join_at_gap else t - out[-1][1] < gap_ms):
            out[-1][1] = t
            out[-1][2] += 1
        else:
            out.append([t, t, 1])
    return [(s, last + gap_ms, n) for s, last, n in out]


class Q11(Query):
    name = "q11"
    title = "user sessions"
    columns = ("bidder", "session_start_ms", "session_end_ms", "bid_count")
    variants = ("slicer", "dataflow")
    ready_column = "session_end_ms"
    notes = "dataflow form: Beam's session rule (bids exactly 10 s apart split)"

    def reference(self, bids, variant=None):
        times: dict[int, list[int]] = defaultdict(list)
        for b in bids:
            times[b["bidder"]].append(b["dateTime"])
        join = variant != "dataflow"
        return sorted((bidder, s, e, n) for bidder, ts in times.items() for s, e, n in sessions(ts, GAP_MS, join))

    def overlaps(self, row, other):
        return row[0] == other[0] and row[1] < other[2] and other[1] < row[2]

    def pipeline(self, variant, settings=Settings()):
        self._check(variant)
        kw = dict(key={"bidder": json_field("bidder")}, value="offset", allowed_lateness_ms=settings.lateness_ms,
                  num_key_groups=settings.key_groups, name="q11_sessions")
        if variant == "slicer":
            return Pipeline([SlicerStage(windows={"session": SessionWindow(GAP_MS)}, aggregations=[Count()], **kw)])
        return Pipeline([WindowingStage(windows={"session": SessionWindow(GAP_MS)}, aggregations=[Count()],
                                        trigger=AfterWatermark(late=AfterCount(1)), accumulation_mode="accumulating",
                                        **kw)])

    def results(self, variant, frames, settings=Settings()):
        t = window_rows(frames, self.last_stage(variant, settings))
        if not len(t):
            return []
        return sorted(zip(t["bidder"].astype(int), t["window_start_ms"].astype(int), t["window_end_ms"].astype(int),
                          t["count"].astype(int)))

    def native(self, bids, delay):
        from pyspark.sql import functions as F

        s = (bids.withWatermark("dateTime", delay)
             .groupBy("bidder", F.session_window("dateTime", f"{GAP_MS // 1000} seconds"))
             .agg(F.count("*").alias("bid_count")))
        return s.select("bidder", F.unix_millis("session_window.start").alias("session_start_ms"),
                        F.unix_millis("session_window.end").alias("session_end_ms"), "bid_count")
