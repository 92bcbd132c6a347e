"""A query of Spark's own (Spark's Kafka connector or the rate source, a ``foreachBatch`` function,
nothing of dataflow-kafka) stopped while its ``foreachBatch`` job runs: the JVM logs
``java.lang.StackOverflowError`` in ``java.util.regex.Pattern`` from the stream execution thread.

Why (Spark 4.3, ``StreamExecution``): when the stop cancels the job, the Python function fails with
a ``Py4JJavaError`` and py4j hands the JVM a ``Py4JException`` whose message is the whole Python
traceback with the Java stack inside it. ``StreamExecution.isInterruptionException`` matches that
message against ``PROXY_ERROR``, ``py4j.protocol.Py4JJavaError: An error occurred while
calling((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException|...)``: Java's regex engine recurses once
per character of ``(.|\\r\\n|\\r|\\n)*``, so a message of a few thousand characters overflows a
thread stack of the default size (1 MiB). The query still stops; only the stream thread dies with
the error. A larger thread stack for the driver (``spark.driver.extraJavaOptions=-Xss64m``) or
stopping between batches (wait until ``query.status["isTriggerActive"]`` is false) avoids it.

``python spark_stop_overflow.py rate|kafka [BOOTSTRAP TOPIC]``; ``XSS=64m`` sets the thread stack.
Prints ``STOPPED`` after ``query.stop()`` returned.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path


def main(source: str, bootstrap: str | None = None, topic: str | None = None) -> None:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    if source == "kafka":
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from bench.spark_kafka import session_extra

        for k, v in session_extra().items():
            builder = builder.config(k, v)
    if os.environ.get("XSS"):
        builder = builder.config("spark.driver.extraJavaOptions", f"-Xss{os.environ['XSS']}")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    running = threading.Event()

    def slow_batch(df, batch_id: int) -> None:
        from pyspark.sql.functions import udf

        running.set()
        slow = udf(lambda x: (time.sleep(0.5), x)[1], "long")
        df.sparkSession.range(40).select(slow("id")).collect()       # a job of 10 s or more

    if source == "rate":
        stream = spark.readStream.format("rate").option("rowsPerSecond", "20").load()
    else:
        stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest").load())
    query = stream.writeStream.foreachBatch(slow_batch).start()
    running.wait(300)
    time.sleep(3.0)                                    # mid-batch: the foreachBatch job runs
    query.stop()
    print(f"STOPPED exception={query.exception()}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
