"""Composed queries on Spark: every engine's stage in one query with the others.

Each test runs a pipeline over Kafka in two AvailableNow runs (a restart from the checkpoint in
between), then crashes the last batch (its commit deleted) and runs again: the replayed batch must
give the same rows. The output of every batch must equal the pipeline's local run on the same
micro-batches (rebuilt from the topic and the offset log, ``tests.support.source_batches``), and
its data must equal the same engines run one after the other without Spark and without key-group
parallelism (one key group per stage, no fusion): the stage layer changes where work runs, not
what it computes.

1. optimistic sessionisation -> slicer windows (re-keyed from user to page)
2. slicer -> Dataflow trigger: early, on-time and late panes on window results (fused)
3. two keyed stages with different keys: per (user, page) windows -> per page windows
4. window queries added halfway by control-topic commands, in the slicer and the Dataflow stage
"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pandas as pd

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.optimistic import StatefulMap
from dataflow_kafka.optimistic.stage import OptimisticStage
from dataflow_kafka.slicer.stage import SlicerStage
from tests.support import BatchCollector, forget_batches_from, now_ms, source_batches
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, Max, Mean, SlidingWindow, Sum, TumblingWindow


PARTITIONS = 3
USER = "CAST(key AS STRING)"
PAGE = "get_json_object(CAST(value AS STRING), '$.page')"
V = "CAST(get_json_object(CAST(value AS STRING), '$.v') AS DOUBLE)"


def _clicks(base: int, start: int, n: int, rnd: random.Random) -> list[dict]:
    """Clicks 20 ms apart, 30% up to 900 ms out of order, every 37th 1.2 s late, every 61st 3 s late,
    every 71st without v."""
    out = []
    for i in range(start, start + n):
        ts = base + i * 20 - (rnd.randint(0, 900) if rnd.random() < 0.3 else 0) - (3_000 if i % 61 == 0 else 0)
        ts -= 1_200 if i % 37 == 0 else 0
        body = {"page": rnd.choice(["/", "/cart", "/pay", "/item"]), "ts": ts}
        if i % 71:
            body["v"] = rnd.randint(1, 9)
        out.append({"key": f"u{rnd.randrange(6)}".encode(), "value": json.dumps(body).encode(),
                    "partition": rnd.randrange(PARTITIONS)})
    return out


def _prepare(frames: list[pd.DataFrame], columns: dict) -> list[pd.DataFrame]:
    """The first stage's column inputs computed in Python as the SQL expressions compute them."""
    for f in frames:
        data = (f["kind"] == "data").to_numpy()
        bodies = [json.loads(v) if d else {} for v, d in zip(f.get("value", [None] * len(f)), data)]
        keys = [k.decode() if d else None for k, d in zip(f.get("key", [None] * len(f)), data)]
        for name, how in columns.items():
            f[name] = [how(k, b) if d else None for k, b, d in zip(keys, bodies, data)]
    return frames


def _canonical(frame: pd.DataFrame, kinds=("data", "result", "dropped", "punctuation", "modification")) -> list:
    rows = []
    for r in frame.to_dict("records"):
        if r["kind"] not in kinds:
            continue
        if r["kind"] == "punctuation":
            rows.append(("punctuation", r["topic"], r["partition"], _v(r["punctuation_ms"])))
        elif r["kind"] == "modification":
            rows.append(("modification", r["topic"], _v(r["control_offset"])))
        elif r["kind"] == "dropped":
            rows.append(("dropped", r["topic"], r["dropped_key"], r["dropped_reason"], _v(r["dropped_count"])))
        else:
            body = {k: _v(v) for k, v in r.items() if k not in _CONTROL and _v(v) is not None}
            rows.append((r["kind"], r.get("topic") if r["kind"] == "result" else "", _v(r["event_time_ms"]),
                         tuple(sorted(body.items()))))
    return sorted(rows, key=repr)


_CONTROL = {"kind", "topic", "partition", "offset", "event_time_ms", "punctuation_ms", "modification",
            "control_offset", "processing_time_ms", "error", "dropped_key", "dropped_reason", "dropped_count",
            "metrics", "key_group", "key"}


def _v(x):
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA:
        return None
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float):                    # a column with nulls in a batch turns ints to floats
        x = round(x, 9)
        return int(x) if x.is_integer() else x
    if isinstance(x, (bytes, bytearray)):
        return bytes(x)
    if isinstance(x, list):
        return tuple(_v(y) for y in x)
    return x


def _data_only(rows: list) -> list:
    """Data and result rows without stage-instance identities (what one-key-group runs share)."""
    return sorted((r for r in rows if r[0] in ("data", "result")), key=repr)


