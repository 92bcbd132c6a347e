"""keygroups.packed.SourcePacking: the first operator's routing and packing in the source's tasks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from dataflow_kafka.keygroups import Pipeline, json_field
from dataflow_kafka.keygroups.packed import ORDER_COLUMNS, unpack_key_group
from dataflow_kafka.keygroups.source_packing import SourcePacking
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.windowing import Count, Max, TumblingWindow
from tests.suite import examples

T0 = 1_700_000_000_000


def _stage(n: int, key=None):
    return SlicerStage(key=key or {"auction": json_field("auction")}, value="offset",
                       windows={"w": TumblingWindow(1_000)}, aggregations=[Count(), Max()], num_key_groups=n,
                       allowed_lateness_ms=0, name="s")


def _ts(ms):
    return None if ms is None else pd.Timestamp(ms, unit="ms", tz="UTC")


_values = st.one_of(st.integers(-2**63, 2**63 - 1).map(lambda a: json.dumps({"auction": a, "x": 1}).encode()),
                    st.sampled_from([b"not json", b'{"auction": "7"}', b'{"other": 1}', b"{}"]), st.none())
_row = st.tuples(st.sampled_from(["data"] * 6 + ["punctuation", "modification", "error"]), _values,
                 st.integers(0, 2), st.integers(-5_000, 50_000))


def _source_rows(rows):
    """Rows of the source's schema (``datasource.schema``) for ``(kind, value, partition, event ms)``."""
    out = []
    for i, (kind, value, partition, t) in enumerate(rows):
        data = kind == "data"
        out.append(dict(key=b"k", value=value if data else None, topic="t", partition=partition, offset=i,
                        timestamp=_ts(T0 + i) if data else None, timestampType=0 if data else None, kind=kind,
                        event_time=_ts(T0 + t) if data else None,
                        punctuation=_ts(T0 + t) if kind == "punctuation" else None,
                        modification='{"op": "x"}' if kind == "modification" else None,
                        processing_time=_ts(T0 + 60_000), error="bad" if kind == "error" else None,
                        control_offset=i if kind == "modification" else None))
    return out


