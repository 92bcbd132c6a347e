"""``python -m bench.nexmark.throughput``: steady-state NEXMark throughput, this project against
Spark's native queries, in one run ([docs/nexmark.md](../../docs/nexmark.md#steady-state-throughput)).

What it does, once per run:

* generates ``--events`` NEXMark events (default 1,000,000: 920,000 bids), 10% delayed up to 5 s,
  and writes the bids to one Kafka topic **once** (every arm reads the same records);
* per micro-batch size (``--batch-sizes``, default 10k, 50k and 200k records,
  ``maxOffsetsPerTrigger``) and query, runs every **arm** with Trigger.AvailableNow, the arms
  alternated (the order swapped every other query and repeat): our variants (``slicer``,
  ``dataflow``, ``sql``) over ``format("dataflow-kafka")`` (``maxPartitions`` = ``--max-partitions``,
  default 2: at most one source task per core of ``local[2]``, the source's option for small
  batches on few cores; 0 leaves one task per Kafka partition; the windowed forms are given the
  source's reader, so the source routes and packs their first operator's rows:
  ``keygroups.Pipeline.apply``; ``--jvm-packing`` adds them on the loaded source, routed in the
  JVM and packed by a ``mapInArrow`` step, as variants ``<form>/jvm-packing``; the projections
  read the source with ``dataOnly`` (Spark's Kafka columns, data records only, as their SQL needs;
  since 2026-12-01), and ``--markers`` adds them on its rows with markers, filtered by ``kind`` in
  Spark, as variants ``sql/markers``; our records are counted from the source's offsets) and
  Spark's native form over
  ``format("kafka")`` (Spark's JVM connector; :mod:`bench.spark_kafka`) with ``withWatermark``
  5 s;
* first a **warm-up**, not recorded: the first query's arms (ours, Spark's) once at the largest
  batch size, so the first measured arm does not pay for the JVM's and the Python workers' first
  runs (Q0 at 10k, the first arm, ran at 0.75x Q1's rate without it, 0.83x with it);
  ``--warmup-rounds N`` adds N rounds of every arm (at ``--warmup-batch-size``, default the
  largest), not recorded either: the JVM's JIT compiler keeps compiling through several rounds of
  arms, more for our plans than for Spark's (``jit_cpu_s``; docs/nexmark.md, 2026-12-01), and
  compiles again for a batch size it has not run (Q11's first 10k arm after a round at 50k spent
  5-11 s of JIT CPU, its measured 10k arms after three rounds at 10k 1-6 s; docs/nexmark.md,
  2026-12-02 afternoon);
  ``--warmup-each-size`` runs the N rounds before each batch size's repeats, at that size;
* times the **steady state**: the first micro-batch (query start, Python workers' start, the
  first state store) is left out: rows/s = the bids of batches 1.. over the sum of their
  ``triggerExecution``; CPU = the CPU seconds of Spark's JVM, its Python workers and this driver
  process from the end of batch 0 to the end of the run (``/proc``, sampled: :class:`ProcessCpu`;
  the broker is not counted); of the JVM's CPU, what its JIT compiler threads used is given apart
  (``jit_cpu_s``): HotSpot compiles for minutes after a JVM starts, each arm's plan has code of its
  own to compile, and a long-running query no longer pays it; so the rate of the steady batches'
  later half is given too (``late_rows_per_s``, :func:`late_half`; the table's last column), where
  most of an arm's compiling is behind it;
* **Q8** (persons joined with their auctions per 10 s window: the windowed join, in the default
  query list) reads two topics of its own, the persons and auctions of ``--join-events`` NEXMark
  events (default 5,000,000: 400,000 records), made on first use; its rows/s are persons and
  auctions, its events per CPU-second those / 0.08, and its records are counted from the
  sources' offsets (Spark's native join scans its source once per side, so ``numInputRows``
  counts each row twice); Spark's arm is the stream-stream join with ``withWatermark`` 5 s on
  both sides, whose pairs are all due when a bounded run ends (none ``open``);
* ``--floor``: a third arm per query, the evidence for a gap: the same query shape with no code
  of ours. Windowed queries: Spark's connector, the bids parsed in the JVM, hashed by the first
  stage's key into as many key groups as our form's first stage has (4; Q5 and Q7 one since
  2026-12-01 evening, ``--top-key-groups``) and passed through as many
  ``transformWithStateInPandas`` processors as our forms of the query run per micro-batch
  (:func:`floor_operators`: one for Q5, Q7 and Q11; Q5 and Q7 two with ``--top-key-groups`` over
  one, the second re-keyed and fed one row per key group and batch, as our merge per window is
  then; Q8 one, keyed by the person), each only counting its rows in its state
  (:class:`bench._stream.FloorProcessor`): what any
  Python stateful operators of that shape cost on Spark's own connector, with no stage code
  (checked by the row count). Projections: Spark's native query over the simplest Python source
  that reads Kafka (:class:`bench.python_floor.KafkaFloorSource`), what Spark's Python Data
  Source API costs for the rows our source delivers (checked as Spark's arm). Before 2026-11-29
  the floor was one operator for every windowed query and none for the projections;
* checks every arm's final result: ours against the brute-force reference (every row), Spark's
  against the reference on the windows its final watermark closed (a bounded append-mode run never
  emits the rest, counted as ``open``); projections Q0/Q1 by a checksum per batch (count and
  column sums, computed by Spark in the sink), so no arm pays for collecting 920,000 rows;
* prints the whole table: rows/s, ours / Spark's per query and batch size, and NEXMark events
  per CPU-second (bids / 0.92, the events a NEXMark source would have produced for them) beside
  Flink's published per-core rates (nexmark/nexmark README, Flink 1.13, 8 workers x 8 cores,
  100M events, throughput / cores where cores is the CPU the workers used), and writes a CSV.

``--key-groups`` (default 4) sets our stages' key groups (results do not depend on it; each key
group is one call of a stage's processor per batch); ``--top-key-groups`` (default 1) those of the
slicer forms of Q5 and Q7 (more than one: a second operator merges their tops, ``Settings``).
``--quick`` (100,000 events, 10k and 50k batches) is the smoke form; ``--profile DIR`` records
py-spy flame graphs of Spark's Python workers during each steady state of ours (one SVG per arm;
:mod:`bench.nexmark.profile`). The load average is recorded before and after every arm: on a
shared machine read CPU per record rather than wall time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from bench.nexmark.generator import NexmarkConfig, bids, generate, produce
from bench.nexmark.queries import REGISTRY, get
from bench.nexmark.queries.q3 import PersonAuctionJoin, native_source, produce_in_order
from bench.nexmark.query import Projection, Query, Settings, parse_bids
from bench.nexmark.runs import final_watermark_ms, run_available_now, source_options
from bench.nexmark.stats import load1, multiset_diff, write_rows

__all__ = ["FLINK_PER_CORE", "BID_SHARE", "ProcessCpu", "Steady", "run_arm", "Harness", "session_extra", "main"]

#: Flink 1.13's NEXMark throughput per core (events per CPU-second), nexmark/nexmark README.
FLINK_PER_CORE = {"q0": 155_020, "q1": 157_940, "q2": 175_210, "q3": 152_120, "q5": 22_140, "q7": 12_330,
                  "q8": 146_140, "q11": 39_700}
#: Bids among NEXMark's events (46 of every 50): bids / BID_SHARE = the events behind them.
BID_SHARE = 0.92
#: Persons and auctions among NEXMark's events (4 of every 50): the joins' inputs.
JOIN_SHARE = 0.08
#: The queries the harness runs by default: the bid queries and Q8 (the windowed join).
DEFAULT_QUERIES = (*REGISTRY, "q8")
NATIVE_DELAY = "5 seconds"
#: Our source's ``maxPartitions`` in the harness: one task per core of ``local[2]`` (module docstring).
MAX_PARTITIONS = 2
#: an ours variant's suffix: the pipeline on the loaded source, routed in the JVM and packed by a
#: ``mapInArrow`` step, instead of on the source's reader (which routes and packs in its tasks)
JVM_PACKING = "jvm-packing"
#: a projection's variant suffix: our source's rows with their markers (filtered by ``kind`` in
#: Spark) instead of ``dataOnly``'s data records in Spark's Kafka columns
MARKERS = "markers"
#: The key of each windowed query's first stage: the floor arm groups by it (module docstring); the
#: joins' key is the person: a person's ``id``, an auction's ``seller``.
FLOOR_KEYS = {"q5": "auction", "q7": "auction", "q11": "bidder", "q8": "person"}
#: The projections' floor: Spark's native query on the simplest Python Kafka source.
PROJECTION_FLOOR = "bench-python-kafka"


def floor_operators(q: Query, settings: Settings = Settings()) -> int:
    """How many Python stateful operators our form of windowed query ``q`` runs per micro-batch
    (its first variant's plan: one for Q5, Q7 and Q11 by default; Q5 and Q7 two with
    ``top_key_groups`` over one, the partial stage fused into the first)."""
    return len(q.pipeline(q.variants[0], settings).plan())


def floor_label(q: Query, settings: Settings = Settings()) -> str | None:
    """The floor arm's variant label for ``q`` with our ``settings`` (None: no floor for it)."""
    if q.name in FLOOR_KEYS:
        n = floor_operators(q, settings)
        return f"{n} no-op transformWithStateInPandas" if n > 1 else "no-op transformWithStateInPandas"
    if isinstance(q, Projection):
        return f"native on format({PROJECTION_FLOOR!r})"
    return None


