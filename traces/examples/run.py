"""Run an example DAG on Spark with the embedded broker and print it next to ``run_local``'s."""

from __future__ import annotations

import tempfile
import time
from typing import Callable

from dataflow_kafka.traces.dag import Dag


def run_example(dag: Dag, produce: Callable[[], list[tuple[bytes | None, bytes]]], partitions: int = 2,
                show: int = 8, batch: int = 500) -> None:   # pragma: no cover - run by hand
    """Produce ``produce()``'s ``(key, value)`` records to a new topic (record ``i`` to partition
    ``i % partitions``), run ``dag.to_spark`` over it (AvailableNow), and print the last ``show``
    output rows of Spark and of ``dag.run_local`` on the same micro-batches, and whether all agree."""
    from confluent_kafka import Producer

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.brokers.admin import create_topics
    from dataflow_kafka.datasource.replay import BatchCollector, read_topic, source_batches
    from dataflow_kafka.datasource.session import spark_session
    from dataflow_kafka.traces.spark import canonical_blocks, canonical_rows, events_of_rows, messages_from_frames, to_spark

    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        topic = f"traces-{int(time.time())}"
        create_topics(bs, {topic: partitions})
        p = Producer({"bootstrap.servers": bs, "linger.ms": 20})
        for i, (k, v) in enumerate(produce()):
            p.produce(topic, value=v, key=k, partition=i % partitions)
        p.flush(60)
        spark = spark_session(shuffle_partitions=partitions)
        src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bs)
               .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
               .option("maxOffsetsPerTrigger", str(batch)).load())
        got = BatchCollector()
        ck = tempfile.mkdtemp(prefix="traces-example-")
        q = to_spark(dag, src).writeStream.foreachBatch(got).option("checkpointLocation", ck) \
            .trigger(availableNow=True).start()
        q.awaitTermination()
        rows = got.rows()
        sinks = [n for n, v in dag.vertices.items() if v.kind == "sink"]
        types = dag.check().out_types
        frames = source_batches(read_topic(bs, topic), ck, sorted(got.batches), topic=topic)
        ref = dag.run_local(messages_from_frames(frames))
        print(f"Spark: {len(got.batches)} micro-batches, {sum(r['kind'] == 'data' for r in rows)} output rows, "
              f"{sum(r['dropped_count'] or 0 for r in rows if r['kind'] == 'dropped')} late items dropped (counted after the stateless vertices of the router)")
        for block, e in events_of_rows(rows, sinks[0])[-show:]:
            print(f"  {sinks[0]}, block {block}: {e.key!r} -> {e.value!r}")
        for sink in sinks:
            ordered = types[sink].ordered
            same = canonical_rows(rows, ordered, sink) == canonical_blocks(ref.outputs[sink], ordered)
            print(f"sink {sink!r}: Spark {len(events_of_rows(rows, sink))} items, run_local {len(ref.events(sink))} "
                  f"items; Spark's blocks equal run_local's: {same}")
        print(f"run_local: {sum(map(len, ref.late.values()))} late records")
        spark.stop()
