"""The optimistic pipeline: every stage runs at once, one barrier at the sink (section V.D).

Items go through all stages as they arrive, late ones included; order-sensitive stages insert
them where the order puts them and send tombstones for outputs that became invalid. Only the
:class:`~optimistic.barrier.Barrier` waits, for punctuations. After the barrier releases below a
bound, every stage forgets state below it (garbage collection driven by the release bound).

:class:`OptimisticPipeline` runs a micro-batch at a time, like a Spark query, and serialises to
bytes so a run can stop and resume (as from a checkpoint).
"""

from __future__ import annotations

import pickle
import random
from typing import Any, Sequence

from dataflow_kafka.optimistic.barrier import Barrier, BarrierCounters
from dataflow_kafka.optimistic.order import Item
from dataflow_kafka.optimistic.replay import KeyedState
from dataflow_kafka.optimistic.stages import Operation
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["OptimisticPipeline", "PipelineBase"]

_FORMAT = 1


class PipelineBase:
    """What both pipelines share: stages, their states, and (de)serialisation of the states."""

    def __init__(self, stages: Sequence[Operation], *, gc: bool = True) -> None:
        self.stages = list(stages)
        self.states: list[Any] = [s.open_state() for s in self.stages]
        self.gc = gc

    def state_entries(self) -> int:
        """Log entries held by all stages (what garbage collection bounds)."""
        return sum(s.entry_count() for s in self.states if s is not None)

    def _buffers_bytes(self) -> Any:
        raise NotImplementedError

    def _restore_buffers(self, data: Any) -> None:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        states = [None if s is None else s.to_bytes() for s in self.states]
        return pickle.dumps((_FORMAT, type(self).__name__, self.gc, states, self._buffers_bytes()), protocol=5)

    @classmethod
    def from_bytes(cls, stages: Sequence[Operation], data: bytes):
        """Rebuild a pipeline of ``stages`` (the same logic) from :meth:`to_bytes`."""
        fmt, kind, gc, states, buffers = pickle.loads(data)
        if (fmt, kind) != (_FORMAT, cls.__name__):
            raise InvalidArgumentError(f"cannot load a {kind} of format {fmt!r} as a {cls.__name__} of format {_FORMAT}")
        p = cls(stages, gc=gc)
        if len(states) != len(p.stages):
            raise InvalidArgumentError(f"saved pipeline has {len(states)} stages, got {len(p.stages)}")
        p.states = [None if b is None else KeyedState.from_bytes(b) for b in states]
        p._restore_buffers(buffers)
        return p


class OptimisticPipeline(PipelineBase):
    """Stages applied optimistically, then a single barrier."""

    buffering_stages = 1

    def __init__(self, stages: Sequence[Operation], *, gc: bool = True) -> None:
        super().__init__(stages, gc=gc)
        self.barrier = Barrier()

    def process_batch(self, items: list[Item], now: float, rng: random.Random | None = None) -> list[Item]:
        """Push one micro-batch through every stage into the barrier; nothing is released here.

        With ``rng`` every link delivers the batch's items in a shuffled order (as a Spark
        shuffle may), so tombstones can overtake their items.
        """
        for stage, state in zip(self.stages, self.states):
            if rng is not None:
                rng.shuffle(items)
            items = stage.process(state, items)
        if rng is not None:
            rng.shuffle(items)
        self.barrier.insert_all(items, now)
        return []

    def punctuate(self, bound_ms: int | float, now: float, rng: random.Random | None = None) -> list[Item]:
        """Release what is valid below ``bound_ms``, then collect garbage below it."""
        out = self.barrier.punctuate(bound_ms, now)
        if self.gc:
            for stage, state in zip(self.stages, self.states):
                stage.collect_garbage(state, bound_ms)
        return out

    def buffered(self) -> int:
        return len(self.barrier)

    @property
    def counters(self) -> BarrierCounters:
        return self.barrier.counters

    def _buffers_bytes(self) -> bytes:
        return self.barrier.to_bytes()

    def _restore_buffers(self, data: bytes) -> None:
        self.barrier = Barrier.from_bytes(data)
