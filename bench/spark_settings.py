"""Effect of each low-latency Spark setting on the micro-batch duration of a stateful pipeline, one
setting at a time against ``spark_session()``'s defaults (the baseline), in the same run.

    python -m bench.spark_settings [--quick] [--cycles 3] [--phase 12] [--csv bench/out/spark_settings.csv]

Pipeline (``bench._stream.inverted_index``): ``format("dataflow-kafka")`` -> today's
``optimistic.spark.build_pipeline(src, inverted_index_stages(2), ...)`` (ingest, two chained
``transformWithStateInPandas`` stages with the barrier fused into the last) -> the project's sink,
on the embedded broker, 10 documents/s (exponential gaps) to a 2-partition topic, Spark's default
trigger, ``local[2]``. For each variant, two queries run at the same time in one session, the
baseline and the variant, each with its own input topic, checkpoint and trickle, and take turns
(``bench._stream.interleaved``): in each cycle one query gets ``--phase`` seconds of input while
the other's input is paused, then the other way round (the order rotates). Both are measured under
the same background load, in phases seconds apart. Settings are set on the session just before
the variant's query starts (Spark snapshots them then) and restored after. Variants
(``variants()``):

* ``defaults``: the baseline, ``spark_session()`` as shipped (RocksDB changelog checkpointing on,
  ``--shuffle`` shuffle partitions, default 1 as on local masters, checkpoint under the system
  temp dir).
* one setting flipped: changelog checkpointing off (what ``low_latency=False`` gives); RocksDB's
  total row count off (``trackTotalNumberOfRows``, on by Spark's default); checkpoint file
  checksums off (``spark.sql.streaming.checkpoint.fileChecksum.enabled``, on by Spark's default);
  2 shuffle partitions instead of 1 (or 1 instead of 2 with ``--shuffle 2``); the checkpoint on
  tmpfs (``/dev/shm``).
* ``everything``: defaults + row count off + checksums off + 1 shuffle partition + tmpfs.

``--try KEY=VALUE ...`` adds a variant per setting (and runs only those unless ``--variants``
names others); ``--fused`` runs the pipeline with its two word-keyed stages in one operator.

Per variant and cycle: the median ``durationMs.triggerExecution`` of each query's micro-batches
with input rows that started in its phase, the median ``addBatch``, ``walCommit`` +
``commitOffsets``, and the median per batch of the stateful operators' ``commitTimeMs`` summed over
operators; ratio = variant / baseline of the same cycle (below 1: the setting shortens the batch).
The summary is the median of the per-cycle ratios. Caveat: the idle query of a pair still polls
its source (Spark's default trigger), which loads the machine a little, alike in both phases.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from bench import _stream

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


def _stats(progress: list[dict]) -> dict:
    return {"batches": len(progress), "trigger": _stream.median_of(progress, "triggerExecution"),
            "addBatch": _stream.median_of(progress, "addBatch"),
            "logs": statistics.median([q["durationMs"].get("walCommit", 0) + q["durationMs"].get("commitOffsets", 0)
                                       for q in progress]) if progress else float("nan"),
            "op_commit": _commit_ms(progress)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 cycles of 8 s phases (about 8 minutes)")
    ap.add_argument("--cycles", type=int, default=None, help="alternation cycles per variant (default 3)")
    ap.add_argument("--phase", type=float, default=None, help="seconds of input per arm and cycle (default 12)")
    ap.add_argument("--warmup", type=float, default=6.0, help="seconds of warm-up (both arms fed)")
    ap.add_argument("--shuffle", type=int, default=1, choices=(1, 2), help="shuffle partitions of the baseline")
    ap.add_argument("--variants", nargs="+", default=None, help="names of VARIANTS (default: all)")
    ap.add_argument("--try", dest="extra", nargs="+", default=[], metavar="KEY=VALUE",
                    help="an extra variant per Spark setting given (and only those unless --variants)")
    ap.add_argument("--fused", action="store_true", help="the two word-keyed stages fused in one operator")
    ap.add_argument("--csv", default=None, help="default bench/out/spark_settings[-quick].csv")
    args = ap.parse_args(argv)
    all_variants = variants(args.shuffle)
    bad = [kv for kv in args.extra if "=" not in kv or not kv.split("=", 1)[0].strip()]
    if bad:
        raise SystemExit(f"--try: expected KEY=VALUE, got {bad}")
    tried = {kv: (dict([kv.split("=", 1)]), False) for kv in args.extra}
    all_variants.update(tried)
    chosen = [v for v in (args.variants or ([] if tried else list(all_variants))) if v != "defaults"] + list(tried)
    unknown = [v for v in chosen if v not in all_variants]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {list(all_variants)}")
    cycles = args.cycles or (2 if args.quick else 3)
    phase = args.phase or (8.0 if args.quick else 12.0)
    out_csv = args.csv or str(Path(__file__).resolve().parent / "out" /
                              f"spark_settings{'-quick' if args.quick else ''}.csv")
    if any(all_variants[v][1] for v in chosen) and not os.path.isdir(TMPFS):
        raise SystemExit(f"{TMPFS} is missing: drop the tmpfs variants")

    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    rows = []
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        spark = spark_session(app_name="bench-spark-settings", shuffle_partitions=args.shuffle)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        pipeline = _stream.inverted_index(stages=2, fused=args.fused)
        print(f"broker {broker.kind}; pipeline: {pipeline.name}, {pipeline.rate:g} docs/s over 2 partitions -> "
              f"sink; local[2], baseline {args.shuffle} shuffle partition(s); per variant: the baseline and the "
              f"variant run at the same time and take turns, {cycles} cycles of {phase:g} s of input each; "
              f"{_stream.machine()}", flush=True)
        try:
            for v in chosen:
                settings, tmpfs = all_variants[v]
                arms = [_stream.Arm("defaults", pipeline),
                        _stream.Arm(v, pipeline, settings=settings, checkpoint_base=TMPFS if tmpfs else None)]
                load = _stream.loadavg()
                res = _stream.interleaved(spark, bs, arms, cycles, phase, args.warmup)
                for c in range(1, cycles + 1):
                    base = _stats(next(r["progress"] for r in res if r["cycle"] == c and r["arm"] == "defaults"))
                    var = _stats(next(r["progress"] for r in res if r["cycle"] == c and r["arm"] == v))
                    ratio = var["trigger"] / base["trigger"]
                    for name, m in (("defaults", base), (v, var)):
                        rows.append({"date": time.strftime("%Y-%m-%d %H:%M"), "variant": v, "cycle": c, "arm": name,
                                     "settings": " ".join(f"{k}={x}" for k, x in all_variants[name][0].items())
                                     + (" checkpoint=/dev/shm" if all_variants[name][1] else ""),
                                     "batches": m["batches"], "median_trigger_ms": m["trigger"],
                                     "median_addBatch_ms": m["addBatch"], "median_wal_plus_commit_ms": m["logs"],
                                     "median_operator_commit_ms": m["op_commit"],
                                     "ratio_vs_defaults": round(ratio, 3), "loadavg_at_start": load})
                    print(f"{v:28s} cycle {c}: defaults {base['batches']:2d} batches {base['trigger']:5.0f} ms "
                          f"(operator commits {base['op_commit']:4.0f}) | variant {var['batches']:2d} batches "
                          f"{var['trigger']:5.0f} ms (operator commits {var['op_commit']:4.0f}) | ratio {ratio:4.2f}",
                          flush=True)
                pooled_b = _stats([p for r in res if r["arm"] == "defaults" for p in r["progress"]])
                pooled_v = _stats([p for r in res if r["arm"] == v for p in r["progress"]])
                print(f"{v:28s} all cycles: defaults {pooled_b['trigger']:.0f} ms, variant {pooled_v['trigger']:.0f} ms, "
                      f"ratio {pooled_v['trigger'] / pooled_b['trigger']:.2f} (load {load} -> {_stream.loadavg()})",
                      flush=True)
        finally:
            spark.stop()
    print("summary: median of the per-cycle ratios variant / defaults (below 1: the variant is faster)")
    for v in chosen:
        ratios = [r["ratio_vs_defaults"] for r in rows if r["variant"] == v and r["arm"] == v]
        print(f"  {v:28s} ratio {statistics.median(ratios):5.2f} (cycles: {' '.join(f'{x:.2f}' for x in ratios)})")
    print(f"load average after: {_stream.loadavg()}; wrote {_stream.write_csv(out_csv, rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
