"""keygroups.packed: key groups packed into Arrow blobs before the shuffle, unpacked in the processor."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa

from dataflow_kafka.keygroups.packed import PAYLOAD_COLUMN, pack_batches, pack_key_groups, unpack_key_group


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


def test_packed_and_unpacked_source_give_the_same_batches(spark, kafka, tmp_path):
    """One query reads the topic twice: a pipeline on packed source rows and the same pipeline on
    unpacked rows give every micro-batch the same output (same rows, same watermarks)."""
    from dataflow_kafka.keygroups import Pipeline
    from tests.keygroups.toy_stages import TumblingCount
    from tests.support import BatchCollector, now_ms

    topic = kafka.topic(4)
    base = now_ms() - 60_000
    kafka.produce(topic, [{"key": b"k%d" % (i % 17), "value": json.dumps({"ts": base + i * 10, "v": 1}).encode(),
                           "partition": i % 4} for i in range(400)])
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("maxOffsetsPerTrigger", "150").load())
    pipe = Pipeline([TumblingCount(key="CAST(key AS STRING)",
                                   value="CAST(get_json_object(CAST(value AS STRING), '$.v') AS DOUBLE)",
                                   size_ms=300, num_key_groups=3)])
    packed, unpacked = pipe.apply(src, pack_source=True), pipe.apply(src, pack_source=False, metrics="unpacked")
    assert packed.columns == unpacked.columns
    both = packed.selectExpr("'packed' AS path", "*").unionByName(unpacked.selectExpr("'unpacked' AS path", "*"))
    out = BatchCollector()
    q = both.writeStream.foreachBatch(out).option("checkpointLocation", str(tmp_path / "ck")) \
        .trigger(availableNow=True).start()
    assert q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert len(out.batches) >= 3

    def rows(batch, path):
        return sorted(repr(tuple(sorted((k, v) for k, v in r.items() if k != "path"))) for r in batch
                      if r["path"] == path)

    counts = 0
    for b, batch in out.batches.items():
        assert rows(batch, "packed") == rows(batch, "unpacked"), f"batch {b}"
        counts += sum(r["count"] or 0 for r in batch if r["path"] == "packed" and r["kind"] == "data")
    assert 0 < counts <= 400


def test_ingest_packing_routes_like_the_local_runner():
    """The Python-routed first operator's one-step ingest (route, fan out markers, pack) gives each
    key group exactly the rows the local runner routes to it."""
    from dataflow_kafka.keygroups.contract import control_frame
    from dataflow_kafka.keygroups.frames import by_key_group, ingest_frame, pack_frame
    from dataflow_kafka.keygroups.plan import ingest_columns
    from dataflow_kafka.optimistic.stage import OptimisticStage
    from dataflow_kafka.optimistic.stages import StatefulMap

    def key(x):
        return x[0]

    stage = OptimisticStage(stage=StatefulMap(lambda s, x: (s, [x]), key=key, initial=None), num_key_groups=3,
                            decode=lambda v: json.loads(v), name="s1")
    data = pd.DataFrame({"kind": ["data"] * 6, "topic": "t", "partition": [0, 1, 0, 1, 0, 1],
                         "offset": [0, 0, 1, 1, 2, 2], "event_time_ms": [5, 6, 7, 8, 9, 10],
                         "processing_time_ms": 100,
                         "value": [json.dumps([k, i]).encode() for i, k in enumerate("abcabd")]})
    control = control_frame([{"kind": "punctuation", "topic": "t", "partition": p, "offset": 3, "punctuation_ms": 4,
                              "processing_time_ms": 100} for p in (0, 1)]
                            + [{"kind": "modification", "modification": '{"op": "x"}', "control_offset": 0,
                                "processing_time_ms": 100},
                               {"kind": "error", "topic": "t", "partition": 0, "offset": 9, "error": "bad",
                                "processing_time_ms": 100}])
    frame = ingest_frame(pd.concat([data, control], ignore_index=True), stage)
    columns = [c for c in ingest_columns(stage) if c[0] != "key_group"]
    packed = pack_frame(frame, columns, 3)
    got = {int(g): unpack_key_group([p]) for g, p in zip(packed["key_group"], packed[PAYLOAD_COLUMN])}
    want = {kg: rows for kg, rows in by_key_group(frame, frame["key_group"].to_numpy(dtype=float, na_value=-1), 3)}
    assert sorted(got) == sorted(want) == [0, 1, 2]
    for kg in want:
        cols = ["kind", "topic", "partition", "offset", "punctuation_ms", "control_offset", "error", "item"]
        exp = unpack_key_group([_blob(want[kg][[c for c, _ in columns]], columns)])
        pd.testing.assert_frame_equal(got[kg][cols].reset_index(drop=True), exp[cols].reset_index(drop=True))
    assert all((got[kg]["kind"] == "punctuation").sum() == 2 for kg in got)     # markers reach every group
    assert (got[0]["kind"] == "error").sum() == 1 and not any((got[kg]["kind"] == "error").any() for kg in (1, 2))
    assert sum((g["kind"] == "data").sum() for g in got.values()) == (frame["kind"] == "data").sum()


def _blob(frame, columns):
    from dataflow_kafka.keygroups.frames import arrow_schema

    schema = arrow_schema(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        w.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
    return sink.getvalue().to_pybytes()
