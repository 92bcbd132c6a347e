"""A SparkSession configured for dataflow-kafka (used by the demo, tests and benchmarks).

What it sets and why: Python workers run this interpreter (``PYSPARK_PYTHON``), so executors
import the same packages; the RocksDB state store, which ``transformWithStateInPandas`` needs;
few shuffle partitions (tiny micro-batches are latency-bound on small machines); no UI.
"""

from __future__ import annotations

import os
import sys

__all__ = ["spark_session", "ROCKSDB_PROVIDER"]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def spark_session(master: str = "local[2]", app_name: str = "dataflow-kafka",
                  shuffle_partitions: int = 2, extra: dict[str, str] | None = None):
    """Get or create a SparkSession with ``format("dataflow-kafka")`` registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.default.parallelism", str(max(2, shuffle_partitions)))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1"))
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from datasource import register

    register(spark)
    return spark
