"""``make demo`` (the README's first command) as a short run: ``python -m demo`` from the repository
against the session's Kafka broker, in its own process (its own Spark), must finish with results and
no error rows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.spark


def test_the_demo_runs_to_its_summary(bootstrap):
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    done = subprocess.run([sys.executable, "-m", "demo", "--seconds", "10"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    summary = done.stdout.split("\nsummary\n")[-1]
    assert "error rows: 0" in summary, done.stdout[-3000:]
    released = re.search(r"sessions \(optimistic\): (\d+) clicks released", summary)
    assert released and int(released.group(1)) > 0, summary
    assert re.search(r"results by query: \{'\w+': [1-9]", summary), summary


@pytest.mark.cluster
@pytest.mark.skipif(not os.environ.get("DFK_CHAOS"), reason="make chaos (three Kafka nodes, a Spark master, two workers)")
def test_the_demo_on_the_clusters_loses_no_click_across_a_leader_and_a_worker_kill():
    done = subprocess.run([sys.executable, "-m", "demo", "--cluster", "--seconds", "60"], cwd=REPO,
                          env={k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"},
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    summary = done.stdout.split("\nsummary\n")[-1]
    print(summary)
    assert "error rows: 0" in summary and "does not balance" not in summary, summary
    produced, reached = re.search(r"every click: (\d+) produced = (\d+) reached", summary).groups()
    assert int(produced) == int(reached) > 0, summary
    assert re.search(r"Kafka node \d \(leader of clicks-0\) SIGKILLed: next micro-batch done", summary), summary
    assert re.search(r"Spark worker-1 SIGKILLed with its executor and Python workers \(\d+ processes\)\n", summary), summary
    assert re.search(r"Spark worker-1 SIGKILLed: next micro-batch done", summary), summary
