"""NEXMark's joins, Q3 (local item suggestion, incremental) and Q8 (new users, 10 s tumbling windows):
without Spark on the source's micro-batches of the person and auction topics, in order and with 10%
of the events delayed up to 5 s, at several batch sizes, equal to the brute-force reference (and
with no allowed lateness Q8 loses the delayed pairs, reported as dropped rows); on Spark over one
``format("dataflow-kafka")`` source reading both topics, equal to the reference and to the local
run on the batches the Spark run read; Spark's native stream-stream join runs on the same input."""

from __future__ import annotations

import uuid
import warnings

import pandas as pd
import pytest

from bench.nexmark.generator import NexmarkConfig, generate
from bench.nexmark.queries import JOINS
from bench.nexmark.queries.q3 import join_batches, produce_in_order, replayed_batches, run_native, run_ours
from bench.nexmark.query import Settings

NAMES = sorted(JOINS)


def events(delayed: float, n: int = 20_000):
    return generate(NexmarkConfig(events=n, seed=5, events_per_s=1000, delayed=delayed))


@pytest.mark.parametrize("delayed", [0.0, 0.1])
@pytest.mark.parametrize("name", NAMES)
def test_local_run_equals_the_reference(name, delayed):
    query, ev = JOINS[name], events(delayed)
    expected = query.reference(ev)
    assert len(expected) > 50
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for per_batch in (97, 1000) if delayed else (1000,):
            out = query.local("join", join_batches(ev, per_batch))
            assert query.results("join", out) == expected, per_batch
            assert not any((f["kind"] == "dropped").any() for f in out)


def test_delayed_events_matter_without_allowed_lateness():
    query, ev, none = JOINS["q8"], events(0.1), Settings(lateness_ms=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = query.local("join", join_batches(ev, 97), none)
    got, expected = query.results("join", out, none), query.reference(ev)
    assert set(got) < set(expected)
    assert sum(f.loc[f["kind"] == "dropped", "dropped_count"].sum() for f in out) > 5


@pytest.fixture(scope="module")
def topics(bootstrap):
    cfg = NexmarkConfig(events=8_000, seed=23, events_per_s=200, delayed=0.1, partitions=2)
    ev = generate(cfg)
    names = produce_in_order(bootstrap, f"nexmark-j-{uuid.uuid4().hex[:8]}", ev, cfg.partitions)
    return names, ev


@pytest.mark.parametrize("name", NAMES)
def test_on_spark_equals_the_reference_and_the_local_run(spark, bootstrap, topics, tmp_path, name):
    names, ev = topics
    query, ck = JOINS[name], str(tmp_path / "ck")
    run = run_ours(spark, bootstrap, names, query, "join", ck, max_offsets=150)
    assert len(run.batch_ids) >= 3
    expected = query.reference(ev)
    assert len(expected) > 20 and query.results("join", run.frames) == expected
    local = query.local("join", replayed_batches(bootstrap, names, ck, run.batch_ids))
    assert query.results("join", local) == expected
    native = run_native(spark, bootstrap, names, query, "5 seconds", str(tmp_path / "native"),
                        connector="dataflow-kafka", max_offsets=150)
    got = query.native_results(pd.concat(native.frames)) if any(len(f) for f in native.frames) else []
    assert set(got) <= set(expected) and got, (len(got), len(expected))
