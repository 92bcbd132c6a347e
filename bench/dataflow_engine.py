"""Elements/s of the Dataflow engine (``watermarks.TriggerDriver``) against Spark's windowed
aggregation over the same elements.

Workload: ``N`` keyed integers with event times 10 ms apart on average (random key among 100,
so about one element per key per second), 3 s of event-time jitter, and 2 % of elements
delayed by 30 s (late data). They arrive in micro-batches of 1000; after each batch the
processing clock moves 1 s and the watermark to (max event time seen - 5 s). Trigger: early
panes every 10 s of processing time, the on-time pane, a late pane per window and micro-batch
with late elements (``AfterWatermark(early=AfterProcessingTime(10_000), late=AfterCount(1))``; one
``add`` per key and micro-batch is one bundle: each window's trigger is asked once), accumulating, 60 s
allowed lateness (so nothing is dropped), sums. Windows: fixed 60 s, sliding 60 s every 20 s,
sessions with a 2 s gap.

Engine: one driver holds all keys (as the Spark operator will per key group); timed from the
first ``add`` to the final ``advance_watermark(END_OF_TIME_MS)``. A second engine figure also
round-trips the driver state through ``to_bytes``/``from_bytes`` after every micro-batch, as a
stateful Spark processor must.

Spark: the same windows as a batch ``groupBy(key, window(...) | session_window(...)).sum`` on
``local[2]`` over a cached DataFrame of the same elements; only the aggregation + collect is
timed (best of 3 after a warm-up). Spark computes the final answer per window once; it cannot
express the early and late panes, so the engine does strictly more work. The final engine
panes are compared with Spark's sums.

Run: ``.venv/bin/python -m bench.dataflow_engine [--quick] [--n N] [--no-spark]``
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import warnings

from dataflow_kafka.watermarks import AccumulationMode, AfterCount, AfterProcessingTime, AfterWatermark, TriggerDriver
from dataflow_kafka.windowing import SessionWindow, SlidingWindow, Sum, TumblingWindow

KEYS, BATCH, LAG_MS, LATENESS_MS = 100, 1000, 5_000, 60_000
TRIGGER = AfterWatermark(early=AfterProcessingTime(10_000), late=AfterCount(1))
CASES = {
    "fixed 60s": (TumblingWindow(60_000), "window(ts, '60 seconds')"),
    "sliding 60s/20s": (SlidingWindow(60_000, 20_000), "window(ts, '60 seconds', '20 seconds')"),
    "sessions gap 2s": (SessionWindow(2_000), "session_window(ts, '2 seconds')"),
}


def workload(n: int, seed: int = 7) -> list[tuple[int, int, int]]:
    """``(key, value, event_time_ms)`` in arrival order."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        t = i * 10 + rnd.randint(0, 3_000)
        out.append((rnd.randrange(KEYS), rnd.randint(1, 9), t))
    late = [j for j in range(n) if rnd.random() < 0.02]
    for j in reversed(late):  # deliver 2 % of elements ~30 s (3000 elements) later
        e = out.pop(j)
        out.insert(min(len(out), j + 3_000), e)
    return out


