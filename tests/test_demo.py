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
