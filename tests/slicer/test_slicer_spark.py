"""slice_windows end to end: Kafka → dataflow-kafka source → key groups → SlicerStage.

The reference is the pure engine fed with the same input: the test reads the micro-batch
boundaries (end offset per partition) from the query's offset log, feeds
one engine per key with that key's records of each batch in (partition, offset) order, and
advances every engine with the low watermark the batch's punctuations must give (min over
partitions of the newest event time of their records up to the end offset, ``watermarkDelayMs=0``). A new key starts at the previous watermark.
"""

from __future__ import annotations

import json
import random

import pytest

from dataflow_kafka.slicer import SlicingWindowOperator
from dataflow_kafka.windowing import M4, Count, Max, Mean, Median, Min, SessionWindow, SlidingWindow, Sum, TumblingWindow
from dataflow_kafka.slicer.keyed import KeyedSlicingOperator
from tests.slicer.slicer_reference import same_rows
from tests.support import BatchCollector, forget_batches_from, now_ms, offset_log


PARTITIONS, KEYS, LATENESS = 3, 7, 1_500
WINDOWS = [SlidingWindow(2_000, 500), TumblingWindow(1_000), SessionWindow(300),
           SlidingWindow(3_000, 1_000)]
AGGS = [Sum(), Count(), M4(), Median()]
# Tumbling and sliding time windows with distributive/algebraic aggregations: all keys of a key
# group in one table (slicer.keyed) instead of one engine per key.
KEYED_WINDOWS = [SlidingWindow(2_000, 500), TumblingWindow(1_000), SlidingWindow(3_000, 1_000, 250)]
KEYED_AGGS = [Sum(), Count(), Mean(), Min(), Max(), M4()]
CONFIGS = {"per_key": (WINDOWS, AGGS), "keyed": (KEYED_WINDOWS, KEYED_AGGS)}
VALUE = "get_json_object(CAST(value AS STRING), '$.amount')"


def _events(base: int, start: int, n: int, rnd: random.Random) -> list[dict]:
    """``n`` records, 20 ms apart on average, 30 % of them up to 1.2 s out of order, some keys
    only in later chunks; every 97th record 4 s late (beyond the allowed lateness), every 151st
    without an amount."""
    out = []
    for i in range(start, start + n):
        ts = base + i * 20 - (rnd.randint(0, 1_200) if rnd.random() < 0.3 else 0)
        if i % 97 == 0:
            ts -= 4_000
        k = rnd.randrange(KEYS if i > 300 else KEYS - 2)
        body = {"ts": ts} if i % 151 == 0 else {"ts": ts, "amount": rnd.randint(1, 50)}
        out.append({"key": b"k%d" % k, "value": json.dumps(body).encode(), "partition": rnd.randrange(PARTITIONS)})
    return out


def _template(windows, aggs) -> SlicingWindowOperator:
    op = SlicingWindowOperator(allowed_lateness_ms=LATENESS, emission="compact",   # as the stage
                               drop_before_watermark=False)
    for a in aggs:
        op.add_aggregation(a)
    for w in windows:
        op.add_window(w)
    return op


def _flat(values) -> tuple:
    return tuple(x for v in values for x in (v if isinstance(v, tuple) else (v,)))


def _reference(records, checkpoint: str, batches: list[int], windows, aggs) -> tuple[dict, dict]:
    """``{batch: sorted rows}`` of the pure engine, batches cut as in the offset log, and
    ``{batch: low watermark}``."""
    from dataflow_kafka.keygroups import PunctuationTracker

    by_part: dict[int, list] = {}
    for m in records:
        by_part.setdefault(m.partition(), []).append(m)
    engines: dict[str, SlicingWindowOperator] = {}
    tracker = PunctuationTracker()
    done = {p: 0 for p in range(PARTITIONS)}
    out: dict[int, list] = {}
    marks: dict[int, int | None] = {}
    for b in batches:
        log = offset_log(checkpoint, b)
        (parts,) = log["partitions"].values()
        prev_wm = tracker.low_watermark_ms
        per_key: dict[str, list] = {}
        for p in range(PARTITIONS):
            end = parts[str(p)]["o"]
            for m in by_part.get(p, [])[done[p]:end]:
                per_key.setdefault(m.key().decode(), []).append(json.loads(m.value()))
            done[p] = end
            seen = [json.loads(m.value())["ts"] for m in by_part.get(p, [])[:end]]
            tracker.update(f"t-{p}", max(seen) if seen else None, end, 0)
        wm = tracker.low_watermark_ms
        rows = []
        for k, recs in per_key.items():
            if k not in engines:
                engines[k] = SlicingWindowOperator.from_bytes(_template(windows, aggs).to_bytes())
                if prev_wm is not None:
                    engines[k].process_watermark(prev_wm)
            op = engines[k]
            before = op.dropped_late
            good = [r for r in recs if "amount" in r]
            for r in good:          # record at a time: the Spark side uses process_elements
                op.process_element(float(r["amount"]), r["ts"])
            late, nulls = op.dropped_late - before, len(recs) - len(good)
            rows += [("dropped", k, why, n) for why, n in (("late", late), ("null", nulls)) if n]
        if wm is not None:
            for k, op in engines.items():
                for r in op.process_watermark(wm):
                    rows.append(("window", k, r.query_id, r.start, r.end, r.update, r.retraction,
                                 *_flat(r.values)))
        out[b] = sorted(rows, key=repr)
        marks[b] = wm
    return out, marks


