"""The end-to-end read on a multi-process Spark standalone cluster (master + worker on loopback),
started with pyspark's own launcher (``bin/spark-class``), not only ``local[*]``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


@pytest.fixture
def standalone_cluster(tmp_path):
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOG_DIR=str(tmp_path / "logs"))
    mport = _port()
    master_url = f"spark://127.0.0.1:{mport}"
    logs = []
    procs = []
    for name, args in (("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(mport), "--webui-port", str(_port())]),
                       ("worker", ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                                   "--cores", "2", "--memory", "2g", "--webui-port", str(_port())])):
        log = tmp_path / f"{name}.log"
        logs.append(log)
        procs.append(subprocess.Popen([_spark_class(), *args], env=env, stdout=open(log, "wb"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 60
        marker = "I have been elected leader" if name == "master" else "Successfully registered with master"
        while marker not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or procs[-1].poll() is not None:
                for p in procs:
                    p.kill()
                pytest.fail(f"standalone {name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
    yield master_url
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def test_end_to_end_read_on_standalone_cluster(standalone_cluster, kafka, tmp_path):
    topic = kafka.topic(4)
    n = 1200
    kafka.produce(topic, [{"value": b"%d" % i, "partition": i % 4} for i in range(n)])
    out = tmp_path / "out.json"
    job = Path(__file__).with_name("cluster_job.py")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    r = subprocess.run([sys.executable, str(job), standalone_cluster, kafka.bootstrap, topic,
                        str(tmp_path / "ck"), str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["master"] == standalone_cluster and result["executors"] >= 1
    data = [row for rows in result["batches"].values() for row in rows if row[0] == "data"]
    assert sorted((p, o) for _, p, o, _ in data) == sorted((i % 4, i // 4) for i in range(n))
    assert sorted(int(v) for *_, v in data) == list(range(n))
    assert len(result["batches"]) >= 3      # maxOffsetsPerTrigger=500 over 1200 records
    puncts = [row for rows in result["batches"].values() for row in rows if row[0] == "punctuation"]
    assert len(puncts) == 4 * len(result["batches"])
