"""Effect of each low-latency Spark setting on the micro-batch duration of a stateful pipeline, one
setting at a time against ``spark_session()``'s defaults (the baseline), in the same run.

    python -m bench.spark_settings [--quick] [--runs 3] [--seconds 20] [--csv bench/out/spark_settings.csv]

Pipeline (``bench._stream.inverted_index``): ``format("dataflow-kafka")`` -> today's
``optimistic.spark.build_pipeline(src, inverted_index_stages(2), ...)`` (ingest, two chained
``transformWithStateInPandas`` stages with the barrier fused into the last) -> the project's sink,
on the embedded broker, 10 documents/s (exponential gaps) to a 2-partition topic, Spark's default
trigger, ``local[2]``. Every variant is a fresh query, input topic and checkpoint; its settings are
set on the session before it starts and restored after. Variants (``VARIANTS``):

* ``defaults``: the baseline, ``spark_session()`` as shipped (RocksDB changelog checkpointing on,
  ``--shuffle`` shuffle partitions, default 1 as on local masters, checkpoint under the system
  temp dir).
* one setting flipped: changelog checkpointing off (what ``low_latency=False`` gives); RocksDB's
  total row count off (``trackTotalNumberOfRows``, on by Spark's default); checkpoint file
  checksums off (``spark.sql.streaming.checkpoint.fileChecksum.enabled``, on by Spark's default);
  2 shuffle partitions instead of 1 (or 1 instead of 2 with ``--shuffle 2``); the checkpoint on
  tmpfs (``/dev/shm``).
* ``everything``: defaults + row count off + checksums off + 1 shuffle partition + tmpfs.

Per variant and run: the median ``durationMs.triggerExecution`` of the micro-batches with input rows
that started in ``--seconds`` s after the first progress event plus ``--warmup`` s, the median
``addBatch``, ``walCommit`` + ``commitOffsets``, and the median per batch of the stateful operators'
``commitTimeMs`` summed over operators. Ratio = variant / baseline of the same run (below 1: the
setting shortens the batch); the summary is the median of the per-run ratios. Variants run in
the same order within a run, reversed every other run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
ROW_COUNT = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
CHECKSUM = "spark.sql.streaming.checkpoint.fileChecksum.enabled"
SHUFFLE = "spark.sql.shuffle.partitions"
TMPFS = "/dev/shm"



def variants(shuffle: int) -> dict[str, tuple[dict[str, str], bool]]:
    """name -> (Spark settings, checkpoint on tmpfs), against a baseline of ``shuffle`` partitions."""
    other = 2 if shuffle == 1 else 1
    return {
        "defaults": ({}, False),
        "changelog checkpointing off": ({CHANGELOG: "false"}, False),
        "total row count off": ({ROW_COUNT: "false"}, False),
        "file checksums off": ({CHECKSUM: "false"}, False),
        f"{other} shuffle partition{'s' if other > 1 else ''}": ({SHUFFLE: str(other)}, False),
        "checkpoint on tmpfs": ({}, True),
        "everything": ({ROW_COUNT: "false", CHECKSUM: "false", SHUFFLE: "1"}, True),
    }


VARIANTS = variants(1)


def _commit_ms(progress: list[dict]) -> float:
    xs = [sum(op.get("commitTimeMs", 0) or 0 for op in p.get("stateOperators", [])) for p in progress]
    return statistics.median(xs) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 runs of 8 s per variant (about 15 minutes)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per variant and run (default 20)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds after the first progress event (default 6)")
    ap.add_argument("--shuffle", type=int, default=1, choices=(1, 2), help="shuffle partitions of the baseline")
    ap.add_argument("--variants", nargs="+", default=None, help="names of VARIANTS (default: all)")
    ap.add_argument("--csv", default=None, help="default bench/out/spark_settings[-quick].csv")
    args = ap.parse_args(argv)
    all_variants = variants(args.shuffle)
    args.variants = args.variants or list(all_variants)
    unknown = [v for v in args.variants if v not in all_variants]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {list(all_variants)}")
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    warmup = args.warmup if args.warmup is not None else (4.0 if args.quick else 6.0)
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" /
                              f"spark_settings{'-quick' if args.quick else ''}.csv")
    if "defaults" not in args.variants:
        args.variants.insert(0, "defaults")
    if any(all_variants[v][1] for v in args.variants) and not os.path.isdir(TMPFS):
        raise SystemExit(f"{TMPFS} is missing: drop the tmpfs variants")

    from bench import _stream
    from brokers import kafka_broker
    from datasource.session import spark_session

    rows = []
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        spark = spark_session(app_name="bench-spark-settings", shuffle_partitions=args.shuffle)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        pipeline = _stream.inverted_index(stages=2)
        print(f"broker {broker.kind}; pipeline: {pipeline.name}, {pipeline.rate:g} docs/s over 2 partitions -> "
              f"sink; local[2], {args.shuffle} shuffle partitions; {seconds:g} s measured per variant after "
              f"{warmup:g} s; {_stream.machine()}", flush=True)

        def measure(name: str, secs: float, warm: float) -> dict:
            settings, tmpfs = all_variants[name]
            before = {k: spark.conf.get(k, None) for k in settings}
            for k, v in settings.items():
                spark.conf.set(k, v)
            try:
                return _stream.run_pipeline(spark, bs, pipeline, "kafka", secs, warm,
                                            checkpoint_base=TMPFS if tmpfs else None)
            finally:
                for k, v in before.items():
                    if v is None:
                        spark.conf.unset(k)
                    else:
                        spark.conf.set(k, v)

        try:
            measure("defaults", 3, 2)   # discarded: Python workers, JIT, the first stateful query
            print(f"warm-up query done; load average {_stream.loadavg()}", flush=True)
            for run in range(1, args.runs + 1):
                order = list(args.variants) if run % 2 else list(reversed(args.variants))
                res = {}
                for v in order:
                    load = _stream.loadavg()
                    r = measure(v, seconds, warmup)
                    p = r["progress"]
                    res[v] = {"batches": len(p), "trigger": _stream.median_of(p, "triggerExecution"),
                              "addBatch": _stream.median_of(p, "addBatch"),
                              "logs": statistics.median([q["durationMs"].get("walCommit", 0) +
                                                         q["durationMs"].get("commitOffsets", 0) for q in p])
                              if p else float("nan"),
                              "op_commit": _commit_ms(p), "load": load}
                base = res["defaults"]["trigger"]
                for v in args.variants:
                    m = res[v]
                    rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "run": run, "variant": v,
                                 "settings": " ".join(f"{k}={x}" for k, x in all_variants[v][0].items())
                                 + (" checkpoint=/dev/shm" if all_variants[v][1] else ""),
                                 "batches": m["batches"], "median_trigger_ms": m["trigger"],
                                 "median_addBatch_ms": m["addBatch"], "median_wal_plus_commit_ms": m["logs"],
                                 "median_operator_commit_ms": m["op_commit"],
                                 "ratio_vs_defaults": round(m["trigger"] / base, 3), "loadavg": m["load"]})
                    print(f"run {run}  {v:28s} {m['batches']:3d} batches  trigger {m['trigger']:6.0f} ms  "
                          f"addBatch {m['addBatch']:6.0f}  wal+commit {m['logs']:5.0f}  operator commits "
                          f"{m['op_commit']:5.0f}  ratio {m['trigger'] / base:5.2f}  (load {m['load']})", flush=True)
        finally:
            spark.stop()
    print("summary: median of the per-run ratios to the defaults (below 1: faster)")
    for v in args.variants:
        ratios = [r["ratio_vs_defaults"] for r in rows if r["variant"] == v]
        trig = [r["median_trigger_ms"] for r in rows if r["variant"] == v]
        print(f"  {v:28s} ratio {statistics.median(ratios):5.2f} (runs: {' '.join(f'{x:.2f}' for x in ratios)}); "
              f"median trigger {statistics.median(trig):.0f} ms")
    print(f"load average after: {_stream.loadavg()}; wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
