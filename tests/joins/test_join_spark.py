"""Join stages on Spark over Kafka, each batch equal to ``Pipeline.run_local`` on the same
micro-batches (rebuilt from the topics and the offset log), across a restart from the checkpoint
and a replayed batch:

1. two sources (one ``readStream`` per topic) into a windowed left outer join with early and
   late panes, accumulating and retracting; ``auctions`` stalls after 3 s for several batches
   while ``persons`` runs to 30 s: the join's output watermark stays at the auctions', nothing of
   either input is late because of the stall, and once auctions catch up their rows join; the
   folded output equals a brute-force join per window;
2. one source reading both topics, split by topic, into a full outer interval join with a
   same-key stage fused after it (one stateful operator).
"""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter

import pandas as pd
import pytest

from dataflow_kafka.joins import LEFT, RIGHT, SidePunctuation, Row
from dataflow_kafka.joins.stage import IntervalJoinStage, JoinInput, WindowJoinStage, current_joins
from dataflow_kafka.keygroups import Computed, Pipeline
from dataflow_kafka.keygroups.pipeline import stateful_operators
from tests.joins.reference import window_join
from tests.keygroups.test_composed_spark import _canonical
from tests.keygroups.toy_stages import TumblingCount
from tests.support import BatchCollector, forget_batches_from, now_ms, source_batches
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.windowing import TumblingWindow


PARTITIONS = 2
PER_BATCH = 60
STALL_MS = 3_000          # auctions: records up to here in phase 1, then nothing until the restart
WINDOW_MS, LATENESS_MS = 1_000, 1_500


def _key(frame: pd.DataFrame) -> list:
    return [bytes(k).decode() for k in frame["key"]]


def _v(frame: pd.DataFrame) -> list:
    return [json.loads(v)["v"] for v in frame["value"]]


def sides(split: bool) -> tuple[JoinInput, JoinInput]:
    key, v = Computed(_key, "string"), Computed(_v, "bigint")
    return (JoinInput("persons", key=key, columns={"pv": v}, select={"topic": SPLIT["persons"]} if split else None),
            JoinInput("auctions", key=key, columns={"av": v}, select={"topic": SPLIT["auctions"]} if split else None))


SPLIT: dict = {}          # test 2: {input: topic}, set before the stages are built


def _records(rnd: random.Random, base: int, start_ms: int, end_ms: int, n: int) -> list[dict]:
    """``n`` records over ``[start_ms, end_ms)``: up to 400 ms out of order, every 13th 1.2 s late
    (within the allowed lateness), every 29th 8 s late (beyond it, and beyond a batch's span)."""
    out = []
    for i in range(n):
        ts = base + start_ms + (end_ms - start_ms) * i // n - rnd.randrange(5) * 100
        ts -= 1_200 if i % 13 == 12 else 8_000 if i % 29 == 28 else 0
        out.append({"key": f"k{rnd.randrange(5)}".encode(), "partition": rnd.randrange(PARTITIONS),
                    "value": json.dumps({"v": rnd.randrange(1000), "ts": max(base, ts)}).encode()})
    return out


def _reader(spark, kafka, topics: str, per_batch: int = PER_BATCH):
    r = spark.readStream.format("dataflow-kafka")
    for k, v in {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topics, "startingOffsets": "earliest",
                 "eventTimeField": "ts", "maxOffsetsPerTrigger": str(per_batch), "watermarkDelayMs": "0"}.items():
        r = r.option(k, v)
    return r.load()


def _start(out, ck: str, got: BatchCollector) -> None:
    q = out.writeStream.foreachBatch(got).option("checkpointLocation", ck).trigger(availableNow=True).start()
    assert q.awaitTermination(600)
    assert q.exception() is None, q.exception()


def _replay_last(out, ck: str, got: BatchCollector) -> None:
    last = max(got.batches)
    before = _canonical(pd.DataFrame(got.batches[last]))
    forget_batches_from(ck, last)                                # a crash during the last batch
    _start(out, ck, got)
    assert _canonical(pd.DataFrame(got.batches[last])) == before, "the replayed batch differs"


