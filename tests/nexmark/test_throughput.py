"""The steady-state throughput harness (``python -m bench.nexmark.throughput``) end to end, small:
both arms of a projection (checked by checksum) and of a windowed query (checked row by row) run,
batch 0 is left out of the timing, every arm equals the reference, and the table and CSV come out.
The session's broker and SparkSession; Spark's native arm reads our source's data rows (the test
JVM has no Spark Kafka connector). Timings are not asserted (house rule: figures live in docs)."""

from __future__ import annotations

import csv

import pytest

from bench.nexmark.queries import get
from bench.nexmark.throughput import FLINK_PER_CORE, Harness

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_quick_harness_runs_both_arms_and_checks_them(spark, bootstrap, tmp_path):
    h = Harness(spark, bootstrap, "dataflow-kafka", events=3000, partitions=2, rate=200, log=lambda _: None)
    q1, q11 = get("q1"), get("q11")
    for q, side, variant in ((q1, "ours", "sql"), (q1, "spark", "5 seconds"), (q11, "ours", "slicer"),
                             (q11, "spark", "5 seconds")):
        row = h.arm(q, side, variant, batch_size=900, repeat=0)
        assert row["correct"] is True, row
        assert row["missing"] == 0 and row["extra"] == 0, row
        assert row["batches"] >= 3, row
        # batch 0 is left out: the steady state saw fewer bids than the topic holds
        assert 0 < row["steady_bids"] < len(h.records), row
        assert row["steady_s"] > 0 and row["cpu_s"] > 0, row
        assert row["late_rows_per_s"] > 0, row
    assert h.rows[-1]["open"] > 0     # Spark's append mode leaves the last sessions open
    table = h.table()
    assert "| q11 | slicer | 900 |" in table and f"{FLINK_PER_CORE['q11']:,}" in table
    assert "late half: ours / Spark; floor / Spark |" in table
    h.write_csv(str(tmp_path / "t.csv"))
    with open(tmp_path / "t.csv") as f:
        assert len(list(csv.DictReader(f))) == 4


def test_a_wrong_result_is_reported_not_hidden(spark, bootstrap):
    h = Harness(spark, bootstrap, "dataflow-kafka", events=1000, partitions=2, rate=200, log=lambda _: None)
    q = get("q1")
    h._references[(q.name, None)] = tuple(x + 1 for x in h._reference(q, None))   # a reference the run cannot meet
    assert h.arm(q, "ours", "sql", batch_size=400, repeat=0)["correct"] is False


def test_the_floor_arms_have_our_queries_shape_and_see_every_bid(spark, bootstrap):
    """``--floor``: with its top taken in 4 key groups Q5's floor runs two no-op stateful operators
    (the second fed one count row per key group and call), as our Q5 slicer form then runs two (one
    by default); a projection's floor is Spark's query on the simplest Python Kafka source. Both
    are checked: every bid counted once, the projection's checksum."""
    from bench.nexmark.throughput import floor_label

    h = Harness(spark, bootstrap, "dataflow-kafka", events=2000, partitions=2, rate=200, log=lambda _: None,
                top_key_groups=4)
    q5, q1 = get("q5"), get("q1")
    assert floor_label(q5, h.settings) == "2 no-op transformWithStateInPandas"
    assert floor_label(q5) == floor_label(get("q11")) == "no-op transformWithStateInPandas"
    assert floor_label(q1) == "native on format('bench-python-kafka')"
    for q in (q5, q1):
        row = h.arm(q, "floor", floor_label(q, h.settings), batch_size=700, repeat=0)
        assert row["correct"] is True and row["batches"] >= 3, row
        assert row["variant"] == floor_label(q, h.settings), row
    assert h.rows[-1]["connector"] == "bench-python-kafka"


def test_the_warm_up_runs_first_and_is_not_in_the_table(spark, bootstrap):
    logged = []
    h = Harness(spark, bootstrap, "dataflow-kafka", events=1500, partitions=2, rate=200, log=logged.append)
    h.run([get("q1")], [500], warmup_rounds=1)
    assert [(r["side"], r["repeat"]) for r in h.rows] == [("ours", 0), ("spark", 0)]
    assert any("warm-up: q1 ours and Spark's at 500" in line for line in logged), logged
    rounds = [i for i, line in enumerate(logged) if "warm-up round 1 of 1: every arm at 500" in line]
    assert len(rounds) == 1 and rounds[0] < len(logged) - 2, logged   # before the recorded arms
    # each arm's JIT compiler CPU is measured, as part of the JVM's, from threads that exist
    assert h.cpu.jit_threads >= 1, "no JIT compiler thread found in Spark's JVM"
    assert all(0 <= r["jit_cpu_s"] <= r["jvm_cpu_s"] for r in h.rows), h.rows


class _Schedule(Harness):
    """The harness's order of arms, without running them (``run`` decides only the order)."""

    def __init__(self) -> None:
        self.rows, self.logged, self.jvm_packing, self.markers = [], [], False, False
        self.log = self.logged.append
        from bench.nexmark.query import Settings
        self.settings = Settings()

    def arm(self, q, side, variant, batch_size, repeat):
        self.rows.append({"query": q.name, "side": side, "batch_size": batch_size, "repeat": repeat})
        self.logged.append((side, batch_size, repeat))
        return self.rows[-1]


