"""A typed DAG with two sources, fan-in and fan-out on Spark over Kafka, one query:
every block both sources closed equals Dag.run_local's on the same micro-batches, across a
restart from the checkpoint and a replayed batch; one source stalled for several batches holds
the output back and loses nothing (the other ran ahead: none of its records is late)."""

from __future__ import annotations

import json
import random

import pytest

from tests.support import BatchCollector, forget_batches_from, now_ms, source_batches
from tests.traces.library import AddOne, Seq, SumPerKey, Total
from tests.traces.test_compile_dag import _assert_sinks_equal
from dataflow_kafka.traces import Dag, OpStateless
from dataflow_kafka.traces.spark import compile_dag, messages_from_frames, to_spark


PARTITIONS = 2
PERIOD_MS = 1_000
PER_BATCH = 100          # 300 records of a in 3 micro-batches, 200 of b in 2: few batches, each costs ~1 s of Spark
B_FIRST_MS = 3_000        # phase 1: b's records end here (then b stalls while a runs on to 30 s)


class Value(OpStateless):
    """A record's ``{"v", "ts"}`` -> ``v``."""

    def on_item(self, key, value, emit):
        emit(key, value["v"])


class KeepTotal(Total):
    preserves_key = True


def build() -> Dag:
    """a, b -> Value each -> Total (fan-in) -> AddOne, SumPerKey (fan-out) -> Seq (fan-in, SORT) -> out;
    Total -> totals."""
    dag = Dag()
    ins = [dag.add_op(Value(), 2, dag.source(s, PERIOD_MS, PARTITIONS), name=f"value_{s}") for s in "ab"]
    total = dag.add_op(KeepTotal(), 2, *ins, name="total")
    left, right = dag.add_op(AddOne(), 2, total, name="left"), dag.add_op(SumPerKey(), 2, total, name="right")
    dag.sink("out", dag.add_op(Seq(), 2, left, right, name="seq"))
    dag.sink("totals", total)
    return dag


def _records(rnd: random.Random, base: int, start_ms: int, end_ms: int, n: int) -> list[dict]:
    """``n`` records with event times spread over ``[start_ms, end_ms)``, up to 400 ms out of
    order, every 29th 3 s late."""
    out = []
    for i in range(n):
        ts = base + start_ms + (end_ms - start_ms) * i // n - rnd.randrange(5) * 100 - (3_000 if i % 29 == 28 else 0)
        out.append({"key": f"k{rnd.randrange(4)}".encode(), "partition": rnd.randrange(PARTITIONS),
                    "value": json.dumps({"v": rnd.randrange(50), "ts": max(base, ts)}).encode()})
    return out


@pytest.fixture(scope="module")
def run(spark, kafka, tmp_path_factory):
    """Phase 1: ``a`` has 3 micro-batches of records, ``b`` records only in its first 3 s; phase 2
    (a restart): ``b`` catches up; then its last batch is replayed."""
    dag, root = build(), tmp_path_factory.mktemp("traces-dag")
    assert [[v.name for s in op for v in s.vertices] for op in compile_dag(dag).plan()] == [
        [], [], ["total", "left", "right"], ["seq"]]
    topics = {s: kafka.topic(PARTITIONS) for s in "ab"}
    rnd, base = random.Random(11), (now_ms() - 60_000) // 1_000 * 1_000

    def reader(topic):
        r = spark.readStream.format("dataflow-kafka")
        for k, v in {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                     "eventTimeField": "ts", "maxOffsetsPerTrigger": str(PER_BATCH), "watermarkDelayMs": "0"}.items():
            r = r.option(k, v)
        return r.load()

    out = to_spark(dag, {s: reader(t) for s, t in topics.items()}, num_key_groups=2)
    ck, got = str(root / "ck"), BatchCollector()

    def start():
        q = out.writeStream.foreachBatch(got).option("checkpointLocation", ck).trigger(availableNow=True).start()
        assert q.awaitTermination(600)
        assert q.exception() is None, q.exception()

    kafka.produce(topics["a"], _records(rnd, base, 0, 30_000, 3 * PER_BATCH))
    kafka.produce(topics["b"], _records(rnd, base, 0, B_FIRST_MS, 20))
    start()
    phase1 = sorted(got.batches)
    kafka.produce(topics["b"], _records(rnd, base, B_FIRST_MS, 30_000, 2 * PER_BATCH))
    start()                                                     # restart from the checkpoint
    batches = sorted(got.batches)
    last = batches[-1]
    before = _data_rows(got.batches[last])
    forget_batches_from(ck, last)                               # a crash during the last batch
    start()
    frames = {s: source_batches(kafka.consume_all(t), ck, batches, topic=t) for s, t in topics.items()}
    return {"dag": dag, "got": got, "batches": batches, "phase1": phase1, "replayed": (last, before),
            "messages": messages_from_frames(frames), "base": base}


def _data_rows(batch_rows):
    return sorted(repr(sorted((k, v) for k, v in r.items() if k != "processing_time_ms")) for r in batch_rows)


def test_two_source_dag_with_fan_in_and_fan_out_equals_run_local_across_restart_and_replay(run):
    got, batches = run["got"], run["batches"]
    assert sorted(got.batches) == batches and len(batches) >= 5, batches
    last, before = run["replayed"]
    assert _data_rows(got.batches[last]) == before, "the replayed batch differs"
    rows = got.rows()
    assert _assert_sinks_equal(run["dag"], rows, run["messages"]) >= 40     # both sinks, every closed block
    ref = run["dag"].run_local(run["messages"])
    dropped = sum(r["dropped_count"] for r in rows if r["kind"] == "dropped" and r["dropped_reason"] == "late")
    assert dropped == len(ref.late["a"]) + len(ref.late["b"]) > 0


def test_a_stalled_source_holds_the_output_back_and_loses_nothing(run):
    got, phase1, base = run["got"], run["phase1"], run["base"]
    assert len(phase1) >= 3, phase1                     # a: 3 batches of records, b: data in the first only
    b_closed = (base + B_FIRST_MS) // PERIOD_MS         # b's punctuation stays below base + 3 s
    held = [r["tblock"] for b in phase1 for r in got.batches[b] if r["kind"] == "data"]
    assert held and max(held) <= b_closed + 1, (max(held), b_closed)
    rows = got.rows()
    assert max(r["tblock"] for r in rows if r["kind"] == "data") > b_closed + 20, "released once b caught up"
    ref = run["dag"].run_local(run["messages"])
    late_a = sum(r["dropped_count"] for r in rows if r["kind"] == "dropped" and r["topic"] == "a")
    # a's late records are its own (every 29th record 3 s behind a's punctuation), not b's stall:
    # a ran 29 s ahead of b, which would have made nearly all of them late
    assert late_a == len(ref.late["a"]) <= 3 * PER_BATCH // 29
