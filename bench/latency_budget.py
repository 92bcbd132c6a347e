"""Where a micro-batch's time goes, per stage, for Kafka -> order-sensitive stages -> Kafka, and the
end-to-end latency it gives.

    python -m bench.latency_budget [--quick] [--runs 3] [--phase 12] [--seconds 20] [--pipeline inverted_index]
                                   [--shuffle 1] [--csv bench/out/latency_budget.csv]

The pipeline is an argument (:func:`budget` takes a :class:`bench._stream.Pipeline`; on the command
line ``--pipeline NAME`` picks one of ``PIPELINES`` or ``module:function`` returning one). The
default is today's ``optimistic.spark.build_pipeline(src, inverted_index_stages(2), ...)`` as
``bench/latency_experiment.py`` drives it: synthetic Zipf documents, 10 docs/s with exponential
gaps to a 2-partition topic, event time = send time minus 100 ms per partition, 4 key groups per
stage, optimistic mode; ``spark_session()`` defaults on ``local[2]`` with ``--shuffle`` shuffle
partitions; Spark's default trigger; embedded broker.

Part 1 runs four queries at the same time in one session, each on its own input topic fed by
its own trickle, and lets them take turns (``bench._stream.interleaved``: in each of ``--runs``
cycles one query gets ``--phase`` seconds of input while the others' inputs are paused), so the
differences between them are measured under the same background load:

* ``source -> noop``: ``format("dataflow-kafka")`` data rows into ``noop`` (the floor: Spark's
  micro-batch and our source);
* ``floor shape -> noop``: the same query shape without our stage code: the source's data rows,
  two chained ``transformWithStateInPandas`` processors that only read and write their key
  group's state once and pass the rows on, 4 key groups and a shuffle before each
  (``bench._stream.floor_shape``), into ``noop``;
* ``pipeline -> noop``: the pipeline into ``noop``;
* ``pipeline -> sink``: the pipeline into the project's sink (a subclass whose tasks also time
  their ``write``: waiting for input rows, producing, flushing; the driver's commit logs them).

Part 2 runs ``pipeline -> sink`` alone ``--runs`` times with uninterrupted input (a paused input
would hold back the punctuations that release the last records) and measures the end-to-end
latency of every record sent in its ``--seconds`` window: the time the last of its expected output
records (``Pipeline.expected``, from the sequential in-order run) is readable in the output topic
(a consumer in this process) minus the time it was sent (same clock).

Per query and cycle (or run), the medians over the micro-batches with input rows that started in
its phase (or window, after a warm-up): ``durationMs`` (queryPlanning, latestOffset, getBatch, addBatch, walCommit,
commitOffsets, triggerExecution; ``other`` = triggerExecution minus the others, per batch), and per stateful
operator (``stateOperators[]``, in plan order) allUpdatesTimeMs, allRemovalsTimeMs, commitTimeMs,
numRowsUpdated, numRowsTotal, numRowsRemoved. Operator times are summed over the operator's tasks
by Spark (with one shuffle partition, one task: wall time inside the batch).

Derived per cycle:

* ``rest of addBatch`` = addBatch - sum over operators of (allUpdates + allRemovals + commit), per
  batch, then the median: the source read, the stateless Python steps, shuffles, task scheduling
  and the sink's writes;
* ``stages`` = median addBatch(pipeline -> noop) - median addBatch(source -> noop), split into
  ``floor`` (floor shape -> noop minus source -> noop: Spark's two stateful operators) and ``our
  stage code`` (pipeline -> noop minus floor shape -> noop);
* ``sink`` = median addBatch(pipeline -> sink) - median addBatch(pipeline -> noop): the sink's
  own cost (the only difference between the two queries is where the rows go), except that a
  slower query's batches hold more rows under the default trigger (rows per batch are printed).

Printed: every cycle and run, the budget table (medians over cycles and runs), the end-to-end p50
and p99, and the ratios of the ``pipeline -> sink`` batch to the ``source -> noop`` batch.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from pathlib import Path
from typing import Callable

from bench import _stream
from dataflow_kafka.datasource import sink as _sink
from dataflow_kafka.datasource.options import parse_sink_options
from dataflow_kafka.datasource.source import DataflowKafkaDataSource

QUERIES = ("source -> noop", "floor shape -> noop", "pipeline -> noop", "pipeline -> sink")


class _TimedIterator:
    """Counts the time ``write`` spends waiting for its input (the upstream stage and the transfer
    from the JVM) and notes when the input ended."""

    def __init__(self, it) -> None:
        self.it, self.wait_s, self.ended = iter(it), 0.0, None

    def __iter__(self):
        return self

    def __next__(self):
        t = time.perf_counter()
        try:
            return next(self.it)
        except StopIteration:
            self.ended = time.perf_counter()
            raise
        finally:
            self.wait_s += time.perf_counter() - t


class _TimedWriter(_sink.DataflowKafkaStreamWriter):
    """The project's sink; each task also reports how its time split (waiting for input rows,
    producing, flushing = from the end of the input to the return), and the driver's commit appends
    the batch's tasks to ``log_path``."""

    def __init__(self, opts, schema, log_path: str) -> None:
        super().__init__(opts, schema)
        self.log_path = log_path

    def write(self, iterator):
        t0 = time.perf_counter()
        it = _TimedIterator(iterator)
        res = super().write(it)
        t1 = time.perf_counter()
        ended = it.ended or t1
        res.timing = {"records": res.records, "wall_ms": (t1 - t0) * 1000, "wait_ms": it.wait_s * 1000,
                      "produce_ms": (ended - t0 - it.wait_s) * 1000, "flush_ms": (t1 - ended) * 1000}
        return res

    def commit(self, messages, batchId: int) -> None:
        import json

        with open(self.log_path, "a") as f:
            f.write(json.dumps({"batch": batchId, "tasks": [getattr(m, "timing", None) for m in messages]}) + "\n")


