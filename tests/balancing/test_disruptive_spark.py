"""Disruptive migration on Spark: a keyed ordered operator's key groups move with their state
through a hand-off topic on the broker; the query is killed in the batch of the moves and again
in the batch that installs the state, and restarted from its checkpoint: every record is counted
exactly once and every running total equals the run without moves."""

from __future__ import annotations

import json
import random
import uuid

import pandas as pd

from dataflow_kafka.balancing.migration_disruptive import KafkaHandoff, MemoryHandoff, ordered_pipeline
from dataflow_kafka.balancing.routing_table import RoutingTable, move_command
from tests.balancing.migration_support import available_now, canonical, source_df
from tests.balancing.test_migration_spark import KEY, VALUE, _inputs, _strip_moves
from tests.support import BatchCollector, forget_batches_from, now_ms, source_batches


KG, SLOTS, PARTS = 8, 4, 2


def _records(base: int, start: int, n: int, rnd: random.Random) -> list[dict]:
    return [{"key": f"u{rnd.randrange(24)}".encode(), "partition": rnd.randrange(PARTS),
             "value": json.dumps({"ts": base + i * 20 - rnd.randint(0, 300), "v": rnd.randint(1, 9)}).encode()}
            for i in range(start, start + n)]


def _rows(frames) -> list[tuple]:
    out = []
    for f in frames:
        d = f[f["kind"] == "data"]
        out += [tuple(canonical(v) for v in r) for r in d[["key", "event_time_ms", "value", "total"]].itertuples(index=False)]
    return sorted(out)


def test_a_query_killed_during_a_move_restarts_without_losing_or_duplicating_state(spark, kafka, tmp_path):
    n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    table = RoutingTable.uniform(KG, SLOTS, n)
    topic, control, handoff = kafka.topic(PARTS), kafka.topic(1, prefix="control"), kafka.topic(1, prefix="handoff")
    pipeline = ordered_pipeline(KEY, VALUE, table, KafkaHandoff(kafka.bootstrap, handoff))
    rnd = random.Random(3)
    base = now_ms() - 60_000
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "maxOffsetsPerTrigger": "120", "controlTopic": control}
    ck, got = str(tmp_path / "ck"), BatchCollector()
    run = available_now(pipeline.apply(source_df(spark, opts)), ck, got)

    kafka.produce(topic, _records(base, 0, 200, rnd))
    run()
    first_run = set(got.batches)
    on_zero = table.key_groups_of_slot(0)
    moves = [move_command(on_zero[0], 1), move_command(on_zero[1], 2), move_command(on_zero[1], 3)]
    kafka.produce(control, [{"value": json.dumps(m).encode()} for m in moves])
    kafka.produce(topic, _records(base, 200, 400, rnd))
    run()
    move_batch = min(b for b in got.batches if b not in first_run)
    assert max(got.batches) >= move_batch + 2
    for crash in (move_batch, move_batch + 1):        # killed in the batch of the moves, then in the next one
        forget_batches_from(ck, crash)
        run()
    assert len(kafka.consume_all(handoff)) >= 4       # two hand-offs (one forwarded), written again on replay

    batches = sorted(got.batches)
    frames = _inputs(source_batches(kafka.consume_all(topic), ck, batches, topic=topic))
    assert sum((f["kind"] == "modification").any() for f in frames) == 1
    still = ordered_pipeline(KEY, VALUE, table, MemoryHandoff(uuid.uuid4().hex)).run_local(_strip_moves(frames))
    spark_rows = _rows([pd.DataFrame(got.batches[b]) for b in batches])
    assert spark_rows == _rows(still)
    assert len(spark_rows) == 600                      # every record once
    errors = [r for b in batches for r in got.batches[b] if r["kind"] == "error"]
    assert not errors, errors[:3]
