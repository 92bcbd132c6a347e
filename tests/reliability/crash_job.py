"""A driver for the crash tests (test_crash.py kills it with SIGKILL and starts it again).

``crash_job.py run|drain BOOTSTRAP SRC WORKDIR`` starts four queries on the dataflow-kafka topic
``SRC`` (records ``{"i": n}`` keyed ``k<n % 7>``), each with its checkpoint under ``WORKDIR``:

* ``file``: the values to Spark's JSON file sink (exactly once through its ``_spark_metadata`` log);
* ``kafka``: the values to the topic ``SRC-alo`` with the at-least-once sink;
* ``kafka_eos``: the same to ``SRC-eos`` with ``exactlyOnce=true``;
* ``stateful``: a count and sum of ``i`` per key (complete mode), each batch's table written by
  ``foreachBatch`` to ``WORKDIR/stateful/<batch id>.json`` (a replay overwrites its file).

``run`` uses a processing-time trigger and runs until killed (it prints ``STARTED`` when the
queries run and ``PROGRESS <query> <batch id>`` after each micro-batch); ``drain`` uses ``availableNow`` and exits when every query has read everything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


MAX_OFFSETS = 40


def _stateful_writer(folder: Path):
    def write(df, batch_id: int) -> None:
        rows = sorted((r["key"], r["n"], r["total"]) for r in df.collect())
        tmp = folder / f".{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        tmp.replace(folder / f"{batch_id}.json")
    return write


def main(mode: str, bootstrap: str, src: str, workdir: str) -> None:
    from dataflow_kafka.datasource.session import spark_session

    work = Path(workdir)
    (work / "stateful").mkdir(parents=True, exist_ok=True)
    spark = spark_session(master="local[2]", shuffle_partitions=1)
    trigger = {"availableNow": True} if mode == "drain" else {"processingTime": "100 milliseconds"}

    def source():
        return (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", src).option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(MAX_OFFSETS)).load().filter("kind = 'data'"))

    def kafka_sink(df, topic: str, **options):
        w = (df.selectExpr("key", "value").writeStream.format("dataflow-kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", topic))
        for k, v in options.items():
            w = w.option(k, v)
        return w

    parsed = source().selectExpr("CAST(key AS STRING) AS key", "CAST(get_json_object(CAST(value AS STRING), '$.i') "
                                 "AS BIGINT) AS i")
    writers = {
        "file": parsed.writeStream.format("json").option("path", str(work / "file")),
        "kafka": kafka_sink(source(), f"{src}-alo"),
        "kafka_eos": kafka_sink(source(), f"{src}-eos", exactlyOnce="true", exactlyOnceCommitTopic=f"{src}-commits"),
        "stateful": parsed.groupBy("key").agg({"i": "sum", "*": "count"})
                          .withColumnRenamed("count(1)", "n").withColumnRenamed("sum(i)", "total")
                          .writeStream.outputMode("complete").foreachBatch(_stateful_writer(work / "stateful")),
    }
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):   # one line per finished micro-batch, for the killer
        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            print(f"PROGRESS {event.progress.name} {event.progress.batchId}", flush=True)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

    spark.streams.addListener(Progress())
    queries = [w.option("checkpointLocation", str(work / "ck" / name)).trigger(**trigger).queryName(name).start()
               for name, w in writers.items()]
    print("STARTED", flush=True)
    for q in queries:
        q.awaitTermination()
        if q.exception() is not None:
            raise SystemExit(f"query {q.name} failed: {q.exception()}")
    print("DRAINED", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
