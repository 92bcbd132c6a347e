"""Instant migration on Spark: slots land on the shuffle partitions the routing table chose, and a
windowed aggregation whose key groups move (commands on the control topic) gives, across a
restart from the checkpoint and a replayed batch, the results of the run without moves."""

from __future__ import annotations

import json
import random

import pandas as pd

from dataflow_kafka.balancing.migration import load_of, windowed_aggregation
from dataflow_kafka.balancing.routing_table import RoutingTable, move_command, murmur3_int, slot_ids_for
from dataflow_kafka.keygroups import key_group_of
from tests.balancing.migration_support import available_now, low_watermarks, reference, results, source_df
from tests.support import BatchCollector, forget_batches_from, now_ms, source_batches
from dataflow_kafka.windowing import SlidingWindow, TumblingWindow


KG, SLOTS, PARTS = 8, 4, 2
KEY = "CAST(key AS STRING)"
VALUE = "get_json_object(CAST(value AS STRING), '$.v')"
WINDOWS = {"s": SlidingWindow(2_000, 1_000), "t": TumblingWindow(3_000)}


def test_murmur3_is_sparks_hash_and_slots_land_on_their_partitions(spark):
    from pyspark.sql import functions as F

    values = [0, 1, 2, 7, 42, 1000, -1, -12345, 2**31 - 1, -(2**31)]
    got = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r.v: r.h for r in got} == {v: murmur3_int(v) for v in values}

    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    ids = slot_ids_for(6, n)

    def where(pdf):
        from pyspark import TaskContext

        return pd.DataFrame({"slot": [int(pdf["slot"].iloc[0])], "partition": [TaskContext.get().partitionId()]})

    df = spark.createDataFrame([(s,) for s in ids for _ in range(3)], "slot int")
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")     # a batch query would coalesce partitions;
    try:                                                       # streaming plans never do
        placed = {r.slot: r.partition
                  for r in df.groupBy("slot").applyInPandas(where, "slot int, partition int").collect()}
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    assert placed == {sid: i % n for i, sid in enumerate(ids)}


def _records(base: int, start: int, n: int, rnd: random.Random) -> list[dict]:
    out = []
    for i in range(start, start + n):
        ts = base + i * 25 - (rnd.randint(0, 600) if rnd.random() < 0.3 else 0) - (2_500 if i % 41 == 0 else 0)
        body = {"ts": ts}
        if i % 53:
            body["v"] = rnd.randint(1, 9)
        out.append({"key": f"u{rnd.randrange(16)}".encode(), "value": json.dumps(body).encode(),
                    "partition": rnd.randrange(PARTS)})
    return out


def _inputs(frames: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """The router's column inputs, computed as its SQL expressions compute them."""
    for f in frames:
        data = (f["kind"] == "data").to_numpy()
        keys = [k.decode() if d else None for k, d in zip(f.get("key", [None] * len(f)), data)]
        vals = [json.loads(v).get("v") if d else None for v, d in zip(f.get("value", [None] * len(f)), data)]
        f["key"] = keys
        f["value"] = [float(v) if v is not None else None for v in vals]
        f["kg"] = [key_group_of(k, KG) if d else None for k, d in zip(keys, data)]
        f["src_partition"] = f["partition"]
    return frames


def _strip_moves(frames: list[pd.DataFrame]) -> list[pd.DataFrame]:
    return [f[f["kind"] != "modification"].reset_index(drop=True) for f in frames]


def test_moves_across_a_restart_and_a_replayed_batch_give_the_results_without_moves(spark, kafka, tmp_path):
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    table = RoutingTable.uniform(KG, SLOTS, n)
    pipeline = windowed_aggregation(KEY, VALUE, WINDOWS, num_key_groups=KG, num_slots=SLOTS, num_partitions=n)
    topic, control = kafka.topic(PARTS), kafka.topic(1, prefix="control")
    rnd = random.Random(5)
    base = (now_ms() - 60_000) // 10_000 * 10_000
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "maxOffsetsPerTrigger": "150", "watermarkDelayMs": "300", "controlTopic": control}
    ck, got = str(tmp_path / "ck"), BatchCollector()
    run = available_now(pipeline.apply(source_df(spark, opts)), ck, got)

    kafka.produce(topic, _records(base, 0, 280, rnd))
    run()
    first_run = sorted(got.batches)
    hot = [kg for kg in range(KG) if table.slot_of(kg) == 0]
    moves = [move_command(hot[0], 1), move_command(hot[1], 3)]      # slot 0 -> slots 1 and 3
    kafka.produce(control, [{"value": json.dumps(m).encode()} for m in moves])
    kafka.produce(topic, _records(base, 280, 300, rnd))
    run()                                                             # restart from the checkpoint
    move_batch = min(b for b in got.batches if b not in first_run)
    before = results(pd.DataFrame(got.batches[move_batch]))
    forget_batches_from(ck, move_batch)                               # a crash in the batch of the moves
    run()
    batches = sorted(got.batches)
    assert len(batches) >= 4 and move_batch in batches
    assert results(pd.DataFrame(got.batches[move_batch])) == before, "the replayed batch differs"

    spark_out = {b: pd.DataFrame(got.batches[b]) for b in batches}
    frames = _inputs(source_batches(kafka.consume_all(topic), ck, batches, delay_ms=300, topic=topic))
    mods = [f for f in frames if (f["kind"] == "modification").any()]
    assert len(mods) == 1 and len(mods[0][mods[0]["kind"] == "modification"]) == 2 * PARTS
    local = pipeline.run_local(frames)
    still = pipeline.run_local(_strip_moves(frames))
    records = [[(0, 0, k, v, t) for k, v, t in zip(f["key"], f["value"], f["event_time_ms"]) if k is not None]
               for f in frames]
    puncts = [{p: w for p, w in zip(f[f["kind"] == "punctuation"]["partition"],
                                    f[f["kind"] == "punctuation"]["punctuation_ms"])} for f in frames]
    want = reference([[(p, o, k, None if pd.isna(v) else v, t) for p, o, k, v, t in r] for r in records],
                     low_watermarks([{p: None if pd.isna(w) else int(w) for p, w in d.items()} for d in puncts]),
                     WINDOWS)
    for i, b in enumerate(batches):
        assert results(spark_out[b]) == results(local[i]), f"batch {b} differs from the local run"
        assert results(spark_out[b]) == results(still[i]), f"batch {b} differs from the run without moves"
        assert results(spark_out[b]) == want[i], f"batch {b} differs from the brute-force reference"
    assert any(want)

    # the moved key groups' rows went to their new slots from the batch of the moves on
    i_move = batches.index(move_batch)
    for kg, to in ((hot[0], 1), (hot[1], 3)):
        for i, b in enumerate(batches):
            slots = {s for s, per in load_of([spark_out[b]]).items() if per.get(kg, (0, 0))[0]}
            assert slots <= ({0} if i < i_move else {to}), (kg, b, slots)
