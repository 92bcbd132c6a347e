"""``python -m bench.nexmark.task_times``: where a NEXMark micro-batch's wall time goes, stage by
stage, for this project's variants, Spark's native query and the no-op floor, in one session.

The throughput table (:mod:`bench.nexmark.throughput`) gives rows/s and CPU per arm; this gives
the shape behind them. Every arm runs as there (the same :class:`~bench.nexmark.throughput.Harness`,
Trigger.AvailableNow, ``maxOffsetsPerTrigger``); the session has Spark's UI on (loopback) so its
REST API can be read after each arm: per stage of the micro-batches (told apart by their number of
tasks and call site), the median over the steady batches' tasks (batches 2..) of the task's
duration, ``executorRunTime`` and ``executorCpuTime`` (the JVM thread's CPU: a Python step's work
is outside it, so run time minus CPU is mostly the task waiting on its Python worker or on I/O);
then, per stateful operator, the median over those batches of Spark's own timings for it
(:func:`state_operator_ms`: ``commitTimeMs``, ``allUpdatesTimeMs``, RocksDB's latencies, summed
over the operator's tasks).

Every arm runs ``--rounds`` times (default 2); the last round is reported (the first warms the
JIT and the Python workers). ``--conf KEY=VALUE`` sets a Spark setting for the session.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import statistics
import tempfile
import urllib.request

from bench.nexmark.queries import get
from bench.nexmark.query import Settings
from bench.nexmark.stats import load1

__all__ = ["stage_tasks", "main"]

UI_PORT = 4099


def _get(spark, path: str):
    url, app = spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/{path}", timeout=30) as r:
        return json.load(r)


def stage_tasks(spark, since: set[int], skip: int = 2) -> list[dict]:
    """Per kind of stage completed after the stages ``since`` (call site, task count and place in its
    job), in the order the first of each kind started: its stage count and the median task
    duration, run time and JVM CPU in ms over every task of its stages but the first ``skip``
    (batches 0 and 1), and the median over those stages of their longest task (a stage's wall time
    when its tasks run at once)."""
    stages = sorted((s for s in _get(spark, "stages") if s["stageId"] not in since and s["status"] == "COMPLETE"),
                    key=lambda s: s["stageId"])
    place = {}   # stage id -> its place among its job's stages (a micro-batch's stateful operators apart)
    for job in _get(spark, "jobs"):
        for i, sid in enumerate(sorted(job.get("stageIds", []))):
            place[sid] = i
    kinds: dict[tuple, list] = collections.OrderedDict()
    for s in stages:
        kinds.setdefault((s["name"].split(" at ")[0], s["numTasks"], place.get(s["stageId"], 0)), []).append(s)
    out = []
    for (name, n, i), group in kinds.items():
        m = collections.defaultdict(list)
        for s in group[skip:]:
            tasks = _get(spark, f"stages/{s['stageId']}/{s['attemptId']}/taskList?length=1000")
            m["longest_ms"].append(max((t.get("duration", 0) for t in tasks), default=0))
            for t in tasks:
                tm = t.get("taskMetrics", {})
                m["task_ms"].append(t.get("duration", 0))
                m["run_ms"].append(tm.get("executorRunTime", 0))
                m["jvm_cpu_ms"].append(tm.get("executorCpuTime", 0) / 1e6)
        if m:
            out.append({"stage": f"{name} x{n} (#{i + 1} of its job)", "stages": len(group),
                        **{k: round(statistics.median(v), 1) for k, v in m.items()}})
    return out


def state_operator_ms(progress: list[dict], skip: int = 2) -> list[dict]:
    """Per stateful operator of the query (in the order of Spark's progress), the median over the
    micro-batches but the first ``skip`` of what Spark reports for it that is a time in ms
    (``commitTimeMs``, ``allUpdatesTimeMs``, ... and its ``customMetrics`` ending in ``Ms`` or
    ``Latency``), plus ``numRowsUpdated``: summed over the operator's tasks by Spark."""
    per_op: dict[int, dict[str, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for p in progress[skip:]:
        for i, op in enumerate(p.get("stateOperators", [])):
            metrics = {k: v for k, v in op.items() if k.endswith("TimeMs") or k == "numRowsUpdated"}
            metrics.update({k: v for k, v in (op.get("customMetrics") or {}).items()
                            if k.endswith("Ms") or k.endswith("Latency")})
            for k, v in metrics.items():
                per_op[i][k].append(v)
    return [{k: statistics.median(v) for k, v in per_op[i].items()} for i in sorted(per_op)]


def main(argv=None) -> None:
    from bench.nexmark.throughput import MAX_PARTITIONS, NATIVE_DELAY, Harness, floor_label, session_extra
    p = argparse.ArgumentParser(prog="python -m bench.nexmark.task_times", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--batch-size", type=int, default=10_000)
    p.add_argument("--query", default="q5")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--key-groups", type=int, default=Settings().key_groups, help="key groups of our stages")
    p.add_argument("--top-key-groups", type=int, default=Settings().top_key_groups,
                   help="key groups of Q5's and Q7's slicer forms (more: a second operator merges their tops)")
    p.add_argument("--max-partitions", type=int, default=MAX_PARTITIONS, help="our source's maxPartitions (0: one task per "
                   "Kafka partition)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    q = get(a.query)
    ui = ["spark.ui.enabled=true", f"spark.ui.port={UI_PORT}", "spark.ui.retainedStages=100000",
          "spark.ui.retainedTasks=1000000"]
    extra, connector = session_extra(p, ui + a.conf)
    arms = [("ours", v) for v in q.variants] + [("spark", NATIVE_DELAY)]
    settings = Settings(key_groups=a.key_groups, top_key_groups=a.top_key_groups)
    if floor_label(q, settings) is not None:
        arms.append(("floor", floor_label(q, settings)))
    with kafka_broker(workdir=tempfile.mkdtemp(prefix="nexmark-tasks-broker-")) as broker:
        spark = spark_session(master="local[2]", shuffle_partitions=a.shuffle_partitions, extra=extra)
        started = dt.datetime.now()
        h = Harness(spark, broker.bootstrap_servers, connector, a.events, a.partitions, log=lambda s: None,
                    max_partitions=a.max_partitions, key_groups=a.key_groups, top_key_groups=a.top_key_groups)
        print(f"{started:%Y-%m-%d %H:%M}: {a.query}, {a.events} events, batches of {a.batch_size}, "
              f"{a.shuffle_partitions} shuffle partitions, our maxPartitions {a.max_partitions or '-'}, "
              f"our key groups {a.key_groups} (Q5's and Q7's slicer forms {a.top_key_groups}), "
              f"native on format({connector!r}), load {load1()}"
              f"{'; ' + ', '.join(a.conf) if a.conf else ''}", flush=True)
        try:
            for r in range(a.rounds):
                for side, variant in arms:
                    since = {s["stageId"] for s in _get(spark, "stages")}
                    row = h.arm(q, side, variant, a.batch_size, r)
                    if r < a.rounds - 1:
                        continue
                    print(f"\n{side} {row['variant']}: {row['batches']} batches, median per steady batch: addBatch "
                          f"{row['ms_addBatch']} ms, rows/s {row['rows_per_s']}, correct {row['correct']}, "
                          f"load {row['load_after']}")
                    print("| stage (call site x tasks) | stages | task ms | longest task ms | run ms | JVM CPU ms |")
                    print("| --- | --- | --- | --- | --- | --- |")
                    for s in stage_tasks(spark, since):
                        print(f"| {s['stage']} | {s['stages']} | {s['task_ms']:.0f} | {s['longest_ms']:.0f} | "
                              f"{s['run_ms']:.0f} | {s['jvm_cpu_ms']:.0f} |", flush=True)
                    for i, m in enumerate(state_operator_ms(h.last_progress)):
                        print(f"state operator {i + 1}: " + ", ".join(f"{k} {v:g}" for k, v in m.items()), flush=True)
        finally:
            print(f"\n{started:%H:%M}-{dt.datetime.now():%H:%M}, load {load1()}")
            spark.stop()


if __name__ == "__main__":
    main()
