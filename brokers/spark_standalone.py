"""A Spark standalone cluster on loopback: a master and workers started with pyspark's own launcher
(``bin/spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), for tests and
demos that need executors in processes of their own, and a worker that can be lost.

Each worker runs in its own process group with a bounded daemon heap (``SPARK_DAEMON_MEMORY``,
default 256 MiB here); the executors it launches are its children. :meth:`SparkWorker.kill`
SIGKILLs the worker and every process below it: the executor JVM, its pyspark daemon, and the
daemon's Python workers, which move into process groups of their own (``os.setpgid(0, 0)``) and
would survive a kill of the worker's group alone. A driver connects with
``spark_session(master=cluster.master_url)``.

Example
-------
>>> with spark_standalone(workers=2) as cluster:          # doctest: +SKIP
...     spark = spark_session(master=cluster.master_url)
...     cluster.workers[0].kill()                       # a lost machine: its executor goes with it
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from dataflow_kafka.brokers.launcher import free_port, proc_stats
from dataflow_kafka.errors import BrokerError

__all__ = ["SparkStandalone", "SparkWorker", "spark_standalone", "descendants"]

DAEMON_MEMORY = "256m"


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent / "bin" / "spark-class")


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for p, fields in proc_stats():
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _wait_for(log: Path, marker: str, proc: subprocess.Popen, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while marker not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise BrokerError(f"standalone Spark {what} did not start (exit code {proc.poll()}); last log lines "
                              f"({log}):\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.3)


@dataclass
class _Daemon:
    """A master or worker process (the leader of its own process group) and its log."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] = field(repr=False)
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def spawn(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([_spark_class(), *self.args], env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> list[int]:
        """SIGKILL the process and everything below it (own process groups included); the pids killed."""
        if self.proc is None:
            return []
        pids = [self.proc.pid, *descendants(self.proc.pid)]
        _kill_all(pids)
        self.proc.wait(30)
        self.proc = None
        return pids

    def stop(self) -> None:
        """SIGTERM the process and what runs below it; SIGKILL whatever is left after 20 s."""
        if self.proc is None:
            return
        pids = [self.proc.pid, *descendants(self.proc.pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(20)
        _kill_all(pids)                 # executors and Python workers a stopped worker left behind
        self.proc.wait(30)
        self.proc = None


def _kill_all(pids: list[int], timeout_s: float = 30.0) -> None:
    """SIGKILL ``pids`` and wait until none is alive."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class SparkWorker(_Daemon):
    """A standalone worker: :meth:`kill` loses it with its executor and Python workers;
    :meth:`start` brings a new one (registered with the master again)."""

    def start(self) -> None:
        if self.running:
            return
        self.spawn()
        _wait_for(self.log_path, "Successfully registered with master", self.proc, self.name)

    def executor_pids(self) -> list[int]:
        """Processes below the worker: its executor JVMs and their Python processes."""
        return descendants(self.proc.pid) if self.proc is not None else []


@dataclass
class SparkStandalone:
    """A running standalone cluster: ``master_url`` for ``spark_session(master=...)``."""

    master_url: str
    master: _Daemon
    workers: list[SparkWorker]
    workdir: Path

    def logs(self, tail: int = 40) -> str:
        return "\n".join(f"-- {d.name} ({d.log_path}):\n" + "\n".join(
            d.log_path.read_text(errors="replace").splitlines()[-tail:]) for d in [self.master, *self.workers])

    def stop(self) -> None:
        for d in [*self.workers, self.master]:
            d.stop()


@contextlib.contextmanager
def spark_standalone(workers: int = 2, cores: int = 2, memory: str = "2g", workdir: str | os.PathLike | None = None,
                     python: str | None = None, env: dict[str, str] | None = None) -> Iterator[SparkStandalone]:
    """Start a master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1 and yield
    the cluster; everything is stopped on exit. ``python``: the interpreter of the Python workers
    (``PYSPARK_PYTHON`` of the daemons; a driver's own setting travels with its jobs); ``env``: more
    environment for the daemons and their executors."""
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="dataflow-kafka-spark-")
        workdir = tmp
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    daemon_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                  "PYSPARK_PYTHON": python or os.environ.get("PYSPARK_PYTHON", sys.executable),
                  "SPARK_LOG_DIR": str(root / "logs"), **(env or {})}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master = _Daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                                "--webui-port", str(free_port())], root / "master.log", daemon_env)
    nodes = [SparkWorker(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                         "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                                         "--work-dir", str(root / f"worker-{i}")],
                         root / f"worker-{i}.log", daemon_env) for i in range(1, workers + 1)]
    cluster = SparkStandalone(url, master, nodes, root)
    try:
        master.spawn()
        _wait_for(master.log_path, "I have been elected leader", master.proc, "master")
        for w in nodes:
            w.spawn()
        for w in nodes:
            _wait_for(w.log_path, "Successfully registered with master", w.proc, w.name)
        yield cluster
    finally:
        cluster.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
