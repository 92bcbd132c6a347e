"""Spark Connect: a client session (``SparkSession.builder.remote``, in its own process, as a
user's) against a Connect server started on loopback runs the source, a composed stateful
pipeline (optimistic sessions -> slicer -> Dataflow panes) and the sink, and writes the same rows
as a classic session running the same query on the same records; the per-stage metrics reach a
``StreamingQueryListener`` registered on the client; a batch read works too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dataflow_kafka.datasource.connect import connect_server
from tests.datasource.connect_job import clicks, run
from tests.support import now_ms

ROOT = Path(__file__).parents[2]
CLICKS = 450                # 3 micro-batches of 150 (connect_job's maxOffsetsPerTrigger), the last ends the input


def _written(kafka, topic: str) -> Counter:
    return Counter(m.value().decode() for m in kafka.consume_all(topic))


def _client(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    try:
        return subprocess.run([sys.executable, "-m", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=900)
    except subprocess.TimeoutExpired as e:       # name what the client printed, not only that it hung
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"the Connect client {args[0]} ran over {e.timeout} s; its stderr ends:\n{err[-4000:]}")


@pytest.fixture(scope="module")
def connect_url(broker, tmp_path_factory):
    with connect_server(shuffle_partitions=1, workdir=tmp_path_factory.mktemp("connect")) as server:
        yield server.url


def test_a_composed_pipeline_over_spark_connect_writes_what_a_classic_session_writes(spark, kafka, connect_url,
                                                                                      tmp_path):
    topic = kafka.topic(2, prefix="connect-in")
    kafka.produce(topic, clicks((now_ms() - 120_000) // 1_000 * 1_000, CLICKS))
    outs = {k: kafka.topic(1, prefix=f"connect-out-{k}") for k in ("classic", "connect")}
    run(spark, kafka.bootstrap, topic, outs["classic"], str(tmp_path / "ck-classic"))
    report = tmp_path / "connect.json"
    done = _client("tests.datasource.connect_job", connect_url, kafka.bootstrap, topic, outs["connect"],
                   str(tmp_path / "ck-connect"), str(report))
    assert done.returncode == 0, done.stderr[-4000:]
    classic, connect = _written(kafka, outs["classic"]), _written(kafka, outs["connect"])
    kinds = Counter(json.loads(v)["kind"] for v in classic.elements())
    assert kinds["data"] > 0 and kinds["result"] > 0, kinds
    assert connect == classic
    got = json.loads(report.read_text())
    progress = got["progress"]
    assert len(progress) == CLICKS // 150
    assert set(progress[-1]["stages"]) == {"sessions", "page_windows", "panes"}
    assert sum(p["stages"]["sessions"]["records_in"] or 0 for p in progress) == CLICKS
    assert progress[-1]["sources"][0]["max_lag"] == 0 and progress[0]["sources"][0]["total_lag"] == CLICKS - 150
    assert got["heard"] and {p["batch_id"] for p in got["heard"]} <= {p["batch_id"] for p in progress}


def test_a_batch_read_over_spark_connect(kafka, connect_url):
    topic = kafka.topic(2, prefix="connect-batch")
    kafka.produce(topic, clicks(now_ms() - 60_000, 50))
    code = ("import sys; from dataflow_kafka.datasource.connect import connect_session; "
            "s = connect_session(sys.argv[1]); "
            "df = s.read.format('dataflow-kafka').option('kafka.bootstrap.servers', sys.argv[2])"
            ".option('subscribe', sys.argv[3]).option('eventTimeField', 'ts').load(); "
            "print(sorted((r['kind'], r['count']) for r in df.groupBy('kind').count().collect()))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code, connect_url, kafka.bootstrap, topic], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "[('data', 50), ('punctuation', 2)]"
