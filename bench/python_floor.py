"""The platform's floor for a Python streaming source and sink at a trickle: what Spark 4.3's Python
Data Source API costs per micro-batch before a connector does any Kafka work.

* :class:`FloorSource` (``format("bench-python-floor")``, options ``kafka.bootstrap.servers`` and
  ``subscribe``): the driver asks Kafka for each partition's high watermark (the one request
  every Kafka source makes per batch); a task yields one prebuilt Arrow batch of ``end - start``
  rows (``key``, ``value``: constant bytes) without reading Kafka. So the batches follow the
  input topic's trickle like a real source's, and everything else is Spark's Python source path:
  the driver-side Python process (``latestOffset``, ``partitions``, ``commit``) and one Python
  worker round trip per task.
* The sink's floor is :class:`bench.sink_cost.NullSink` (a Python sink that drops its rows).

* :class:`KafkaFloorSource` (``format("bench-python-kafka")``, options ``kafka.bootstrap.servers``,
  ``subscribe``, ``maxOffsetsPerTrigger``): the simplest Python source that does read Kafka, the
  platform's floor for a Python source at throughput. One task per partition's range, which reads
  it with a plain confluent-kafka consumer (one per Python worker, ``consume`` in batches) into one
  Arrow batch of Spark's Kafka columns (``key``, ``value``, ``topic``, ``partition``, ``offset``,
  ``timestamp``, ``timestampType``); ``maxOffsetsPerTrigger`` split over the partitions in
  proportion to what each has, Trigger.AvailableNow supported. No event times, punctuations,
  pooled ranges, range stats, error rows or anything else of ours.

Used by ``python -m bench.connector_cost`` (its floor arms) and ``python -m bench.nexmark.throughput
--floor`` (the projections' floor).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

__all__ = ["FloorSource", "KafkaFloorSource"]


class _Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.start, self.end = start, end


class _OffsetsReader(DataSourceStreamReader):
    """What both floor readers share: the driver's consumer, asking for each partition's
    ``(low, high)`` watermarks, and nothing to commit."""

    def __init__(self, options: dict) -> None:
        self.servers, self.topic = options["kafka.bootstrap.servers"], options["subscribe"]
        self._c = None

    def _watermarks(self) -> dict:
        from confluent_kafka import Consumer, TopicPartition   # inside: a module-level import breaks pickling

        if self._c is None:
            self._c = Consumer({"bootstrap.servers": self.servers, "group.id": "bench-python-floor",
                                "enable.auto.commit": False})
        parts = self._c.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        return {str(p): self._c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)
                for p in sorted(parts)}

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._c is not None:
            self._c.close()
            self._c = None

    def __getstate__(self):
        return {**self.__dict__, "_c": None}


class _FloorReader(_OffsetsReader):
    def _high(self) -> dict:
        return {p: hi for p, (_, hi) in self._watermarks().items()}

    def initialOffset(self) -> dict:
        return {p: 0 for p in self._high()}     # startingOffsets=earliest on a fresh topic

    def latestOffset(self, start: dict, limit) -> dict:
        return self._high()

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        return [_Range(int(p), start.get(p, 0), o) for p, o in sorted(end.items()) if o > start.get(p, 0)]

    def read(self, partition: _Range):
        import pyarrow as pa

        n = partition.end - partition.start
        yield pa.RecordBatch.from_pydict({"key": [b"k"] * n, "value": [b'{"ts": 0}'] * n},
                                         schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]))


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-python-floor"

    def schema(self) -> str:
        return "key binary, value binary"

    def streamReader(self, schema) -> _FloorReader:
        return _FloorReader(self.options)


class _KafkaFloorReader(_OffsetsReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict) -> None:
        super().__init__(options)
        self.max_rows = int(options.get("maxOffsetsPerTrigger", 0))
        self._until = None

    def initialOffset(self) -> dict:
        return {p: lo for p, (lo, _) in self._watermarks().items()}     # startingOffsets=earliest

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = {p: hi for p, (_, hi) in self._watermarks().items()}

    def latestOffset(self, start: dict, limit) -> dict:
        high = {p: hi for p, (_, hi) in self._watermarks().items()}
        if self._until is not None:
            high = {p: min(h, self._until.get(p, h)) for p, h in high.items()}
        begin = {p: start.get(p, 0) for p in high}
        left = {p: max(0, high[p] - begin[p]) for p in high}
        total = sum(left.values())
        if not isinstance(limit, ReadMaxRows) or total <= limit.max_rows:
            return {p: begin[p] + left[p] for p in high}
        # proportional to what each partition has, the remainder to the first ones
        share = {p: left[p] * limit.max_rows // total for p in high}
        spare = limit.max_rows - sum(share.values())
        for p in sorted(high, key=int):
            extra = min(spare, left[p] - share[p])
            share[p] += extra
            spare -= extra
        return {p: begin[p] + share[p] for p in high}

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        return [_Range(int(p), start.get(p, 0), o) for p, o in sorted(end.items(), key=lambda e: int(e[0]))
                if o > start.get(p, 0)]

    def read(self, partition: _Range):
        return _read_kafka(self.servers, self.topic, partition)


_consumers: dict = {}


def _read_kafka(servers: str, topic: str, r: _Range):
    """One range as one Arrow batch of Spark's Kafka columns, with this worker's consumer."""
    import pyarrow as pa
    from confluent_kafka import Consumer, TopicPartition

    c = _consumers.get(servers)
    if c is None:
        # librdkafka's defaults make a reassigned consumer wait up to 0.5-1 s per range; these three
        # settings are what any reader of bounded ranges needs (kafka_read.consumer, docs/source.md)
        c = _consumers[servers] = Consumer({"bootstrap.servers": servers, "group.id": "bench-python-kafka",
                                            "enable.auto.commit": False, "fetch.queue.backoff.ms": 10,
                                            "fetch.wait.max.ms": 10, "queued.min.messages": 20_000})
    c.assign([TopicPartition(topic, r.value, r.start)])
    msgs, need = [], r.end - r.start
    while need > 0:
        got = c.consume(min(need, 20_000), timeout=10)
        if not got:
            raise TimeoutError(f"bench-python-kafka: no records from {topic}-{r.value} at offset {r.end - need}")
        for m in got:
            if m.error() is None and m.offset() < r.end:
                msgs.append(m)
        need = r.end - (msgs[-1].offset() + 1) if msgs else need
    c.unassign()
    n = len(msgs)
    yield pa.RecordBatch.from_arrays(
        [pa.array([m.key() for m in msgs], pa.binary()), pa.array([m.value() for m in msgs], pa.binary()),
         pa.array([topic] * n, pa.string()), pa.array([r.value] * n, pa.int32()),
         pa.array([m.offset() for m in msgs], pa.int64()),
         pa.array([m.timestamp()[1] * 1000 for m in msgs], pa.timestamp("us", tz="UTC")),
         pa.array([m.timestamp()[0] for m in msgs], pa.int32())],
        ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"])


class KafkaFloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-python-kafka"

    def schema(self) -> str:
        return ("key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
                "timestampType int")

    def streamReader(self, schema) -> _KafkaFloorReader:
        return _KafkaFloorReader(self.options)
