"""The benchmarks' JVM baselines and our fused stages on Spark's connector
(``jvm_ingest.punctuate``) run and agree with the in-order reference (a smoke test, no timings). Needs Spark's Kafka connector resolved by ``make bench`` (``python -m bench.spark_kafka``);
skipped without it. Runs in a fresh process: the connector's jars must be on the classpath of a
JVM started for them, and the test session's JVM has none."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import spark_kafka

pytestmark = [pytest.mark.spark, pytest.mark.kafka,
              pytest.mark.skipif(spark_kafka.connector_jars() is None, reason=spark_kafka.missing_message())]

ROOT = Path(__file__).resolve().parents[2]


def test_baselines_and_fused_on_spark_connector_equal_the_in_order_reference():
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    done = subprocess.run([sys.executable, "-c", "from bench.jvm_baseline import smoke; print(repr(smoke()))"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    got = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    for variant in ("spark-jvm", "spark-py", "fused-jvm"):
        counts = got[variant]
        assert counts["expected"] > 50, counts
        assert counts["missing"] == counts["wrong"] == counts["extra"] == 0, (variant, counts)
