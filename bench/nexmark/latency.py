"""End-to-end latency of a NEXMark query running continuously, and what it got right.

The generator's clock is the wall clock: events are generated with ``start_ms`` = now and
:class:`EventTrickle` sends each at its arrival time (a delayed one up to 5 s after it
happened). The query runs with the default trigger (a micro-batch as soon as the previous one
ends) into a ``foreachBatch`` sink that notes when each batch's rows are in the driver.

A result row's latency is the time it is visible minus the time it could first be known
(:meth:`~bench.nexmark.query.Query.ready_ms`): a window's end (a session's: its last bid + the
gap), or, for a projected bid, when it was sent. For a query whose results change (ours: updates,
retractions), the row counted is the final one: its latency is when the folded output first
holds it. Results ready by ``cutoff`` (well before the trickle stops) are compared with the
reference on the bids sent: rows missing and rows that should not be there; a row ready by the
cutoff that overlaps a result ready after it (a session a late bid extended past the cutoff) is
counted apart as *stale* for our variants: the Dataflow stage takes such a session back only when
the extended session is emitted (Beam's retraction comes with the merged window's pane). Spark's
append mode never takes a row back, so there such a row is wrong (``extra``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from bench.nexmark.generator import Event
from bench.nexmark.query import Query
from bench.nexmark.runs import FrameCollector
from dataflow_kafka.windowing.final import WindowFold

__all__ = ["EventTrickle", "TimedCollector", "Measured", "run_timed", "measure"]


class EventTrickle(threading.Thread):
    """Sends ``events`` (of ``topics``' kinds) at their arrival times, wall-clock ms; ``sent``:
    ``(event, send time ms)``."""

    def __init__(self, bootstrap: str, topics: dict[str, str], events: Sequence[Event], partitions: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "log_level": 3})
        self.topics, self.partitions = topics, partitions
        self.events = sorted((e for e in events if e.kind in topics), key=lambda e: (e.arrival_ms, e.i))
        self.sent: list[tuple[Event, int]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        i = 0
        while i < len(self.events) and not self._halt.is_set():
            now = time.time() * 1000
            while i < len(self.events) and self.events[i].arrival_ms <= now:
                e = self.events[i]
                self.p.produce(self.topics[e.kind], value=e.value(), partition=e.partition % self.partitions)
                self.sent.append((e, int(time.time() * 1000)))
                i += 1
            self.p.poll(0)
            self._halt.wait(0.005)
        self.p.flush(30)

    def stop(self) -> None:
        self._halt.set()
        self.join(60)


class TimedCollector(FrameCollector):
    """:class:`FrameCollector` that also notes when each batch's rows reached the driver (ms)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen_ms: dict[int, int] = {}

    def __call__(self, df, batch_id: int) -> None:
        super().__call__(df, batch_id)
        self.seen_ms[batch_id] = int(time.time() * 1000)

    def timed(self) -> list[tuple[int, pd.DataFrame]]:
        return [(self.seen_ms[b], self.frames[b]) for b in sorted(self.frames)]


def run_timed(out_df, checkpoint: str, start_trickle, seconds: float, warmup_timeout_s: float = 180):
    """Run ``out_df`` continuously; after its first batch, ``start_trickle()`` (returns the
    started :class:`EventTrickle`), run ``seconds``, stop both. Returns ``(collector, trickle,
    progress)``."""
    got = TimedCollector()
    q = out_df.writeStream.foreachBatch(got).option("checkpointLocation", checkpoint).start()
    trickle = None
    try:
        deadline = time.monotonic() + warmup_timeout_s
        while not got.frames and time.monotonic() < deadline and q.isActive:
            time.sleep(0.2)
        if not got.frames:
            raise RuntimeError(f"no first batch within {warmup_timeout_s:.0f} s: {q.exception()}")
        trickle = start_trickle()
        time.sleep(seconds)
    finally:
        if trickle is not None:
            trickle.stop()
        _wait_idle(q)
        progress = [dict(p) for p in q.recentProgress]
        q.stop()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    return got, trickle, progress


def _wait_idle(q, timeout_s: float = 20) -> None:
    """Wait until ``q`` runs no batch (stopping one mid-batch makes Spark log a cancelled job and,
    for our Python operators, a StackOverflowError of its stream thread)."""
    deadline = time.monotonic() + timeout_s
    time.sleep(1.0)
    while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)


@dataclass
class Measured:
    """Latencies (ms) of the result rows ready by the cutoff, and their accuracy."""

    latencies_ms: list[int]
    expected: int
    missing: int
    extra: int
    #: rows ready by the cutoff that are part of a result not over by then (a session a late bid
    #: extended, shown until the extended session is emitted): neither right nor wrong yet
    stale: int = 0


def _rows_when_seen(query: Query, variant: str | None, timed: list[tuple[int, pd.DataFrame]]) -> dict:
    """``{result row: time first seen}``; ``variant`` None: Spark's native output (append mode)."""
    seen: dict = {}
    if variant is None or variant == "sql":
        for t, frame in timed:
            if len(frame):
                rows = query.native_results(frame) if variant is None else query.results(variant, [frame])
                for r in rows:
                    seen.setdefault(r, t)
        return seen
    fold, table = WindowFold.of(query.last_stage(variant)), None
    for t, frame in timed:
        if not len(frame):
            continue
        table = fold.apply(table, frame)
        for r in query.results(variant, [table]):
            seen.setdefault(r, t)
    return seen


def measure(query: Query, variant: str | None, timed: list[tuple[int, pd.DataFrame]],
            sent: Sequence[tuple[Event, int]], cutoff_ms: int) -> Measured:
    """Latency and accuracy of one run (module docstring); ``variant`` None: Spark's native form."""
    frames = [f for _, f in timed]
    final = (query.native_results(pd.concat([f for f in frames if len(f)])) if any(len(f) for f in frames) else []) \
        if variant is None else query.results(variant, frames)
    bids = [(e.record, t) for e, t in sent if e.kind == "bid"]
    index = query.sent_index(bids)

    def ready(r):
        return query.ready_ms(r, index)

    reference = query.reference([b for b, _ in bids], variant)
    expected = Counter(r for r in reference if ready(r) is not None and ready(r) <= cutoff_ms)
    later = [r for r in reference if ready(r) is not None and ready(r) > cutoff_ms]
    got, stale = Counter(), 0
    for r in final:
        if ready(r) is None or ready(r) > cutoff_ms:
            continue
        if variant is not None and r not in expected and any(query.overlaps(r, x) for x in later):
            stale += 1          # part of a result not over yet (a session a late bid extended): ours takes it back
        else:
            got[r] += 1
    seen = _rows_when_seen(query, variant, timed)
    lat = [seen[r] - ready(r) for r in got if r in expected and r in seen]
    return Measured(sorted(lat), sum(expected.values()), sum((expected - got).values()), sum((got - expected).values()),
                    stale)