def _sequential(pipeline: Pipeline) -> Pipeline:
    """The same stages with one key group each, to run unfused: the engines one after the other."""
    p = Pipeline([dataclasses.replace(s, num_key_groups=1) for s in pipeline.stages])
    return p.emit(*pipeline.chain.emit) if pipeline.chain.emit else p


def run_composed(spark, kafka, tmp_path, pipeline: Pipeline, prepare: dict, *, commands=(), seed=1, n=(450, 300),
                 delay_ms=0, **apply_options):
    topic = kafka.topic(PARTITIONS)
    control = kafka.topic(1, prefix="control") if commands else None
    rnd = random.Random(seed)
    base = (now_ms() - 60_000) // 60_000 * 60_000      # windows fall the same way in every run
    chunks = [_clicks(base, 0, n[0], rnd), _clicks(base, n[0], n[1], rnd)]
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "maxOffsetsPerTrigger": "240", "watermarkDelayMs": str(delay_ms)}
    if control:
        opts["controlTopic"] = control
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in opts.items():
        reader = reader.option(k, v)
    out_df = pipeline.apply(reader.load(), **apply_options)
    ck = str(tmp_path / "ck")
    got = BatchCollector()

    def run():
        q = out_df.writeStream.foreachBatch(got).option("checkpointLocation", ck).trigger(availableNow=True).start()
        assert q.awaitTermination(300)
        assert q.exception() is None, q.exception()

    kafka.produce(topic, chunks[0])
    run()
    if commands:
        kafka.produce(control, [{"value": json.dumps(c).encode()} for c in commands])
    kafka.produce(topic, chunks[1])
    run()                                               # restart from the checkpoint
    batches = sorted(got.batches)
    assert len(batches) >= 4, batches
    last = batches[-1]
    before = _canonical(pd.DataFrame(got.batches[last]))
    forget_batches_from(ck, last)                       # a crash during the last batch
    run()
    assert sorted(got.batches) == batches
    assert _canonical(pd.DataFrame(got.batches[last])) == before, "the replayed batch differs"

    frames = source_batches(kafka.consume_all(topic), ck, batches, delay_ms=delay_ms, topic=topic)
    expected = pipeline.run_local(_prepare(frames, prepare))
    spark_rows = {b: _canonical(pd.DataFrame(got.batches[b])) for b in batches}
    for b, exp in zip(batches, expected):
        assert spark_rows[b] == _canonical(exp), f"batch {b} differs from the local run"
    sequential = _sequential(pipeline).run_local(_prepare(source_batches(kafka.consume_all(topic), ck, batches,
                                                                         delay_ms=delay_ms, topic=topic), prepare),
                                                 fuse=False)
    for b, seq in zip(batches, sequential):
        assert _data_only(spark_rows[b]) == _data_only(_canonical(seq)), f"batch {b} differs from the sequential run"
    return [r for b in batches for r in spark_rows[b]], {b: got.batches[b] for b in batches}


# -- the four compositions ------------------------------------------------------------------------

def _user(click: dict) -> str:
    return click["user"]


def _click(row: dict) -> dict:
    """A source row as a click: the user is the record key, page and time are in the value."""
    return {"user": bytes(row["key"]).decode(), **json.loads(row["value"])}


def _depth(state, click):
    """Per user, in event-time order: how many clicks on the same page in a row (order-sensitive)."""
    run = state[1] + 1 if state is not None and state[0] == click["page"] else 1
    return (click["page"], run), [(click["user"], click["page"], run)]


def _depth_columns(out) -> dict:
    return {"user": out[0], "page": out[1], "run": out[2]}


def test_optimistic_stage_then_slicer_windows(spark, kafka, tmp_path):
    sessions = OptimisticStage(stage=StatefulMap(_depth, key=_user, initial=None), num_key_groups=2,
                               from_row=_click, output=_depth_columns, output_key=("user",), name="runs",
                               output_schema=(("user", "string"), ("page", "string"), ("run", "bigint")))
    windows = SlicerStage(key="page", value="run", windows={"s": SlidingWindow(1_000, 500), "t": TumblingWindow(700)},
                          aggregations=[Count(), Max(), Mean()], allowed_lateness_ms=400, num_key_groups=3,
                          name="pages")
    pipe = Pipeline([sessions, windows])
    assert [len(op) for op in pipe.plan()] == [1, 1]                 # re-keyed: one shuffle
    rows, _ = run_composed(spark, kafka, tmp_path, pipe, {}, delay_ms=1_000)
    data = [r for r in rows if r[0] == "data"]
    assert len(data) > 20 and {dict(r[3])["query_id"] for r in data} == {"s", "t"}
    assert any(r[0] == "dropped" and r[1] == "runs" for r in rows)   # 3 s late clicks: behind the barrier