@pytest.mark.parametrize("each_size", [False, True])
def test_the_warm_up_rounds_run_once_or_before_each_batch_size(each_size):
    """``warmup_each_size``: the rounds (every arm, not recorded) run before each batch size's
    repeats at that size; without it once, at the largest size, before every measured arm."""
    h = _Schedule()
    h.run([get("q11")], [10, 50], repeats=1, floor=True, warmup_rounds=2, warmup_each_size=each_size)
    order = [(size, repeat) for e in h.logged if isinstance(e, tuple) for _, size, repeat in [e]]
    per_round = 4          # Q11: our two forms, Spark's, the floor
    first = [(50, -1)] * 2  # the first query's ours and Spark's at the largest size
    if each_size:
        assert order == first + [(10, -1)] * 2 * per_round + [(10, 0)] * per_round + [(50, -1)] * 2 * per_round \
            + [(50, 0)] * per_round
    else:
        assert order == first + [(50, -1)] * 2 * per_round + [(10, 0)] * per_round + [(50, 0)] * per_round
    assert [(r["batch_size"], r["repeat"]) for r in h.rows] == [(10, 0)] * per_round + [(50, 0)] * per_round
    sizes = [line for line in h.logged if isinstance(line, str) and "warm-up round" in line]
    assert sizes == ([f"  (warm-up round {r} of 2: every arm at {n}, not recorded)" for n in (10, 50) for r in (1, 2)]
                     if each_size else [f"  (warm-up round {r} of 2: every arm at 50, not recorded)" for r in (1, 2)])


def test_the_windowed_join_runs_its_three_arms_on_persons_and_auctions(spark, bootstrap):
    """Q8 (persons joined with their auctions per 10 s window) reads its own topics, made on first
    use from ``join_events``: our join, Spark's stream-stream join and the floor (one no-op stateful
    operator keyed by the person) all read every person and auction, and both joins equal the
    reference (an inner join's pairs are all due: none left open)."""
    from bench.nexmark.throughput import JOIN_SHARE, floor_label

    h = Harness(spark, bootstrap, "dataflow-kafka", events=200, partitions=2, rate=200, log=lambda _: None,
                join_events=15_000)
    q8 = get("q8")
    topics, events = h.join_input()
    assert sorted(topics) == ["auction", "person"] and {e.kind for e in events} == {"person", "auction"}
    assert len(events) == 15_000 * JOIN_SHARE
    assert floor_label(q8) == "no-op transformWithStateInPandas"
    for side, variant in (("ours", "join"), ("spark", "5 seconds"), ("floor", floor_label(q8))):
        row = h.arm(q8, side, variant, batch_size=400, repeat=0)
        assert row["correct"] is True and row["open"] == 0, row
        assert row["bids"] == len(events) and row["batches"] >= 3, row
        # batch 0 (400 records) is left out; a self-join's doubled numInputRows is not counted
        assert row["steady_bids"] == len(events) - 400, row
    assert h.rows[0]["expected"] > 0 and h.rows[0]["expected"] == h.rows[1]["expected"]


def test_the_late_half_is_the_second_half_of_batches_1_on_and_its_rate_counts_offsets_or_rows():
    """``late_half``: batch 0 is out, and of the steady batches the later half (the larger part when
    odd); ``rate_of`` counts records from the offsets (ours, joins) or ``numInputRows``."""
    from bench.nexmark.throughput import late_half, rate_of, records_read

    def batch(i, rows, ms, start, end):
        return {"batchId": i, "numInputRows": rows, "durationMs": {"triggerExecution": ms},
                "sources": [{"startOffset": {"t": {"0": start}}, "endOffset": {"t": {"0": end}}}]}

    progress = [batch(0, 50, 9000, 0, 40), batch(1, 11, 1000, 40, 50), batch(2, 11, 1000, 50, 60),
                batch(3, 21, 1000, 60, 80), batch(4, 21, 500, 80, 100), batch(5, 21, 500, 100, 120)]
    assert [p["batchId"] for p in late_half(progress)] == [3, 4, 5]
    assert [p["batchId"] for p in late_half(progress[:5])] == [3, 4]
    assert records_read(progress, by_offsets=True) == 80 and records_read(progress, by_offsets=False) == 85
    assert rate_of(late_half(progress), by_offsets=True) == pytest.approx(60 / 2.0)
    assert rate_of(late_half(progress), by_offsets=False) == pytest.approx(63 / 2.0)
    assert rate_of(progress[:1], by_offsets=False) is None


def test_state_operator_timings_are_medians_per_operator_over_the_steady_batches():
    """``task_times``' reading of Spark's progress: per stateful operator (in the progress' order),
    the median of each time in ms and of ``numRowsUpdated`` over the batches after the first two;
    other metrics (row counts, memory) are left out."""
    from bench.nexmark.task_times import state_operator_ms

    def batch(commit, custom):
        return {"stateOperators": [
            {"commitTimeMs": commit, "numRowsUpdated": 1, "numRowsTotal": 9, "memoryUsedBytes": 5,
             "customMetrics": {"rocksdbChangeLogWriterCommitLatencyMs": custom, "rocksdbGetLatency": 2,
                               "rocksdbSstFileSize": 7}},
            {"commitTimeMs": 10 * commit, "allUpdatesTimeMs": 3}]}

    got = state_operator_ms([batch(999, 999), batch(999, 999), batch(1, 4), batch(3, 6), batch(2, 8)])
    assert got == [{"commitTimeMs": 2, "numRowsUpdated": 1, "rocksdbChangeLogWriterCommitLatencyMs": 6,
                    "rocksdbGetLatency": 2},
                   {"commitTimeMs": 20, "allUpdatesTimeMs": 3}]
