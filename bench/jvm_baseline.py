"""What a Spark user would run instead of this project: Spark's JVM Kafka connector
(``format("kafka")``), ``withWatermark`` and Spark's own operators. Benchmarks only; the
connector's jars come from :mod:`bench.spark_kafka` (``make bench``).

* :func:`kafka_source`: ``spark.readStream.format("kafka")`` from the earliest offset.
* :func:`words`: the inverted index's first step in Spark SQL (JSON parse, the distinct words of a
  document in order of first occurrence, each with its positions): the rows both native variants
  of the latency experiment feed their stateful operator.
* :func:`milestones_jvm`: posting lists and document-frequency milestones by word in one
  ``transformWithState`` with event-time timers, in Java (``bench/spark-kafka/java``).
* :func:`milestones_py`: the same in PySpark's Row-based ``transformWithState`` (what a Python
  user writes; its operator runs in a Python worker).

Both emit ``key`` = the project's sort key of the same item and ``value`` = its JSON payload
(``["word", milestone, doc_id]``), so one in-order reference judges every variant.
"""

from __future__ import annotations

import struct
from typing import Iterator

__all__ = ["kafka_source", "words", "milestones_jvm", "milestones_py", "WORDS_SCHEMA_SQL"]

#: Columns of :func:`words`.
WORDS_SCHEMA_SQL = ("word string, event_time timestamp, ts long, part int, off long, j int, doc_id long, "
                    "positions array<int>")


def kafka_source(spark, bootstrap: str, topic: str, max_offsets: int | None = None, **options: str):
    """``readStream.format("kafka")`` (Spark's connector) from the earliest offset."""
    from bench._kafka import stream_source

    return stream_source(spark, "kafka", bootstrap, topic, max_offsets, **options)


def words(src):
    """Documents ``{"ts", "id", "text"}`` from ``format("kafka")`` rows -> one row per distinct word
    of a document (``optimistic.workload.split_document`` in SQL): ``j`` its index among the
    distinct words, ``positions`` where it occurs; ``event_time`` from ``ts`` (epoch ms)."""
    doc = src.selectExpr("partition AS part", "offset AS off",
                         "from_json(CAST(value AS STRING), 'ts long, id long, text string') AS d")
    doc = doc.selectExpr("part", "off", "d.ts AS ts", "d.id AS doc_id", "split(d.text, ' ') AS w")
    return doc.selectExpr("part", "off", "ts", "doc_id", "w", "posexplode(array_distinct(w)) AS (j, word)") \
        .selectExpr("word", "timestamp_millis(ts) AS event_time", "ts", "part", "off", "j", "doc_id",
                    "filter(sequence(0, size(w) - 1), i -> w[i] = word) AS positions")


def milestones_jvm(src, delay_ms: int):
    """``words(src)`` -> ``withWatermark`` -> Java ``transformWithState`` (event-time timers) ->
    ``key, value`` rows for ``format("kafka")``."""
    from pyspark.sql import DataFrame

    w = words(src)
    spark = w.sparkSession
    jdf = spark._jvm.dataflowkafka.bench.NativeMilestones.apply(w._jdf, int(delay_ms))
    return DataFrame(jdf, spark)


_HEAD, _PART = struct.Struct(">QIQ"), struct.Struct(">I")


def _sort_key(ts: int, part: int, off: int, j: int) -> bytes:
    """``optimistic.order.Meta(ts, part, off, (j, 0, 0)).sort_key()``."""
    return (_HEAD.pack(ts + (1 << 63), part + (1 << 31), off + (1 << 63))
            + _PART.pack(j + (1 << 31)) + _PART.pack(1 << 31) * 2)


def _processor():
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import ArrayType, IntegerType, LongType, StructField, StructType

    buffer_schema = StructType([StructField("ts", LongType()), StructField("part", IntegerType()),
                                StructField("off", LongType()), StructField("j", IntegerType()),
                                StructField("doc_id", LongType()),
                                StructField("positions", ArrayType(IntegerType()))])
    posting_schema = StructType([StructField("doc_id", LongType()), StructField("positions", ArrayType(IntegerType()))])

    class Milestones(StatefulProcessor):
        """One word: buffer rows; on the event-time timer, apply those at or below Spark's watermark
        in (ts, part, off, j) order: append the posting, count the document frequency, emit at
        powers of two (the Java processor's logic)."""

        def init(self, handle) -> None:
            self.handle = handle
            self.buffer = handle.getListState("buffer", buffer_schema)
            self.postings = handle.getListState("postings", posting_schema)
            self.df = handle.getValueState("df", StructType([StructField("n", LongType())]))
            self.timer = handle.getValueState("timer", StructType([StructField("t", LongType())]))

        def _retime(self, first) -> None:
            current = self.timer.get()[0] if self.timer.exists() else None
            if first is None or (current is not None and current <= first):
                return
            if current is not None:
                self.handle.deleteTimer(current)
            self.handle.registerTimer(first)
            self.timer.update((first,))

        def handleInputRows(self, key, rows, timerValues) -> Iterator:
            add = [(r.ts, r.part, r.off, r.j, r.doc_id, r.positions) for r in rows]
            if add:
                self.buffer.appendList(add)
                self._retime(min(a[0] for a in add))
            return iter(())

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator:
            wm = timerValues.getCurrentWatermarkInMs()
            word = key[0]
            rows = [tuple(r) for r in self.buffer.get()]
            ready = sorted(r for r in rows if r[0] <= wm)
            rest = [r for r in rows if r[0] > wm]
            n = self.df.get()[0] if self.df.exists() else 0
            out = []
            if ready:
                self.postings.appendList([(r[4], r[5]) for r in ready])
            for ts, part, off, j, doc_id, _ in ready:
                n += 1
                if n & (n - 1) == 0:
                    out.append(Row(key=_sort_key(ts, part, off, j), value=f'["{word}",{n},{doc_id}]'.encode()))
            self.df.update((n,))
            self.buffer.clear()
            self.timer.clear()
            if rest:
                self.buffer.put(rest)
                self._retime(min(r[0] for r in rest))
            return iter(out)

        def close(self) -> None:
            pass

    return Milestones()


