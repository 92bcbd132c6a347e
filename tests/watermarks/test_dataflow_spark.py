"""The Dataflow Model on Spark end to end: Kafka → dataflow-kafka → apply_windowing → panes.

Three micro-batches (one AvailableNow run each, all on one checkpoint, so every batch after the
first starts from a restored state), then a crash simulated with ``forget_batches_from``: the last
batch is replayed from its offset log. Two queries run side by side on the same topic:

* fixed one-minute windows, early panes every 2 elements, on time, late panes per late datum,
  accumulating, one minute of allowed lateness (one datum beyond it is dropped and counted);
* 30-second sessions, early panes 1 s of processing time after data, late panes per datum,
  accumulating and retracting: merging sessions retract their earlier panes.

The expected panes come from a pure :class:`watermarks.TriggerDriver` fed the same batches: the
same elements in Kafka order, the watermark worked out from the records (min over the two
partitions of their newest event time) and the processing time the source recorded in the
offset log. Some panes are also checked by hand. Each key group's punctuation is its output
watermark: the input watermark minus the allowed lateness.
"""

from __future__ import annotations

import json

import pytest

from tests.support import BatchCollector, forget_batches_from, offset_log
from dataflow_kafka.watermarks import AccumulationMode, AfterCount, AfterProcessingTime, AfterWatermark, TriggerDriver
from dataflow_kafka.windowing import SessionWindow, Sum, TumblingWindow

#: late drops are expected here and counted; the warning itself is tested in test_dataflow_beam_rules.py
pytestmark = pytest.mark.filterwarnings("ignore::dataflow_kafka.watermarks.LateDataDropped")


T0 = 1_700_000_040_000  # a minute boundary; event times live in the JSON field "ts"
S = 1_000

# (key, partition, event time offset in s, score), one list per micro-batch
BATCHES = [
    [("a", 0, 5, 5), ("a", 0, 10, 7), ("b", 0, 20, 3), ("a", 1, 15, 4), ("b", 1, 40, 1)],
    [("a", 0, 70, 2), ("b", 0, 65, 6), ("a", 1, 40, 8), ("b", 1, 80, 9)],
    [("a", 0, 30, 10), ("a", 0, -90, 100), ("b", 0, 130, 1), ("a", 1, 125, 2), ("b", 1, 140, 3)],
]

CONFIGS = {
    "fixed": dict(windows=TumblingWindow(60_000),
                  trigger=AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
                  accumulation_mode=AccumulationMode.ACCUMULATING, allowed_lateness_ms=60_000),
    "sessions": dict(windows=SessionWindow(30_000),
                     trigger=AfterWatermark(early=AfterProcessingTime(1_000), late=AfterCount(1)),
                     accumulation_mode=AccumulationMode.ACCUMULATING_AND_RETRACTING,
                     allowed_lateness_ms=60_000),
}

VALUE = "CAST(get_json_object(CAST(value AS STRING), '$.score') AS LONG)"


def pane_row(key, start, end, value, timing, index, first, last, retraction, ts, pt):
    return (key, start - T0, end - T0, value, timing, index, first, last, retraction, ts - T0, pt)


def expected_panes(config: dict, processing_times: list[int]) -> list[dict]:
    """Per batch: {key: [pane rows in emission order]}, and per batch {key: dropped_late}."""
    d = TriggerDriver(config["windows"], config["trigger"], config["accumulation_mode"],
                      config["allowed_lateness_ms"], combiner=Sum())
    newest: dict[int, int] = {}
    out = []
    for batch, pt in zip(BATCHES, processing_times):
        panes = d.advance_processing_time(pt)
        drops = {}
        for key in dict.fromkeys(k for k, *_ in sorted(batch, key=lambda r: r[1])):  # first appearance
            elems = [(v, T0 + t * S) for k, p, t, v in sorted(batch, key=lambda r: r[1]) if k == key]
            before = d.dropped_late
            panes += d.add(elems, key=key)
            if d.dropped_late > before:
                drops[key] = d.dropped_late - before
        for _, p, t, _ in batch:
            newest[p] = max(newest.get(p, t), t)
        wm = T0 + min(newest.values()) * S
        panes += d.advance_watermark(wm)
        per_key: dict[str, list] = {}
        for p in panes:
            per_key.setdefault(p.key, []).append(pane_row(
                p.key, p.start_ms, p.end_ms, float(p.value), p.timing.name, p.index, p.is_first,
                p.is_last, p.is_retraction, p.timestamp_ms, pt))
        out.append({"panes": per_key, "dropped_late": drops, "watermark": wm - T0 - config["allowed_lateness_ms"]})
    return out