def _spark_rows(collector: BatchCollector, aggs) -> dict:
    """Window and dropped rows of each batch; every key group's punctuation is checked to be
    its output watermark (the input watermark minus the allowed lateness) on the way."""
    from dataflow_kafka.windowing.rows import aggregation_columns

    cols = [c for c, _ in aggregation_columns(aggs)]
    out = {}
    for b, rows in collector.batches.items():
        conv = []
        for r in rows:
            if r["kind"] == "dropped":
                conv.append(("dropped", r["dropped_key"], r["dropped_reason"], r["dropped_count"]))
            elif r["kind"] == "data":
                assert r["event_time_ms"] >= r["window_end_ms"] - 1 and r["measure"] == "time"
                conv.append(("window", r["key"], r["query_id"], r["window_start_ms"], r["window_end_ms"],
                             r["update"], r["is_retraction"], *(r[c] for c in cols)))
        out[b] = sorted(conv, key=repr)
    return out


def _output_watermarks(collector: BatchCollector) -> dict:
    out = {}
    for b, rows in collector.batches.items():
        marks = {r["punctuation_ms"] for r in rows if r["kind"] == "punctuation"}
        assert len(marks) == 1, marks
        out[b] = marks.pop()
    return out


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_slice_windows_equals_engine_across_restart_and_replay(spark, kafka, tmp_path, config):
    from dataflow_kafka.slicer.spark import slice_windows

    windows, aggs = CONFIGS[config]
    assert KeyedSlicingOperator.supports(_template(windows, aggs)) == (config == "keyed")

    topic = kafka.topic(PARTITIONS)
    rnd = random.Random(11)
    base = now_ms() - 120_000
    chunks = [_events(base, 0, 500, rnd), _events(base, 500, 300, rnd)]
    opts = {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "maxOffsetsPerTrigger": "300"}
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in opts.items():
        reader = reader.option(k, v)
    out_df = slice_windows(reader.load(), key="CAST(key AS STRING)", windows=windows, aggregations=aggs,
                           value=VALUE, num_key_groups=3, allowed_lateness_ms=LATENESS)
    ck = str(tmp_path / "ck")
    out = BatchCollector()

    def run():
        q = (out_df.writeStream.foreachBatch(out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(240)
        assert q.exception() is None

    kafka.produce(topic, chunks[0])
    run()
    first_run = sorted(out.batches)
    kafka.produce(topic, chunks[1])
    run()                                            # restart from the checkpoint mid-stream
    batches = sorted(out.batches)
    assert len(first_run) == 2 and len(batches) == 3

    # Crash during the last batch (the restarted run's): Spark replays it from the offset log and
    # the state of the batch before; the replayed output must be the same.
    last = batches[-1]
    before = _spark_rows(out, aggs)[last]
    forget_batches_from(ck, last)
    run()
    assert sorted(out.batches) == batches
    got = _spark_rows(out, aggs)
    assert same_rows(got[last], before)

    expected, marks = _reference(kafka.consume_all(topic), ck, batches, windows, aggs)
    for b in batches:
        assert same_rows(got[b], expected[b]), f"batch {b}:\n{got[b]}\n!=\n{expected[b]}"
    assert _output_watermarks(out) == {b: marks[b] - LATENESS for b in batches}
    windows = [r for b in batches for r in got[b] if r[0] == "window"]
    drops = [r for b in batches for r in got[b] if r[0] == "dropped"]
    assert any(r[5] for r in windows)                                      # updates from late records
    # late records within the lateness extend and fuse emitted sessions: retracted
    assert any(r[6] for r in windows) == (config == "per_key")
    assert {r[2] for r in windows} == {str(i) for i in range(len(CONFIGS[config][0]))}   # query ids: the index
    late = sum(r[3] for r in drops if r[2] == "late")
    assert late > 0 and sum(r[3] for r in drops if r[2] == "null") == len(range(0, 800, 151))