FIELDS = ["date", "batch_size", "repeat", "query", "side", "variant", "connector", "bids", "batches", "steady_bids",
          "steady_s", "rows_per_s", "late_rows_per_s", "cpu_s", "jvm_cpu_s", "jit_cpu_s", "python_cpu_s", "python_started",
          "python_started_cpu_s", "python_new", "driver_cpu_s",
          "cores_busy", "events_per_cpu_s", "flink_per_core", "correct", "expected", "missing", "extra", "open",
          "first_batch_s", "load_before", "load_after", "profile", "max_partitions", "key_groups", "top_key_groups",
          "source_options"]
#: phases of Spark's ``durationMs`` recorded per arm (``ms_<phase>``: milliseconds per steady batch)
PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
FIELDS += [f"ms_{phase}" for phase in PHASES]


class ProcessCpu:
    """CPU seconds used by Spark's JVM and its descendants (the Python daemons and workers) and
    by this process (not its other children: the broker), between :meth:`start` and :meth:`stop`.

    pyspark's daemon ignores ``SIGCHLD``, so the kernel reaps a worker that exits and its CPU
    reaches no parent's ``cutime``: a background thread reads every process's own CPU every
    ``interval_s`` and keeps the last value seen per process (by pid and start time), so a worker
    that exits during the run loses at most its last interval. The thread's own CPU is left out of
    the driver's. :attr:`jit_s`: after :meth:`stop`, the CPU seconds of the JVM's JIT compiler
    threads (``C1``/``C2 CompilerThread``, part of the JVM's), sampled the same way per thread;
    :attr:`jit_threads`, how many such threads were seen; :attr:`python_started` and
    :attr:`python_started_s`, the Python processes (workers, daemons) started during the run and
    their CPU seconds, counted whole (a worker Spark starts pays its imports there);
    :attr:`python_new`, the Python processes of the run that no earlier run of this meter saw
    (Spark replaced its idle workers between the runs)."""

    def __init__(self, jvm_pid: int, interval_s: float = 0.2) -> None:
        self.jvm_pid, self.interval_s = jvm_pid, interval_s
        self.tick = os.sysconf("SC_CLK_TCK")
        self._first: dict[tuple[int, int], int] = {}
        self._last: dict[tuple[int, int], tuple[int, bool]] = {}     # (ticks, is Python)
        self._own0 = self._meter_s = self.jit_s = 0.0
        self.jit_threads = 0            # compiler threads seen between the last start and stop
        self._jit_first: dict[int, int] = {}
        self._jit_last: dict[int, int] = {}
        self._is_jit: dict[str, bool] = {}     # JVM thread id -> a compiler thread, per run (names do not change)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.python_started = 0         # Python processes started between the last start and stop
        self.python_started_s = 0.0     # their CPU seconds (part of the Python workers')
        self.python_new = 0             # Python processes of the last run that no earlier run saw
        self._python_seen: set[tuple[int, int]] = set()

    @staticmethod
    def _stat(pid: int | str) -> list[str] | None:
        """Fields 3.. of ``/proc/<pid>/stat`` (``pid`` may be ``"<pid>/task/<tid>"``: a thread's)."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            return None
        return text[text.rindex(")") + 2:].split()     # fields from 3 on (state, ppid, ...)

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = self._stat(int(entry))
                if st is not None:
                    children.setdefault(int(st[1]), []).append(int(entry))
        out, todo = [], [self.jvm_pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    def _sample(self, first: bool = False) -> None:
        self._sample_jit(first)
        for pid in self._tree():
            st = self._stat(pid)
            if st is None:
                continue
            key = (pid, int(st[19]))                         # pid and start time: a reused pid is new
            ticks = int(st[11]) + int(st[12])               # utime, stime
            if key not in self._last:
                self._first[key] = ticks if first else 0    # a process started during the run counts whole
                self._last[key] = (ticks, self._comm(pid).startswith("python"))
            else:
                self._last[key] = (ticks, self._last[key][1])

    def _sample_jit(self, first: bool) -> None:
        """The JVM's compiler threads' CPU ticks, per thread id (HotSpot starts and stops compiler
        threads as its queue grows and shrinks: one started during the run counts whole)."""
        try:
            tids = os.listdir(f"/proc/{self.jvm_pid}/task")
        except OSError:
            return
        for tid in tids:
            thread = f"{self.jvm_pid}/task/{tid}"
            if tid not in self._is_jit:
                self._is_jit[tid] = "CompilerThre" in self._comm(thread)
            st = self._stat(thread) if self._is_jit[tid] else None
            if st is None:
                continue
            ticks = int(st[11]) + int(st[12])
            if int(tid) not in self._jit_last:
                self._jit_first[int(tid)] = ticks if first else 0
            self._jit_last[int(tid)] = ticks

    def _run(self) -> None:
        t0 = time.thread_time()
        while not self._stop.wait(self.interval_s):
            self._sample()
        self._meter_s = time.thread_time() - t0      # the meter's own CPU, left out of the driver's

    def start(self) -> None:
        """Start counting (at the end of batch 0)."""
        self._first, self._last = {}, {}
        self._jit_first, self._jit_last, self._is_jit = {}, {}, {}
        self._sample(first=True)
        own = os.times()
        self._own0 = own.user + own.system
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()

    def stop(self) -> tuple[float, float, float]:
        """``(JVM, Python workers, this driver process)`` CPU seconds since :meth:`start`."""
        if self._thread is None:
            return 0.0, 0.0, 0.0
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        jvm = py = 0
        for key, (ticks, is_python) in self._last.items():
            used = ticks - self._first[key]
            if is_python:
                py += used
            else:
                jvm += used
        self.jit_s = sum(t - self._jit_first[tid] for tid, t in self._jit_last.items()) / self.tick
        self.jit_threads = len(self._jit_last)
        started = [ticks for key, (ticks, is_python) in self._last.items() if is_python and self._first[key] == 0]
        self.python_started, self.python_started_s = len(started), sum(started) / self.tick
        python = {key for key, (_, is_python) in self._last.items() if is_python}
        self.python_new = len(python - self._python_seen)   # not seen in any earlier run of this meter
        self._python_seen |= python
        own = os.times()
        return jvm / self.tick, py / self.tick, own.user + own.system - self._own0 - self._meter_s

    @staticmethod
    def _comm(pid: int | str) -> str:
        try:
            with open(f"/proc/{pid}/comm") as f:
                return f.read()
        except OSError:
            return ""

    def python_pids(self) -> list[int]:
        """Spark's Python processes now (the daemons and their workers)."""
        return [pid for pid in self._tree() if self._comm(pid).startswith("python")]