def observed(collector: BatchCollector, query: str) -> list[dict]:
    out = []
    for b in sorted(collector.batches):
        rows = [r for r in collector.batches[b] if r["query"] == query]
        per_key: dict[str, list] = {}
        for r in sorted((r for r in rows if r["kind"] == "data"), key=lambda r: (r["partition"], r["offset"])):
            per_key.setdefault(r["key"], []).append(pane_row(
                r["key"], r["window_start_ms"], r["window_end_ms"], r["sum"], r["timing"], r["pane_index"],
                r["is_first"], r["is_last"], r["is_retraction"], r["event_time_ms"], r["processing_time_ms"]))
        drops = {r["dropped_key"]: r["dropped_count"] for r in rows
                 if r["kind"] == "dropped" and r["dropped_reason"] == "late"}
        marks = {r["punctuation_ms"] for r in rows if r["kind"] == "punctuation"}
        assert len(marks) == 1, marks          # every key group forwards the same output watermark
        out.append({"panes": per_key, "dropped_late": drops, "watermark": marks.pop() - T0})
    return out


def test_early_on_time_late_panes_and_session_retractions_survive_restart_and_replay(spark, kafka, tmp_path):
    from dataflow_kafka.watermarks.spark import apply_windowing

    topic = kafka.topic(2)
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .load())
    from pyspark.sql import functions as F

    # Both operators in one query (one plan, one checkpoint): a union of two independent branches.
    panes = None
    for name, cfg in CONFIGS.items():
        branch = apply_windowing(src, "CAST(key AS STRING)", VALUE, aggregations=[Sum()], num_key_groups=2,
                                 name=name, **cfg).withColumn("query", F.lit(name))
        panes = branch if panes is None else panes.unionByName(branch)
    ck, col = str(tmp_path / "ck"), BatchCollector()

    def run():  # one AvailableNow run from the checkpoint
        q = panes.writeStream.foreachBatch(col).option("checkpointLocation", ck).trigger(availableNow=True).start()
        assert q.awaitTermination(180), "query did not finish"
        assert q.exception() is None, q.exception()

    for batch in BATCHES:
        kafka.produce(topic, [{"key": k.encode(), "partition": p,
                               "value": json.dumps({"ts": T0 + t * S, "score": v}).encode()}
                              for k, p, t, v in batch])
        run()
    def canonical(batches):  # row order of collect() is not part of the contract
        return {b: sorted(rows, key=repr) for b, rows in batches.items()}

    first_attempt = canonical(col.batches)
    forget_batches_from(ck, len(BATCHES) - 1)  # crash during the last batch: replayed from its offsets
    run()

    assert sorted(col.batches) == list(range(len(BATCHES)))
    assert canonical(col.batches) == first_attempt, "the replayed batch differs"
    pts = [offset_log(ck, b)["batchTimeMs"] for b in range(len(BATCHES))]
    for name, cfg in CONFIGS.items():
        got, want = observed(col, name), expected_panes(cfg, pts)
        assert got == want, f"{name}:\n got {got}\nwant {want}"

    fixed = observed(col, "fixed")
    pane = lambda b, k, i: fixed[b]["panes"][k][i][1:10]  # noqa: E731  (start, end, value, timing, ...)
    # By hand (a micro-batch is one bundle: AfterCount(2) is asked once per window, after the batch).
    # Batch 0: a's 5, 7 and 4 make one early pane of 16 (not 12 after the 7); b's 3 and 1 make 4.
    assert pane(0, "a", 0) == (0, 60 * S, 16.0, "EARLY", 0, True, False, False, 60 * S - 1)
    assert pane(0, "b", 0) == (0, 60 * S, 4.0, "EARLY", 0, True, False, False, 60 * S - 1)
    # Batch 1: the 8 at 40 s is the only element of [0, 60 s) since the early pane (no early pane);
    # the watermark min(70 s, 80 s) passes the end of [0, 60 s): the on-time pane 5+7+4+8.
    assert pane(1, "a", 0) == (0, 60 * S, 24.0, "ON_TIME", 1, False, False, False, 60 * S - 1)
    # Batch 2: the 10 at 30 s is late but within lateness: a late pane; the 100 at -90 s is dropped;
    # the watermark (130 s) passes [60 s, 120 s): its on-time pane holds the 2 at 70 s.
    assert pane(2, "a", 0) == (0, 60 * S, 34.0, "LATE", 2, False, False, False, 60 * S - 1)
    assert pane(2, "a", 1) == (60 * S, 120 * S, 2.0, "ON_TIME", 0, True, False, False, 120 * S - 1)
    assert fixed[2]["dropped_late"] == {"a": 1}

    sessions = observed(col, "sessions")
    # Batch 2 opens with the early refinement of b's grown session: retract [20 s, 70 s) then 19.
    b2 = [(r[1], r[2], r[3], r[4], r[8]) for r in sessions[1]["panes"]["b"] + sessions[2]["panes"]["b"]]
    assert (20 * S, 70 * S, 4.0, "EARLY", True) in b2 and (20 * S, 110 * S, 19.0, "EARLY", False) in b2
    assert b2.index((20 * S, 70 * S, 4.0, "EARLY", True)) < b2.index((20 * S, 110 * S, 19.0, "EARLY", False))
    # a: the late 10 at 30 s joins [5 s, 70 s): its on-time 24 is retracted, then a late 34.
    a2 = [(r[1], r[2], r[3], r[4], r[8]) for r in sessions[2]["panes"]["a"]]
    i = a2.index((5 * S, 70 * S, 24.0, "ON_TIME", True))
    assert a2[i + 1] == (5 * S, 70 * S, 34.0, "LATE", False)
