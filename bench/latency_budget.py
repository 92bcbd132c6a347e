"""Where a micro-batch's time goes, per stage, for Kafka -> order-sensitive stages -> Kafka, and the
end-to-end latency it gives.

    python -m bench.latency_budget [--quick] [--runs 3] [--seconds 20] [--pipeline inverted_index]
                                   [--shuffle 1] [--csv bench/out/latency_budget.csv]

The pipeline is an argument (:func:`budget` takes a :class:`bench._stream.Pipeline`; on the command
line ``--pipeline NAME`` picks one of ``PIPELINES`` or ``module:function`` returning one). The
default is today's ``optimistic.spark.build_pipeline(src, inverted_index_stages(2), ...)`` as
``bench/latency_experiment.py`` drives it: synthetic Zipf documents, 10 docs/s with exponential
gaps to a 2-partition topic, event time = send time minus 100 ms per partition, 4 key groups per
stage, optimistic mode; ``spark_session()`` defaults on ``local[2]`` with ``--shuffle`` shuffle
partitions; Spark's default trigger; embedded broker.

Each run measures three queries, each on a fresh input topic, fed from just before its start, in
the same order (reversed every other run):

* ``source -> noop``: ``format("dataflow-kafka")`` data rows into ``noop`` (the floor: Spark's
  micro-batch and our source);
* ``pipeline -> noop``: the pipeline into ``noop``;
* ``pipeline -> sink``: the pipeline into the project's sink (a subclass whose tasks also time
  their ``write``: waiting for input rows, producing, flushing; the driver's commit logs them); also
  the end-to-end latency of every
  document sent in the measured window: the time the last of its expected output records
  (``Pipeline.expected``, from the sequential in-order run) is readable in the output topic
  (a consumer in this process) minus the time it was sent (same clock).

Per query, the medians over the micro-batches with input rows that started in the measured window
(after a warm-up): ``durationMs`` (queryPlanning, latestOffset, getBatch, addBatch, walCommit,
commitOffsets, triggerExecution; ``other`` = triggerExecution minus the others, per batch), and per stateful
operator (``stateOperators[]``, in plan order) allUpdatesTimeMs, allRemovalsTimeMs, commitTimeMs,
numRowsUpdated, numRowsTotal, numRowsRemoved. Operator times are summed over the operator's tasks
by Spark (with one shuffle partition, one task: wall time inside the batch).

Derived per run:

* ``rest of addBatch`` = addBatch - sum over operators of (allUpdates + allRemovals + commit), per
  batch, then the median: the source read, the stateless Python steps, shuffles, task scheduling
  and the sink's writes;
* ``stages`` = median addBatch(pipeline -> noop) - median addBatch(source -> noop);
* ``sink`` = median addBatch(pipeline -> sink) - median addBatch(pipeline -> noop): the sink's
  own cost (the only difference between the two queries is where the rows go), except that a
  slower query's batches hold more rows under the default trigger (rows per batch are printed).

Printed: every run, the budget table (medians over runs) and the ratios of the pipeline -> sink
batch and of the end-to-end p50 to the ``source -> noop`` batch of the same run.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _stream  # noqa: E402
from datasource import sink as _sink  # noqa: E402
from datasource.options import parse_sink_options  # noqa: E402
from datasource.source import DataflowKafkaDataSource  # noqa: E402

QUERIES = ("source -> noop", "pipeline -> noop", "pipeline -> sink")


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


def budget(spark, bootstrap: str, pipeline: _stream.Pipeline, runs: int = 3, seconds: float = 20.0,
           warmup_s: float = 6.0, checkpoint_base: str | None = None, log: Callable[[str], None] = print) -> list[dict]:
    """Measure ``pipeline`` (module docstring) ``runs`` times; returns one summary per run and query."""
    passthrough = _stream.passthrough(pipeline.rate)
    passthrough.record, passthrough.poisson = pipeline.record, pipeline.poisson   # the same input
    passthrough.source_options = pipeline.source_options

    from bench import latency_budget as this   # by reference: Spark's Python workers import bench.latency_budget

    spark.dataSource.register(this.TimedSink)

    def measure(query: str, secs: float, warm: float) -> dict:
        pipe = passthrough if query == "source -> noop" else pipeline
        sink = "kafka" if query == "pipeline -> sink" else "noop"
        log_path = Path(_stream.checkpoint_dir("bench-timing-")) / "sink.jsonl"
        r = _stream.run_pipeline(spark, bootstrap, pipe, sink, secs, warm, checkpoint_base=checkpoint_base,
                                 latency=sink == "kafka", sink_format=TimedSink.name(),
                                 sink_options={"timingLog": str(log_path)})
        r["sink_timing"] = _sink_timing(log_path, {p["batchId"] for p in r["progress"]})
        return r

    for q in QUERIES:   # discarded: Python workers, JIT, first-query costs
        measure(q, 3, 2)
    log(f"warm-up queries done; load average {_stream.loadavg()}")
    out = []
    for run in range(1, runs + 1):
        res = {}
        for q in (QUERIES if run % 2 else tuple(reversed(QUERIES))):
            load = _stream.loadavg()
            res[q] = {**_summary(measure(q, seconds, warmup_s)), "load": load}
        floor = res["source -> noop"]["triggerExecution"]
        sink_ms = res["pipeline -> sink"]["addBatch"] - res["pipeline -> noop"]["addBatch"]
        stages_ms = res["pipeline -> noop"]["addBatch"] - res["source -> noop"]["addBatch"]
        for q in QUERIES:
            s = res[q]
            out.append({"date": time.strftime("%Y-%m-%d %H:%M"), "run": run, "query": q, "pipeline": pipeline.name,
                        **{k: v for k, v in s.items() if k != "operators"},
                        **{f"op{j}_{f}": o[f] for j, o in enumerate(s["operators"]) for f in _stream.OPERATOR_FIELDS},
                        "stages_ms": stages_ms, "sink_ms": sink_ms,
                        "ratio_vs_source_noop": s["triggerExecution"] / floor})
            log(f"run {run}  {q:17s} {s['batches']:3d} batches ({s['rows_per_batch']:4.1f} rows)  trigger "
                f"{s['triggerExecution']:5.0f}  plan {s['queryPlanning']:4.0f}  latestOffset {s['latestOffset']:4.0f}  "
                f"getBatch {s['getBatch']:3.0f}  addBatch {s['addBatch']:5.0f} (operators {s['ops_time']:4.0f}, rest "
                f"{s['rest_of_addBatch']:4.0f})  walCommit {s['walCommit']:4.0f}  commitOffsets {s['commitOffsets']:4.0f}  "
                f"other {s['other']:4.0f} ms  ratio {s['triggerExecution'] / floor:4.2f}"
                + (f"  e2e p50 {s['p50']:5.0f} p99 {s['p99']:5.0f} ms ({s['measured_docs']} docs, "
                   f"{s['incomplete']} incomplete)" if q == "pipeline -> sink" else "") + f"  (load {s['load']})")
        t = res["pipeline -> sink"]
        log(f"run {run}  derived: stages {stages_ms:.0f} ms, sink {sink_ms:.0f} ms per batch; e2e p50 / source->noop "
            f"batch {t['p50'] / floor:.2f}; inside the sink's write() per batch: {t['sink_records']:.0f} records, "
            f"{t['sink_tasks']:.0f} tasks, wall {t['sink_wall_ms']:.0f} = waiting for input {t['sink_wait_ms']:.0f} + "
            f"producing {t['sink_produce_ms']:.0f} + flush {t['sink_flush_ms']:.0f} ms")
    return out


def print_budget(rows: list[dict], log: Callable[[str], None] = print) -> None:
    """The per-stage budget of ``pipeline -> sink``, medians over runs, beside the two noop queries."""
    def med(query: str, key: str) -> float:
        xs = [r[key] for r in rows if r["query"] == query and key in r and r[key] == r[key]]
        return statistics.median(xs) if xs else float("nan")

    log("budget, ms per micro-batch (medians over runs):")
    log(f"  {'':34s}" + "".join(f"{q:>18s}" for q in QUERIES))
    for key in ("queryPlanning", "latestOffset", "getBatch", "addBatch", "walCommit", "commitOffsets", "other",
                "triggerExecution"):
        log(f"  {key:34s}" + "".join(f"{med(q, key):18.0f}" for q in QUERIES))
    n_ops = max((int(k[2:].split("_")[0]) + 1 for r in rows for k in r if k.startswith("op") and "_" in k
                 and k[2:].split("_")[0].isdigit()), default=0)
    for j in range(n_ops):
        for f in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs", "numRowsUpdated", "numRowsTotal"):
            log(f"  {'operator %d %s' % (j + 1, f):34s}" + "".join(f"{med(q, f'op{j}_{f}'):18.0f}" for q in QUERIES))
    log(f"  {'addBatch - operators':34s}" + "".join(f"{med(q, 'rest_of_addBatch'):18.0f}" for q in QUERIES))
    log(f"  stages (pipeline->noop - source->noop addBatch) {med('pipeline -> sink', 'stages_ms'):.0f}; "
        f"sink (pipeline->sink - pipeline->noop addBatch) {med('pipeline -> sink', 'sink_ms'):.0f}")
    log(f"  inside the sink's write() (pipeline -> sink, summed over a batch's tasks): "
        f"{med('pipeline -> sink', 'sink_records'):.0f} records, wall {med('pipeline -> sink', 'sink_wall_ms'):.0f} ms = "
        f"waiting for input {med('pipeline -> sink', 'sink_wait_ms'):.0f} + producing "
        f"{med('pipeline -> sink', 'sink_produce_ms'):.0f} + flush {med('pipeline -> sink', 'sink_flush_ms'):.0f} ms")
    log(f"  end to end (pipeline -> sink): p50 {med('pipeline -> sink', 'p50'):.0f} ms, "
        f"p99 {med('pipeline -> sink', 'p99'):.0f} ms; batch / source->noop batch "
        f"{med('pipeline -> sink', 'ratio_vs_source_noop'):.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 runs of 8 s per query (about 8 minutes)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per query and run (default 20)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds after the first progress event (default 6)")
    ap.add_argument("--pipeline", default="inverted_index", help=f"{sorted(PIPELINES)} or module:function")
    ap.add_argument("--shuffle", type=int, default=None, help="shuffle partitions (default: spark_session's)")
    ap.add_argument("--checkpoint-dir", default=None, help="parent of the checkpoints (e.g. /dev/shm)")
    ap.add_argument("--spark-conf", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--csv", default=None, help="default bench/out/latency_budget[-quick].csv")
    args = ap.parse_args(argv)
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    warmup = args.warmup if args.warmup is not None else (4.0 if args.quick else 6.0)
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" /
                              f"latency_budget{'-quick' if args.quick else ''}.csv")

    from brokers import kafka_broker
    from datasource.session import spark_session

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
            rows = budget(spark, broker.bootstrap_servers, pipeline, args.runs, seconds, warmup, args.checkpoint_dir,
                          log=lambda s: print(s, flush=True))
        finally:
            spark.stop()
    print_budget(rows)
    print(f"load average after: {_stream.loadavg()}; wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
