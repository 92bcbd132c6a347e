"""Local runners: drive a pipeline over items given in arrival order, for tests and reasoning.

:func:`run_local` runs the optimistic pipeline (stages at once, one barrier at the sink);
:func:`run_buffered` (``run_local(..., mode="buffered")``) runs the buffered baseline with the
same stage objects. Both return a
:class:`RunResult`: what left the pipeline in release order, and counters.

Arrivals are ``(event_time_ms, source, offset, payload)`` tuples in arrival order; ``(source,
offset)`` must be unique. Punctuations are ``(after, bound_ms)`` pairs: once the first ``after``
arrivals are processed, no later arrival has event time below ``bound_ms``. The runner checks
this and raises if an arrival breaks it. Arrivals are processed in micro-batches of
``batch_size``; a punctuation takes effect after the batch that completes its ``after``. Time for
lags is counted in micro-batches (``now`` is the batch number). At the end everything still
buffered is released (a final punctuation at infinity) unless ``flush=False``.

Example: the paper's grouping example (section V.B) under reordering
------------------------------------------------------------------
>>> from dataflow_kafka.optimistic.stages import Grouping
>>> def parity(x): return x % 2
>>> arrivals = [(t, 0, t, t) for t in (3, 1, 4, 2, 6, 5, 8, 7)]
>>> r = run_local([Grouping(window=3, key=parity)], arrivals, safe_punctuations(arrivals, 2))
>>> [i.payload for i in r.released]
[(1,), (2,), (1, 3), (2, 4), (1, 3, 5), (2, 4, 6), (3, 5, 7), (4, 6, 8)]
>>> r.tombstones_in, r.replay_ratio  # (3) and (4) were emitted, then cancelled
(2, 1.5)
"""

from __future__ import annotations

import enum
import math
import pickle
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from dataflow_kafka.optimistic.barrier import BarrierCounters
from dataflow_kafka.optimistic.buffered import BufferedPipeline
from dataflow_kafka.optimistic.order import Item
from dataflow_kafka.optimistic.pipeline import OptimisticPipeline
from dataflow_kafka.optimistic.stages import Operation
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["Mode", "RunResult", "run_local", "run_buffered", "safe_punctuations"]

Arrival = tuple[int, int, int, Any]


@dataclass
class RunResult:
    """What a local run produced.

    ``latencies`` holds, per input that produced output, the micro-batches from its arrival to
    the release of its last output (the end-to-end latency the Spark experiment measures).
    """

    released: list[Item]
    counters: BarrierCounters
    max_buffer: int
    max_state_entries: int
    final_state_entries: int
    buffering_stages: int
    latencies: list[int] = field(default_factory=list)

    @property
    def items_in(self) -> int:
        return self.counters.items_in

    @property
    def tombstones_in(self) -> int:
        return self.counters.tombstones_in

    @property
    def released_count(self) -> int:
        return self.counters.released

    @property
    def replay_ratio(self) -> float:
        return self.counters.replay_ratio

    @property
    def release_lag_max(self) -> float:
        return max(self.latencies, default=0)

    @property
    def release_lag_mean(self) -> float:
        return sum(self.latencies) / len(self.latencies) if self.latencies else 0.0


def _source_items(arrivals: Iterable[Arrival | Item]) -> list[Item]:
    items = [a if isinstance(a, Item) else Item.source(*a) for a in arrivals]
    seen: set[tuple[int, int]] = set()
    for item in items:
        if item.meta.path or item.tombstone:
            raise InvalidArgumentError(f"arrivals must be source items (no child path, no tombstone), got {item!r}")
        sid = (item.meta.source, item.meta.offset)
        if sid in seen:
            raise InvalidArgumentError(f"arrival (source, offset) {sid!r} occurs twice; the total order needs it unique")
        seen.add(sid)
    return items


def _check_punctuations(items: list[Item], punctuations: Iterable[tuple[int, int | float]]) -> list[tuple[int, int | float]]:
    suffix_min = [math.inf] * (len(items) + 1)
    for i in range(len(items) - 1, -1, -1):
        suffix_min[i] = min(suffix_min[i + 1], items[i].meta.time_ms)
    checked = sorted((int(after), bound) for after, bound in punctuations)
    for after, bound in checked:
        if not 0 <= after <= len(items):
            raise InvalidArgumentError(f"punctuation (after={after}, bound_ms={bound}) is outside 0..{len(items)} arrivals")
        if suffix_min[after] < bound:
            late = next(i for i in range(after, len(items)) if items[i].meta.time_ms < bound)
            raise InvalidArgumentError(
                f"punctuation (after={after}, bound_ms={bound}) is broken by arrival {late} "
                f"with event time {items[late].meta.time_ms}"
            )
    return checked


