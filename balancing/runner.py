"""The balancer beside a running query: per-batch load in, move commands out to the control topic.

:class:`BalancerRunner` (pure) folds each micro-batch's load, ``{slot: {key_group: (rows,
processor_ms)}}`` (from the compute stage's ``metrics`` rows: :func:`balancing.migration.load_of`),
into periods of ``period_batches`` batches, runs a :class:`~balancing.controller.FluxController`
once per period and hands the move commands to a writer. :class:`ControlTopicWriter` is the thin
Kafka part: one JSON record per command on the control topic (one partition), flushed before it
returns; the source turns them into modification punctuations, so the offset log holds every move
and a replay routes as the first run did, whatever the balancer does after a restart (Enorm §6.2).

A batch id seen before (Spark re-runs a batch after a failure) is not counted twice.

Use it from the query's ``foreachBatch`` (or any loop that sees each batch's metrics rows)::

    from dataflow_kafka.balancing.migration import load_of
    runner = BalancerRunner(FluxController(table_as_dict, slots=range(4)),
                            ControlTopicWriter("localhost:9092", "events-control"), period_batches=5)

    def sink(df, batch_id):
        pdf = df.toPandas()                      # or only the metrics rows
        ...                                      # write the results
        runner.on_batch(batch_id, load_of([pdf]))
"""

from __future__ import annotations

import json
from typing import Callable, Mapping

from dataflow_kafka.balancing.controller import FluxController, Load
from dataflow_kafka.errors import InvalidArgumentError, KafkaClientError

__all__ = ["BalancerRunner", "ControlTopicWriter", "encode_command"]


def encode_command(command: Mapping) -> bytes:
    """A command as the control topic's record value (compact JSON)."""
    return json.dumps(dict(command), separators=(",", ":")).encode()


class BalancerRunner:
    """Periods of ``period_batches`` micro-batches: sum their load, step the controller, write.

    Parameters
    ----------
    controller : the :class:`~balancing.controller.FluxController` deciding the moves.
    write : called with each period's non-empty list of commands (e.g. :class:`ControlTopicWriter`).
    period_batches : batches per period (>= 1).
    """

    def __init__(self, controller: FluxController, write: Callable[[list[dict]], None], *,
                 period_batches: int = 1) -> None:
        if not (isinstance(period_batches, int) and not isinstance(period_batches, bool) and period_batches >= 1):
            raise InvalidArgumentError(f"BalancerRunner.period_batches must be an integer >= 1, got {period_batches!r}")
        self.controller = controller
        self.write = write
        self.period_batches = period_batches
        self.last_batch_id: int | None = None
        self.commands: list[dict] = []           # every command written, in order
        self._pending: dict[int, dict[int, list[float]]] = {}
        self._batches = 0

    def on_batch(self, batch_id: int, load: Load) -> list[dict]:
        """Fold one batch's load; at the end of a period, return (and write) its commands."""
        if self.last_batch_id is not None and batch_id <= self.last_batch_id:
            return []
        self.last_batch_id = batch_id
        for slot, groups in load.items():
            acc = self._pending.setdefault(int(slot), {})
            for kg, (rows, ms) in groups.items():
                a = acc.setdefault(int(kg), [0.0, 0.0])
                a[0] += rows
                a[1] += ms
        self._batches += 1
        if self._batches < self.period_batches:
            return []
        period = {s: {kg: (r, ms) for kg, (r, ms) in g.items()} for s, g in self._pending.items()}
        self._pending, self._batches = {}, 0
        commands = self.controller.step(period)
        if commands:
            self.write(commands)
            self.commands += commands
        return commands


class ControlTopicWriter:
    """Writes commands to ``topic`` with confluent-kafka (acks=all, idempotent), one record each, in
    order; raises a RuntimeError naming the topic and the command when a record is not delivered."""

    def __init__(self, bootstrap_servers: str, topic: str, *, timeout_s: float = 30.0, **producer_conf) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.timeout_s = timeout_s
        self._producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all",
                                   "enable.idempotence": True, "linger.ms": 0,
                                   "message.timeout.ms": int(timeout_s * 1000), **producer_conf})

    def __call__(self, commands: list[dict]) -> None:
        errors: list[str] = []
        for cmd in commands:
            value = encode_command(cmd)
            self._producer.produce(self.topic, value=value,
                                   on_delivery=lambda err, msg, v=value: err and errors.append(f"{v.decode()}: {err}"))
        left = self._producer.flush(self.timeout_s)
        if errors or left:
            raise KafkaClientError(f"control topic {self.topic!r}: {len(errors) + left} of {len(commands)} move "
                               f"commands not delivered ({'; '.join(errors) or f'{left} still queued'})")

    def close(self) -> None:
        """Flush what is queued and release the producer."""
        self._producer.flush(self.timeout_s)
