"""NEXMark on Spark: every registered query, every variant, over
``format("dataflow-kafka")`` with 10% of the events delayed up to 5 s, equals the brute-force
reference; and the same query run without Spark (``run_local``) on the micro-batches the Spark run
read gives the same final rows. One topic for the module, the session's broker and SparkSession."""

from __future__ import annotations

import json

import pytest

from bench.nexmark.generator import NexmarkConfig, bids, generate, produce
from bench.nexmark.queries import REGISTRY
from bench.nexmark.query import Query
from bench.nexmark.runs import replayed_batches, run_ours


CONFIG = NexmarkConfig(events=4000, seed=22, events_per_s=100, delayed=0.1, partitions=2)
PER_BATCH = 1200
CASES = [(q.name, v) for q in REGISTRY.values() for v in q.variants]


@pytest.fixture(scope="module")
def nexmark(bootstrap):
    """``(bid topic, bid records)`` of the module's events, written once."""
    import uuid

    events = generate(CONFIG)
    names = produce(bootstrap, f"nexmark-{uuid.uuid4().hex[:8]}", events, CONFIG.partitions, kinds=("bid",))
    return names["bid"], bids(events)


@pytest.mark.parametrize("name,variant", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_query_on_spark_equals_the_reference_and_the_local_run(spark, bootstrap, nexmark, tmp_path, name, variant):
    topic, records = nexmark
    query = REGISTRY[name]
    ck = str(tmp_path / "ck")
    run = run_ours(spark, bootstrap, topic, query, variant, ck, max_offsets=PER_BATCH)
    assert len(run.batch_ids) >= 3
    expected = query.reference(records, variant)
    assert expected, "the reference has rows"
    on_spark = query.results(variant, run.frames)
    local_frames = query.local(variant, replayed_batches(bootstrap, topic, ck, run.batch_ids))
    local = query.results(variant, local_frames)
    assert (on_spark, local) == (expected, expected), _difference(expected, on_spark, local, run.frames, local_frames)
    staged = type(query).spark is Query.spark                   # a stage pipeline (not a projection in SQL)
    selecting = [s.name for s in query.pipeline(variant).stages if getattr(s, "select_before_shuffle", False)
                 ] if staged else []
    for stage in selecting:     # the source's tasks sent fewer rows than the run without Spark took: the
        # first batch's all (no event time read before it), then a few per task and window
        sent, taken = _counters(run.frames)[stage]["records_in"], _counters(local_frames)[stage]["records_in"]
        assert taken == len(records) and 0 < sent < taken / 2, (stage, sent, taken)


def _counters(frames) -> dict:
    """Per stage, the sums over key groups and batches of its ``metrics`` rows' counters."""
    out: dict = {}
    for f in frames:
        if "kind" in f.columns:
            for topic, text in zip(f["topic"][f["kind"] == "metrics"], f["metrics"][f["kind"] == "metrics"]):
                mine = out.setdefault(topic, {})
                for k, v in json.loads(text).items():
                    if k.startswith(("records_", "dropped_")) and v:
                        mine[k] = mine.get(k, 0) + int(v)
    return out


def _difference(expected, on_spark, local, frames, local_frames) -> str:
    """What a failure needs to be told apart: which rows differ, whether the run without Spark on
    the same micro-batches agrees, and each stage's record and drop counts in both runs."""
    missing, extra = sorted(set(expected) - set(on_spark)), sorted(set(on_spark) - set(expected))
    return (f"on Spark: {len(missing)} rows missing (e.g. {missing[:3]}), {len(extra)} extra (e.g. {extra[:3]}); "
            f"without Spark on the same batches: {'equal' if local == expected else 'different'}"
            f"{', equal to Spark' if local == on_spark else ''}; counters on Spark {_counters(frames)}, "
            f"without {_counters(local_frames)}")