def _local_routing(rows, stage, n):
    """What Spark's first operator gets per key group, as the local runner routes it: ``{key group:
    frame}`` (``keygroups.frames``' steps of ``Pipeline.run_local``)."""
    from dataflow_kafka.keygroups.frames import _local_inputs, by_key_group, groups_of_columns
    from dataflow_kafka.keygroups.stage import key_columns_of

    frame = pd.DataFrame(rows)
    for ts in ("event_time", "punctuation", "processing_time"):
        frame[f"{ts}_ms"] = pd.array([None if pd.isna(v) else int(v.value // 1_000_000) for v in frame[ts]],
                                     dtype="Int64")
    frame = _local_inputs(frame.drop(columns=["event_time", "punctuation", "processing_time", "timestamp"]), stage, 0)
    # a plain input under another name is the column on every row, as Spark's first operator computes it
    # (the local runner leaves it null in a batch without data rows)
    frame = frame.assign(**{name: frame[col] for name, col in SourcePacking.of(stage).renamed})
    groups = groups_of_columns(frame, key_columns_of(stage), n)
    return {kg: part for kg, part in by_key_group(frame, groups, n)}


def _unpacked(batches):
    blobs: dict = {}
    for b in batches:
        assert b.schema.names == ["key_group", "payload"] and b.schema.field(0).type == pa.int32()
        for g, p in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
            blobs.setdefault(g, []).append(p)
    return {g: unpack_key_group(ps) for g, ps in blobs.items()}


@settings(deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=40), n=st.integers(1, 6), cuts=st.lists(st.integers(0, 40), max_size=3),
       rows_per_blob=st.integers(1, 50), clean=st.booleans())
def test_the_source_packs_each_key_group_the_rows_the_local_runner_routes_to_it(rows, n, cuts, rows_per_blob, clean):
    """Any split of a task's record batches, any blob size: each key group unpacks to exactly the
    rows (and values, nulls, types) the local runner's routing gives it, markers in every group,
    other rows in group 0; the same rows ``keygroups.spark_steps`` packs on the JVM path. ``clean``:
    every value a JSON object with an integer key (the key's one Arrow pass over the column; any
    other value sends the column through pandas, as ``evaluate`` parses it)."""
    if clean:
        rows = [(k, json.dumps({"auction": (t * 7919) % 2**40 - 2**39, "x": [1]}).encode(), p, t) for k, _, p, t in rows]
    stage = _stage(n)
    packing = SourcePacking.of(stage)
    packing = SourcePacking(packing.columns, packing.renamed, packing.computed, packing.keys, n, rows_per_blob)
    from dataflow_kafka.datasource.schema import arrow_schema

    batch = pa.RecordBatch.from_pylist(_source_rows(rows), arrow_schema(False))
    bounds = sorted({0, len(rows), *[c for c in cuts if c <= len(rows)]})
    got = _unpacked(packing.pack(batch.slice(a, b - a) for a, b in zip(bounds, bounds[1:])))
    want = _local_routing(_source_rows(rows), stage, n)
    assert sorted(got) == sorted(want)
    names = [c for c, _ in packing.columns]
    for kg, frame in want.items():
        exp = frame[names].sort_values(list(ORDER_COLUMNS), kind="stable", na_position="last").reset_index(drop=True)
        pd.testing.assert_frame_equal(got[kg][names].reset_index(drop=True), exp, check_dtype=False)
        assert got[kg]["auction"].dtype == "Int64" and got[kg]["offset"].dtype == "Int64"


def test_a_stage_the_source_cannot_run_keeps_the_jvm_path():
    from dataflow_kafka.keygroups import Computed

    assert SourcePacking.of(_stage(2, key={"k": "CAST(key AS STRING)"})) is None            # SQL: Spark's
    assert SourcePacking.of(_stage(2, key={"k": Computed(lambda f: f["value"], "binary")})) is None  # columns unnamed
    assert SourcePacking.of(_stage(2, key={"k": "timestamp"})) is None                       # a timestamp column
    assert SourcePacking.of(_stage(2, key={"k": Computed(lambda f: f["event_time_ms"], "bigint",
                                                         ("event_time_ms",))})) is None     # not a column read() has
    assert SourcePacking.of(_stage(2, key={"k": "key"})).columns[-2:] == (("k", "binary"), ("slicer_value", "bigint"))


def test_the_option_refuses_what_apply_did_not_write():
    from dataflow_kafka.datasource.options import OptionError, parse_source_options

    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
    assert parse_source_options(base | {"keyGroupPacking": " "}, streaming=True).key_group_packing is None
    with pytest.raises(OptionError, match="keyGroupPacking.*not a packing"):
        parse_source_options(base | {"keyGroupPacking": "not base64!"}, streaming=True)
    import base64
    import pickle

    with pytest.raises(OptionError, match="keyGroupPacking.*holds a dict"):
        parse_source_options(base | {"keyGroupPacking": base64.b64encode(pickle.dumps({})).decode()}, streaming=True)
    packing = SourcePacking.of(_stage(3))
    back = parse_source_options(base | {"keyGroupPacking": packing.option()}, streaming=True).key_group_packing
    assert (back.columns, back.keys, back.num_key_groups, repr(back.computed)) == \
        (packing.columns, packing.keys, 3, repr(packing.computed))


def test_the_reader_path_gives_the_loaded_paths_output_across_a_restart(spark, kafka, tmp_path):
    """One query, one topic read twice: the pipeline given the reader (the source routes and packs)
    and given its ``load()`` (the JVM routes, a ``mapInArrow`` step packs) give every micro-batch the
    same rows; again after a restart from the checkpoint with more records."""
    from tests.support import BatchCollector

    topic = kafka.topic(3)

    def produce(lo, hi):
        kafka.produce(topic, [{"key": b"k", "partition": i % 3,
                               "value": (json.dumps({"auction": i % 11, "t": T0 + i * 7}).encode()
                                         if i % 37 else b"not json")} for i in range(lo, hi)])

    def reader():
        return (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "t")
                .option("maxOffsetsPerTrigger", "120"))

    pipe = Pipeline([_stage(3)])
    given = reader()
    assert "MapInArrow" not in pipe.apply(given)._jdf.queryExecution().analyzed().toString()
    assert given.load().columns[:2] == ["key", "value"]          # the caller's reader reads rows again
    out = BatchCollector()

    def run():
        packed = pipe.apply(reader(), metrics="source")
        loaded = pipe.apply(reader().load(), metrics="loaded")
        both = packed.selectExpr("'source' AS path", "*").unionByName(loaded.selectExpr("'jvm' AS path", "*"))
        q = both.writeStream.foreachBatch(out).option("checkpointLocation", str(tmp_path / "ck")) \
            .trigger(availableNow=True).start()
        assert q.awaitTermination(300)
        assert q.exception() is None, q.exception()
        return q

    produce(0, 300)
    run()
    first = len(out.batches)
    produce(300, 500)
    q = run()
    assert first >= 3 and len(out.batches) > first
    assert any(int(p["numInputRows"]) < 120 for p in q.recentProgress)     # packed rows, not records

    def rows(batch, path):       # each source takes its own batch time (processing_time_ms)
        return sorted(repr(tuple(sorted((k, v) for k, v in r.items() if k not in ("path", "processing_time_ms"))))
                      for r in batch if r["path"] == path)

    counted = 0
    for b, batch in out.batches.items():
        src, jvm = rows(batch, "source"), rows(batch, "jvm")
        assert src == jvm, f"batch {b}"
        counted += sum(r["count"] or 0 for r in batch if r["path"] == "source" and r["kind"] == "data")
    assert counted > 0


