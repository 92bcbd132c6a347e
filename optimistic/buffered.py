"""The buffered baseline (section IV.B): sort before each order-sensitive stage, then apply.

Each order-sensitive stage gets a buffer in front of it that holds its input until a punctuation
and releases it sorted; the stage then sees its input in order and never replays. Stateless
stages pass items on at once. Released items are processed through the following stages up to
the next buffer, which the same punctuation releases next, so the output leaves in order. A
pipeline without an order-sensitive stage gets one buffer at the sink so its output is ordered too.

The buffers are :class:`~optimistic.barrier.Barrier` objects that never see a tombstone, and the
stages are the same objects with the same user functions as in the optimistic pipeline.
"""

from __future__ import annotations

import random
from typing import Sequence

from dataflow_kafka.optimistic.barrier import Barrier, BarrierCounters
from dataflow_kafka.optimistic.order import Item
from dataflow_kafka.optimistic.pipeline import PipelineBase
from dataflow_kafka.optimistic.stages import Operation

__all__ = ["BufferedPipeline"]


class BufferedPipeline(PipelineBase):
    """One buffer before each order-sensitive stage; the same interface as the optimistic one."""

    def __init__(self, stages: Sequence[Operation], *, gc: bool = True) -> None:
        super().__init__(stages, gc=gc)
        positions = [i for i, s in enumerate(self.stages) if s.order_sensitive] or [len(self.stages)]
        self.buffers = {i: Barrier() for i in positions}
        self.counters = BarrierCounters()  # what reaches the sink: items only, all valid

    @property
    def buffering_stages(self) -> int:
        return len(self.buffers)

    def _run(self, start: int, items: list[Item], now: float, rng: random.Random | None) -> list[Item]:
        """Apply stages from ``start`` until a buffer takes the items; return what reaches the sink."""
        for i in range(start, len(self.stages) + 1):
            if rng is not None:
                rng.shuffle(items)
            if i in self.buffers:
                self.buffers[i].insert_all(items, now)
                return []
            if i == len(self.stages):
                return items
            items = self.stages[i].process(self.states[i], items)
        raise AssertionError("unreachable")

    def process_batch(self, items: list[Item], now: float, rng: random.Random | None = None) -> list[Item]:
        return self._sink(self._run(0, items, now, rng))

    def punctuate(self, bound_ms: int | float, now: float, rng: random.Random | None = None) -> list[Item]:
        """Release every buffer below ``bound_ms`` in pipeline order, applying the stages between."""
        out: list[Item] = []
        for i in sorted(self.buffers):
            released = self.buffers[i].punctuate(bound_ms, now)
            if i == len(self.stages):
                out += released
                continue
            outputs = self.stages[i].process(self.states[i], released)
            out += self._run(i + 1, outputs, now, None)
            if self.gc:
                self.stages[i].collect_garbage(self.states[i], bound_ms)
        return self._sink(out)

    def _sink(self, items: list[Item]) -> list[Item]:
        self.counters.items_in += len(items)
        self.counters.released += len(items)
        return items

    def buffered(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def _buffers_bytes(self) -> tuple:
        return {i: b.to_bytes() for i, b in self.buffers.items()}, self.counters

    def _restore_buffers(self, data: tuple) -> None:
        buffers, self.counters = data
        self.buffers = {i: Barrier.from_bytes(b) for i, b in buffers.items()}
