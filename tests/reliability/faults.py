"""Support for the fault tests on the three-node cluster: a producer under load that remembers
what Kafka acknowledged, and what a consumer sees afterwards, counted."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from dataflow_kafka.datasource.replay import read_topic

__all__ = ["AckedWriter", "Seen", "seen", "timed"]


class AckedWriter:
    """Numbered JSON records ``{"n": i, "ts": ms}`` into ``topic`` (round robin over
    ``partitions``) from a thread, with ``acks=all`` and idempotence, retrying through faults for
    up to ``timeout_ms`` per record; ``acked`` holds the numbers Kafka acknowledged, ``failed``
    the errors of records it did not. ``rate``: records per second (None: as fast as it can)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float | None = None,
                 timeout_ms: int = 120_000) -> None:
        from confluent_kafka import Producer

        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.acked: set[int] = set()
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                            "linger.ms": 5, "message.timeout.ms": timeout_ms, "log_level": 0})
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.add(json.loads(msg.value())["n"])
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            if self.rate is not None and self.sent > self.rate * (time.monotonic() - started):
                self._p.poll(0.005)
                continue
            try:
                value = json.dumps({"n": self.sent, "ts": int(time.time() * 1000)}).encode()
                self._p.produce(self.topic, value, partition=self.sent % self.partitions,
                                on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                self._p.poll(0.01)
            self._p.poll(0)

    def stop(self, flush_timeout_s: float = 150.0) -> None:
        """Stop writing and wait for every record's delivery report."""
        self._stop.set()
        self._t.join()
        left = self._p.flush(flush_timeout_s)
        assert left == 0, f"{left} records without a delivery report after {flush_timeout_s:.0f} s"


@dataclass
class Seen:
    """What a consumer read: how often each number came, and whether any partition went backwards."""

    counts: Counter = field(default_factory=Counter)
    out_of_order: list = field(default_factory=list)

    def lost(self, expected) -> int:
        return len(set(expected) - set(self.counts))

    @property
    def duplicated(self) -> int:
        return sum(n - 1 for n in self.counts.values() if n > 1)


def seen(bootstrap: str, topic: str, isolation: str = "read_committed", key: str = "n") -> Seen:
    """Every record of ``topic`` as a consumer with ``isolation`` reads it: the numbers in field
    ``key`` of the JSON values, and per partition whether they only grew (records written in
    order by one producer must be read in that order)."""
    out = Seen()
    last: dict[int, int] = {}
    for m in read_topic({"bootstrap.servers": bootstrap, "isolation.level": isolation}, topic):
        n = json.loads(m.value())[key]
        out.counts[n] += 1
        if m.partition() in last and n <= last[m.partition()]:
            out.out_of_order.append((m.partition(), m.offset(), n, last[m.partition()]))
        last[m.partition()] = n
    return out


def timed(fn, *args, **kwargs) -> tuple[object, float]:
    """``(fn(*args, **kwargs), seconds it took)``."""
    t = time.monotonic()
    result = fn(*args, **kwargs)
    return result, time.monotonic() - t