def test_a_reader_of_another_format_is_refused_by_name(spark):
    from dataflow_kafka.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="format\\('dataflow-kafka'\\)"):
        Pipeline([_stage(2)]).apply(spark.readStream.format("rate"))


_clean_bid = st.tuples(st.integers(0, 5), st.integers(-5_000, 50_000)).map(
    lambda p: json.dumps({"auction": p[0], "ts": T0 + p[1], "x": [1]}).encode())
_bid = st.one_of(_clean_bid, st.sampled_from([b"not json", b'{"auction": "7", "ts": 1}', b'{"ts": 5}', b"{}",
                                              b'{"auction": 1}', b'{"auction": 1.5, "ts": 2}']))
#: chunks the shared pass takes (every value a JSON object of integers, at least
#: ``kafka_read.SMALL_CHUNK`` of them), or any values
_chunk = st.lists(_clean_bid, min_size=64, max_size=80) | st.lists(_bid, min_size=0, max_size=80)


@settings(max_examples=examples(30), deadline=None)
@given(chunks=st.lists(_chunk, min_size=1, max_size=4), n=st.integers(1, 6),
       rows_per_blob=st.integers(1, 150), marker_after=st.integers(0, 4))
def test_fields_the_source_parses_with_its_event_times_pack_as_the_packings_own_parse(chunks, n, rows_per_blob,
                                                                                      marker_after):
    """The source's read path (``kafka_read.decode`` with the packing's ``json_fields``, then
    ``records_to_batch``) hands the stage's JSON fields over as extra columns; packing those
    batches gives the blobs of the same batches without them (the packing's own Arrow or pandas
    parse), with a marker batch among them and chunks the shared pass refuses."""
    from dataflow_kafka.datasource import kafka_read

    stage = SlicerStage(key={"auction": json_field("auction")}, value=json_field("ts"),
                        windows={"w": TumblingWindow(1_000)}, aggregations=[Count(), Max()], num_key_groups=n,
                        allowed_lateness_ms=0, name="s")
    packing = SourcePacking.of(stage)
    packing = SourcePacking(packing.columns, packing.renamed, packing.computed, packing.keys, n, rows_per_blob)
    also = packing.json_fields("value")
    assert set(also) == {"auction", "ts"}
    with_fields, without, offset = [], [], 0
    for i, values in enumerate(chunks):
        records = kafka_read.RecordColumns([b"k"] * len(values), list(values),
                                           np.arange(offset, offset + len(values), dtype=np.int64),
                                           np.tile(np.array([[1, T0]], np.int64), (len(values), 1)), [None] * len(values))
        offset += len(values)
        for out, extra in ((with_fields, also), (without, None)):
            rec = kafka_read.decode(records, "t", 0, "ts", None, extra)
            out.append(kafka_read.records_to_batch(rec, False, T0 + 60_000))
        if len(values) >= kafka_read.SMALL_CHUNK and all(v.endswith(b', "x": [1]}') for v in values):
            assert with_fields[-1].num_columns == without[-1].num_columns + 2   # the shared pass took them
        if i == marker_after:
            marker = kafka_read.make_rows_batch([{"topic": "t", "partition": 0, "offset": offset, "kind": "punctuation",
                                                  "punctuation": T0, "processing_time": T0 + 60_000}], False)
            with_fields.append(marker)
            without.append(marker)
    got, want = _unpacked(packing.pack(with_fields)), _unpacked(packing.pack(without))
    assert sorted(got) == sorted(want)
    for kg in want:
        pd.testing.assert_frame_equal(got[kg], want[kg])
