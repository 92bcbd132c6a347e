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

Used by ``python -m bench.connector_cost`` (its floor arms).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

__all__ = ["FloorSource"]


class _Range(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(partition)
        self.start, self.end = start, end


class _FloorReader(DataSourceStreamReader):
    def __init__(self, options: dict) -> None:
        self.servers, self.topic = options["kafka.bootstrap.servers"], options["subscribe"]
        self._c = None

    def _high(self) -> dict:
        from confluent_kafka import Consumer, TopicPartition   # inside: a module-level import breaks pickling

        if self._c is None:
            self._c = Consumer({"bootstrap.servers": self.servers, "group.id": "bench-python-floor",
                                "enable.auto.commit": False})
        parts = self._c.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        return {str(p): self._c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
                for p in sorted(parts)}

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

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._c is not None:
            self._c.close()
            self._c = None

    def __getstate__(self):
        return {**self.__dict__, "_c": None}


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-python-floor"

    def schema(self) -> str:
        return "key binary, value binary"

    def streamReader(self, schema) -> _FloorReader:
        return _FloorReader(self.options)
