"""keygroups.packed: key groups packed into Arrow blobs before the shuffle, unpacked in the processor."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest

from keygroups.packed import PAYLOAD_COLUMN, PackedKeyGroupProcessor, pack_batches, pack_key_groups, unpack_key_group
from tests.datasource.test_key_group_processor import OUT, CountingOperator


def _batch(rows):
    return pa.RecordBatch.from_pylist(rows, pa.schema([("key_group", pa.int32()), ("kind", pa.string()),
                                                       ("topic", pa.string()), ("partition", pa.int32()),
                                                       ("offset", pa.int64()), ("v", pa.float64())]))


def test_pack_then_unpack_gives_each_groups_rows_sorted_by_position():
    rows = [{"key_group": g, "kind": "data", "topic": "t", "partition": p, "offset": o, "v": float(o)}
            for o, (g, p) in enumerate([(1, 0), (0, 1), (1, 1), (2, 0), (1, 0), (0, 0)])]
    rows.append({"key_group": 1, "kind": "punctuation", "topic": "t", "partition": 0, "offset": None, "v": None})
    out = list(pack_batches([_batch(rows[:3]), _batch([]), _batch(rows[3:])], "key_group"))
    got = {}
    for b in out:
        assert b.schema.names == ["key_group", PAYLOAD_COLUMN] and b.num_rows == 1
        got.setdefault(b.column(0)[0].as_py(), []).append(b.column(1)[0].as_py())
    assert sorted(got) == [0, 1, 2] and all(len(v) == 1 for v in got.values())   # one blob per group
    # Blobs arriving in any order unpack to the same frame: sorted by (topic, partition, offset, kind).
    g1 = unpack_key_group(got[1])
    assert "key_group" not in g1.columns
    assert list(zip(g1["partition"], g1["offset"].astype(object))) == [(0, 0), (0, 4), (0, pd.NA), (1, 2)]
    assert g1["offset"].dtype == "Int64" and g1["v"].dtype == "float64"
    split = list(pack_batches([_batch(rows[:3]), _batch(rows[3:])], "key_group", rows_per_blob=1))
    g1_split = [b.column(1)[0].as_py() for b in split if b.column(0)[0].as_py() == 1]
    assert len(g1_split) == 2                          # one per input batch
    pd.testing.assert_frame_equal(unpack_key_group(g1_split[::-1]), g1)


class _PackedCounting(PackedKeyGroupProcessor, CountingOperator):
    """test_key_group_processor's counting operator, fed from packed key groups."""


@pytest.mark.spark
@pytest.mark.kafka
def test_packed_processor_sees_all_rows_and_every_punctuation(spark, kafka, tmp_path):
    from tests.support import BatchCollector, now_ms

    topic = kafka.topic(4)
    base = now_ms() - 60_000
    kafka.produce(topic, [{"key": b"k%d" % (i % 17), "value": json.dumps({"ts": base + i * 10}).encode(),
                           "partition": i % 4} for i in range(400)])
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts").load())
    packed = pack_key_groups(src, "key", 3)
    assert packed.columns == ["key_group", PAYLOAD_COLUMN]
    out_df = packed.groupBy("key_group").transformWithStateInPandas(
        _PackedCounting(), OUT, "Append", "None")
    out = BatchCollector()
    q = out_df.writeStream.foreachBatch(out).option("checkpointLocation", str(tmp_path / "ck")) \
        .outputMode("append").trigger(availableNow=True).start()
    q.awaitTermination(300)
    assert q.exception() is None
    rows = out.rows()
    assert sum(r["batch_rows"] for r in rows) == 400
    for b in out.batches:
        assert sorted(r["key_group"] for r in out.batches[b]) == [0, 1, 2]   # punctuations reach every group
    assert all(r["low_watermark_ms"] is not None for r in rows)