def run_engine(window_fn, elements, state_bytes: bool = False) -> tuple[float, dict, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make = lambda: TriggerDriver(window_fn, TRIGGER, AccumulationMode.ACCUMULATING,  # noqa: E731
                                     allowed_lateness_ms=LATENESS_MS, combiner=Sum())
        driver = make()
    final: dict = {}
    panes = 0
    start = time.perf_counter()
    max_t = 0
    for b in range(0, len(elements), BATCH):
        out = driver.advance_processing_time((b // BATCH + 1) * 1_000)
        by_key: dict[int, list] = {}
        for key, value, t in elements[b : b + BATCH]:
            by_key.setdefault(key, []).append((value, t))
            max_t = max(max_t, t)
        for key, items in by_key.items():
            out += driver.add(items, key=key)
        out += driver.advance_watermark(max_t - LAG_MS)
        if state_bytes:
            driver = TriggerDriver.from_bytes(driver.to_bytes(), window_fn, TRIGGER, AccumulationMode.ACCUMULATING,
                                              allowed_lateness_ms=LATENESS_MS, combiner=Sum())
        panes += len(out)
        for p in out:
            final[(p.key, p.window.start_ms, p.window.end_ms)] = p.value
    out = driver.advance_watermark(END_OF_TIME_MS)
    elapsed = time.perf_counter() - start
    panes += len(out)
    for p in out:
        final[(p.key, p.window.start_ms, p.window.end_ms)] = p.value
    assert driver.dropped_late == 0 and driver.dropped_closed == 0, (driver.dropped_late, driver.dropped_closed)
    if driver.window_fn.is_merging:  # keep only the final sessions: drop windows merged into larger ones
        by_key: dict = {}
        for (k, s, e), v in final.items():
            by_key.setdefault(k, []).append((s, e, v))
        final = {}
        for k, ws in by_key.items():
            for s, e, v in ws:
                if not any(s2 <= s and e <= e2 and (s2, e2) != (s, e) for s2, e2, _ in ws):
                    final[(k, s, e)] = v
    return elapsed, final, panes


def run_spark(elements, repeats: int = 3) -> dict[str, tuple[float, dict]]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench-dataflow-engine")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import pandas as pd

    pdf = pd.DataFrame(elements, columns=["key", "value", "t"])
    df = spark.createDataFrame(pdf).selectExpr("key", "value", "timestamp_millis(t) AS ts").cache()
    df.count()
    results = {}
    for name, (_, expr) in CASES.items():
        agg = (df.selectExpr("key", "value", f"{expr} AS w").groupBy("key", "w")
               .agg({"value": "sum"}).selectExpr("key", "unix_millis(w.start) AS s", "unix_millis(w.end) AS e",
                                                 "`sum(value)` AS v"))
        agg.collect()  # warm-up
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            rows = agg.collect()
            best = min(best, time.perf_counter() - start)
        results[name] = (best, {(r.key, r.s, r.e): r.v for r in rows})
    spark.stop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 000 elements instead of 200 000")
    ap.add_argument("--n", type=int, default=None, help="number of elements")
    ap.add_argument("--no-spark", action="store_true", help="engine only")
    args = ap.parse_args()
    n = args.n or (20_000 if args.quick else 200_000)
    elements = workload(n)
    print(f"{n} elements, {KEYS} keys, micro-batches of {BATCH}, trigger {TRIGGER!r}, accumulating")
    engine = {}
    for name, (window_fn, _) in CASES.items():
        elapsed, final, panes = run_engine(window_fn, elements)
        elapsed_bytes, final_bytes, _ = run_engine(window_fn, elements, state_bytes=True)
        assert final_bytes == final
        engine[name] = (elapsed, final)
        print(f"engine  {name:<16} {n / elapsed:>10,.0f} elements/s  ({panes} panes, {len(final)} windows);"
              f" with state bytes per batch {n / elapsed_bytes:>10,.0f} elements/s")
    if args.no_spark:
        return
    spark = run_spark(elements)
    for name, (best, sums) in spark.items():
        elapsed, final = engine[name]
        same = sum(1 for k, v in sums.items() if final.get(k) == v)
        print(f"spark   {name:<16} {n / best:>10,.0f} elements/s  ({len(sums)} windows; engine finals equal on "
              f"{same}/{len(sums)})   engine/spark = {best / elapsed:.2f}")
        if same != len(sums):
            ends = {(k, e) for k, s, e in final}
            touching = sum(1 for k, s, e in final if (k, s) in ends)
            print(f"        {touching} engine sessions merely touch the next one (end == next start): Spark "
                  "merges those, Beam and this engine keep them apart")


if __name__ == "__main__":
    main()
