"""The smooth split -> combine switch on Spark and the embedded broker: the windows of the old
query (split) up to T and of the new one (combine) from T on equal the windows of one query
without a switch, with out-of-order records on both sides of T."""

from __future__ import annotations

import json
import random

from dataflow_kafka.balancing.cost_model import COMBINE, SPLIT, Measurement, SplitCombinePolicy, window_shape
from dataflow_kafka.balancing.migration import windowed_aggregation
from dataflow_kafka.balancing.switch import SmoothSwitch, last_committed_batch, longest_window_ms, read_offset_log, switch_time
from dataflow_kafka.keygroups.pipeline import Pipeline
from dataflow_kafka.slicer.stage import SlicerStage
from tests.balancing.migration_support import available_now, canonical, source_df
from tests.support import BatchCollector, now_ms
from dataflow_kafka.windowing import Count, Max, Mean, Min, SlidingWindow, Sum, TumblingWindow


KEY = "CAST(key AS STRING)"
VALUE = "CAST(get_json_object(CAST(value AS STRING), '$.v') AS DOUBLE)"
WINDOWS = {"s": SlidingWindow(2_000, 1_000), "t": TumblingWindow(3_000)}
COLUMNS = ["kind", "key", "query_id", "window_start_ms", "window_end_ms", "count", "sum"]
PARTS = 2


def _record(ts: int, rnd: random.Random, partition: int | None = None) -> dict:
    return {"key": f"u{rnd.randrange(6)}".encode(), "value": json.dumps({"ts": ts, "v": rnd.randint(1, 9)}).encode(),
            "partition": rnd.randrange(PARTS) if partition is None else partition}


def _windows(rows) -> list[tuple]:
    return sorted(tuple(canonical(r[c]) for c in COLUMNS[1:]) for r in rows if r["kind"] == "data")


def test_split_to_combine_switch_gives_the_windows_of_one_query(spark, kafka, tmp_path):
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    split = windowed_aggregation(KEY, VALUE, WINDOWS, num_key_groups=8, num_slots=4, num_partitions=n)
    combine = Pipeline([SlicerStage(key={"key": KEY}, value=VALUE, windows=WINDOWS, allowed_lateness_ms=0,
                                    aggregations=[Sum(), Count(), Min(), Max(), Mean()], num_key_groups=2)])
    topic = kafka.topic(PARTS)
    rnd = random.Random(7)
    base = (now_ms() - 120_000) // 10_000 * 10_000
    # disorder (up to 600 ms) below the watermark delay: no record is late, whatever the batching
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "maxOffsetsPerTrigger": "200", "watermarkDelayMs": "800"}

    phase1 = [base + i * 20 - (rnd.randint(0, 600) if rnd.random() < 0.3 else 0) for i in range(200)]
    kafka.produce(topic, [_record(ts, rnd) for ts in phase1])
    got: dict = {}

    def sink(df, plan, batch_id):
        got[(plan, batch_id)] = [r.asDict() for r in df.collect()]

    sw = SmoothSwitch(spark, sink, WINDOWS, str(tmp_path / "switch"), columns=COLUMNS)
    old = sw.start("split", split, opts, str(tmp_path / "old"), trigger={"availableNow": True})
    assert old.awaitTermination(300) and old.exception() is None

    t_expected = switch_time(max(phase1), WINDOWS)
    # phase 2: records just below T (the old plan's windows), at and just above T in any order
    # (the new plan's), then time runs on and every partition's watermark passes T + p
    around = [t_expected + d for d in (-700, -300, -1, 0, 1, 250, -450, 600, -50, 999)]
    phase2 = around + [max(phase1) + 200 + i * 25 - (rnd.randint(0, 600) if rnd.random() < 0.3 else 0)
                       for i in range(260)]
    last = max(phase2) + 4_000
    kafka.produce(topic, [_record(ts, rnd) for ts in phase2] + [_record(last, rnd, p) for p in range(PARTS)])

    # the cost model decides, from the figures of the period (few tuples, overlapping windows): combine
    p, _, pw, w = window_shape(WINDOWS.values())
    b = last_committed_batch(str(tmp_path / "old"))
    at = read_offset_log(str(tmp_path / "old"), b)["batchTimeMs"]      # time from the offset log
    decision = SplitCombinePolicy(period_ms=p, initial=SPLIT).evaluate(
        "windows", Measurement(len(phase1), 0.01, w, pw, 0, 1.0, 0, 8), now_ms=at)
    assert (decision.plan, decision.switch) == (COMBINE, True)
    plan = sw.follow(decision, {SPLIT: split, COMBINE: combine}, checkpoint=str(tmp_path / "new"),
                     trigger={"availableNow": True})
    assert plan.after_batch == b
    assert (plan.old, plan.new, plan.t_ms) == ("split", "combine", t_expected)
    assert plan.stop_at_ms == t_expected + longest_window_ms(WINDOWS)
    assert SmoothSwitch(spark, sink, WINDOWS, str(tmp_path / "switch")).plan == plan      # persisted
    old = sw.start("split", split, opts, str(tmp_path / "old"), trigger={"availableNow": True})  # the old one goes on
    for q in (sw.queries["combine"], old):
        assert q.awaitTermination(300) and q.exception() is None
    assert sw.old_done.is_set(), "the old query's output watermark never reached T + p"

    ref = BatchCollector()
    available_now(split.apply(source_df(spark, opts)), str(tmp_path / "ref"), ref)()
    want = _windows(r for b in sorted(ref.batches) for r in ref.batches[b])
    old_rows = _windows(r for (p, _), rows in got.items() if p == "split" for r in rows)
    new_rows = _windows(r for (p, _), rows in got.items() if p == "combine" for r in rows)
    assert len(set(want)) == len(want)
    assert sorted(old_rows + new_rows) == want
    assert all(w[2] < plan.t_ms for w in old_rows) and all(w[2] >= plan.t_ms for w in new_rows)
    # both plans emitted windows, and windows on both sides of T hold phase-2 records
    assert any(w[2] == plan.t_ms for w in new_rows)
    assert any(w[2] < plan.t_ms < w[3] for w in old_rows)
    assert [r for rows in got.values() for r in rows if r["kind"] == "error"] == []