def _assert_equals_run_local(got: BatchCollector, batches: list, expected: list) -> None:
    assert len(expected) == len(batches)
    for b, exp in zip(batches, expected):
        kinds = ("data", "dropped", "punctuation", "metrics")
        spark_rows = [r for r in _canonical(pd.DataFrame(got.batches[b]), kinds)]
        assert spark_rows == _canonical(exp, kinds), f"batch {b} differs from the local run"


def _engine_batches(frames: dict[str, list[pd.DataFrame]]) -> list:
    """The micro-batches as the join engine sees them: rows per side, each side's watermark (min
    over its partitions, once each has punctuated) as its punctuation."""
    newest: dict = {}
    out = []
    for i in range(len(frames["persons"])):
        rows, puncts = [], []
        for side, name in ((LEFT, "persons"), (RIGHT, "auctions")):
            f = frames[name][i]
            if "kind" not in f.columns:                     # the source did not move in this batch
                continue
            data = f[f["kind"] == "data"]
            rows += [Row(side, k, int(t), v) for k, t, v in zip(_key(data), data["event_time_ms"], _v(data))]
            for p, w in zip(f.loc[f["kind"] == "punctuation", "partition"], f.loc[f["kind"] == "punctuation",
                                                                                   "punctuation_ms"]):
                if not pd.isna(w):
                    newest[(name, p)] = max(newest.get((name, p), int(w)), int(w))
            marks = [w for (n, _), w in newest.items() if n == name]
            if len(marks) == PARTITIONS:
                puncts.append(SidePunctuation(side, min(marks)))
        out.append((rows, puncts, 0))
    return out


@pytest.fixture(scope="module")
def two_sources(spark, kafka, tmp_path_factory):
    root = tmp_path_factory.mktemp("join-two-sources")
    topics = {s: kafka.topic(PARTITIONS, prefix=s) for s in ("persons", "auctions")}
    stage = WindowJoinStage(*sides(False), window=TumblingWindow(WINDOW_MS), how="left_outer",
                            trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
                            accumulation_mode="accumulating_and_retracting", allowed_lateness_ms=LATENESS_MS,
                            num_key_groups=3)
    pipeline = Pipeline([stage])
    # 360 persons in 3 micro-batches, then 240 auctions in 2: few batches, each costs ~1 s of Spark
    out = pipeline.apply({s: _reader(spark, kafka, t, 2 * PER_BATCH) for s, t in topics.items()})
    assert stateful_operators(out) == 1
    rnd, base = random.Random(23), (now_ms() - 60_000) // 1_000 * 1_000
    ck, got = str(root / "ck"), BatchCollector()
    kafka.produce(topics["persons"], _records(rnd, base, 0, 30_000, 6 * PER_BATCH))
    kafka.produce(topics["auctions"], _records(rnd, base, 0, STALL_MS, 25))
    _start(out, ck, got)
    phase1 = sorted(got.batches)
    kafka.produce(topics["auctions"], _records(rnd, base, STALL_MS, 30_000, 4 * PER_BATCH))
    _start(out, ck, got)                                          # a restart from the checkpoint
    _replay_last(out, ck, got)
    batches = sorted(got.batches)
    frames = {s: source_batches(kafka.consume_all(t), ck, batches, topic=t) for s, t in topics.items()}
    return {"stage": stage, "pipeline": pipeline, "got": got, "batches": batches, "phase1": phase1,
            "frames": frames, "base": base}


def test_two_source_join_equals_run_local_across_restart_and_replay(two_sources):
    got, batches, frames = two_sources["got"], two_sources["batches"], two_sources["frames"]
    assert len(batches) >= 5, batches
    _assert_equals_run_local(got, batches, two_sources["pipeline"].run_local(frames))


def test_the_folded_join_equals_a_brute_force_join_per_window(two_sources):
    stage, got = two_sources["stage"], two_sources["got"]
    spark_frames = [pd.DataFrame(got.batches[b]) for b in two_sources["batches"]]
    folded = {(repr(k), w): Counter({((lt[0], lt[1][0]) if lt else None, (rt[0], rt[1][0]) if rt else None): n
                                     for (lt, rt), n in c.items()})
              for (k, w), c in current_joins(spark_frames, stage).items()}
    expected = window_join(_engine_batches(two_sources["frames"]), TumblingWindow(WINDOW_MS), "left_outer", LATENESS_MS)
    assert folded == expected and len(expected) > 50
    timings = {r["timing"] for f in spark_frames for r in f[f["kind"] == "data"].to_dict("records")}
    assert timings == {"EARLY", "ON_TIME", "LATE"}
    assert any(f.loc[f["kind"] == "data", "is_retraction"].any() for f in spark_frames)


