"""The fast Python start of ``datasource.session``: Spark's Python processes run through a wrapper
that drops pip-installed pyspark's byte-code-less ``pyspark.zip`` from ``PYTHONPATH``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from dataflow_kafka.datasource.session import python_without_pyspark_zip

ZIP = Path(pyspark.__file__).resolve().parent / "python" / "lib" / "pyspark.zip"


@pytest.mark.skipif(not ZIP.is_file() or os.name != "posix", reason="pyspark without python/lib/pyspark.zip")
def test_wrapper_drops_only_pysparks_zip_and_runs_this_interpreter(tmp_path):
    wrapper = python_without_pyspark_zip()
    assert wrapper is not None and os.access(wrapper, os.X_OK)
    other = str(tmp_path / "other dir")
    code = "import os, sys, pyspark; print(os.environ['PYTHONPATH']); print(pyspark.__file__); print(sys.prefix)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ZIP), other]))
    out = subprocess.run([wrapper, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    path, module, prefix = out.splitlines()
    assert path == other                                   # the zip is gone, the rest is kept
    assert Path(module).resolve() == Path(pyspark.__file__).resolve()  # the installed, byte-compiled pyspark
    assert prefix == sys.prefix
    # without the wrapper the zip shadows the installed package
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "pyspark.zip" in plain.splitlines()[1]


# -- low-latency defaults -----------------------------------------------------------------------------

def test_low_latency_defaults_on_local_masters_only_and_extra_overrides_them():
    from dataflow_kafka.datasource.session import ANY_MASTER, LOW_LATENCY_DEFAULTS, ROCKSDB_PROVIDER, session_settings

    local = session_settings("local[2]")
    assert {k: local[k] for k in LOW_LATENCY_DEFAULTS} == LOW_LATENCY_DEFAULTS
    assert local["spark.sql.shuffle.partitions"] == "1"              # the default on local masters
    assert local["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert session_settings("local[2]", shuffle_partitions=3)["spark.sql.shuffle.partitions"] == "3"
    cluster = session_settings("spark://127.0.0.1:7077")
    assert cluster["spark.sql.shuffle.partitions"] == "2"
    # elsewhere only the ones that do not depend on where checkpoints live (Unix sockets)
    assert set(LOW_LATENCY_DEFAULTS) & set(cluster) == set(ANY_MASTER) == {"spark.python.unix.domain.socket.enabled"}
    assert not set(LOW_LATENCY_DEFAULTS) & set(session_settings("spark://127.0.0.1:7077", low_latency=False))
    assert not set(LOW_LATENCY_DEFAULTS) & set(session_settings("local[2]", low_latency=False))
    key = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
    overridden = session_settings("local[2]", shuffle_partitions=1,
                                  extra={key: "false", "spark.sql.shuffle.partitions": "3", "spark.x": "y"})
    assert (overridden[key], overridden["spark.sql.shuffle.partitions"], overridden["spark.x"]) == ("false", "3", "y")


def test_arrow_batches_are_bounded_by_rows_not_bytes_on_every_master(spark):
    """Spark skips its size check per row only at exactly ``Int.MaxValue``; a user can give the byte
    bound back. The shared session carries the setting as Spark reads it."""
    from dataflow_kafka.datasource.session import ARROW_MAX_BYTES_PER_BATCH, session_settings

    for master in ("local[2]", "spark://127.0.0.1:7077"):
        assert session_settings(master)[ARROW_MAX_BYTES_PER_BATCH] == "2147483647", master
    assert session_settings("local[2]", extra={ARROW_MAX_BYTES_PER_BATCH: "64m"})[ARROW_MAX_BYTES_PER_BATCH] == "64m"
    assert spark.conf.get(ARROW_MAX_BYTES_PER_BATCH).rstrip("b") == "2147483647"


def test_the_session_runs_stateful_queries_with_changelog_checkpoints(spark, tmp_path):
    """The setting name is real: Spark's RocksDB store reads its settings by prefix and would
    ignore a typo, so check what it did: changelog files instead of snapshot zips (and the total
    row count, which we leave on, is still reported)."""
    from dataflow_kafka.datasource.session import LOW_LATENCY_DEFAULTS

    assert all(spark.conf.get(k) == v for k, v in LOW_LATENCY_DEFAULTS.items())
    ck = tmp_path / "ck"
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 50).load()
          .selectExpr("value % 7 AS k").groupBy("k").count())
    for _ in range(2):
        q = (df.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(ck))
             .trigger(once=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
    op = q.lastProgress["stateOperators"][0]
    assert op["numRowsUpdated"] == 7 and op["numRowsTotal"] == 7
    files = {p.name for p in (ck / "state").rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert {"1.changelog", "2.changelog"} <= files and not any(f.endswith(".zip") for f in files), files


def test_the_session_talks_to_python_workers_over_unix_domain_sockets(spark):
    """The setting reached the Python workers: Spark tells a worker's daemon to listen on a Unix
    socket through its environment, and the worker's connection to the executor is one."""
    from tests.support import python_worker_sockets

    seen = python_worker_sockets(spark)
    assert seen["uds"] and "AF_UNIX" in seen["families"], seen


