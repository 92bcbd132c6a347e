"""A SparkSession configured for dataflow-kafka (used by the demo, tests and benchmarks).

What it sets and why: Python workers run this interpreter (``PYSPARK_PYTHON``), so executors
import the same packages; the RocksDB state store, which ``transformWithStateInPandas`` needs;
few shuffle partitions (tiny micro-batches are latency-bound on small machines); no UI.

Low-latency defaults, for local masters (the machine the query runs on is small and its
micro-batches are tiny; measured with ``bench.spark_settings``, figures in docs/latency.md); on
other masters only the Unix domain sockets (``ANY_MASTER``: a Python worker talks to the executor
on its own machine wherever that is; the cluster test checks the executors' workers use them):

* one shuffle partition (``shuffle_partitions=None`` means 1 on local masters, 2 elsewhere): every
  stateful operator then runs one task per micro-batch instead of two that wait for each other
  and commit separately (the largest effect measured). The cost is parallelism inside a stateful
  stage on large micro-batches. For an existing checkpoint Spark keeps the state partition count
  it was created with.
* ``LOW_LATENCY_DEFAULTS`` (``low_latency=True``; ``extra=`` overrides each one):
  ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true``. Each stateful
  operator's commit writes the batch's changed keys (a changelog file) instead of uploading a
  RocksDB snapshot; snapshots are made in the background by state store maintenance. Same
  durability (the changelog is in the checkpoint before the batch commits); recovery replays at
  most ``minDeltasForSnapshot`` changelogs on top of the last snapshot; Spark allows switching it
  on and off for an existing checkpoint. It shortens the stateful operators' commits.
  ``spark.python.unix.domain.socket.enabled=true``: the executor talks to its Python workers
  over Unix domain sockets instead of loopback TCP. Over TCP every Python step of a task
  (the source's ``read()``, ``mapInArrow``) waited about 35 ms for its first rows (small
  writes held back until the previous one is acknowledged); with it, about 1 ms (an identity
  ``mapInArrow`` task over 10 rows, ``local[2]``: 86 ms -> 37 ms; measurements in
  docs/latency.md). Nothing else changes: the workers run on the executor's machine either
  way (a Spark option since 4.1, off by default; the socket files go under ``java.io.tmpdir``).

On every master ``spark.sql.execution.arrow.maxBytesPerBatch`` is ``2147483647`` (``Int.MaxValue``;
Spark 4.3's default is 64 MiB): Spark writes the rows of a ``mapInArrow`` step (the packing of a
first operator's input into key groups, ``keygroups.packed``) to Arrow asking the writer for its
size in bytes before every row, a sum over every column's buffers, unless the setting is
``Int.MaxValue``. Without that check a ``mapInArrow`` pass over the packing step's 12 columns
used 0.38-0.50 of the JVM CPU it used with the check (2M rows, two runs, ``python -m bench.arrow_batch_bytes``,
docs/nexmark.md). Batches stay bounded by ``spark.sql.execution.arrow.maxRecordsPerBatch``
(10,000 rows): with large records (a Kafka value can be 1 MiB) lower that, or give the byte bound
back with ``extra={ARROW_MAX_BYTES_PER_BATCH: "64m"}``.

Measured and withdrawn: ``spark.sql.streaming.checkpointFileManagerClass`` = Spark's
``FileSystemBasedCheckpointFileManager``. It removes the ``readlink`` child processes Hadoop starts
for every checkpoint file ``FileContext.rename`` renames without its native library (a no-op
``transformWithStateInPandas`` task 143 -> 52 ms; docs/latency.md), but on the local file system
it silently keeps the old file when Spark asks to overwrite one (``createAtomic(path,
overwriteIfPossible=True)``, which state stores use when a batch runs again): a test pins that
the session's manager overwrites.

Measured and not set: ``spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=false``
(no effect with key-group state, a few rows written per batch; it would cost the
``numRowsTotal`` metric), ``spark.sql.streaming.checkpoint.fileChecksum.enabled=false`` (no
measured effect; Spark 4.3 documents the checksums as enabled only with
``spark.sql.streaming.stateStore.checkpointFormatVersion`` >= 2, default 1; turning them off
removes the detection of corrupted checkpoint files), and a checkpoint location on tmpfs (no
measured effect, and the checkpoint is lost with the machine: a durability choice for the user,
never a default).

Addresses: on local masters (``local``, ``local[N]``) the driver binds to loopback
(``spark.driver.host`` and ``spark.driver.bindAddress`` 127.0.0.1, ``SPARK_LOCAL_IP``): nothing
outside the machine needs it. On any other master nothing is set, so Spark advertises the address
a cluster reaches the driver at (the host name's address, ``SPARK_LOCAL_IP`` or your
``spark.driver.host``): executors on other machines could not connect to 127.0.0.1.
Whatever the log level, lost executors and retried tasks are logged on the driver's console
(:data:`EXECUTOR_EVENT_LOGGERS`).

On local masters the Python workers start through a small wrapper
(:func:`python_without_pyspark_zip`): it takes pip-installed pyspark's ``pyspark.zip`` off
``PYTHONPATH`` (the zip has no byte code, so every worker compiled pyspark again) and keeps the
progress notes that pyspark's ``transformWithStateInPandas`` driver worker prints on stdout off
the application's console (its errors still reach Spark).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

__all__ = ["spark_session", "session_settings", "python_without_pyspark_zip", "use_in_this_thread", "is_connect",
           "show_executor_events", "ROCKSDB_PROVIDER", "ARROW_MAX_BYTES_PER_BATCH", "LOW_LATENCY_DEFAULTS", "ANY_MASTER",
           "EXECUTOR_EVENT_LOGGERS"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: Set to ``Int.MaxValue`` on every master (module docstring): Spark then skips a size check per row
#: when it writes rows to Arrow for a Python step; batches stay bounded by ``maxRecordsPerBatch``.
ARROW_MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"

#: Settings that shorten every micro-batch without changing results or durability (module
#: docstring); applied on local masters unless ``low_latency=False``.
LOW_LATENCY_DEFAULTS = {
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.python.unix.domain.socket.enabled": "true",
}
#: The ``LOW_LATENCY_DEFAULTS`` that also apply on other masters: Python workers are forked on their
#: executor's machine wherever it runs (the others concern where checkpoints live).
ANY_MASTER = ("spark.python.unix.domain.socket.enabled",)
LOCAL_SHUFFLE_PARTITIONS = 1    # default on local masters (module docstring)
OTHER_SHUFFLE_PARTITIONS = 2    # default elsewhere


def spark_session(master: str = "local[2]", app_name: str = "dataflow-kafka",
                  shuffle_partitions: int | None = None, extra: dict[str, str] | None = None,
                  fast_python_start: bool = True, low_latency: bool = True):
    """Get or create a SparkSession with ``format("dataflow-kafka")`` registered.

    ``shuffle_partitions``: None means 1 on local masters, 2 elsewhere. ``extra``: more Spark
    settings; they override everything set here, including ``LOW_LATENCY_DEFAULTS`` (applied on
    local masters when ``low_latency``, their ``ANY_MASTER`` part on others)."""
    local = _is_local(master)
    if "PYSPARK_PYTHON" not in os.environ:
        wrapper = python_without_pyspark_zip() if fast_python_start and local else None
        os.environ["PYSPARK_PYTHON"] = wrapper or sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in session_settings(master, shuffle_partitions, extra, low_latency).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    show_executor_events(spark)
    register(spark)
    return spark


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


#: Spark's loggers whose messages a user must see although the session logs at ERROR: a lost
#: executor (``TaskSchedulerImpl``: "Lost executor 1 on ...: worker lost"), a failed task that is
#: retried (``TaskSetManager``: "Lost task 0.0 in stage 3.0 (TID 12) ...: ExecutorLostFailure"),
#: and the standalone master's word on executors ("Executor ... removed: ...", "Granted executor").
EXECUTOR_EVENT_LOGGERS = {
    "org.apache.spark.scheduler.TaskSchedulerImpl": "WARN",
    "org.apache.spark.scheduler.TaskSetManager": "WARN",
    "org.apache.spark.scheduler.cluster.StandaloneSchedulerBackend": "INFO",
}


def show_executor_events(spark) -> None:
    """Log lost executors and retried tasks on the driver's console (standard error) at the
    levels of :data:`EXECUTOR_EVENT_LOGGERS`, whatever the session's log level."""
    jvm = spark._jvm
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    for name, level in EXECUTOR_EVENT_LOGGERS.items():
        configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.getLevel(level))


