"""After ``query.stop()`` and ``spark.stop()`` nothing of ours keeps running: a driver process
(tests/reliability/leak_job.py, on its own embedded broker) runs source -> sink, stops the query
and the session, then the broker, and reports what is left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark
@pytest.mark.kafka
def test_nothing_of_ours_runs_after_query_stop_and_spark_stop():
    # as a module from the root: the job imports tests.support (python -m puts the root on sys.path)
    done = subprocess.run([sys.executable, "-m", "tests.reliability.leak_job"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT "):])
    assert report["written"] == 100, report
    # no consumer idling at the end of a log (noida-db spins a core for one): the broker is idle
    assert report["broker_cpu_share_after_query_stop"] < 0.5, report
    assert report["kafka_threads_in_driver"] == [], report        # librdkafka threads are named rdk:*
    assert report["python_workers_left"] == [], report
    assert report["new_wrapper_dirs"] == [], report               # no dataflow-kafka-python-* per session
    # no client left open retrying the stopped broker
    after_stop = done.stderr[done.stderr.index("BROKER STOPPING"):]
    assert "Connection refused" not in after_stop and "CHECK DONE" in after_stop, after_stop[-3000:]