def milestones_py(src, delay_ms: int):
    """``words(src)`` -> ``withWatermark`` -> PySpark's Row-based ``transformWithState``
    (event-time timers) -> ``key, value`` rows for ``format("kafka")``."""
    w = words(src).withWatermark("event_time", f"{int(delay_ms)} milliseconds")
    return w.groupBy("word").transformWithState(_processor(), "key binary, value binary", "Append", "EventTime")


def smoke(docs: int = 120) -> dict[str, dict[str, int]]:
    """Run both milestone baselines and our fused stages on Spark's connector (``fused-jvm``:
    :func:`jvm_ingest.punctuate`) once (``Trigger.AvailableNow``, a fresh broker and session with
    the connector) over ``docs`` documents of two partitions, one 10 ms apart, partition 1 100 ms
    behind, and compare their output topics with the in-order reference below the baselines' final
    watermark: ``{variant: {"outputs", "expected", "missing", "wrong", "extra"}}``. Needs the
    connector (``python -m bench.spark_kafka``); ``python -m bench.jvm_baseline`` runs it."""
    import json
    import tempfile
    import time

    from bench import spark_kafka
    from bench._kafka import create_topics
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session
    from dataflow_kafka.jvm_ingest import punctuate
    from dataflow_kafka.optimistic import run_local
    from dataflow_kafka.optimistic.spark import build_pipeline
    from dataflow_kafka.optimistic.stage import encode_json
    from dataflow_kafka.optimistic.workload import generate_documents, inverted_index_same_key, inverted_index_stages

    if spark_kafka.connector_jars() is None:
        raise RuntimeError(spark_kafka.missing_message())
    from confluent_kafka import Producer

    from dataflow_kafka.datasource.replay import read_topic

    delay_ms = 300
    texts = generate_documents(docs, vocabulary_size=2000, words_per_doc=(10, 30), seed=1)
    out: dict[str, dict[str, int]] = {}
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        create_topics(bs, {"docs": 2, "out-jvm": 1, "out-py": 1, "out-fused": 1})
        p = Producer({"bootstrap.servers": bs})
        base, sent, offsets = int(time.time() * 1000), [], [0, 0]
        for i, (_, text) in enumerate(texts):
            part, ts = i % 2, base + i * 10 - (i % 2) * 100
            p.produce("docs", json.dumps({"ts": ts, "id": i, "text": text}).encode(), partition=part)
            sent.append((ts, part, offsets[part], (i, text)))
            offsets[part] += 1
        p.flush(30)
        reference = {i.meta.sort_key(): encode_json(i.payload)
                     for i in run_local(inverted_index_stages(2), sorted(sent)).released}
        final_wm = max(s[0] for s in sent) - delay_ms
        due = {k for k in reference if int.from_bytes(k[:8], "big") - (1 << 63) <= final_wm - 200}
        spark = spark_session(app_name="jvm-baseline-smoke", extra=spark_kafka.session_extra())
        try:
            def fused(src, _delay_ms):
                def decode(value: bytes):
                    d = json.loads(value)
                    return (d["id"], d["text"])

                return build_pipeline(punctuate(src, partitions={"docs": 2}, event_time_field="ts"),
                                      inverted_index_stages(2), output_topic="out-fused", key_groups=2, decode=decode,
                                      fuse_same_key=inverted_index_same_key(2))

            topics = {"spark-jvm": "out-jvm", "spark-py": "out-py", "fused-jvm": "out-fused"}
            for name, build in (("spark-jvm", milestones_jvm), ("spark-py", milestones_py), ("fused-jvm", fused)):
                topic = topics[name]
                w = (build(kafka_source(spark, bs, "docs", 100), delay_ms).writeStream.format("kafka")
                     .option("kafka.bootstrap.servers", bs)
                     .option("checkpointLocation", tempfile.mkdtemp(prefix="jvm-smoke-")))
                q = (w if name == "fused-jvm" else w.option("topic", topic)).trigger(availableNow=True).start()
                q.awaitTermination()
                if q.exception():
                    raise q.exception()
                got = {bytes(m.key()): bytes(m.value()) for m in read_topic(bs, topic)}
                out[name] = {"outputs": len(got), "expected": len(due), "missing": len(due - set(got)),
                             "wrong": sum(1 for k, v in got.items() if k in reference and reference[k] != v),
                             "extra": sum(1 for k in got if k not in reference)}
        finally:
            spark.stop()
    return out


if __name__ == "__main__":
    for variant, counts in smoke().items():
        print(variant, counts)
