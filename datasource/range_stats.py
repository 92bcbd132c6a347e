"""Range statistics: the newest event time of an offset range, handed from the tasks that read the
range to the driver, which needs it for the next offset's ``p`` (see :mod:`datasource.offsets`).

Without it the driver reads every range a second time. With it, each streaming task writes one
small record to the topic ``rangeStatsTopic`` (default ``dataflow-kafka-range-stats``, created if
missing) after reading its range, and the driver looks the range up when it plans the next batch.

It is a cache, not a source of truth: the value is a pure function of the records in the range
and of the event-time option (both in the key), so every task that reads the range writes the
same value; the offset log keeps the value the driver used, so a replay never reads this topic;
and a driver that finds no entry (the write failed, the topic cannot be created, a restart after
the entries scrolled away) scans the range itself, as it would without the topic.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict

from dataflow_kafka.datasource import kafka_read, kafka_security
from dataflow_kafka.datasource.sink import ProducerCache, ensure_topic
from dataflow_kafka.errors import KafkaSecurityError

__all__ = ["DEFAULT_TOPIC", "range_key", "publish", "close_producers", "RangeStats"]

DEFAULT_TOPIC = "dataflow-kafka-range-stats"
_TAIL = 10_000         # entries the driver reads back when it starts (a restarted query's last batch)
_CACHE = 50_000        # entries the driver keeps
_log = logging.getLogger(__name__)
_producers = ProducerCache({}, forced={"linger.ms": 0})  # per Kafka configuration and process


def range_key(topic: str, partition: int, start: int, end: int, event_time_field: str | None,
              kafka_conf: dict[str, str] | None = None) -> bytes:
    """The key of offsets ``[start, end)`` of ``topic``-``partition`` under what decides the value:
    the event-time option and the consumer's ``isolation.level`` (aborted transactional records
    are skipped under ``read_committed``, librdkafka's default)."""
    isolation = (kafka_conf or {}).get("isolation.level", "read_committed")
    return json.dumps([topic, partition, start, end, event_time_field or "", isolation]).encode()


def publish(kafka_conf: dict[str, str], stats_topic: str, key: bytes, newest_ms: int | None,
            timeout_s: float = 10.0) -> bool:
    """Executor side: write one entry and wait for the broker's acknowledgement (the driver reads
    it when it plans the next batch). Returns False, with a warning, if the write failed.

    The producer is kept per Python process and Kafka configuration (``_producers``, a
    :class:`datasource.sink.ProducerCache`): each call flushes its entry before it returns, so
    nothing waits in the producer between tasks. After a failed or timed-out write the producer
    is dropped (the next task makes a new one rather than wait behind a stuck queue), and one
    that reported a fatal error is replaced; cached producers are flushed and closed at process
    exit where Python runs exit hooks (pyspark's forked workers do not, and have nothing
    pending; they end with Spark), and by :meth:`brokers.Broker.stop` in this process."""
    failures: list = []
    try:
        producer = _producers.acquire(kafka_conf).producer
        producer.produce(stats_topic, json.dumps({"newest_ms": newest_ms}).encode(), key,
                         on_delivery=lambda err, _msg: failures.append(err) if err else None)
        left = producer.flush(timeout_s)
    except Exception as e:  # noqa: BLE001 - a cache write must not fail the task
        failures.append(e)
        left = 0
    if failures or left:
        _producers.drop(kafka_conf)
        _log.warning("dataflow-kafka: could not write range stats to %r (%s); the driver will scan the "
                     "range itself", stats_topic, failures[0] if failures else "flush timed out")
        return False
    return True


def close_producers(timeout_s: float = 5.0) -> None:
    """Flush (for at most ``timeout_s`` each) and drop this process's stats producers (their
    threads stop; e.g. before the broker goes away)."""
    _producers.close(timeout_s)


class RangeStats:
    """Driver side: entries of the stats topic, read forward on demand."""

    def __init__(self, kafka_conf: dict[str, str], topic: str, poll_timeout_ms: int) -> None:
        self.kafka_conf, self.topic, self.poll_timeout_ms = kafka_conf, topic, poll_timeout_ms
        self._c = None
        self._next: dict[int, int] = {}                    # stats partition -> next offset to read
        self._entries: OrderedDict[bytes, int | None] = OrderedDict()
        self._partitions: list[int] | None = None          # the topic's partitions, asked for once (and on a miss)

    def ensure_topic(self) -> str | None:
        """Create the topic if it is missing; an error message if it cannot be used."""
        try:
            ensure_topic(self.kafka_conf, self.topic)
            return None
        except (kafka_security.KafkaAuthorizationError, KafkaSecurityError):
            raise             # a missing ACL or a TLS mistake is the user's to fix, not a silent slow path
        except Exception as e:  # noqa: BLE001 - no broker support: fall back to scans
            return f"cannot use range stats topic {self.topic!r}: {e}"

    def get(self, key: bytes) -> tuple[bool, int | None]:
        """``(found, newest event time)`` of a range key. The topic's partitions are asked for
        once, not at every batch's planning; a key not found asks again, in case partitions were
        added."""
        if key not in self._entries:
            self._read_new()
            if key not in self._entries and self._partitions is not None:
                self._partitions = None
                self._read_new()
        return (key in self._entries), self._entries.get(key)

    def _consumer(self):
        if self._c is None:
            self._c = kafka_read.consumer(self.kafka_conf)
        return self._c

    def _read_new(self) -> None:
        c = self._consumer()
        if self._partitions is None:
            md = kafka_read.list_topics(c, self.topic).topics.get(self.topic)
            if md is None or md.error is not None:
                return
            self._partitions = sorted(md.partitions)
        for p in self._partitions:
            low, high = kafka_read.watermarks(c, self.topic, p)
            start = max(low, self._next.get(p, high - _TAIL))
            for msgs, _ in kafka_read.fetch_range(c, self.topic, p, start, high, self.poll_timeout_ms,
                                                  fail_on_data_loss=False):
                for m in msgs:
                    try:
                        self._entries[m.key()] = json.loads(m.value())["newest_ms"]
                    except (ValueError, KeyError, TypeError):
                        continue  # not ours: a stats entry is a JSON object with newest_ms
                    self._entries.move_to_end(m.key())
            self._next[p] = high
        while len(self._entries) > _CACHE:
            self._entries.popitem(last=False)

    def close(self) -> None:
        if self._c is not None:
            self._c.close()
            self._c = None
