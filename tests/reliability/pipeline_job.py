"""The query the cluster fault tests run, in the test's process or as a driver of its own.

``format("dataflow-kafka")`` -> the demo's composed pipeline (sessions -> page_windows -> panes,
without the processing-time early panes: demo/pipeline.py) -> ``exactlyOnce`` dataflow-kafka sink,
over clicks produced before the query starts and read ``maxOffsetsPerTrigger`` at a time, so the
micro-batches are fixed by the offsets alone. What a ``read_committed`` consumer finds in the output
topic is compared with the pipeline's local run (``Pipeline.run_local``) of the micro-batches in the
query's offset log: an uninterrupted run of the same batches, without Spark and without Kafka
faults (:func:`expected_rows`, :func:`sunk_rows`).

As a driver: ``python pipeline_job.py pipeline MASTER BOOTSTRAP TOPIC OUT CHECKPOINT [SHUFFLE_PARTITIONS
[MAX_OFFSETS]]``
runs the query with an ``availableNow`` trigger to the end of the input and prints ``DONE``;
``copy`` instead of ``pipeline`` runs the copier of :func:`start_copy` until it is killed. On a
cluster, ``demo`` (the pipeline's functions) must reach the executors: ``--py-files demo.zip`` in
``PYSPARK_SUBMIT_ARGS``, as ``demo.pipeline.package_zip`` builds it.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:                  # run as a script
    sys.path.insert(0, str(REPO))

from demo.pipeline import pipeline  # noqa: E402
from tests.balancing.migration_support import canonical  # noqa: E402

PARTITIONS = 3
MAX_OFFSETS = 300            # records per micro-batch
COPY_MAX_OFFSETS = 3000      # the copier's (it catches up after each bounce)
DELAY_MS = 2_000             # watermarkDelayMs
#: columns of the pipeline's rows that are bookkeeping, not results (left out of the comparison)
_BOOKKEEPING = {"partition", "offset", "punctuation_ms", "modification", "control_offset", "processing_time_ms",
                "error", "metrics", "key_group"}
SUNK_KINDS = ("data", "result", "dropped")


def clicks(n: int, base_ms: int, seed: int = 7) -> list[dict]:
    """``n`` clicks ``{"user", "page", "ts"}`` 10 ms apart from ``base_ms``, keyed by user, 15% of
    them 0.5 to 3 s late; as records for ``KafkaHelper.produce``."""
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(24)]
    pages = ["/", "/search", "/item", "/cart", "/pay"]
    out = []
    for i in range(n):
        user = rng.choice(users)
        ts = base_ms + 10 * i - (rng.randint(500, 3_000) if rng.random() < 0.15 else 0)
        out.append({"key": user.encode(), "partition": users.index(user) % PARTITIONS,
                    "value": json.dumps({"user": user, "page": rng.choice(pages), "ts": ts}).encode()})
    return out


def source_options(bootstrap: str, topic: str, control_topic: str | None = None,
                   range_stats_topic: str | None = None, max_offsets: int = MAX_OFFSETS) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "eventTimeField": "ts", "watermarkDelayMs": str(DELAY_MS), "maxOffsetsPerTrigger": str(max_offsets)}
    if control_topic:
        opts["controlTopic"] = control_topic
    if range_stats_topic:
        opts["rangeStatsTopic"] = range_stats_topic
    return opts


def start_query(spark, bootstrap: str, topic: str, out_topic: str, checkpoint: str, *, trigger: dict | None = None,
                control_topic: str | None = None, range_stats_topic: str | None = None, sink_options: dict | None = None,
                max_offsets: int = MAX_OFFSETS):
    """Start the query; the sink's commit topic is ``<out_topic>-commits``."""
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in source_options(bootstrap, topic, control_topic, range_stats_topic, max_offsets).items():
        reader = reader.option(k, v)
    rows = pipeline(early_panes_ms=None).apply(reader.load())
    kinds = ", ".join(f"'{k}'" for k in SUNK_KINDS)
    out = rows.where(f"kind IN ({kinds})").selectExpr("to_json(struct(*)) AS value")
    writer = (out.writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", out_topic).option("exactlyOnce", "true")
              .option("exactlyOnceCommitTopic", f"{out_topic}-commits"))
    for k, v in (sink_options or {}).items():
        writer = writer.option(k, v)
    return (writer.option("checkpointLocation", checkpoint).trigger(**(trigger or {"availableNow": True}))
            .queryName(f"faults-{out_topic}").start())