def test_slicer_then_dataflow_trigger_early_and_late_panes(spark, kafka, tmp_path):
    per_second = SlicerStage(key={"user": USER}, value=V, windows={"1s": TumblingWindow(1_000)},
                             aggregations=[Sum()], allowed_lateness_ms=1_500, num_key_groups=2, name="per_second",
                             output_watermark="input")         # updates travel on as late data
    panes = WindowingStage(key="user", value="sum", windows=TumblingWindow(2_000),   # updates of odd seconds: late
                           trigger=AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
                           accumulation_mode="accumulating", allowed_lateness_ms=2_000, aggregations=[Max()],
                           num_key_groups=2, name="panes")
    pipe = Pipeline([per_second, panes]).emit("per_second")
    assert [len(op) for op in pipe.plan()] == [2]                    # same key: fused
    rows, _ = run_composed(spark, kafka, tmp_path, pipe, {"user": lambda k, b: k, "slicer_value": lambda k, b: b.get("v")})
    timings = {dict(r[3]).get("timing") for r in rows if r[0] == "data"}
    updates = sum(1 for r in rows if r[0] == "result" and dict(r[3]).get("update"))
    dropped = [r for r in rows if r[0] == "dropped"]
    assert {"EARLY", "ON_TIME", "LATE"} <= timings, (timings, updates, dropped)   # late panes from updates
    assert any(dict(r[3]).get("update") for r in rows if r[0] == "result")
    assert any(r[0] == "dropped" and r[3] == "null" for r in rows)


def test_two_keyed_stages_with_different_keys(spark, kafka, tmp_path):
    per_user_page = SlicerStage(key={"user": USER, "page": PAGE}, value=V, windows={"1s": TumblingWindow(1_000)},
                                aggregations=[Sum(), Count()], allowed_lateness_ms=1_000, num_key_groups=3,
                                name="user_page")
    per_page = SlicerStage(key="page", value="sum", windows={"2s": SlidingWindow(2_000, 1_000)},
                           aggregations=[Max(), Count()], allowed_lateness_ms=0, num_key_groups=2, name="page")
    pipe = Pipeline([per_user_page, per_page])
    assert [len(op) for op in pipe.plan()] == [1, 1]
    rows, _ = run_composed(spark, kafka, tmp_path, pipe, {"user": lambda k, b: k, "page": lambda k, b: b["page"],
                                                          "slicer_value": lambda k, b: b.get("v")}, seed=3)
    assert {dict(r[3])["page"] for r in rows if r[0] == "data"} == {"/", "/cart", "/pay", "/item"}


def test_window_queries_added_halfway_in_every_key_group(spark, kafka, tmp_path):
    windows = SlicerStage(key={"user": USER}, value=V, windows={"1s": TumblingWindow(1_000)}, aggregations=[Sum()],
                          allowed_lateness_ms=1_000, num_key_groups=3, name="windows")
    panes = WindowingStage(key="user", value="sum", select={"query_id": "1s"}, windows={"3s": TumblingWindow(3_000)},
                           trigger=AfterWatermark(late=AfterCount(1)), accumulation_mode="accumulating",
                           allowed_lateness_ms=1_000, aggregations=[Sum()], num_key_groups=3, name="panes")
    commands = [{"op": "add_window", "stage": "windows", "id": "2s", "window": {"type": "sliding", "size_ms": 2_000,
                                                                               "slide_ms": 500}},
                {"op": "add_window", "stage": "panes", "id": "5s", "window": {"type": "tumbling", "size_ms": 5_000}}]
    pipe = Pipeline([windows, panes]).emit("windows")
    rows, batches = run_composed(spark, kafka, tmp_path, pipe, {"user": lambda k, b: k,
                                                                "slicer_value": lambda k, b: b.get("v")},
                                 commands=commands, seed=4)
    mods = [r for r in rows if r[0] == "modification"]
    assert sorted(m[2] for m in mods) == [0, 1] and {m[1] for m in mods} == {"panes"}   # forwarded once
    applied = [b for b, rs in batches.items() if any(r["kind"] == "modification" for r in rs)]
    assert len(applied) == 1
    first = applied[0]
    for query, kind in (("2s", "result"), ("5s", "data")):
        seen = {r["partition"] for b, rs in batches.items() for r in rs
                if r["kind"] == kind and r.get("query_id") == query}
        before = [r for b, rs in batches.items() if b < first for r in rs if r.get("query_id") == query]
        assert not before and len(seen) > 1, (query, seen)            # from that batch on, in several key groups