class TimedSink(DataflowKafkaDataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-timed-dataflow-kafka"

    def streamWriter(self, schema, overwrite: bool):
        opts = {k: v for k, v in self.options.items() if k.lower() != "timinglog"}
        return _TimedWriter(parse_sink_options(opts), schema, self.options["timingLog"])
PIPELINES: dict[str, Callable[[], _stream.Pipeline]] = {
    "inverted_index": lambda: _stream.inverted_index(stages=2),
    "inverted_index_1": lambda: _stream.inverted_index(stages=1),
    "inverted_index_fused": lambda: _stream.inverted_index(stages=2, fused=True),
}


def _pipeline(name: str) -> _stream.Pipeline:
    if name in PIPELINES:
        return PIPELINES[name]()
    module, _, func = name.partition(":")
    if not func:
        raise SystemExit(f"--pipeline: one of {sorted(PIPELINES)} or module:function, got {name!r}")
    return getattr(importlib.import_module(module), func)()


def _sink_timing(log_path: Path, batch_ids: set[int]) -> dict:
    """Medians over the measured batches of the sink tasks' times, summed over a batch's tasks."""
    import json

    per = []
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            c = json.loads(line)
            tasks = [t for t in c["tasks"] if t]
            if c["batch"] in batch_ids and tasks:
                per.append({k: sum(t[k] for t in tasks) for k in ("records", "wall_ms", "wait_ms", "produce_ms",
                                                                  "flush_ms")} | {"tasks": len(tasks)})
    keys = ("records", "wall_ms", "wait_ms", "produce_ms", "flush_ms", "tasks")
    return {f"sink_{k}": statistics.median(b[k] for b in per) if per else float("nan") for k in keys}


def _per_batch(p: dict) -> dict:
    d = {name: p["durationMs"].get(name, 0) for name in _stream.DURATIONS}
    d["other"] = d["triggerExecution"] - sum(d[n] for n in _stream.DURATIONS if n != "triggerExecution")
    d["ops_time"] = sum((op.get("allUpdatesTimeMs") or 0) + (op.get("allRemovalsTimeMs") or 0)
                        + (op.get("commitTimeMs") or 0) for op in p.get("stateOperators", []))
    d["rest_of_addBatch"] = d["addBatch"] - d["ops_time"]
    return d


def _summary(r: dict) -> dict:
    """Medians over the measured batches; ``other`` and ``rest_of_addBatch`` are computed per batch
    first (a difference of medians is not the median of the differences)."""
    p = r["progress"]
    per = [_per_batch(x) for x in p]
    d = {k: statistics.median(b[k] for b in per) if per else float("nan")
         for k in (*_stream.DURATIONS, "other", "ops_time", "rest_of_addBatch")}
    d["operators"] = _stream.operator_medians(p)
    d["batches"] = len(p)
    d["rows_per_batch"] = statistics.mean(x["numInputRows"] for x in p) if p else float("nan")
    lat = r["latencies_ms"]
    d["p50"], d["p99"] = _stream.percentile(lat, 50), _stream.percentile(lat, 99)
    d["measured_docs"], d["incomplete"] = len(lat), r["incomplete"]
    d.update(r.get("sink_timing", {}))
    return d


def _log_run(log, label: str, s: dict, floor: float) -> None:
    log(f"{label}  {s['query']:24s} {s['batches']:3d} batches ({s['rows_per_batch']:4.1f} rows)  trigger "
        f"{s['triggerExecution']:5.0f}  plan {s['queryPlanning']:4.0f}  latestOffset {s['latestOffset']:4.0f}  "
        f"getBatch {s['getBatch']:3.0f}  addBatch {s['addBatch']:5.0f} (operators {s['ops_time']:4.0f}, rest "
        f"{s['rest_of_addBatch']:4.0f})  walCommit {s['walCommit']:4.0f}  commitOffsets {s['commitOffsets']:4.0f}  "
        f"other {s['other']:4.0f} ms  ratio to source->noop {s['triggerExecution'] / floor:4.2f}"
        + (f"  e2e p50 {s['p50']:5.0f} p99 {s['p99']:5.0f} ms ({s['measured_docs']} records, "
           f"{s['incomplete']} incomplete)" if s["measured_docs"] else ""))


def budget(spark, bootstrap: str, pipeline: _stream.Pipeline, runs: int = 3, seconds: float = 20.0,
           warmup_s: float = 6.0, phase_s: float = 12.0, checkpoint_base: str | None = None,
           log: Callable[[str], None] = print) -> list[dict]:
    """Measure ``pipeline`` (module docstring); returns one summary per cycle or run and query.

    Part 1: the three queries of ``QUERIES`` run at the same time and take turns
    (``bench._stream.interleaved``, ``runs`` cycles of ``phase_s`` seconds of input each): the
    per-stage budget and the differences between the queries, under the same load. Part 2: the
    end-to-end latency needs uninterrupted input (the punctuations that release a record come with
    later records), so ``pipeline -> sink`` also runs ``runs`` times alone, ``seconds`` measured."""
    passthrough = _stream.passthrough(pipeline.rate)
    passthrough.record, passthrough.poisson = pipeline.record, pipeline.poisson   # the same input
    passthrough.source_options = pipeline.source_options

    from bench import latency_budget as this   # by reference: Spark's Python workers import bench.latency_budget

    spark.dataSource.register(this.TimedSink)

    def timed_arm(name: str) -> tuple[_stream.Arm, Path]:
        log_path = Path(_stream.checkpoint_dir("bench-timing-")) / "sink.jsonl"
        return _stream.Arm(name, pipeline, "kafka", checkpoint_base=checkpoint_base, sink_format=TimedSink.name(),
                           sink_options={"timingLog": str(log_path)}), log_path

    sink_arm, sink_log = timed_arm("pipeline -> sink")
    floor_pipe = _stream.floor_shape(rate=pipeline.rate, record=pipeline.record, source_options=pipeline.source_options)
    arms = [_stream.Arm("source -> noop", passthrough, "noop", checkpoint_base=checkpoint_base),
            _stream.Arm("floor shape -> noop", floor_pipe, "noop", checkpoint_base=checkpoint_base),
            _stream.Arm("pipeline -> noop", pipeline, "noop", checkpoint_base=checkpoint_base), sink_arm]
    log(f"part 1: {' | '.join(QUERIES)} at the same time, taking turns ({runs} cycles of {phase_s:g} s of input each)")
    res_all = _stream.interleaved(spark, bootstrap, arms, runs, phase_s, warmup_s, log=log)
    out = []
    for c in range(1, runs + 1):
        res = {}
        for r in (r for r in res_all if r["cycle"] == c):
            extra = {"sink_timing": _sink_timing(sink_log, {p["batchId"] for p in r["progress"]})} \
                if r["arm"] == "pipeline -> sink" else {}
            res[r["arm"]] = {"query": r["arm"], **_summary({"progress": r["progress"], "latencies_ms": [],
                                                            "incomplete": 0, **extra})}
        floor = res["source -> noop"]["triggerExecution"]
        sink_ms = res["pipeline -> sink"]["addBatch"] - res["pipeline -> noop"]["addBatch"]
        stages_ms = res["pipeline -> noop"]["addBatch"] - res["source -> noop"]["addBatch"]
        spark_ops_ms = res["floor shape -> noop"]["addBatch"] - res["source -> noop"]["addBatch"]
        ours_ms = res["pipeline -> noop"]["addBatch"] - res["floor shape -> noop"]["addBatch"]
        for q in QUERIES:
            s = res[q]
            out.append({"date": time.strftime("%Y-%m-%d %H:%M"), "part": "interleaved", "run": c,
                        "pipeline": pipeline.name, **{k: v for k, v in s.items() if k != "operators"},
                        **{f"op{j}_{f}": o[f] for j, o in enumerate(s["operators"]) for f in _stream.OPERATOR_FIELDS},
                        "stages_ms": stages_ms, "sink_ms": sink_ms, "floor_ops_ms": spark_ops_ms,
                        "our_stage_code_ms": ours_ms,
                        "ratio_vs_source_noop": s["triggerExecution"] / floor, "load": _stream.loadavg()})
            _log_run(log, f"cycle {c}", s, floor)
        t = res["pipeline -> sink"]
        log(f"cycle {c}  derived: stages {stages_ms:.0f} ms (two no-op stateful operators {spark_ops_ms:.0f}, our "
            f"stage code on top {ours_ms:.0f}), sink {sink_ms:.0f} ms per batch; inside the sink's "
            f"write() per batch: {t['sink_records']:.0f} records, {t['sink_tasks']:.0f} task(s), wall "
            f"{t['sink_wall_ms']:.0f} = waiting for input {t['sink_wait_ms']:.0f} + producing "
            f"{t['sink_produce_ms']:.0f} + flush {t['sink_flush_ms']:.0f} ms")
    floor_all = statistics.median(r["triggerExecution"] for r in out if r["query"] == "source -> noop")
    log(f"part 2: pipeline -> sink alone, uninterrupted input, {runs} runs of {seconds:g} s, end-to-end latency")
    for run in range(1, runs + 1):
        load = _stream.loadavg()
        arm, log_path = timed_arm("pipeline -> sink (alone)")
        r = _stream.run_pipeline(spark, bootstrap, pipeline, "kafka", seconds, warmup_s, checkpoint_base=checkpoint_base,
                                 latency=True, sink_format=arm.sink_format, sink_options=arm.sink_options)
        r["sink_timing"] = _sink_timing(log_path, {p["batchId"] for p in r["progress"]})
        s = {"query": "pipeline -> sink (alone)", **_summary(r)}
        out.append({"date": time.strftime("%Y-%m-%d %H:%M"), "part": "alone", "run": run, "pipeline": pipeline.name,
                    **{k: v for k, v in s.items() if k != "operators"},
                    **{f"op{j}_{f}": o[f] for j, o in enumerate(s["operators"]) for f in _stream.OPERATOR_FIELDS},
                    "ratio_vs_source_noop": s["triggerExecution"] / floor_all, "load": load})
        _log_run(log, f"run {run}  ", s, floor_all)
        log(f"run {run}   e2e p50 / batch {s['p50'] / s['triggerExecution']:.2f}; e2e p50 / source->noop batch "
            f"(part 1 median) {s['p50'] / floor_all:.2f}  (load {load})")
    return out


def print_budget(rows: list[dict], log: Callable[[str], None] = print) -> None:
    """The per-stage budget of ``pipeline -> sink``, medians over runs, beside the two noop queries."""
    def med(query: str, key: str) -> float:
        xs = [r[key] for r in rows if r["query"] == query and key in r and r[key] == r[key]]
        return statistics.median(xs) if xs else float("nan")

    log("budget, ms per micro-batch (medians over runs):")
    queries = (*QUERIES, "pipeline -> sink (alone)")
    log(f"  {'':34s}" + "".join(f"{q:>26s}" for q in queries))
    for key in ("queryPlanning", "latestOffset", "getBatch", "addBatch", "walCommit", "commitOffsets", "other",
                "triggerExecution"):
        log(f"  {key:34s}" + "".join(f"{med(q, key):26.0f}" for q in queries))
    n_ops = max((int(k[2:].split("_")[0]) + 1 for r in rows for k in r if k.startswith("op") and "_" in k
                 and k[2:].split("_")[0].isdigit()), default=0)
    for j in range(n_ops):
        for f in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs", "numRowsUpdated", "numRowsTotal"):
            log(f"  {'operator %d %s' % (j + 1, f):34s}" + "".join(f"{med(q, f'op{j}_{f}'):26.0f}" for q in queries))
    log(f"  {'addBatch - operators':34s}" + "".join(f"{med(q, 'rest_of_addBatch'):26.0f}" for q in queries))
    log(f"  {'rows per batch':34s}" + "".join(f"{med(q, 'rows_per_batch'):26.1f}" for q in queries))
    log(f"  stages (pipeline->noop - source->noop addBatch) {med('pipeline -> sink', 'stages_ms'):.0f}, of which "
        f"two no-op stateful operators (floor shape->noop - source->noop) {med('pipeline -> sink', 'floor_ops_ms'):.0f} "
        f"and our stage code (pipeline->noop - floor shape->noop) {med('pipeline -> sink', 'our_stage_code_ms'):.0f}; "
        f"sink (pipeline->sink - pipeline->noop addBatch) {med('pipeline -> sink', 'sink_ms'):.0f}")
    for q in ("pipeline -> sink", "pipeline -> sink (alone)"):
        log(f"  inside the sink's write() ({q}, summed over a batch's tasks): "
            f"{med(q, 'sink_records'):.0f} records, wall {med(q, 'sink_wall_ms'):.0f} ms = waiting for input "
            f"{med(q, 'sink_wait_ms'):.0f} + producing {med(q, 'sink_produce_ms'):.0f} + flush "
            f"{med(q, 'sink_flush_ms'):.0f} ms")
    a = "pipeline -> sink (alone)"
    log(f"  end to end ({a}): p50 {med(a, 'p50'):.0f} ms, p99 {med(a, 'p99'):.0f} ms (medians of the runs' "
        f"percentiles); its batch / source->noop batch {med(a, 'ratio_vs_source_noop'):.2f}, e2e p50 / its batch "
        f"{med(a, 'p50') / med(a, 'triggerExecution'):.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 cycles of 6 s, 3 latency runs of 8 s (about 6 minutes)")
    ap.add_argument("--runs", type=int, default=3, help="cycles of part 1 and runs of part 2")
    ap.add_argument("--phase", type=float, default=None, help="part 1: seconds of input per query and cycle "
                    "(default 12)")
    ap.add_argument("--seconds", type=float, default=None, help="part 2: measured seconds per run (default 20)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds after the first progress event (default 6)")
    ap.add_argument("--pipeline", default="inverted_index", help=f"{sorted(PIPELINES)} or module:function")
    ap.add_argument("--shuffle", type=int, default=None, help="shuffle partitions (default: spark_session's)")
    ap.add_argument("--checkpoint-dir", default=None, help="parent of the checkpoints (e.g. /dev/shm)")
    ap.add_argument("--spark-conf", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--csv", default=None, help="default bench/out/latency_budget[-quick].csv")
    args = ap.parse_args(argv)
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    phase = args.phase or (6.0 if args.quick else 12.0)
    warmup = args.warmup if args.warmup is not None else (4.0 if args.quick else 6.0)
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" /
                              f"latency_budget{'-quick' if args.quick else ''}.csv")

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    with kafka_broker() as broker:
        kw = {} if args.shuffle is None else {"shuffle_partitions": args.shuffle}
        spark = spark_session(app_name="bench-latency-budget", extra=dict(kv.split("=", 1) for kv in args.spark_conf),
                              **kw)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        pipeline = _pipeline(args.pipeline)
        print(f"broker {broker.kind}; pipeline: {pipeline.name}, {pipeline.rate:g} records/s over 2 partitions; "
              f"local[2], {spark.conf.get('spark.sql.shuffle.partitions')} shuffle partitions; {seconds:g} s measured "
              f"per query; {_stream.machine()}", flush=True)
        try:
            rows = budget(spark, broker.bootstrap_servers, pipeline, args.runs, seconds, warmup, phase,
                          args.checkpoint_dir, log=lambda s: print(s, flush=True))
        finally:
            spark.stop()
    print_budget(rows)
    print(f"load average after: {_stream.loadavg()}; wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
