"""NEXMark Q5, hot items: per sliding window (10 s, every 2 s, as the Flink nexmark form; Beam's
suite slides by 5 s), the auctions with the most bids, ties kept (the public SQL joins the
counts with their maximum on ``num >= maxn``).

This project's forms. ``slicer``: bids counted per auction and window (the slicer's keyed
table), then the entries with the highest count per window
(:class:`~bench.nexmark.aggregations.ArgMax` in a Dataflow stage) where the counts are
(``fuse="partial"``: no shuffle of a row per auction and window), in one operator and one key
group (``Settings.top_key_groups``). With more key groups the top is taken per key group there, then
re-keyed by the window's end, the highest of those in a second operator (one key group: a row per
window and key group is all it gets). Every stage passes its input watermark on
(``output_watermark="input"``): the top fires at the window's end and takes the counts' later
updates as late panes. ``dataflow``: one operator, as Spark's and Beam's (``Count.perElement`` then
``Top``) combine: per window over all the bids (one key, ``fanout(1)``),
:class:`~bench.nexmark.aggregations.MostFrequent` of the auctions, in accumulating mode with a late
pane per late bid. Result rows: ``(window_start_ms, window_end_ms, auction, num)``.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict

from dataflow_kafka.keygroups import Pipeline, fanout, json_field
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, SlidingWindow, TumblingWindow

from bench.nexmark.aggregations import ArgMax, MostFrequent
from bench.nexmark.query import Query, Settings, window_rows

__all__ = ["Q5"]

SIZE_MS, SLIDE_MS = 10_000, 2_000


class Q5(Query):
    name = "q5"
    title = "hot items"
    columns = ("window_start_ms", "window_end_ms", "auction", "num")
    variants = ("slicer", "dataflow")
    ready_column = "window_end_ms"

    def reference(self, bids, variant=None):
        counts: dict[int, Counter] = defaultdict(Counter)
        for b in bids:
            last = b["dateTime"] // SLIDE_MS * SLIDE_MS
            for start in range(last - SIZE_MS + SLIDE_MS, last + 1, SLIDE_MS):
                counts[start][b["auction"]] += 1
        out = []
        for start, c in counts.items():
            top = max(c.values())
            out += [(start, start + SIZE_MS, a, n) for a, n in c.items() if n == top]
        return sorted(out)

    def pipeline(self, variant, settings=Settings()):
        self._check(variant)
        key, late = {"auction": json_field("auction")}, settings.lateness_ms
        if variant == "dataflow":
            hot = WindowingStage(key={"all": fanout(1)}, value=json_field("auction"),
                                 windows={"hop": SlidingWindow(SIZE_MS, SLIDE_MS)}, aggregations=[MostFrequent("auction")],
                                 trigger=AfterWatermark(late=AfterCount(1)), accumulation_mode="accumulating",
                                 allowed_lateness_ms=late, num_key_groups=settings.key_groups, name="q5_hot")
            return Pipeline([hot])
        n = settings.top_key_groups        # the top per window needs every auction's count in one place
        counts = SlicerStage(key=key, value="offset", windows={"hop": SlidingWindow(SIZE_MS, SLIDE_MS)},
                             aggregations=[Count()], allowed_lateness_ms=late,
                             output_watermark="input", num_key_groups=n, name="q5_counts")
        top = dict(windows=TumblingWindow(SLIDE_MS), trigger=AfterWatermark(late=AfterCount(1)),
                   accumulation_mode="accumulating", allowed_lateness_ms=late, num_key_groups=n)
        # the top per window of the key group's auctions, where the counts are (a partial stage: no
        # shuffle of a row per auction and window; each element the tuple (auction, count), an entry
        # made only at the top); with more than one key group, then the top of those per window
        # (their JSON lists) in one key group
        hot = WindowingStage(key={"w": "window_end_ms"}, value={"auction": "auction", "count": "count"},
                             aggregations=[ArgMax("count", key=("auction",), fields=("auction", "count"))],
                             name="q5_hot", **top)
        if n == 1:
            return Pipeline([counts]).then(hot, fuse="partial")
        partial = dataclasses.replace(hot, output_watermark="input", name="q5_hot_partial")
        hot = WindowingStage(key={"w": "w"}, value="top", aggregations=[ArgMax("count", key=("auction",))],
                             name="q5_hot", **{**top, "num_key_groups": 1})
        return Pipeline([counts]).then(partial, fuse="partial").then(hot)

    def results(self, variant, frames, settings=Settings()):
        table = window_rows(frames, self.last_stage(variant, settings))
        out = []
        for end, top in zip(table.get("w" if variant == "slicer" else "window_end_ms", []), table.get("top", [])):
            out += [(int(end) - SIZE_MS, int(end), e["auction"], e["count"]) for e in json.loads(top)]
        return sorted(out)

    def native(self, bids, delay):
        from pyspark.sql import functions as F

        counts = (bids.withWatermark("dateTime", delay)
                  .groupBy(F.window("dateTime", f"{SIZE_MS // 1000} seconds", f"{SLIDE_MS // 1000} seconds"),
                           "auction")
                  .agg(F.count("*").alias("num")))
        # the second aggregation: per window (its end as event time), every auction at the top count
        per_window = (counts.groupBy(F.window(F.window_time("window"), f"{SLIDE_MS // 1000} seconds").alias("w"))
                      .agg(F.max("num").alias("maxn"), F.collect_list(F.struct("auction", "num")).alias("all")))
        top = per_window.select(F.col("w"), F.explode(F.filter("all", lambda x: x["num"] == F.col("maxn"))).alias("t"))
        end = F.unix_millis(F.col("w.end"))
        return top.select((end - SIZE_MS).alias("window_start_ms"), end.alias("window_end_ms"),
                          F.col("t.auction").alias("auction"), F.col("t.num").alias("num"))
