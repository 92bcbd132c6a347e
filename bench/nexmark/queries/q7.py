"""NEXMark Q7, highest bid: per tumbling window of 10 s, the bids with the highest price (all of
them on a tie: the public SQL joins the bids with the window's maximum on ``price = maxprice``).

This project's forms:

* ``dataflow``: one operator, as Spark's own Q7: :class:`~bench.nexmark.aggregations.ArgMax` in
  one Dataflow stage over all the bids (one key, ``fanout(1)``), accumulating, a late pane per
  late bid; each element the pair (price, the record's value bytes), the price read as a JSON
  field, so that only the bids at the top are decoded and parsed. The stage selects its rows
  before the shuffle (``select_before_shuffle``, :mod:`watermarks.before_shuffle`): each source
  task sends per window only its bids at its highest price (every bid of a window the watermark
  may have passed), the same panes from a few rows per task and window;
* ``slicer``: the highest price per (auction, bidder) and window (``Max`` in the slicer's keyed
  table), then the highest of those per window where the table is (``fuse="partial"``), in one
  operator and one key group (``Settings.top_key_groups``; with more, the highest per window of
  each key group, then re-keyed by the window's end, the highest of those in a second operator).
  The slicer aggregates numbers, so this form names the bid by auction and bidder and loses its
  ``dateTime`` and ``extra``: its rows are the reference's projected on ``(window, auction,
  bidder, price)``.

Result rows: ``(window_start_ms, window_end_ms, auction, bidder, price, dateTime, extra)``
(``dateTime`` and ``extra`` None in the slicer form).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

from dataflow_kafka.keygroups import Pipeline, fanout, json_field
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Max, TumblingWindow

from bench.nexmark.aggregations import ArgMax
from bench.nexmark.query import Query, Settings, window_rows

__all__ = ["Q7"]

SIZE_MS = 10_000


class Q7(Query):
    name = "q7"
    title = "highest bid"
    columns = ("window_start_ms", "window_end_ms", "auction", "bidder", "price", "dateTime", "extra")
    variants = ("slicer", "dataflow")
    ready_column = "window_end_ms"
    notes = "slicer form: the slicer aggregates numbers; rows name the bid by (auction, bidder), no dateTime/extra"

    def reference(self, bids, variant=None):
        windows: dict[int, list] = defaultdict(list)
        for b in bids:
            windows[b["dateTime"] // SIZE_MS * SIZE_MS].append(b)
        out = set()
        for start, bs in windows.items():
            top = max(b["price"] for b in bs)
            for b in bs:
                if b["price"] == top:
                    full = (b["dateTime"], b["extra"]) if variant != "slicer" else (None, None)
                    out.add((start, start + SIZE_MS, b["auction"], b["bidder"], b["price"], *full))
        return sorted(out, key=repr)

    def pipeline(self, variant, settings=Settings()):
        self._check(variant)
        n, late = settings.key_groups, settings.lateness_ms
        per_window = dict(windows=TumblingWindow(SIZE_MS), trigger=AfterWatermark(late=AfterCount(1)),
                          accumulation_mode="accumulating", allowed_lateness_ms=late, num_key_groups=n)
        if variant == "dataflow":
            # the highest per window over all the bids; each source task sends only its top bids
            highest = WindowingStage(key={"all": fanout(1)}, value={"price": json_field("price"), "bid": "value"},
                                     aggregations=[ArgMax("price")], select_before_shuffle=True,
                                     name="q7_highest", **per_window)
            return Pipeline([highest])
        n = settings.top_key_groups        # the highest per window needs every key's maximum in one place
        per_window = {**per_window, "num_key_groups": n}
        first = SlicerStage(key={"auction": json_field("auction"), "bidder": json_field("bidder")},
                            value=json_field("price"), windows={"10s": TumblingWindow(SIZE_MS)},
                            aggregations=[Max()], allowed_lateness_ms=late,
                            output_watermark="input", num_key_groups=n, name="q7_max")
        fields = ("auction", "bidder", "max")         # each element a tuple of these columns
        top = ArgMax("max", key=fields[:2], fields=fields)
        # the highest per window of the key group's rows, where the first stage ran (a partial stage:
        # no shuffle of its every row); with more than one key group, then the highest of those per
        # window (their JSON lists) in one key group
        highest = WindowingStage(key={"w": "window_end_ms"}, value={f: f for f in fields}, aggregations=[top],
                                 name="q7_highest", **per_window)
        if n == 1:
            return Pipeline([first]).then(highest, fuse="partial")
        partial = dataclasses.replace(highest, output_watermark="input", name="q7_highest_partial")
        highest = WindowingStage(key={"w": "w"}, value="top", aggregations=[ArgMax(top.by, key=top.key)],
                                 name="q7_highest", **{**per_window, "num_key_groups": 1})
        return Pipeline([first]).then(partial, fuse="partial").then(highest)

    def results(self, variant, frames, settings=Settings()):
        table = window_rows(frames, self.last_stage(variant, settings))
        out = set()
        for end, top in zip(table.get("w" if variant == "slicer" else "window_end_ms", []), table.get("top", [])):
            for e in json.loads(top):
                if variant == "slicer":
                    out.add((int(end) - SIZE_MS, int(end), e["auction"], e["bidder"], int(e["max"]), None, None))
                else:
                    out.add((int(end) - SIZE_MS, int(end), e["auction"], e["bidder"], e["price"], e["dateTime"],
                             e["extra"]))
        return sorted(out, key=repr)

    def native(self, bids, delay):
        from pyspark.sql import functions as F

        per_window = (bids.withWatermark("dateTime", delay)
                      .groupBy(F.window("dateTime", f"{SIZE_MS // 1000} seconds"))
                      .agg(F.max("price").alias("maxprice"),
                           F.collect_list(F.struct("auction", "bidder", "price", "ts_ms", "extra")).alias("all")))
        top = per_window.select("window", F.explode(F.filter("all", lambda b: b["price"] == F.col("maxprice"))).alias("b"))
        start = F.unix_millis(F.col("window.start"))
        return top.select(start.alias("window_start_ms"), (start + SIZE_MS).alias("window_end_ms"),
                          *(F.col(f"b.{c}").alias(c) for c in ("auction", "bidder", "price")),
                          F.col("b.ts_ms").alias("dateTime"), F.col("b.extra").alias("extra"))

    def native_results(self, frame):
        return sorted(set(super().native_results(frame)), key=repr)