def safe_punctuations(arrivals: Sequence[Arrival | Item], every: int = 1) -> list[tuple[int, int]]:
    """The tightest valid punctuation after every ``every`` arrivals: the least event time to come."""
    times = [a.meta.time_ms if isinstance(a, Item) else a[0] for a in arrivals]
    out: list[tuple[int, int]] = []
    for after in range(every, len(times), every):
        out.append((after, min(times[after:])))
    return out


class Mode(enum.Enum):
    """Which pipeline a local run builds."""

    OPTIMISTIC = "optimistic"  # stages at once, one barrier at the sink
    BUFFERED = "buffered"  # a sort buffer before each order-sensitive stage

    @classmethod
    def parse(cls, value: "str | Mode") -> "Mode":
        try:
            return value if isinstance(value, Mode) else cls(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in cls)
            raise InvalidArgumentError(f"mode must be one of {allowed}, got {value!r}") from None


def run_local(
    stages: Sequence[Operation],
    arrivals: Iterable[Arrival | Item],
    punctuations: Iterable[tuple[int, int | float]] = (),
    *,
    mode: str | Mode = Mode.OPTIMISTIC,
    batch_size: int = 1,
    shuffle_seed: int | None = None,
    gc: bool = True,
    restart_every: int | None = None,
    flush: bool = True,
) -> RunResult:
    """Run ``stages`` over ``arrivals``: optimistically with one barrier at the sink (default),
    or as the buffered baseline with ``mode="buffered"``.

    Parameters
    ----------
    stages : the pipeline, e.g. ``[Map(split), StatefulMap(update, key=word_of)]``.
    arrivals : ``(event_time_ms, source, offset, payload)`` in arrival order.
    punctuations : ``(after, bound_ms)`` pairs, see the module docstring.
    mode : ``"optimistic"`` or ``"buffered"``.
    batch_size : arrivals per micro-batch.
    shuffle_seed : if set, every link delivers a micro-batch in a seeded random order, so
        tombstones can overtake their items.
    gc : collect state below each punctuation.
    restart_every : if set, after every that many micro-batches the pipeline is serialised to
        bytes, the stages are pickled, and the run resumes from the bytes (a restart).
    flush : release everything at the end.

    Returns
    -------
    RunResult : the released items in release order, counters of what arrived at the barrier
    (items, tombstones, released, replay ratio), the most it held (for the baseline: all its
    buffers together), state sizes and latencies.
    """
    mode = Mode.parse(mode)
    if batch_size < 1:
        raise InvalidArgumentError(f"batch_size must be >= 1, got {batch_size!r}")
    if restart_every is not None and restart_every < 1:
        raise InvalidArgumentError(f"restart_every must be >= 1 or None, got {restart_every!r}")
    kind = OptimisticPipeline if mode is Mode.OPTIMISTIC else BufferedPipeline
    pipeline: OptimisticPipeline | BufferedPipeline = kind(stages, gc=gc)
    items = _source_items(arrivals)
    pending = _check_punctuations(items, punctuations)
    rng = None if shuffle_seed is None else random.Random(shuffle_seed)
    arrived_at: dict[tuple[int, int, int], int] = {}
    last_release: dict[tuple[int, int, int], int] = {}
    released: list[Item] = []
    max_buffer = max_state = 0

    def release(out: list[Item], now: int) -> None:
        released.extend(out)
        for item in out:
            last_release[item.meta[:3]] = now

    n_batches = (len(items) + batch_size - 1) // batch_size
    for b in range(n_batches):
        batch = items[b * batch_size:(b + 1) * batch_size]
        for item in batch:
            arrived_at[item.meta[:3]] = b
        release(pipeline.process_batch(list(batch), b, rng), b)
        max_buffer = max(max_buffer, pipeline.buffered())
        max_state = max(max_state, pipeline.state_entries())
        while pending and pending[0][0] <= (b + 1) * batch_size:
            release(pipeline.punctuate(pending.pop(0)[1], b, rng), b)
        if restart_every is not None and (b + 1) % restart_every == 0:
            stages = pickle.loads(pickle.dumps(list(stages)))
            pipeline = kind.from_bytes(stages, pipeline.to_bytes())
    if flush:  # the end of input is known after the last batch, like a punctuation then
        end = max(n_batches - 1, 0)
        release(pipeline.punctuate(math.inf, end, rng), end)
    return RunResult(
        released=released,
        counters=pipeline.counters,
        max_buffer=max_buffer,
        max_state_entries=max_state,
        final_state_entries=pipeline.state_entries(),
        buffering_stages=pipeline.buffering_stages,
        latencies=[now - arrived_at[src] for src, now in last_release.items()],
    )


def run_buffered(
    stages: Sequence[Operation],
    arrivals: Iterable[Arrival | Item],
    punctuations: Iterable[tuple[int, int | float]] = (),
    **options: Any,
) -> RunResult:
    """The buffered baseline: :func:`run_local` with ``mode="buffered"`` (same stage objects)."""
    return run_local(stages, arrivals, punctuations, mode=Mode.BUFFERED, **options)