def register(spark) -> None:
    """Make ``format("dataflow-kafka")`` available in ``spark``, and make ``spark`` the active
    session of the calling thread (Spark looks Python data sources up in the thread's active
    session: see :func:`use_in_this_thread`). Also ``dataflow_kafka.datasource.register``. ``spark``
    may be a Spark Connect client session (:mod:`datasource.connect`): Spark ships the class to
    the server, whose Python workers must be able to import this package."""
    from dataflow_kafka.datasource.source import DataflowKafkaDataSource

    spark.dataSource.register(DataflowKafkaDataSource)
    if not is_connect(spark):          # a Connect client has no JVM thread of its own to pin
        use_in_this_thread(spark)


def session_settings(master: str = "local[2]", shuffle_partitions: int | None = None,
                     extra: dict[str, str] | None = None, low_latency: bool = True) -> dict[str, str]:
    """The Spark settings :func:`spark_session` applies: ours, then ``LOW_LATENCY_DEFAULTS`` (local
    masters; on others the ``ANY_MASTER`` ones; with ``low_latency``), then ``extra``, which
    overrides any of them."""
    local = _is_local(master)
    if shuffle_partitions is None:
        shuffle_partitions = LOCAL_SHUFFLE_PARTITIONS if local else OTHER_SHUFFLE_PARTITIONS
    settings = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(max(2, shuffle_partitions)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        ARROW_MAX_BYTES_PER_BATCH: str(2**31 - 1),
    }
    if local:       # a cluster's executors must reach the driver at an address of the network
        settings.update({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"})
    if low_latency:
        settings.update(LOW_LATENCY_DEFAULTS if local else {k: LOW_LATENCY_DEFAULTS[k] for k in ANY_MASTER})
    settings.update(extra or {})
    return settings


def python_without_pyspark_zip() -> str | None:
    """Path of an executable that runs this interpreter with pip-installed pyspark's own
    ``python/lib/pyspark.zip`` removed from ``PYTHONPATH`` (see the module docstring), or None
    when pyspark has no such zip."""
    import pyspark

    zip_path = Path(pyspark.__file__).resolve().parent / "python" / "lib" / "pyspark.zip"
    if not zip_path.is_file() or os.name != "posix":
        return None
    script = (
        "#!/bin/sh\n"
        "# dataflow-kafka: start Python for Spark without pyspark.zip (no byte code) on PYTHONPATH\n"
        f"PYTHONPATH=$(printf '%s' \"$PYTHONPATH\" | tr ':' '\\n' | grep -vxF {shlex.quote(str(zip_path))} "
        "| paste -sd: -)\n"
        "export PYTHONPATH\n"
        "# pyspark's transformWithStateInPandas driver worker prints progress notes on stdout (its errors\n"
        "# go back to Spark through the socket): keep them out of the application's console\n"
        "case \" $* \" in *\" pyspark.sql.streaming.transform_with_state_driver_worker \"*) exec >/dev/null;; esac\n"
        f"exec {shlex.quote(sys.executable)} \"$@\"\n"
    )
    # one directory per user and script (content-addressed), reused by every session and process:
    # nothing is left behind per spark_session(), even by a process that is killed
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"dataflow-kafka-python-{os.getuid()}-{digest}"
    path = folder / "python"
    if path.is_file() and os.access(path, os.X_OK) and path.read_text() == script:
        return str(path)
    folder.mkdir(mode=0o700, exist_ok=True)
    tmp = folder / f".python.{os.getpid()}"
    tmp.write_text(script)
    tmp.chmod(0o755)
    os.replace(tmp, path)         # atomic: a concurrent process sees the old or the new file, whole
    return str(path)


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client session (it has no JVM of its own)."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:                # the client's dependencies (grpcio, ...) are not installed
        return False
    return isinstance(spark, ConnectSession)


def use_in_this_thread(spark) -> None:
    """Make ``spark`` the active session of the calling thread, so that ``format("dataflow-kafka")``
    (any Python data source) resolves in it.

    Why: Spark resolves a Python data source through the *active* session of the JVM thread that
    runs the call, and the active session is thread-local. PySpark pins each Python thread to a
    JVM thread of its own; in a thread other than the one that created the session, that JVM
    thread has no active session, and a write or read fails with ``DATA_SOURCE_NOT_FOUND`` even
    after ``spark.dataSource.register(...)`` in that thread (the registration is session-wide and
    was never the problem). :func:`datasource.register` calls this, so ``register(spark)`` in the
    thread is the workaround; or call this function, or ``spark.createDataFrame`` (it sets the
    active session too) before the first use in a thread."""
    from pyspark.sql import SparkSession

    SparkSession._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)
