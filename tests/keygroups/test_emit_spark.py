"""``Pipeline.emit`` and computed inputs on Spark.

A Q5-shaped pipeline of every windowing stage type, each followed by a re-keyed stage: bids
counted per auction (the keyed slicing table) -> the hottest auction per window (Dataflow panes,
its value the JSON text of two columns, computed in Python) -> pane counts per bucket (one slicer
engine per key, keyed by a computed column) -> a last Dataflow stage. The first three are kept
with ``emit``. On Spark the ``result`` rows must carry every column of their stage with the
declared types, exactly as ``run_local`` gives them on the same micro-batches, and the output
schema must be the one both runners declare.
"""

from __future__ import annotations

import json
import math
import random

from dataflow_kafka.keygroups import Computed, Pipeline, json_object
from dataflow_kafka.keygroups.plan import frame_types
from dataflow_kafka.slicer.stage import SlicerStage
from tests.keygroups.toy_stages import Hottest
from tests.support import BatchCollector, now_ms, source_batches
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, Max, Median, TumblingWindow


PARTITIONS = 2


def field(name: str, ddl: str) -> Computed:
    return Computed(lambda df: [json.loads(v)[name] for v in df["value"]], ddl, ("value",))


def pipeline() -> Pipeline:
    counts = SlicerStage(key={"auction": field("auction", "bigint")}, value=field("price", "double"),
                         windows={"1s": TumblingWindow(1000)}, aggregations=[Count()], allowed_lateness_ms=500,
                         num_key_groups=2, name="counts")
    hot = WindowingStage(key={"w": "window_end_ms"}, value=json_object("auction", "count"), windows=TumblingWindow(1000),
                         aggregations=[Hottest()], trigger=AfterWatermark(late=AfterCount(1)),
                         accumulation_mode="accumulating", allowed_lateness_ms=500, num_key_groups=2, name="hot")
    per_key = SlicerStage(key={"b": Computed(lambda df: df["w"] // 1000 % 3, "bigint", ("w",))}, value="pane_index",
                          windows={"2s": TumblingWindow(2000)}, aggregations=[Count(), Median()],
                          allowed_lateness_ms=0, num_key_groups=3, name="per_key")
    last = WindowingStage(key={"q": "query_id"}, value="count", windows=TumblingWindow(4000), aggregations=[Max()],
                          num_key_groups=2, name="last")
    return counts.then(hot).then(per_key).then(last).emit("counts", "hot", "per_key")


def _events(base: int, n: int, rnd: random.Random) -> list[dict]:
    out = []
    for i in range(n):
        ts = base + i * 25 - (rnd.randint(0, 400) if rnd.random() < 0.2 else 0)
        body = {"ts": ts, "auction": rnd.randrange(5), "price": rnd.randint(1, 9)}
        out.append({"key": b"bid", "value": json.dumps(body).encode(), "partition": rnd.randrange(PARTITIONS)})
    return out


def _comparable(rows: list[dict], columns: list[str]) -> list:
    out = []
    for r in rows:
        vals = []
        for c in columns:
            v = r.get(c)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                v = None
            elif isinstance(v, float):
                v = round(v, 9)
            vals.append(v)
        out.append(tuple(vals))
    return sorted(out, key=repr)


def test_emitted_rows_and_schema_equal_the_local_run(spark, kafka, tmp_path):
    topic = kafka.topic(PARTITIONS)
    kafka.produce(topic, _events(now_ms() - 60_000, 600, random.Random(22)))
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                 "eventTimeField": "ts", "maxOffsetsPerTrigger": "200"}.items():
        reader = reader.option(k, v)
    source = reader.load()
    p = pipeline()
    out_df = p.apply(source)
    ck = str(tmp_path / "ck")
    got = BatchCollector()
    q = out_df.writeStream.foreachBatch(got).option("checkpointLocation", ck).trigger(availableNow=True).start()
    assert q.awaitTermination(300) and q.exception() is None
    batches = sorted(got.batches)
    assert len(batches) >= 3

    spark_schema = [(f.name, f.dataType.simpleString()) for f in out_df.schema.fields]
    inputs = source_batches(kafka.consume_all(topic), ck, batches)
    assert spark_schema == p.output_columns(input=source) == p.bound_specs(frame_types(inputs[0]))[-1].output_columns()
    assert dict(spark_schema)["auction"] == "bigint" and dict(spark_schema)["b"] == "bigint"

    local = p.run_local(inputs)
    names = [c for c, _ in spark_schema]
    for b, frame in zip(batches, local):
        assert list(frame.columns) == names
        spark_rows = [r for r in got.batches[b] if r["kind"] in ("result", "data", "dropped")]
        local_rows = [r for r in frame.to_dict("records") if r["kind"] in ("result", "data", "dropped")]
        assert _comparable(spark_rows, names) == _comparable(local_rows, names), f"batch {b}"
    results = [r for b in batches for r in got.batches[b] if r["kind"] == "result"]
    for stage, cols in (("counts", ["auction", "query_id", "window_start_ms", "count"]),
                        ("hot", ["w", "window_start_ms", "hottest", "timing"]),
                        ("per_key", ["b", "window_start_ms", "count", "median"])):
        mine = [r for r in results if r["topic"] == stage]
        assert mine and all(r[c] is not None for r in mine for c in cols), stage   # nothing lost on the way
    # the pane value is JSON text of the aggregate, here itself the JSON text json_object made
    assert all(json.loads(json.loads(r["hottest"]))["count"] >= 1 for r in results if r["topic"] == "hot")