def test_a_stalled_input_holds_the_join_back_and_loses_nothing(two_sources):
    got, phase1, base = two_sources["got"], two_sources["phase1"], two_sources["base"]
    assert len(phase1) >= 3, phase1                    # persons: 3 batches; auctions: records in the first
    held = [r["punctuation_ms"] for b in phase1 for r in got.batches[b] if r["kind"] == "punctuation"]
    assert held and max(p for p in held if p is not None) <= base + STALL_MS - LATENESS_MS
    closed = [r["window_end_ms"] for b in phase1 for r in got.batches[b] if r["kind"] == "data" and r["timing"] != "EARLY"]
    assert closed and max(closed) <= base + STALL_MS          # persons' later windows: early panes only
    rows = got.rows()
    assert max(r["window_end_ms"] for r in rows if r["kind"] == "data") > base + 25_000, "released after the stall"
    late = Counter()
    for r in rows:
        if r["kind"] == "metrics":
            for name, reasons in json.loads(r["metrics"])["dropped"].items():
                late[name] += reasons.get("late", 0)
    # each input's late rows are its own (records 8 s behind their partition), not the stall's:
    # persons ran 27 s ahead of auctions, which would have made all 240 auctions of phase 2 late
    assert 0 < late["auctions"] <= 240 // 29 + 2 and late["persons"] <= 2, late


def test_one_source_split_by_topic_into_an_interval_join_with_a_fused_stage(spark, kafka, tmp_path):
    topics = {s: kafka.topic(PARTITIONS, prefix=s) for s in ("persons", "auctions")}
    SPLIT.update(topics)
    join = IntervalJoinStage.between(*sides(True), -500, 1_000, how="full_outer", allowed_lateness_ms=LATENESS_MS,
                                     num_key_groups=2)
    count = TumblingCount(key="key", value="av", size_ms=2_000, num_key_groups=2, name="matched")
    pipeline = Pipeline([join, count]).emit(join.name or "interval_join")
    assert len(pipeline.plan()) == 1
    out = pipeline.apply(_reader(spark, kafka, ",".join(topics.values())))
    assert stateful_operators(out) == 1
    fan_out = Pipeline([TumblingCount(key="k", value="av", name="up")]).then(
        WindowJoinStage(JoinInput("l", key="k", columns={"lc": "count"}), JoinInput("r", key="k", columns={"rc": "count"}),
                        window=TumblingWindow(1_000)))
    assert stateful_operators(fan_out.apply(_reader(spark, kafka, topics["persons"]).withColumn("k", _text_key())
                                            .withColumn("av", _text_key()))) == 2     # the upstream once
    rnd, base = random.Random(5), (now_ms() - 60_000) // 1_000 * 1_000
    ck, got = str(tmp_path / "ck"), BatchCollector()
    for s in topics.values():
        kafka.produce(s, _records(rnd, base, 0, 12_000, 2 * PER_BATCH))
    _start(out, ck, got)
    for s in topics.values():
        kafka.produce(s, _records(rnd, base, 12_000, 20_000, PER_BATCH))
    _start(out, ck, got)
    _replay_last(out, ck, got)
    batches = sorted(got.batches)
    assert len(batches) >= 4, batches
    records = [m for t in topics.values() for m in kafka.consume_all(t)]
    frames = source_batches(records, ck, batches)
    _assert_equals_run_local(got, batches, pipeline.run_local(frames))
    joined = [r for r in got.rows("result")]
    assert any(r["persons_event_time_ms"] is None for r in joined) and any(r["auctions_event_time_ms"] is None
                                                                           for r in joined)
    assert sum(1 for r in got.rows("data")) > 0


def _text_key():
    from pyspark.sql import functions as F

    return F.col("key").cast("string")