def start_copy(spark, bootstrap: str, topic: str, out_topic: str, checkpoint: str):
    """Kafka's ``transactions_test`` copier: every record of ``topic`` to the same partition of
    ``out_topic`` through the exactly-once sink, micro-batches every 500 ms until stopped."""
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in source_options(bootstrap, topic, max_offsets=COPY_MAX_OFFSETS).items():
        reader = reader.option(k, v)
    return (reader.load().where("kind = 'data'").select("value", "partition")
            .writeStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out_topic).option("exactlyOnce", "true")
            .option("exactlyOnceCommitTopic", f"{out_topic}-commits").option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds").queryName(f"copy-{out_topic}").start())


def fingerprint(row: dict) -> tuple:
    """A result row without its bookkeeping columns, comparable between Spark's JSON and pandas."""
    return tuple(sorted((k, v) for k, v in ((k, canonical(v)) for k, v in row.items())
                        if k not in _BOOKKEEPING and v is not None))


def sunk_rows(bootstrap: str, out_topic: str) -> Counter:
    """The rows a ``read_committed`` consumer finds in ``out_topic``, counted."""
    from dataflow_kafka.datasource.replay import read_topic

    conf = {"bootstrap.servers": bootstrap, "isolation.level": "read_committed"}
    return Counter(fingerprint(json.loads(m.value())) for m in read_topic(conf, out_topic))


def committed_batches(checkpoint: str) -> list[int]:
    commits = Path(checkpoint) / "commits"
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def expected_rows(bootstrap: str, topic: str, checkpoint: str) -> Counter:
    """The rows the pipeline's local run gives on the query's micro-batches, counted."""
    from dataflow_kafka.datasource.replay import read_topic
    from tests.support import source_batches

    frames = source_batches(read_topic(bootstrap, topic), checkpoint, committed_batches(checkpoint),
                            delay_ms=DELAY_MS, topic=topic)
    out: Counter = Counter()
    for frame in pipeline(early_panes_ms=None).run_local(frames):
        for row in frame[frame["kind"].isin(SUNK_KINDS)].to_dict("records"):
            out[fingerprint(row)] += 1
    return out


def main(mode: str, master: str, bootstrap: str, topic: str, out_topic: str, checkpoint: str,
         shuffle_partitions: str = "2", max_offsets: str = str(MAX_OFFSETS)) -> None:
    from dataflow_kafka.datasource.session import spark_session

    spark = spark_session(master=master, app_name=f"dataflow-kafka-{mode}", shuffle_partitions=int(shuffle_partitions))
    if mode == "pipeline":
        query = start_query(spark, bootstrap, topic, out_topic, checkpoint, max_offsets=int(max_offsets))
    else:
        query = start_copy(spark, bootstrap, topic, out_topic, checkpoint)
    print(f"STARTED {query.id}", flush=True)
    query.awaitTermination()
    failure = query.exception()
    sc = spark.sparkContext
    executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1        # minus the driver
    from tests.support import python_worker_sockets

    seen = {'executors': executors, 'driver_host': spark.conf.get('spark.driver.host'),
            'python_workers': python_worker_sockets(spark)}
    print(f"CLUSTER {json.dumps(seen)}", flush=True)
    spark.stop()
    if failure is not None:
        raise SystemExit(f"query failed: {failure}")
    print("DONE", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
