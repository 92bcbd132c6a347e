"""What ``spark.sql.execution.arrow.maxBytesPerBatch`` costs the JVM when it feeds a ``mapInArrow``
step: Spark's default (64 MiB) against ``2147483647`` (``Int.MaxValue``), alternated in one session.

Spark 4.3 writes a ``mapInArrow`` step's input rows to Arrow in ``BatchedPythonArrowInput.writeSizedBatch``,
which before every row asks the Arrow writer for its size in bytes (the sum over every column's
buffers) unless the setting is ``Int.MaxValue``; batches are then bounded by
``spark.sql.execution.arrow.maxRecordsPerBatch`` alone (10,000 rows by default). Java Flight
Recorder put ``ArrowFieldWriter.getSizeInBytes`` at 5% of the JVM's Java samples in NEXMark Q5
([nexmark.md](../docs/nexmark.md)): our source's rows are packed into key groups by a
``mapInArrow`` step (``keygroups.packed``).

The shape: ``--rows`` rows with the columns of that packing step's input (a key group, the row
contract's control columns, mostly null, and two inputs), cached, then ``mapInArrow`` with a
function that yields one row per batch, written to ``noop``; the CPU seconds of the JVM and of
its Python workers in each run (``bench.nexmark.throughput.ProcessCpu``) and its wall time. The arms alternate ``--repeats`` times; prints
the median of each and the ratio Int.MaxValue / default.

    python -m bench.arrow_batch_bytes [--rows 2000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

DEFAULT, UNBOUNDED = "67108864b", "2147483647"
SETTING = "spark.sql.execution.arrow.maxBytesPerBatch"


def _one_row_per_batch(batches):
    import pyarrow as pa

    for b in batches:
        yield pa.RecordBatch.from_pydict({"n": [b.num_rows]})


def frame(spark, rows: int):
    """The packing step's input shape: key group, control columns (mostly null), two inputs."""
    from pyspark.sql import functions as F

    df = spark.range(rows).select(
        (F.col("id") % 4).cast("int").alias("key_group"),
        F.lit("data").alias("kind"), F.lit("nexmark-bid").alias("topic"), (F.col("id") % 4).cast("int").alias("partition"),
        F.col("id").alias("offset"), (F.col("id") * 7).alias("event_time_ms"),
        F.lit(None).cast("bigint").alias("punctuation_ms"), F.lit(None).cast("string").alias("modification"),
        F.lit(None).cast("bigint").alias("control_offset"), F.lit(1_767_225_600_000).alias("processing_time_ms"),
        F.lit(None).cast("string").alias("error"), (F.col("id") % 1000).alias("auction"))
    return df.cache()


def run_once(spark, df, value: str) -> tuple[float, float, float]:
    """``(JVM CPU s, Python workers' CPU s, wall s)`` of one ``mapInArrow`` pass with the setting at ``value``."""
    from bench.nexmark.throughput import ProcessCpu

    spark.conf.set(SETTING, value)
    meter = ProcessCpu(int(spark._jvm.java.lang.ProcessHandle.current().pid()))
    meter.start()
    t0 = time.perf_counter()
    df.mapInArrow(_one_row_per_batch, "n long").write.format("noop").mode("overwrite").save()
    wall = time.perf_counter() - t0
    jvm, py, _ = meter.stop()
    return jvm, py, wall


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.arrow_batch_bytes", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    from dataflow_kafka.datasource.session import spark_session

    spark = spark_session("local[2]", extra={SETTING: DEFAULT})
    df = frame(spark, a.rows)
    df.count()
    print(f"{a.rows} rows, {len(df.columns)} columns; load {os.getloadavg()[0]:.2f}")
    runs: dict[str, list[tuple[float, float, float]]] = {DEFAULT: [], UNBOUNDED: []}
    for value in (DEFAULT, UNBOUNDED):                                    # warm-up, not recorded
        run_once(spark, df, value)
    for r in range(a.repeats):
        for value in ((DEFAULT, UNBOUNDED) if r % 2 == 0 else (UNBOUNDED, DEFAULT)):
            runs[value].append(run_once(spark, df, value))
            jvm, py, wall = runs[value][-1]
            print(f"  {SETTING}={value}: CPU s JVM {jvm:.2f} + Python {py:.2f}, wall {wall:.2f} s")
    med = {v: tuple(statistics.median(r[i] for r in rs) for i in range(3)) for v, rs in runs.items()}
    for v, (jvm, py, wall) in med.items():
        print(f"{SETTING}={v}: median CPU s JVM {jvm:.2f} + Python {py:.2f}, wall {wall:.2f} s")
    (j0, p0, w0), (j1, p1, w1) = med[DEFAULT], med[UNBOUNDED]
    print(f"Int.MaxValue / default: JVM CPU {j1 / j0:.2f}, Python CPU {p1 / p0:.2f}, wall {w1 / w0:.2f}; "
          f"load {os.getloadavg()[0]:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
