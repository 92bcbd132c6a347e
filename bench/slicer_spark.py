"""Rows/s and state size of the slicing Spark operator (``slicer.spark.slice_windows``) against
Spark's native ``groupBy(key, window(...)).agg(sum)`` for 1, 10 and 100 concurrent sliding windows.

Input (the same for every side, same run): one Kafka topic (embedded broker unless
``KAFKA_BOOTSTRAP_SERVERS`` is set), ``--records`` JSON records ``{"ts", "v"}`` over 4 partitions,
``--keys`` keys, event times 1 ms apart per record with 10 % of records delayed by 0-1 s. Sides
(``--sides``): ``slicer`` reads it with ``format("dataflow-kafka")``; ``spark-jvm`` (the baseline
when Spark's JVM connector is resolved, :mod:`bench.spark_kafka`) with ``format("kafka")``, the
event time parsed from the JSON in Spark SQL: what a Spark user runs with no Python at all;
``spark`` is the same native plan on ``format("dataflow-kafka")`` (the baseline before). All use
``Trigger.AvailableNow`` and the same ``maxOffsetsPerTrigger``, on ``local[2]`` with 2 shuffle
partitions, into the ``noop`` sink; each run is timed from ``start()`` to the end of
``awaitTermination()`` (micro-batch planning, Kafka reads, state store commits and everything else
included). rows/s = input records / seconds. Also printed per side: micro-batches run, seconds of
query planning (``recentProgress``) and the state at the end (rows and memory of every stateful
operator, bytes of the checkpoint's ``state/`` folder); with ``--repeat R`` each side runs R times,
alternating, and the median run of each side is shown.

Windows: query ``i`` is a sliding window with slide ``s_i`` in 1..10 s and size ``k_i * s_i``,
``k_i`` in 2..5 (seeded); the first ``W`` queries run. Aggregation: sum of ``v``. ``--sliding
SIZE,SLIDE`` (ms) runs one sliding window of that shape instead (``--sliding 100000,1000``: 100
overlapping instances per record, which Spark's plan copies each record into: its ``Expand``), and
``--count`` counts instead of summing (issue 27's shape: ``--records 20000 --max-offsets 5000
--sliding 100000,1000 --count``, four micro-batches).

* slicer: one ``slice_windows`` query with all ``W`` windows (shared slices), 6 key groups (Spark
  puts 3 on each of the 2 shuffle partitions; 4 would put 3 on one), allowed lateness 2 s behind
  the source's punctuations.
* Spark: the ``W`` ``groupBy(key, window(event_time, size, slide)).agg(sum(v))`` aggregations
  over the parsed source, unioned into one streaming query, ``withWatermark`` 2 s, append mode.
  That is how one writes W windows natively: Spark plans one aggregation (and one read of the
  source) per window.

Both runs emit the windows the watermark closed that hold records (the slicer stage runs its
engines with ``emission="compact"``, not the engine's Scotty default with empty windows, so the
comparison with Spark's aggregation is like for like); the output row counts are printed (Spark's
append mode holds back windows its watermark has not passed at the end of the run).

Floor (on by default, ``--no-floor`` skips it): the slicer's query exactly (the same one-stage
``keygroups.Pipeline`` as ``slice_windows``: key groups, packing, the ``transformWithStateInPandas``
operator and its per-key-group framework work: unpacking, splitting rows by kind, folding
punctuations, one read and write of the key group's state) but with a stage whose ``process``
does no slicing (``NoopSlicerStage``, a ``slicer.stage.SlicerStage`` subclass: its state is empty,
it emits no rows and passes the input watermark on), run alternating with the other two at the
first window count. It is what this plan costs before any stage work; it does not depend on the
number of windows. ``floor/spark`` is the best ratio any stage in this plan could reach against
Spark's native aggregation.

Run: ``.venv/bin/python -m bench.slicer_spark [--quick] [--records N] [--keys K] [--windows 1,10,100]
[--max-offsets M] [--repeat R] [--sides slicer,spark-jvm,spark,floor] [--no-floor]``
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import tempfile
import time
from pathlib import Path

from bench._kafka import create_topics, dataflow_kafka_source, produce_json

LATENESS_MS = 2_000
PARTITIONS = 4
# Spark places key group g in shuffle partition pmod(murmur3(g), 2): with 4 key groups that is
# 3 groups on one partition and 1 on the other (one core does 3/4 of the work); 6 split 3 + 3.
KEY_GROUPS = 6


def window_specs(n: int, seed: int = 5) -> list[tuple[int, int]]:
    """``(size_ms, slide_ms)`` of ``n <= 100`` distinct sliding window queries: slide 1..10 s,
    size 2..11 slides, in a seeded random order."""
    specs = [(1_000 * s * k, 1_000 * s) for s in range(1, 11) for k in range(2, 12)]
    random.Random(seed).shuffle(specs)
    if n > len(specs):
        raise ValueError(f"at most {len(specs)} distinct window queries")
    return specs[:n]


def produce(bootstrap: str, topic: str, n: int, keys: int, seed: int = 1) -> None:
    base = int(time.time() * 1000) - n - 60_000

    def record(i, rnd):
        ts = base + i - (rnd.randint(0, 1_000) if rnd.random() < 0.1 else 0)
        return b"k%d" % rnd.randrange(keys), {"ts": ts, "v": rnd.randint(1, 100)}

    produce_json(bootstrap, topic, n, PARTITIONS, record, seed)


def _source(spark, bootstrap: str, topic: str, max_offsets: int):
    return dataflow_kafka_source(spark, bootstrap, topic, max_offsets, eventTimeField="ts")


VALUE = "get_json_object(CAST(value AS STRING), '$.v')"


def _noop_stage_class():
    from dataflow_kafka.keygroups import StageOutput
    from dataflow_kafka.slicer.stage import SlicerStage

    class NoopSlicerStage(SlicerStage):
        """The slicer stage's inputs, key and output columns, doing no slicing: what any stage in
        this plan gets for free (the operator still unpacks its rows, folds the punctuations and
        reads and writes the key group's state once). Its own state is empty; it emits no rows
        and passes the input watermark on."""

        def new_state(self):
            return None

        def dump_state(self, state) -> bytes:
            return b""

        def load_state(self, blob: bytes):
            return None

        def process(self, state, batch):
            return StageOutput(None, batch.watermark_ms)

    return NoopSlicerStage


def slicer_query(src, specs, floor: bool = False, count: bool = False):
    """The slicer's query: ``slice_windows``, or (``floor``) the same one-stage pipeline with
    :class:`NoopSlicerStage` in place of the ``SlicerStage`` it builds; ``count``: Count, not Sum."""
    from dataflow_kafka.keygroups import Pipeline
    from dataflow_kafka.windowing import Count, SlidingWindow, Sum
    from dataflow_kafka.slicer.spark import slice_windows

    windows = [SlidingWindow(s, d) for s, d in specs]
    agg = Count() if count else Sum()
    if not floor:
        return slice_windows(src, "CAST(key AS STRING)", windows, [agg], value=VALUE,
                             num_key_groups=KEY_GROUPS, allowed_lateness_ms=LATENESS_MS)
    # everything else as slice_windows passes it by default (name, store, idle timeout, packing, ...)
    d = {k: p.default for k, p in inspect.signature(slice_windows).parameters.items() if p.default is not p.empty}
    stage = _noop_stage_class()(key="CAST(key AS STRING)", value=VALUE, windows=windows, aggregations=[agg],
                                allowed_lateness_ms=LATENESS_MS, num_key_groups=KEY_GROUPS,
                                stream_order=d["stream_order"], store=d["store"],
                                output_watermark=d["output_watermark"], name=d["name"])
    return Pipeline([stage]).apply(src, idle_timeout_ms=d["idle_timeout_ms"], pack_source=d["pack_source"])


def spark_query(src, specs, jvm_source: bool = False, count: bool = False):
    """Spark's native plan: one ``groupBy(key, window(...)).agg(sum)`` per window, unioned;
    ``jvm_source``: ``src`` is ``format("kafka")`` (event time parsed from the JSON ``ts``);
    ``count``: ``count(*)`` instead of the sum."""
    from pyspark.sql import functions as F

    if jvm_source:
        src = src.withColumn("event_time", F.expr(
            "timestamp_millis(CAST(get_json_object(CAST(value AS STRING), '$.ts') AS BIGINT))"))
    else:
        src = src.where("kind = 'data'")
    parsed = (src.select(F.expr("CAST(key AS STRING)").alias("key"), "event_time",
                         F.expr(VALUE).cast("double").alias("v"))
              .withWatermark("event_time", f"{LATENESS_MS} milliseconds"))
    out = None
    for i, (size, slide) in enumerate(specs):
        agg = (parsed.groupBy("key", F.window("event_time", f"{size} milliseconds", f"{slide} milliseconds"))
               .agg(F.count("*").alias("count") if count else F.sum("v").alias("sum"))
               .select("key", F.lit(i).alias("query_id"), F.col("window.start").alias("window_start"),
                       F.col("window.end").alias("window_end"), "count" if count else "sum"))
        out = agg if out is None else out.unionByName(agg)
    return out


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
               if os.path.exists(os.path.join(d, f)))


def _state_bytes(ck: str) -> int:
    import shutil

    size = _du(os.path.join(ck, "state"))
    shutil.rmtree(ck, ignore_errors=True)
    return size


def run(df, meter=None, profile: Path | None = None) -> dict:
    """Seconds from ``start()`` to the end, input rows of the first source, output rows, micro-batches,
    seconds of query planning summed over the batches (from ``recentProgress``), and the state at
    the end: rows and memory over every stateful operator (the last batch's ``stateOperators``) and
    the bytes of the checkpoint's ``state/`` folder; with ``meter`` (a
    :class:`bench.nexmark.throughput.ProcessCpu`) the CPU seconds of Spark's JVM and its Python
    workers over the same span; ``profile``: py-spy's stacks of the Python workers over the run go
    there (:class:`bench.nexmark.profile.WorkerProfiler`; ``python -m bench.nexmark.flame DIR``)."""
    t0 = time.perf_counter()
    prof = None
    if meter is not None:
        meter.start()
        if profile is not None:
            from bench.nexmark.profile import WorkerProfiler

            prof = WorkerProfiler(meter, profile)
            prof.start()
    ck = tempfile.mkdtemp(prefix="slicer-bench-")
    q = (df.writeStream.format("noop").option("checkpointLocation", ck)
         .outputMode("append").trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.perf_counter() - t0
    if prof is not None:
        prof.stop()
    jvm_cpu, py_cpu, _ = meter.stop() if meter is not None else (0.0, 0.0, 0.0)
    if q.exception() is not None:
        raise q.exception()
    progress = q.recentProgress
    return {"s": dt, "rows_in": sum(p["sources"][0]["numInputRows"] for p in progress),
            "rows_out": sum(p["sink"].get("numOutputRows", 0) or 0 for p in progress),
            "batches": len(progress),
            "planning_s": sum(p["durationMs"].get("queryPlanning", 0) for p in progress) / 1000,
            "state_rows": sum(op.get("numRowsTotal", 0) for op in progress[-1].get("stateOperators", [])),
            "state_memory_bytes": sum(op.get("memoryUsedBytes", 0) for op in progress[-1].get("stateOperators", [])),
            "state_disk_bytes": _state_bytes(ck), "jvm_cpu_s": jvm_cpu, "python_cpu_s": py_cpu}


def _median(runs: list[dict]) -> dict:
    """The run with the median time (the lower one of the middle two)."""
    return sorted(runs, key=lambda r: r["s"])[(len(runs) - 1) // 2]


SIDES = ("slicer", "spark-jvm", "spark", "floor")
SIDE_NAMES = {"slicer": "slice_windows (our source)", "spark-jvm": "groupBy(window) on format(kafka)",
              "spark": "groupBy(window) on our source", "floor": "the slicer's plan computing nothing"}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="30k records in one micro-batch, windows 1,10 (Spark's 100-window union alone takes "
                         "minutes: ~500 s for 30k records on a loaded 2-core machine)")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--windows", default=None, help="comma-separated window counts (default 1,10,100; quick: 1,10)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each side this often, alternating; report the median run of each")
    ap.add_argument("--max-offsets", type=int, default=None, help="maxOffsetsPerTrigger (default: records/2)")
    ap.add_argument("--sides", default=None,
                    help="comma-separated, from " + ", ".join(SIDES) + " (default: slicer, spark-jvm and floor when "
                    "Spark's connector is resolved, else slicer, spark and floor); floor runs at the first window "
                    "count only")
    ap.add_argument("--no-floor", dest="floor", action="store_false", help="skip the floor side")
    ap.add_argument("--sliding", default=None, help="SIZE,SLIDE (ms): one sliding window of this shape instead of "
                    "the generated ones (--windows is then 1)")
    ap.add_argument("--count", action="store_true", help="count the records per window instead of summing v")
    ap.add_argument("--profile", metavar="DIR", default=None,
                    help="py-spy stacks of the Python workers in the last run of each side (bench.nexmark.flame DIR)")
    ap.add_argument("--json", default=None, help="write the results here (default bench/out/slicer_spark[_quick].json)")
    args = ap.parse_args(argv)
    n = args.records or (30_000 if args.quick else 200_000)
    max_offsets = args.max_offsets or (n if args.quick else max(1, n // 2))
    counts = [int(x) for x in (args.windows or ("1,10" if args.quick else "1,10,100")).split(",")]
    if args.sliding:
        counts = [1]

    from bench import spark_kafka
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    jvm = spark_kafka.connector_jars() is not None
    sides = (args.sides.split(",") if args.sides else ["slicer", "spark-jvm" if jvm else "spark", "floor"])
    sides = [x for x in sides if x != "floor" or args.floor]
    if "spark-jvm" in sides and not jvm:
        raise SystemExit(spark_kafka.missing_message())
    base = "spark-jvm" if "spark-jvm" in sides else "spark"
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        create_topics(bs, {"slicer-bench": PARTITIONS, "slicer-warmup": PARTITIONS})
        produce(bs, "slicer-warmup", 5_000, args.keys, seed=2)
        produce(bs, "slicer-bench", n, args.keys)
        spark = spark_session(shuffle_partitions=2, extra=spark_kafka.session_extra())
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        from bench.nexmark.throughput import ProcessCpu

        meter = ProcessCpu(int(spark._jvm.java.lang.ProcessHandle.current().pid()))
        specs = ([tuple(int(x) for x in args.sliding.split(","))] if args.sliding else window_specs(max(counts)))

        def query(side: str, topic: str, m: int, w: int):
            if side == "spark-jvm":
                from bench.jvm_baseline import kafka_source

                return spark_query(kafka_source(spark, bs, topic, m), specs[:w], jvm_source=True, count=args.count)
            src = _source(spark, bs, topic, m)
            return (spark_query(src, specs[:w], count=args.count) if side == "spark"
                    else slicer_query(src, specs[:w], side == "floor", count=args.count))

        for side in sides:   # warm-up (JVM, Python workers, codegen) on another topic
            run(query(side, "slicer-warmup", 5_000, 2))
        load0 = os.getloadavg()
        print(f"broker: {broker.kind}; {n} records, {args.keys} keys, {PARTITIONS} partitions, "
              f"maxOffsetsPerTrigger {max_offsets}; Spark local[2], 2 shuffle partitions; cores: {os.cpu_count()}; "
              f"load avg {load0[0]:.1f}; baseline {base}: {SIDE_NAMES[base]}"
              + (f" (Spark's connector {spark_kafka.CONNECTOR_VERSION} in pyspark {spark.version})"
                 if base == "spark-jvm" else ""), flush=True)
        results = []
        floor = None
        for w in counts:
            now = [x for x in sides if x != "floor" or floor is None]
            runs = {x: [] for x in now}
            for r in range(args.repeat):
                for x in now:
                    prof = (Path(args.profile) / f"{x}-{w}.txt" if args.profile and r == args.repeat - 1
                            and x != base else None)
                    runs[x].append(run(query(x, "slicer-bench", max_offsets, w), meter, prof))
            med = {x: _median(rs) for x, rs in runs.items()}
            assert med["slicer"]["rows_in"] >= n, f"slicer query read {med['slicer']['rows_in']} rows, expected >= {n}"
            row = {"windows": w, "records": n, "keys": args.keys, "loadavg": round(os.getloadavg()[0], 1)}
            for x, r in med.items():
                row.update({f"{x}_rows_s": n / r["s"], f"{x}_s": r["s"], f"{x}_out": r["rows_out"],
                            f"{x}_batches": r["batches"], f"{x}_planning_s": r["planning_s"],
                            f"{x}_state_rows": r["state_rows"], f"{x}_state_memory_bytes": r["state_memory_bytes"],
                            f"{x}_state_disk_bytes": r["state_disk_bytes"], f"{x}_jvm_cpu_s": r["jvm_cpu_s"],
                            f"{x}_python_cpu_s": r["python_cpu_s"],
                            f"{x}_runs_s": " ".join(f"{q['s']:.1f}" for q in runs[x])})
            row["ratio"] = med[base]["s"] / med["slicer"]["s"]
            cpu = {x: r["jvm_cpu_s"] + r["python_cpu_s"] for x, r in med.items()}
            row["cpu_ratio"] = cpu[base] / cpu["slicer"] if cpu["slicer"] else float("nan")
            if "floor" in med:
                floor = {"windows": w, "floor_rows_s": n / med["floor"]["s"],
                         "floor_over_base": med[base]["s"] / med["floor"]["s"]}
            results.append(row)
            print(f"windows {w}: slicer / {base} rows/s {row['ratio']:.2f}; CPU {base} / slicer {row['cpu_ratio']:.2f}",
                  flush=True)
            for x, r in med.items():
                print(f"  {x:10s} {n / r['s']:>10,.0f} rows/s {r['s']:7.1f} s  batches {r['batches']}  planning "
                      f"{r['planning_s']:5.1f} s  out {r['rows_out']:>9,}  state: {r['state_rows']:>9,} rows, "
                      f"{r['state_memory_bytes'] / 1e3:9,.0f} kB in memory, {r['state_disk_bytes'] / 1e3:7,.0f} kB on disk"
                      f"  CPU {r['jvm_cpu_s']:.2f} s JVM + {r['python_cpu_s']:.2f} s Python"
                      + (f"  runs {row[x + '_runs_s']}" if args.repeat > 1 else ""), flush=True)
        if floor is not None:
            print(f"floor ({floor['windows']} window runs): {floor['floor_rows_s']:,.0f} rows/s; "
                  f"floor / {base} {floor['floor_over_base']:.2f}", flush=True)
        print(f"load avg {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}")
        out = Path(args.json) if args.json else (Path(__file__).resolve().parent / "out" /
                                                 ("slicer_spark_quick.json" if args.quick else "slicer_spark.json"))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "broker": broker.kind, "baseline": base,
                                   "records": n, "keys": args.keys, "max_offsets": max_offsets, "results": results,
                                   "floor": floor, "windows": specs[:max(counts)], "count": args.count}, indent=1))
        print(f"wrote {out}")
        spark.stop()


if __name__ == "__main__":
    main()
