"""The project on a Spark standalone cluster: a master and two workers on loopback, started with
pyspark's own launcher (``brokers.spark_standalone``), the driver a process of its own.

The demo's composed pipeline (sessions -> page_windows -> panes, two shuffle partitions) into
the exactly-once sink, one worker SIGKILLed with its executor and Python workers while the query
runs: Spark reschedules the lost tasks, the state comes back from the checkpoint, the query
finishes, and what a ``read_committed`` consumer finds equals the pipeline's local run of
the same micro-batches: nothing lost, nothing twice. ``DFK_WORKER_KILLS`` kills (1 in ``make faults``;
``make chaos`` more, the workers in turn, each restarted after the query recovered) give the
recovery time as a repeated figure.

The job runs as docs/reliability.md recommends for a cluster: the package's wheel installed in
the Python the executors run (a fresh virtualenv with the wheel built from this repository, named
by ``PYSPARK_PYTHON``; its dependencies come from the test environment), the job's own code
(``demo``) shipped with ``--py-files``, and the driver at the machine's host name (no loopback
default).
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataflow_kafka.brokers.spark_standalone import spark_standalone
from demo.pipeline import package_zip
from tests.reliability import pipeline_job as job
from tests.reliability.cluster_faults import commit_times
from tests.support import now_ms

pytestmark = pytest.mark.cluster
KILLS = int(os.environ.get("DFK_WORKER_KILLS", "1"))
MAX_OFFSETS = 600           # records per micro-batch (the cluster's batches cost more than local ones)


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    with spark_standalone(workers=2, cores=2, memory="2g", workdir=tmp_path_factory.mktemp("spark")) as cluster:
        yield cluster


@pytest.fixture
def executor_python(fresh_env) -> str:
    """The executors' interpreter: the session's fresh virtualenv with the package's wheel."""
    return str(fresh_env / "bin" / "python")


def _driver_env(py_files: Path, python: str) -> dict[str, str]:
    """A driver's environment as on a cluster: no loopback default (``SPARK_LOCAL_IP``), the
    driver at the machine's host name, the job's files shipped with ``--py-files``, the Python
    workers run by ``python``."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "PYSPARK_SUBMIT_ARGS")}
    env["PYSPARK_SUBMIT_ARGS"] = (f"--conf spark.driver.host={socket.gethostname()} --py-files {py_files} "
                                  "pyspark-shell")
    env["PYSPARK_PYTHON"] = python
    return env


def test_only_local_masters_get_a_driver_on_loopback():
    from dataflow_kafka.datasource.session import session_settings

    local = session_settings("local[2]")
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    for master in ("spark://10.1.2.3:7077", "yarn", "k8s://https://10.1.2.3:6443", "local-cluster[2,1,1024]"):
        assert not {"spark.driver.host", "spark.driver.bindAddress"} & set(session_settings(master)), master


def _executor_assertions(standalone_cluster) -> list[str]:
    """``AssertionError`` lines of the state server in any executor's log (the issue's
    ``TransformWithStateInPySparkStateServer.serveRequests`` failure)."""
    hits = []
    for f in standalone_cluster.workdir.glob("worker-*/app-*/*/stderr"):
        hits += [ln for ln in f.read_text(errors="replace").splitlines()
                 if "AssertionError" in ln or "TransformWithStateInPySparkStateServer.scala" in ln]
    return hits


@pytest.mark.long_fault
def test_composed_pipeline_survives_a_lost_worker_exactly_once(standalone_cluster, executor_python, kafka, tmp_path):
    records = 2400 + 2400 * KILLS
    topic, out_topic = kafka.topic(job.PARTITIONS, prefix="cluster-in"), kafka.topic(2, prefix="cluster-out")
    kafka.produce(topic, job.clicks(records, now_ms() - 10 * records - 60_000))
    ck = str(tmp_path / "ck")
    log = tmp_path / "driver.log"
    # run from outside the repository: its dataflow_kafka/ folder would shadow the wheel in Python workers
    driver = subprocess.Popen([sys.executable, job.__file__, "pipeline", standalone_cluster.master_url, kafka.bootstrap, topic,
                               out_topic, ck, "2", str(MAX_OFFSETS)], env=_driver_env(package_zip(tmp_path), executor_python),
                              stdout=subprocess.PIPE, stderr=open(log, "wb"), text=True, cwd=tmp_path)
    kills = []
    try:
        for i in range(KILLS):
            _wait_commits(ck, len(commit_times(ck)) + (2 if i == 0 else 4), driver, log)   # the restarted one warm
            worker = standalone_cluster.workers[i % 2]
            at = time.time()
            killed = worker.kill()
            _wait_commits(ck, len(commit_times(ck)) + 1, driver, log, planned_after=at)
            recovered = min(c for p, c in commit_times(ck).values() if p > at) - at
            kills.append({"worker": worker.name, "processes": len(killed), "recovered_s": round(recovered, 1)})
            worker.start()
        out, _ = driver.communicate(timeout=900)
    finally:
        if driver.poll() is None:
            driver.kill()
    stderr = log.read_text(errors="replace")
    assert driver.returncode == 0 and "DONE" in out, stderr[-5000:]
    got, expected = job.sunk_rows(kafka.bootstrap, out_topic), job.expected_rows(kafka.bootstrap, topic, ck)
    figures = {"records": records, "batches": len(commit_times(ck)), "kills": kills,
               "rows": sum(expected.values()), "lost": sum((expected - got).values()),
               "duplicated": sum((got - expected).values()), "state_server_assertions": len(_executor_assertions(standalone_cluster)),
               "median_recovery_s": statistics.median(k["recovered_s"] for k in kills)}
    print(f"WORKER KILL FIGURES {json.dumps(figures)}")
    assert figures["rows"] > 100 and got == expected, figures
    seen = json.loads(out.split("CLUSTER ", 1)[1].splitlines()[0])
    assert seen["driver_host"] == socket.gethostname(), seen
    # spark_session()'s Unix-socket default holds on a cluster too: the executors' Python workers
    assert seen["python_workers"]["uds"] and "AF_UNIX" in seen["python_workers"]["families"], seen
    assert all(k["processes"] >= 3 for k in kills), kills    # worker, executor JVM, pyspark daemon (+ workers)
    # what the user sees on the driver's console although the session logs at ERROR: each lost executor
    assert len(set(re.findall(r"Lost executor (\d+) on 127.0.0.1: worker lost", stderr))) == KILLS, stderr[-3000:]
    assert len(re.findall(r"Executor app-\S+ removed: worker lost", stderr)) == KILLS, stderr[-3000:]


def _wait_commits(ck: str, n: int, driver, log: Path, planned_after: float | None = None, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        times = commit_times(ck)
        if len(times) >= n and (planned_after is None or any(p > planned_after for p, _ in times.values())):
            return
        assert driver.poll() is None, log.read_text(errors="replace")[-5000:]
        assert time.monotonic() < deadline, f"no {n} committed batches within {timeout_s:.0f} s"
        time.sleep(0.2)