@dataclass
class Steady:
    """One arm's run: output frames (or per-batch checksums), the steady state's measures."""

    frames: list = field(default_factory=list)
    progress: list[dict] = field(default_factory=list)
    batches: int = 0
    steady_s: float = 0.0
    first_batch_s: float = 0.0
    cpu_s: tuple[float, float, float] = (0.0, 0.0, 0.0)     # JVM, Python workers, driver
    jit_s: float = 0.0                                       # of the JVM's: its JIT compiler threads
    python_started: tuple[int, float] = (0, 0.0)             # Python processes started in it, their CPU s
    python_new: int = 0                                      # Python processes no earlier arm saw
    profile: str = ""


class _Collector:
    """``foreachBatch``: keeps each batch's output (or ``summarise(df)``), and at the end of batch 0
    starts the CPU meter and ``on_steady`` (a profiler)."""

    def __init__(self, cpu: ProcessCpu, summarise: Callable | None, on_steady: Callable | None) -> None:
        self.cpu, self.summarise, self.on_steady = cpu, summarise, on_steady
        self.out: dict[int, object] = {}
        self.steady = False

    def __call__(self, df, batch_id: int) -> None:
        self.out[batch_id] = self.summarise(df) if self.summarise is not None else df.toPandas()
        if not self.steady:
            self.steady = True
            self.cpu.start()
            if self.on_steady is not None:
                self.on_steady()


def run_arm(out_df, checkpoint: str, cpu: ProcessCpu, summarise: Callable | None = None,
            profiler=None, timeout_s: float = 3600) -> Steady:
    """Run ``out_df`` with Trigger.AvailableNow into the collecting sink; the steady state is
    batches 1.. (see the module docstring)."""
    got = _Collector(cpu, summarise, profiler.start if profiler is not None else None)
    try:
        q = run_available_now(out_df, checkpoint, got, timeout_s,
                              on_end=profiler.stop if profiler is not None else None)
    finally:
        cpu_s = cpu.stop()
    progress = sorted((dict(p) for p in q.recentProgress), key=lambda p: p["batchId"])
    if progress and progress[0]["batchId"] != 0:
        raise RuntimeError("Spark kept too few progress reports to time batch 0 apart "
                           "(spark.sql.streaming.numRecentProgressUpdates)")
    steady = [p for p in progress if p["batchId"] >= 1]
    return Steady(frames=[got.out[b] for b in sorted(got.out)], progress=progress, batches=len(progress),
                  steady_s=sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000,
                  first_batch_s=progress[0]["durationMs"]["triggerExecution"] / 1000 if progress else 0.0,
                  cpu_s=cpu_s, jit_s=cpu.jit_s, python_started=(cpu.python_started, cpu.python_started_s),
                  python_new=cpu.python_new,
                  profile=getattr(profiler, "path", "") if profiler is not None else "")


