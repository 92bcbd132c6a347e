"""The ``StackOverflowError`` logged when a query is stopped mid-batch is Spark's: reproduced with
Spark's own Kafka connector and a ``foreachBatch`` function, nothing of dataflow-kafka in the
driver (``spark_stop_overflow.py`` says why), and gone with a larger thread stack.

Two Spark drivers of about a minute each: in ``make chaos`` (``DFK_CHAOS=1``), not in the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("spark_stop_overflow.py")
pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.cluster,
              pytest.mark.skipif(not os.environ.get("DFK_CHAOS"), reason="make chaos (two Spark drivers)")]


def _stop_mid_batch(bootstrap: str, topic: str, xss: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "XSS"}
    if xss:
        env["XSS"] = xss
    done = subprocess.run([sys.executable, str(SCRIPT), "kafka", bootstrap, topic], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and "STOPPED exception=None" in done.stdout, done.stderr[-3000:]
    return done.stderr


def test_stopping_a_spark_kafka_query_mid_batch_overflows_spark_regex(kafka):
    from bench.spark_kafka import connector_jars, missing_message

    if connector_jars() is None:
        pytest.skip(missing_message())
    topic = kafka.topic(1, prefix="overflow")
    kafka.produce(topic, [{"value": b"%d" % i} for i in range(100)])
    log = _stop_mid_batch(kafka.bootstrap, topic)
    overflow = log[log.find("java.lang.StackOverflowError"):][:3000]
    assert "java.lang.StackOverflowError" in log and "stream execution thread" in log, log[-3000:]
    assert "java.util.regex.Pattern" in overflow, overflow
    assert "dataflow_kafka" not in log
    assert "java.lang.StackOverflowError" not in _stop_mid_batch(kafka.bootstrap, topic, xss="64m")
