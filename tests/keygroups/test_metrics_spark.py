"""Per-stage metrics in Spark's progress, over Kafka: the example listener
(``docs/examples/metrics_listener.py``) hears, for every micro-batch and stage, exactly the fold of
that batch's ``metrics`` rows (the minimum watermark over key groups, the summed counters), the
late records the stage dropped, and the consumer lag Spark's own Kafka source would report."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pandas as pd

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.watermarks import AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Count, TumblingWindow
from tests.support import BatchCollector, now_ms

ROOT = Path(__file__).parents[2]
PER_BATCH = 100
N = 600


def _listener_class():
    spec = importlib.util.spec_from_file_location("metrics_listener", ROOT / "docs" / "examples" / "metrics_listener.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PrintStageMetrics


def _fold(rows: pd.DataFrame, stage: str) -> dict:
    mine = [json.loads(m) for m in rows.loc[(rows["kind"] == "metrics") & (rows["topic"] == stage), "metrics"]]
    marks = lambda k: [m[k] for m in mine if m[k] is not None]  # noqa: E731
    out = {k: (min(marks(k)) if marks(k) else None) for k in ("watermark_in_ms", "watermark_out_ms")}
    out.update({k: sum(m[k] for m in mine) for k in ("records_in", "records_out", "retractions")})
    out.update({f"dropped_{r}": sum(m.get(f"dropped_{r}", 0) for m in mine) for r in ("late", "null", "closed")})
    out["key_groups"] = len(mine)
    return out


def test_the_listener_hears_each_stage_metrics_folded_from_the_batch_rows(spark, kafka, tmp_path, capsys):
    topic = kafka.topic(2, prefix="metrics")
    base = (now_ms() - 120_000) // 1_000 * 1_000
    records = []
    for i in range(N):
        late = 5_000 if i % 20 == 19 else 0              # beyond the lateness: dropped as late
        records.append({"value": json.dumps({"k": f"k{i % 4}", "ts": base + i * 50 - late}).encode(),
                        "partition": i % 2})
    kafka.produce(topic, records)
    windows = WindowingStage(key="get_json_object(CAST(value AS STRING), '$.k')", value="offset", name="windows",
                             windows=TumblingWindow(1_000), aggregations=[Count()], trigger=AfterWatermark(),
                             allowed_lateness_ms=500, num_key_groups=3)
    pipeline = Pipeline([windows])
    listener = _listener_class()(pipeline)
    spark.streams.addListener(listener)
    got = BatchCollector()
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("maxOffsetsPerTrigger", str(PER_BATCH)).load())
    try:
        q = (pipeline.apply(src).writeStream.foreachBatch(got).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(600) and q.exception() is None, q.exception()
        deadline = time.monotonic() + 30                  # the listener bus delivers asynchronously
        while len(listener.seen) < len(q.recentProgress) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    heard = {m["batch_id"]: m for m in listener.seen}
    assert sorted(heard) == sorted(got.batches) and len(heard) == N // PER_BATCH
    for b in sorted(got.batches):
        rows = pd.DataFrame(got.batches[b])
        assert heard[b]["stages"]["windows"] == _fold(rows, "windows"), b
        assert heard[b]["sources"][0]["total_lag"] == N - PER_BATCH * (b + 1)
    assert sum(m["stages"]["windows"]["records_in"] for m in heard.values()) == N
    dropped = sum(int(pd.DataFrame(r).query("kind == 'dropped'")["dropped_count"].sum()) for r in got.batches.values())
    assert sum(m["stages"]["windows"]["dropped_late"] for m in heard.values()) == dropped > 0
    assert heard[max(heard)]["state"][0]["operator"] == ("windows",)
    assert "batch 0 windows: watermark in" in capsys.readouterr().out