# -- projections: a checksum per batch instead of every row --------------------------------------
_SUMS = ("auction", "bidder", "price", "dateTime")


def _checksum(df) -> tuple:
    """Spark: ``(count, sum per column, total length of extra)`` of a projection's batch."""
    from pyspark.sql import functions as F

    cols = [c for c in _SUMS if c in df.columns]
    aggs = [F.count(F.lit(1))] + [F.sum(c) for c in cols]
    if "extra" in df.columns:
        aggs.append(F.sum(F.length("extra")))
    row = df.agg(*aggs).collect()[0]
    return tuple(0 if v is None else float(v) for v in row)


def _checksum_reference(q: Projection, records: list[dict]) -> tuple:
    rows = q.reference(records)
    cols = list(q.columns)
    sums = [sum(r[cols.index(c)] for r in rows) for c in _SUMS if c in cols]
    extra = [sum(len(r[cols.index("extra")]) for r in rows)] if "extra" in cols else []
    return tuple(float(v) for v in [len(rows), *sums, *extra])


def _same_checksum(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= 1e-9 * max(1.0, abs(y)) for x, y in zip(a, b))


def _count(df) -> tuple:
    return (df.count(),)


def _sum_n(df) -> tuple:
    from pyspark.sql import functions as F

    return (df.agg(F.coalesce(F.sum("n"), F.lit(0))).collect()[0][0],)


def _uses_checksum(q: Query) -> bool:
    return isinstance(q, Projection) and "extra" in q.columns     # Q0, Q1: one output row per bid


