"""Per-stage metrics rows without Spark: every stage writes one per key group and batch with its
input and output watermarks, the records it took and emitted, its retractions and its dropped
records by reason, beside its own counters; the values match the rows the stage emitted, and a
stage's own counter named like a standard one is kept under ``own_``. ``progress_metrics`` reads
a progress's observations, state operators and consumer lag."""

from __future__ import annotations

import json

import pandas as pd

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.metrics import OBSERVATION_PREFIX, progress_metrics, stage_metrics
from dataflow_kafka.keygroups.stage import Dropped
from dataflow_kafka.watermarks import AfterCount, AfterWatermark
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Sum, TumblingWindow
from tests.keygroups.test_pipeline_local import batch
from tests.keygroups.toy_stages import TumblingCount


def _metrics(frames: list[pd.DataFrame], stage: str) -> list[list[dict]]:
    """Per batch, the stage's metrics objects (one per key group)."""
    return [[json.loads(m) for m in f.loc[(f["kind"] == "metrics") & (f["topic"] == stage), "metrics"]]
            for f in frames]


def test_every_stage_reports_watermarks_counts_and_drops_per_key_group_and_batch():
    counts = TumblingCount(name="counts", num_key_groups=3)
    sums = WindowingStage(key="k", value="count", windows=TumblingWindow(2_000), aggregations=[Sum()],
                          trigger=AfterWatermark(early=AfterCount(1)), accumulation_mode="accumulating_and_retracting",
                          num_key_groups=2, name="sums")
    recs = [(0, 0, "a", 1.0, 100), (1, 0, "b", 1.0, 900), (2, 0, "a", None, 300), (0, 1, "a", 1.0, 1500)]
    b1 = batch(recs, {0: 1500, 1: 900, 2: 1200})
    b2 = batch([(1, 1, "b", 1.0, 200), (1, 2, "b", 1.0, 1100), (2, 1, "c", 1.0, 2_300)], {0: 2600, 1: 2100, 2: 2500})
    b3 = batch([], {0: 5000, 1: 5000, 2: 5000})
    out = Pipeline([counts, sums]).run_local([b1, b2, b3])
    m = _metrics(out, "counts")
    assert [len(per) for per in m] == [3, 3, 3]                   # every key group, every batch
    assert [sum(x["records_in"] for x in per) for per in m] == [4, 3, 0]
    assert [sum(x.get("dropped_null", 0) for x in per) for per in m] == [1, 0, 0]
    assert [sum(x.get("dropped_late", 0) for x in per) for per in m] == [0, 1, 0]
    assert [{x["watermark_in_ms"] for x in per} for per in m] == [{900}, {2100}, {5000}]
    s = _metrics(out, "sums")
    assert [len(per) for per in s] == [2, 2, 2]
    # the second operator took what the first emitted, and its watermarks follow the first's
    assert [sum(x["records_in"] for x in per) for per in s] == [sum(x["records_out"] for x in per) for per in m]
    assert [{x["watermark_in_ms"] for x in per} for per in s] == [{x["watermark_out_ms"] for x in per} for per in m]
    for f, per in zip(out, s):
        data = f[f["kind"] == "data"]
        assert sum(x["records_out"] for x in per) == len(data)
        assert sum(x["retractions"] for x in per) == int(data["is_retraction"].fillna(False).sum())
    assert sum(x["retractions"] for per in s for x in per) > 0     # an early pane corrected


def test_a_stage_counter_named_like_a_standard_metric_is_kept_apart():
    got = stage_metrics([1, 2], None, 5, 4, [Dropped("k", "late", 2), Dropped("j", "late", 1)], {"records_in": 9,
                                                                                                 "held": 3})
    assert got == {"watermark_in_ms": 5, "watermark_out_ms": 4, "records_in": 2, "records_out": 0, "retractions": 0,
                   "dropped_late": 3, "own_records_in": 9, "held": 3}


def test_progress_metrics_reads_observations_state_operators_and_lag():
    progress = {
        "batchId": 4,
        "observedMetrics": {f"{OBSERVATION_PREFIX}counts": {"watermark_out_ms": 900, "records_in": 7},
                            "users_own": {"x": 1}},
        "stateOperators": [{"operatorName": "transformWithStateInPandasExec", "numRowsTotal": 3,
                            "memoryUsedBytes": 1000, "customMetrics": {"rocksdbSstFileSize": 10}}],
        "sources": [{"description": "dataflow-kafka", "startOffset": None,
                     "endOffset": json.dumps({"v": 2, "partitions": {"t": {"0": {"o": 40, "s": 0}, "1": {"o": 10}}}}),
                     "latestOffset": json.dumps({"t": {"0": 50, "1": 10}})}],
    }
    got = progress_metrics(progress, Pipeline([TumblingCount(name="counts")]))
    assert got["batch_id"] == 4
    assert got["stages"] == {"counts": {"watermark_out_ms": 900, "records_in": 7}}
    assert got["state"] == [{"operator": ("counts",), "key_groups": 3, "memory_bytes": 1000,
                             "custom": {"rocksdbSstFileSize": 10}}]
    assert got["sources"][0]["lag"] == {"t": {"0": 10, "1": 0}}
    assert got["sources"][0]["max_lag"] == 10 and got["sources"][0]["total_lag"] == 10
    connect_form = {"observedMetrics": {f"{OBSERVATION_PREFIX}counts": {
        "values": [900, 7], "schema": {"type": "struct", "fields": [{"name": "watermark_out_ms"}, {"name": "records_in"}]}}}}
    assert progress_metrics(connect_form)["stages"] == got["stages"]         # a Spark Connect client's progress
    spark_kafka = {"sources": [{"endOffset": json.dumps({"t": {"0": 5}}), "latestOffset": json.dumps({"t": {"0": 8}})}]}
    assert progress_metrics(spark_kafka)["sources"][0]["lag"] == {"t": {"0": 3}}       # Spark's own connector