def test_the_wrapper_is_one_file_per_script_not_one_directory_per_session():
    first, second = python_without_pyspark_zip(), python_without_pyspark_zip()
    if first is None:
        pytest.skip("pyspark without python/lib/pyspark.zip")
    assert first == second
    assert Path(first).parent.name.startswith(f"dataflow-kafka-python-{os.getuid()}-")
    assert sorted(p.name for p in Path(first).parent.iterdir()) == ["python"]   # no temporary file left


# -- threads ------------------------------------------------------------------------------------------

def test_writing_from_another_thread_needs_the_session_active_there_and_register_makes_it_so(spark, kafka):
    """Spark resolves Python data sources through the JVM thread's active session; a new Python
    thread gets a JVM thread without one (datasource.session.use_in_this_thread)."""
    import threading

    from dataflow_kafka.datasource import register

    topic = kafka.topic(1, prefix="thread")
    outcome: dict = {}

    def write(tag: str) -> None:
        (spark.range(3).selectExpr(f"CONCAT('{tag}', CAST(id AS STRING)) AS value").write.format("dataflow-kafka")
         .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", topic).mode("append").save())

    def in_thread() -> None:
        try:
            write("a")
        except Exception as e:  # noqa: BLE001
            outcome["before"] = str(e)
        register(spark)
        write("b")
        outcome["after"] = "ok"

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(300)
    assert "DATA_SOURCE_NOT_FOUND" in outcome.get("before", ""), outcome
    assert outcome.get("after") == "ok", outcome
    assert sorted(m.value() for m in kafka.consume_all(topic)) == [b"b0", b"b1", b"b2"]


def test_the_sessions_checkpoint_files_are_overwritten_when_spark_asks_and_queries_restart(spark, tmp_path):
    """Spark's FileSystem-based checkpoint file manager (faster here: no readlink child processes)
    keeps the old file on the local file system when Spark asks to overwrite one, which state
    stores do when a batch runs again; so the session keeps Spark's default manager. Pinned
    through Spark's factory with the Hadoop configuration a streaming query gets: a second
    overwriting write wins. And a stateful query restarts from the checkpoint it wrote."""
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        jvm.org.apache.hadoop.fs.Path(str(tmp_path)), conf)
    target = tmp_path / "file"
    for content in (b"first", b"second"):
        out = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(str(target)), True)
        out.write(bytearray(content))
        out.close()
    assert target.read_bytes() == b"second", manager.getClass().getSimpleName()
    ck = tmp_path / "ck"
    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 20).load()
          .selectExpr("value % 3 AS k").groupBy("k").count())
    counts = []
    for _ in range(2):
        q = (df.writeStream.format("memory").queryName(f"fs_api_{len(counts)}").outputMode("complete")
             .option("checkpointLocation", str(ck)).trigger(once=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        counts.append(sorted(tuple(r) for r in spark.table(f"fs_api_{len(counts)}").collect()))
    assert counts == [[(0, 7), (1, 7), (2, 6)], [(0, 14), (1, 13), (2, 13)]]
    assert sorted(p.name for p in (ck / "commits").iterdir() if not p.name.startswith(".")) == ["0", "1"]
