"""A SparkSession configured for dataflow-kafka (used by the demo, tests and benchmarks).

What it sets and why: Python workers run this interpreter (``PYSPARK_PYTHON``), so executors
import the same packages; the RocksDB state store, which ``transformWithStateInPandas`` needs;
few shuffle partitions (tiny micro-batches are latency-bound on small machines); no UI.

Low-latency state store settings (``LOW_LATENCY_DEFAULTS``; local masters, ``low_latency=True``;
``extra=`` overrides each one). Only settings that change neither results nor durability:

* ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true``: each stateful
  operator's commit writes the batch's changed keys (a changelog file) instead of uploading a
  RocksDB snapshot; snapshots are made in the background by state store maintenance. Same
  durability (the changelog is in the checkpoint before the batch commits); recovery replays at
  most ``minDeltasForSnapshot`` changelogs on top of the last snapshot. Spark allows switching
  it on and off for an existing checkpoint.
* ``spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows=false``: RocksDB does not count
  every key on each commit (a read of the whole store); the cost is a metric:
  ``stateOperators[].numRowsTotal`` is no longer reported correctly in query progress.

Not set here, because they trade durability or integrity for speed (see docs/latency.md for
their measured effect): ``spark.sql.streaming.checkpoint.fileChecksum.enabled=false`` (state
store checkpoint files are written and read without checksums, so a corrupted file goes
undetected) and a checkpoint location on tmpfs (lost with the machine).

Fast Python start (local masters, pip-installed pyspark): Spark puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of every Python process it
starts. The zip holds no byte code, so each fresh process compiles the pyspark modules it imports
from source: importing the ``transformWithState`` pre-init worker took 1.42 s from the zip
against 0.23 s from the installed package here. Fresh processes are started on every query start
(the Python data source's planner and streaming runners) and on the first micro-batch of every
``transformWithStateInPandas`` query (pre-init). With pip's layout the zip is the same release as
the installed package, so ``PYSPARK_PYTHON`` becomes a small shell wrapper that drops that one
zip from ``PYTHONPATH`` and runs this interpreter. Not done when ``PYSPARK_PYTHON`` is set, for
non-local masters (executors elsewhere cannot run a wrapper written here), or with
``fast_python_start=False``.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
import tempfile
from pathlib import Path

__all__ = ["spark_session", "session_settings", "python_without_pyspark_zip", "ROCKSDB_PROVIDER",
           "LOW_LATENCY_DEFAULTS"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

#: State store settings that shorten every stateful micro-batch without changing results or
#: durability (module docstring); applied on local masters unless ``low_latency=False``.
LOW_LATENCY_DEFAULTS = {
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
}


def spark_session(master: str = "local[2]", app_name: str = "dataflow-kafka",
                  shuffle_partitions: int = 2, extra: dict[str, str] | None = None,
                  fast_python_start: bool = True, low_latency: bool = True):
    """Get or create a SparkSession with ``format("dataflow-kafka")`` registered.

    ``extra``: more Spark settings; they override everything set here, including
    ``LOW_LATENCY_DEFAULTS`` (applied on local masters when ``low_latency``)."""
    if "PYSPARK_PYTHON" not in os.environ:
        wrapper = python_without_pyspark_zip() if fast_python_start and master.startswith("local") else None
        os.environ["PYSPARK_PYTHON"] = wrapper or sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in session_settings(master, shuffle_partitions, extra, low_latency).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from datasource import register

    register(spark)
    return spark


def session_settings(master: str = "local[2]", shuffle_partitions: int = 2, extra: dict[str, str] | None = None,
                     low_latency: bool = True) -> dict[str, str]:
    """The Spark settings :func:`spark_session` applies: ours, then ``LOW_LATENCY_DEFAULTS`` (local
    masters, ``low_latency``), then ``extra``, which overrides any of them."""
    settings = {
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(max(2, shuffle_partitions)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
    }
    if low_latency and master.startswith("local"):
        settings.update(LOW_LATENCY_DEFAULTS)
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
        f"exec {shlex.quote(sys.executable)} \"$@\"\n"
    )
    path = Path(tempfile.mkdtemp(prefix="dataflow-kafka-python-")) / "python"
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)
