"""Spark Connect: a server on loopback for jobs and tests, and a client session with the source.

A Spark Connect client (``SparkSession.builder.remote("sc://host:port")``) sends plans to a
server that runs them; ``format("dataflow-kafka")``, :meth:`keygroups.Pipeline.apply`
(``transformWithStateInPandas``), ``foreachBatch``, ``observe`` and the sink work over it
(docs/connect.md). What differs from a classic session:

* the Python workers run on the **server's** machine with the server's interpreter: the
  package (and any module a pipeline's functions come from) must be importable there;
  :func:`connect_server` starts one with this interpreter and the current directory on its
  ``PYTHONPATH``;
* :func:`datasource.register` registers the data source in the client's session (Spark ships the
  class to the server); a session made by another client registers it again;
* the client has no JVM: helpers that read a plan through ``_jdf`` (e.g.
  :func:`keygroups.pipeline.stateful_operators`) take a classic session's DataFrame only;
* pyspark runs one kind of session per process: a classic session and a Connect client do not
  mix in one Python process.

:func:`connect_server` is a context manager starting ``SparkConnectServer`` (the class pyspark's
``sbin/start-connect-server.sh`` starts) as a child process with the settings of
:func:`datasource.session.session_settings`, on a free loopback port, and stopping it by process
id; :func:`connect_session` is a client session on it with the data source registered.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from dataflow_kafka.errors import ConnectServerError

__all__ = ["ConnectServer", "connect_server", "connect_session"]

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    """A running Spark Connect server: its ``url`` (``sc://127.0.0.1:port``), process and log."""

    url: str
    process: subprocess.Popen
    log_path: Path

    def logs(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server and its children (its process group), SIGKILL after ``timeout_s``."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def connect_server(master: str = "local[2]", shuffle_partitions: int | None = None,
                   extra: Mapping[str, str] | None = None, timeout_s: float = 120.0,
                   workdir: str | os.PathLike | None = None) -> Iterator[ConnectServer]:
    """A Spark Connect server on a free loopback port for the duration of the block.

    The server runs ``master`` with :func:`~datasource.session.session_settings` (``extra``
    overrides them), its Python workers this interpreter, with the current directory on
    ``PYTHONPATH`` (so a pipeline's functions defined in a module of the project import there).
    Raises :class:`~errors.ConnectServerError` with the server's log if it does not listen within
    ``timeout_s``."""
    import pyspark

    from dataflow_kafka.datasource.session import session_settings

    home = Path(pyspark.__file__).resolve().parent
    port = _free_port()
    conf = session_settings(master, shuffle_partitions, dict(extra or {}))
    conf.update({"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port)})
    cmd = [str(home / "bin" / "spark-submit"), "--master", master, "--class", SERVER_CLASS,
           "--name", "dataflow-kafka Spark Connect server"]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd.append("spark-internal")
    folder = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="dataflow-kafka-connect-"))
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "connect-server.log"
    path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=path)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    server = ConnectServer(f"sc://127.0.0.1:{port}", proc, log_path)
    try:
        deadline = time.monotonic() + timeout_s
        while not _ready(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ConnectServerError(f"the Spark Connect server did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s "
                                  f"(exit code {proc.poll()}); last log lines:\n{server.logs()}")
            time.sleep(0.5)
        yield server
    finally:
        server.stop()


def connect_session(url: str):
    """A Spark Connect client session on ``url`` with ``format("dataflow-kafka")`` registered.
    pyspark keeps one kind of session per process (its column functions build the columns of one
    kind): in a process that runs a classic session this raises pyspark's ``SESSION_ALREADY_EXIST``."""
    from pyspark.sql import SparkSession

    from dataflow_kafka.datasource.session import register

    spark = SparkSession.builder.remote(url).getOrCreate()
    register(spark)
    return spark