class Harness:
    """One run of the harness: a Spark session, a broker, the bids produced once, the rows."""

    def __init__(self, spark, bootstrap: str, connector: str, events: int, partitions: int = 4, seed: int = 1,
                 delayed: float = 0.1, rate: int = 10_000, profile_dir: str | None = None,
                 log: Callable[[str], None] = print, max_partitions: int | None = MAX_PARTITIONS,
                 key_groups: int = Settings().key_groups, join_events: int = 5_000_000,
                 jvm_packing: bool = False, markers: bool = False,
                 top_key_groups: int = Settings().top_key_groups,
                 source_options: dict[str, str] | None = None) -> None:
        self.spark, self.bootstrap, self.connector = spark, bootstrap, connector
        self.source_options = dict(source_options or {})    # added to our source's options in our arms
        self.jvm_packing = jvm_packing
        self.markers = markers
        self.settings = Settings(key_groups=key_groups, top_key_groups=top_key_groups)
        self.partitions, self.log, self.profile_dir = partitions, log, profile_dir
        self.max_partitions = max_partitions or None
        self.tmp = Path(tempfile.mkdtemp(prefix="nexmark-steady-"))
        self.rows: list[dict] = []
        self.last_progress: list[dict] = []     # the last arm's progress reports (bench.nexmark.task_times)
        self.cpu = ProcessCpu(int(spark._jvm.java.lang.ProcessHandle.current().pid()))
        cfg = NexmarkConfig(events=events, seed=seed, events_per_s=rate, delayed=delayed, partitions=partitions)
        t0 = time.monotonic()
        evs = generate(cfg)
        prefix = f"nexmark-steady-{uuid.uuid4().hex[:8]}"
        self.topic = produce(bootstrap, prefix, evs, partitions, kinds=("bid",))["bid"]
        self.records = bids(evs)
        self._references: dict = {}
        self._join_cfg = NexmarkConfig(events=join_events, seed=seed, events_per_s=rate, delayed=delayed,
                                       partitions=partitions)
        self._join_input: tuple[dict[str, str], list] | None = None
        log(f"{events} events, {len(self.records)} bids in {self.topic} ({partitions} partitions, {delayed:.0%} "
            f"delayed, {rate} events/s of event time), generated and produced in {time.monotonic() - t0:.0f} s")

    def join_input(self) -> tuple[dict[str, str], list]:
        """The joins' topics (``{kind: topic}``) and events: the persons and auctions of
        ``join_events`` NEXMark events (4 in 50), generated and produced on first use."""
        if self._join_input is None:
            t0 = time.monotonic()
            cfg = self._join_cfg
            evs = generate(cfg, kinds=PersonAuctionJoin.kinds)
            topics = produce_in_order(self.bootstrap, f"nexmark-steady-j-{uuid.uuid4().hex[:8]}", evs, self.partitions)
            self._join_input = topics, evs
            self.log(f"{cfg.events} events, {len(evs)} persons and auctions in {', '.join(topics.values())}, "
                     f"generated and produced in {time.monotonic() - t0:.0f} s")
        return self._join_input

    def _reference(self, q: Query, variant: str | None):
        key = (q.name, variant)
        if key not in self._references:
            self._references[key] = (_checksum_reference(q, self.records) if _uses_checksum(q)
                                     else q.reference(self.join_input()[1], variant) if _is_join(q)
                                     else q.reference(self.records, variant))
        return self._references[key]

    def _inputs(self, q: Query) -> int:
        """The records ``q`` reads: the bids, or a join's persons and auctions."""
        return len(self.join_input()[1]) if _is_join(q) else len(self.records)

    def _profiler(self, label: str):
        if not self.profile_dir:
            return None
        from bench.nexmark.profile import WorkerProfiler

        return WorkerProfiler(self.cpu, Path(self.profile_dir) / f"{label}.txt")

    def _native_source(self, batch_size: int):
        """Spark's connector on the bids, parsed (:func:`parse_bids`)."""
        opts = {"kafka.bootstrap.servers": self.bootstrap, "subscribe": self.topic, "startingOffsets": "earliest",
                "maxOffsetsPerTrigger": str(batch_size)}
        if self.connector == "dataflow-kafka":
            opts["eventTimeField"] = "dateTime"
        src = self.spark.readStream.format(self.connector).options(**opts).load()
        return parse_bids(src, with_kind=self.connector == "dataflow-kafka")

    def arm(self, q: Query, side: str, variant: str, batch_size: int, repeat: int) -> dict:
        before = load1()
        path = ""
        ck = str(self.tmp / uuid.uuid4().hex[:10])
        summarise = _checksum if _uses_checksum(q) else None
        if side == "floor" and q.name in FLOOR_KEYS:
            out, summarise = self._floor_query(q, batch_size)
            connector = self.connector
            run = run_arm(out, ck, self.cpu, summarise)
            by_offsets = _is_join(q)
        elif side == "floor":
            from bench.python_floor import KafkaFloorSource

            self.spark.dataSource.register(KafkaFloorSource)
            src = (self.spark.readStream.format(PROJECTION_FLOOR)
                   .options(**{"kafka.bootstrap.servers": self.bootstrap, "subscribe": self.topic,
                               "maxOffsetsPerTrigger": str(batch_size)}).load())
            out, connector = q.native(parse_bids(src, with_kind=False), NATIVE_DELAY), PROJECTION_FLOOR
            run = run_arm(out, ck, self.cpu, summarise)
            by_offsets = False
        elif side == "ours":
            topics = list(self.join_input()[0].values()) if _is_join(q) else [self.topic]
            opts = source_options(self.bootstrap, ",".join(topics), batch_size)
            if self.max_partitions:
                opts["maxPartitions"] = str(self.max_partitions)
            opts.update(self.source_options)
            variant, _, path = variant.partition("/")       # "/jvm-packing": the pipeline on the loaded source
            if isinstance(q, Projection) and path != MARKERS:  # Spark's operators only: the data records
                opts = {k: v for k, v in opts.items() if k not in ("eventTimeField", "endOfInput")} | {"dataOnly": "true"}
            reader = self.spark.readStream.format("dataflow-kafka").options(**opts)
            source = reader if path != JVM_PACKING and type(q).spark is Query.spark else reader.load()
            out, connector = q.spark(variant, source, self.settings), "dataflow-kafka"
            label = f"{q.name}-{variant}{'-' + path if path else ''}-{batch_size}-r{repeat}"
            run = run_arm(out, ck, self.cpu, summarise, self._profiler(label))
            # records read, from the offsets: numInputRows counts the source's rows, which are packed
            # rows where the source packs (one per task and key group) and include a punctuation row
            # per topic-partition and batch where it does not
            by_offsets = True
        elif _is_join(q):
            topics = self.join_input()[0]
            src = native_source(self.spark, self.bootstrap, topics, q.kinds, self.connector, batch_size)
            out, connector = q.native(src, NATIVE_DELAY, topics), self.connector
            run = run_arm(out, ck, self.cpu, summarise)
            by_offsets = True       # the join scans its source twice: numInputRows doubles
        else:
            out = q.native(self._native_source(batch_size), NATIVE_DELAY)
            connector = self.connector
            run = run_arm(out, ck, self.cpu, summarise)
            by_offsets = False
        check = self._check(q, side, variant, run)
        self.last_progress = run.progress
        if side == "ours" and path:
            variant = f"{variant}/{path}"
        steady_bids = records_read(run.progress, by_offsets)
        rate = steady_bids / run.steady_s if run.steady_s > 0 else None
        late_rate = rate_of(late_half(run.progress), by_offsets)
        jvm_s, py_s, driver_s = run.cpu_s
        cpu_s = jvm_s + py_s + driver_s
        events_per_cpu = steady_bids / (JOIN_SHARE if _is_join(q) else BID_SHARE) / cpu_s if cpu_s > 0 else None
        row = {"date": dt.datetime.now().isoformat(timespec="seconds"), "batch_size": batch_size, "repeat": repeat,
               "query": q.name, "side": side,
               "variant": (variant if side == "ours" else floor_label(q, self.settings) if side == "floor"
                           else _native_label(q)),
               "connector": connector, "bids": self._inputs(q), "batches": run.batches, "steady_bids": steady_bids,
               "steady_s": round(run.steady_s, 3), "rows_per_s": None if rate is None else round(rate),
               "late_rows_per_s": None if late_rate is None else round(late_rate),
               "cpu_s": round(cpu_s, 2), "jvm_cpu_s": round(jvm_s, 2), "jit_cpu_s": round(run.jit_s, 2),
               "python_cpu_s": round(py_s, 2),
               "python_started": run.python_started[0], "python_started_cpu_s": round(run.python_started[1], 2),
               "python_new": run.python_new,
               "driver_cpu_s": round(driver_s, 2),
               "cores_busy": round(cpu_s / run.steady_s, 2) if run.steady_s else None,
               "events_per_cpu_s": None if events_per_cpu is None else round(events_per_cpu),
               "flink_per_core": FLINK_PER_CORE.get(q.name), "first_batch_s": round(run.first_batch_s, 2),
               "load_before": before, "load_after": load1(), "profile": run.profile,
               "max_partitions": self.max_partitions if side == "ours" else None,
               "key_groups": self.settings.key_groups if side == "ours" else None,
               "top_key_groups": self.settings.top_key_groups if side == "ours" else None,
               "source_options": " ".join(f"{k}={v}" for k, v in self.source_options.items()) if side == "ours" else None,
               **check,
               **_phase_ms(run.progress)}
        self.rows.append(row)
        self.log("  " + "  ".join(f"{k}={row[k]}" for k in ("batch_size", "query", "side", "variant", "batches",
                                                            "rows_per_s", "late_rows_per_s", "cpu_s", "jvm_cpu_s", "jit_cpu_s",
                                                            "python_cpu_s", "python_started", "python_new", "events_per_cpu_s",
                                                            "correct",
                                                            "missing", "extra", "open", "load_after",
                                                            "ms_latestOffset", "ms_addBatch", "ms_walCommit",
                                                            "ms_commitOffsets")))
        return row

    def _floor_query(self, q: Query, batch_size: int):
        """The windowed floor (module docstring): its output DataFrame and summariser (a row count,
        or the sum of the second operator's counts: both the number of bids)."""
        from bench._stream import FloorProcessor

        key, operators = FLOOR_KEYS[q.name], floor_operators(q, self.settings)
        groups = q.pipeline(q.variants[0], self.settings).stages[0].num_key_groups
        if _is_join(q):
            keyed = self._join_floor_source(q, batch_size)
        else:
            keyed = self._native_source(batch_size)
        keyed = keyed.selectExpr(f"CAST(pmod(hash({key}), {groups}) AS INT) AS key_group", key, "ts_ms")
        if operators == 1:
            return keyed.groupBy("key_group").transformWithStateInPandas(
                FloorProcessor(), f"key_group int, {key} bigint, ts_ms bigint", "Append", "None"), _count
        counts = keyed.groupBy("key_group").transformWithStateInPandas(
            FloorProcessor(counts=True), "key_group int, n bigint", "Append", "None")
        for _ in range(operators - 1):
            counts = (counts.selectExpr(f"CAST(pmod(key_group + 1, {groups}) AS INT) AS key_group", "n")
                      .groupBy("key_group").transformWithStateInPandas(FloorProcessor(), "key_group int, n bigint",
                                                                        "Append", "None"))
        return counts, _sum_n

    def _join_floor_source(self, q: PersonAuctionJoin, batch_size: int):
        """Spark's connector on a join's topics, each record's person (a person's ``id``, an
        auction's ``seller``) and event time parsed in the JVM: the floor's input for a join."""
        from pyspark.sql import functions as F

        topics = self.join_input()[0]
        rec = F.from_json(F.col("value").cast("string"), "id BIGINT, seller BIGINT, dateTime BIGINT")
        src = native_source(self.spark, self.bootstrap, topics, q.kinds, self.connector, batch_size)
        return src.select(F.col("topic"), rec.alias("r")).select(
            F.when(F.col("topic") == topics["person"], F.col("r.id")).otherwise(F.col("r.seller")).alias("person"),
            F.col("r.dateTime").alias("ts_ms"))

    def _check(self, q: Query, side: str, variant: str, run: Steady) -> dict:
        if side == "floor" and q.name in FLOOR_KEYS:
            ok = sum(n for n, in run.frames) == self._inputs(q)
            return {"correct": ok, "expected": self._inputs(q), "missing": 0 if ok else None,
                    "extra": 0 if ok else None, "open": 0}
        if _uses_checksum(q):
            got = tuple(map(sum, zip(*run.frames))) if run.frames else ()
            ok = _same_checksum(got, self._reference(q, None))
            return {"correct": ok, "expected": len(self.records), "missing": 0 if ok else None,
                    "extra": 0 if ok else None, "open": 0}
        frames = [f for f in run.frames if len(f)]
        if side == "ours":
            expected = self._reference(q, variant)
            got = q.results(variant, frames, self.settings)
            missing, extra = multiset_diff(expected, got)
            return {"correct": missing == extra == 0, "expected": len(expected), "missing": missing, "extra": extra,
                    "open": 0}
        expected = self._reference(q, None)
        got = q.native_results(pd.concat(frames)) if frames else []
        wm = final_watermark_ms(run.progress)
        # an inner join emits a pair when its later row arrives: every pair is due
        closed = [r for r in expected if _is_join(q) or q.ready_column == ""
                  or (wm is not None and q.ready_ms(r, {}) <= wm)]
        missing, extra = multiset_diff(closed, got)
        return {"correct": missing == extra == 0, "expected": len(closed), "missing": missing, "extra": extra,
                "open": len(expected) - len(closed)}

    def run(self, queries: list[Query], batch_sizes: list[int], repeats: int = 1, floor: bool = False,
            warmup: bool = True, warmup_rounds: int = 0, warmup_batch_size: int | None = None,
            warmup_each_size: bool = False) -> None:
        """Every arm of every query per batch size and repeat (module docstring). ``warmup``: first
        the first query's arms once at the largest batch size, not recorded, so the first measured
        arm does not pay for the JVM's and Python workers' first runs. ``warmup_rounds``: then
        that many rounds of every arm of every query, not recorded either, at ``warmup_batch_size``
        (default the largest), each logged with its JIT compiler CPU: a JVM whose JIT has settled
        further, as a long-running query's has. ``warmup_each_size``: those rounds run before each
        batch size's repeats, at that size, instead of once before all of them."""
        if warmup and queries:
            q, size = queries[0], max(batch_sizes)
            for side, variant in [("ours", q.variants[0]), ("spark", NATIVE_DELAY)]:
                self.arm(q, side, variant, size, -1)
                self.rows.pop()
            self.log(f"  (warm-up: {q.name} ours and Spark's at {size:,}, not recorded)")
        if not warmup_each_size:
            self._warm_up_rounds(queries, warmup_rounds, warmup_batch_size or max(batch_sizes), floor)
        k = 0
        for batch_size in batch_sizes:
            if warmup_each_size:
                self._warm_up_rounds(queries, warmup_rounds, batch_size, floor)
            for repeat in range(repeats):
                for q in queries:
                    arms = self._arms(q, floor)
                    for side, variant in arms if k % 2 == 0 else arms[::-1]:
                        self.arm(q, side, variant, batch_size, repeat)
                    k += 1

    def _warm_up_rounds(self, queries: list[Query], rounds: int, size: int, floor: bool) -> None:
        """``rounds`` rounds of every arm of every query at ``size``, not recorded."""
        for r in range(rounds):
            for q in queries:
                for side, variant in self._arms(q, floor):
                    self.arm(q, side, variant, size, -1)
                    self.rows.pop()
            self.log(f"  (warm-up round {r + 1} of {rounds}: every arm at {size:,}, not recorded)")

    def _arms(self, q: Query, floor: bool) -> list[tuple[str, str]]:
        """``q``'s arms as ``(side, variant)``: our variants, Spark's, the floor's if asked."""
        arms = [("ours", v) for v in q.variants] + [("spark", NATIVE_DELAY)]
        if self.jvm_packing and type(q).spark is Query.spark:
            arms[len(q.variants):len(q.variants)] = [("ours", f"{v}/{JVM_PACKING}") for v in q.variants]
        if self.markers and isinstance(q, Projection):
            arms[len(q.variants):len(q.variants)] = [("ours", f"{v}/{MARKERS}") for v in q.variants]
        if floor and floor_label(q, self.settings) is not None:
            arms.append(("floor", floor_label(q, self.settings)))
        return arms

    # -- the table -------------------------------------------------------------------------------
    def table(self) -> str:
        """Per query and batch size: rows/s of each arm, ours / Spark's (medians over repeats), our
        events per CPU-second, Spark's, Flink's per core; and ours / Spark's and the floor / Spark's
        over the late half of the steady batches (:func:`late_half`)."""
        if not self.rows:
            return "(no runs)"
        df = pd.DataFrame(self.rows)
        lines = ["| query | variant | batch | ours rows/s | Spark rows/s | ours / Spark | ours ev/CPU-s | "
                 "Spark ev/CPU-s | Flink ev/core-s | floor / Spark, rows/s; ev/CPU-s | correct (ours, Spark) | "
                 "late half: ours / Spark; floor / Spark |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for (query, batch), g in df.groupby(["query", "batch_size"], sort=False):
            spark_rows, floor_rows = g[g["side"] == "spark"], g[g["side"] == "floor"]
            floor = "-"
            if len(floor_rows) and len(spark_rows):
                floor = (f"{floor_rows['rows_per_s'].median() / spark_rows['rows_per_s'].median():.2f}; "
                         f"{floor_rows['events_per_cpu_s'].median() / spark_rows['events_per_cpu_s'].median():.2f}")
            s_rate = spark_rows["rows_per_s"].median() if len(spark_rows) else None
            s_cpu = spark_rows["events_per_cpu_s"].median() if len(spark_rows) else None
            s_ok = bool(spark_rows["correct"].all()) if len(spark_rows) else None
            s_late = _median_of(spark_rows, "late_rows_per_s")
            f_late = _median_of(floor_rows, "late_rows_per_s")
            for variant, o in g[g["side"] == "ours"].groupby("variant", sort=False):
                o_rate, o_cpu = o["rows_per_s"].median(), o["events_per_cpu_s"].median()
                ratio = f"**{o_rate / s_rate:.2f}**" if s_rate else "-"
                lines.append(f"| {query} | {variant} | {batch:,} | {o_rate:,.0f} | "
                             f"{'-' if s_rate is None else f'{s_rate:,.0f}'} | {ratio} | {o_cpu:,.0f} | "
                             f"{'-' if s_cpu is None else f'{s_cpu:,.0f}'} | "
                             f"{FLINK_PER_CORE.get(query, 0):,} | {floor} | {bool(o['correct'].all())}, {s_ok} | "
                             f"{_ratio(_median_of(o, 'late_rows_per_s'), s_late)}; {_ratio(f_late, s_late)} |")
        return "\n".join(lines)

    def write_csv(self, path: str) -> None:
        self.log(f"wrote {write_rows(path, FIELDS, self.rows)}")


def _median_of(rows: pd.DataFrame, column: str) -> float | None:
    """The median of ``rows[column]`` without its missing values (None when none is left)."""
    values = rows[column].dropna()
    return float(values.median()) if len(values) else None


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def _phase_ms(progress: list[dict]) -> dict:
    """Milliseconds per steady batch (batches 1..) of each phase of Spark's ``durationMs``: where a
    micro-batch's wall time goes (``addBatch`` runs the query's tasks; the others are the driver's)."""
    steady = [p["durationMs"] for p in progress if p["batchId"] >= 1]
    return {f"ms_{phase}": round(sum(d.get(phase, 0) for d in steady) / len(steady), 1) if steady else None
            for phase in PHASES}


def session_extra(parser: argparse.ArgumentParser, conf: list[str]) -> tuple[dict[str, str], str]:
    """The harness's extra Spark settings and the native arms' connector: Spark's Kafka connector
    when it is resolved (else our source's data rows), every batch's progress kept for the timing,
    then each ``--conf KEY=VALUE`` (a malformed one is the parser's error)."""
    from bench import spark_kafka

    extra = spark_kafka.session_extra()
    connector = "kafka" if extra else "dataflow-kafka"
    if not extra:
        print(f"{spark_kafka.missing_message()}; Spark's native queries read format('dataflow-kafka') data rows")
    extra["spark.sql.streaming.numRecentProgressUpdates"] = "1000"    # every batch's progress, for the timing
    extra.update(_key_values(parser, "--conf", conf))
    return extra, connector


def _key_values(parser: argparse.ArgumentParser, flag: str, given: list[str]) -> dict[str, str]:
    """``{KEY: VALUE}`` of a repeatable ``flag KEY=VALUE`` (a malformed one is the parser's error)."""
    out = {}
    for kv in given:
        key, sep, value = kv.partition("=")
        if not sep:
            parser.error(f"{flag} {kv!r}: expected KEY=VALUE")
        out[key] = value
    return out


def offsets_read(progress: list[dict]) -> int:
    """Kafka records read by batches 1.., from their sources' start and end offsets (Spark's
    connector's ``{topic: {partition: offset}}``, or ours' ``partitions`` of ``{"o": offset}``); a
    query that scans one source twice (a self-join) counts each row twice in ``numInputRows``."""
    def offsets(o) -> dict:
        o = json.loads(o) if isinstance(o, str) else (o or {})
        parts = o.get("partitions", o) if "v" in o else o
        return {(t, p): v["o"] if isinstance(v, dict) else v for t, ps in parts.items() for p, v in ps.items()}

    n = 0
    for p in progress:
        if p["batchId"] >= 1:
            for src in p.get("sources", []):
                start, end = offsets(src.get("startOffset")), offsets(src.get("endOffset"))
                n += sum(o - start.get(tp, 0) for tp, o in end.items())
    return n


def records_read(progress: list[dict], by_offsets: bool) -> int:
    """Records read by batches 1.. of ``progress``: from the sources' offsets (:func:`offsets_read`)
    or Spark's ``numInputRows``."""
    if by_offsets:
        return offsets_read(progress)
    return sum(int(p["numInputRows"]) for p in progress if p["batchId"] >= 1)


def late_half(progress: list[dict]) -> list[dict]:
    """The second half of the steady batches (batches 1..; the later half when their count is odd):
    the JVM's JIT compiler has done most of its work for the arm's new plan by then (it compiles
    for seconds after a query starts, more after a change of batch size; docs/nexmark.md)."""
    steady = [p for p in progress if p["batchId"] >= 1]
    return steady[len(steady) // 2:]


def rate_of(progress: list[dict], by_offsets: bool) -> float | None:
    """Records per second of ``progress``' batches 1.. over the sum of their ``triggerExecution``."""
    seconds = sum(p["durationMs"]["triggerExecution"] for p in progress if p["batchId"] >= 1) / 1000
    return records_read(progress, by_offsets) / seconds if seconds > 0 else None


def _is_join(q: Query) -> bool:
    return isinstance(q, PersonAuctionJoin)


def _native_label(q: Query) -> str:
    return "sql" if isinstance(q, Projection) else f"withWatermark {NATIVE_DELAY}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.nexmark.throughput", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000, help="events generated (46 of 50 are bids)")
    p.add_argument("--batch-sizes", default="10000,50000,200000", help="maxOffsetsPerTrigger values")
    p.add_argument("--queries", default=",".join(DEFAULT_QUERIES), help="comma-separated, e.g. q5,q11")
    p.add_argument("--join-events", type=int, default=5_000_000,
                   help="events generated for the joins (Q8): their persons and auctions (4 of 50) are its input")
    p.add_argument("--repeats", type=int, default=1, help="runs of every arm per batch size")
    p.add_argument("--warmup-rounds", type=int, default=0,
                   help="rounds of every arm before measuring, not recorded (the JVM's JIT settles: jit_cpu_s)")
    p.add_argument("--warmup-batch-size", type=int, default=None, help="their batch size (default: the largest)")
    p.add_argument("--warmup-each-size", action="store_true",
                   help="the warm-up rounds before each batch size's repeats, at that size (not once, at "
                        "--warmup-batch-size)")
    p.add_argument("--delayed", type=float, default=0.1, help="share of events delayed up to 5 s")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--key-groups", type=int, default=Settings().key_groups,
                   help="key groups of our stages (results do not depend on it; each costs a call per batch)")
    p.add_argument("--top-key-groups", type=int, default=Settings().top_key_groups,
                   help="key groups of Q5's and Q7's slicer forms (more: a second operator merges their tops)")
    p.add_argument("--max-partitions", type=int, default=MAX_PARTITIONS,
                   help="our source's maxPartitions (0: one task per Kafka partition)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--floor", action="store_true", help="also the same query shape without our code: as many no-op Python stateful "
                   "operators as our form runs, on Spark's connector (windowed queries); Spark's query on the "
                   "simplest Python Kafka source (projections)")
    p.add_argument("--profile", metavar="DIR", help="py-spy flame graphs of the Python workers, ours' steady states")
    p.add_argument("--jvm-packing", action="store_true",
                   help="also our windowed forms on the loaded source (the JVM routes, a mapInArrow step packs): "
                        "variants '<form>/jvm-packing'")
    p.add_argument("--markers", action="store_true",
                   help="also the projections on our source's rows with their markers (not dataOnly): variants "
                        "'sql/markers'")
    p.add_argument("--csv", default="bench/out/nexmark_throughput.csv")
    p.add_argument("--quick", action="store_true", help="100,000 events, batches of 10k and 50k")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for the session (repeatable), e.g. to measure one setting's effect")
    p.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of our source in our arms (repeatable), e.g. to measure an option's effect")
    a = p.parse_args(argv)
    if a.quick:
        a.events, a.join_events, a.batch_sizes = min(a.events, 100_000), min(a.join_events, 500_000), "10000,50000"
    queries = [get(n) for n in a.queries.split(",") if n]
    sizes = [int(x) for x in a.batch_sizes.split(",") if x]

    from dataflow_kafka.brokers import kafka_broker
    from bench import spark_kafka
    from dataflow_kafka.datasource.session import spark_session

    extra, connector = session_extra(p, a.conf)
    with kafka_broker(workdir=tempfile.mkdtemp(prefix="nexmark-steady-broker-")) as broker:
        spark = spark_session(master="local[2]", shuffle_partitions=a.shuffle_partitions, extra=extra)
        started = dt.datetime.now()
        print(f"{started:%Y-%m-%d %H:%M}: broker {broker.kind} at {broker.bootstrap_servers}; Spark {spark.version} "
              f"local[2], {a.shuffle_partitions} shuffle partitions, our maxPartitions {a.max_partitions or '-'}; "
              f"native on format({connector!r}); "
              f"load {load1()}{'; ' + ', '.join(a.conf) if a.conf else ''}"
              f"{'; our source: ' + ', '.join(a.source_option) if a.source_option else ''}", flush=True)
        h = Harness(spark, broker.bootstrap_servers, connector, a.events, a.partitions, a.seed, a.delayed,
                    profile_dir=a.profile, log=lambda s: print(s, flush=True), max_partitions=a.max_partitions,
                    key_groups=a.key_groups, top_key_groups=a.top_key_groups, join_events=a.join_events,
                    jvm_packing=a.jvm_packing,
                    markers=a.markers, source_options=_key_values(p, "--source-option", a.source_option))
        try:
            h.run(queries, sizes, a.repeats, a.floor, warmup_rounds=a.warmup_rounds,
                  warmup_batch_size=a.warmup_batch_size, warmup_each_size=a.warmup_each_size)
        finally:
            native_note = "" if connector == "kafka" else f" (not Spark's connector: {spark_kafka.missing_message()})"
            print(f"\nsteady state (batch 0 excluded), {started:%Y-%m-%d %H:%M}-{dt.datetime.now():%H:%M}, "
                  f"load {min((r['load_before'] for r in h.rows), default=0):.1f}-"
                  f"{max((r['load_after'] for r in h.rows), default=0):.1f}; events/CPU-s = bids / {BID_SHARE} "
                  f"(a join's persons and auctions / {JOIN_SHARE}) per CPU-second of Spark's JVM, Python workers and driver; "
                  f"Spark's native queries on format({connector!r}){native_note}:\n")
            print(h.table())
            if h.rows:
                h.write_csv(a.csv)
            spark.stop()


if __name__ == "__main__":
    main()
