"""Records/s of the slicer stage's work per key group as the number of keys grows: one
``SlicingWindowOperator`` per key (the baseline, same run) against one ``KeyedSlicingOperator``
for all keys of the group (``slicer.keyed``).

What is timed is ``slicer.stage.SlicerStage.process`` plus ``SlicerStage.dump_state`` for
micro-batches of one key group, given as ``keygroups.StageInput`` (the work the stage does in
``keygroups.operator.run_key_group`` after Spark hands the ``transformWithStateInPandas`` call
the rows; the live state is carried to the next batch, as the operator's state cache does), one
core, no Spark: ``--records`` records per batch (default 20,000), event times 1 ms apart with 10 %
delayed by up to 1 s, sliding windows as in ``bench/slicer_spark.py``, Sum, allowed lateness 2 s,
a watermark per batch that trails the newest record by 1 s; ``--windows session`` runs one
session window (gap 10 s, NEXMark Q11's) with Count instead, the keyed layout then being
``slicer.keyed_sessions.KeyedSessionOperator``. Two warm-up batches, then
``--batches`` timed ones (default 5). The layout is the stage's ``keyed`` attribute (set from
the tables' ``supports``; the baseline sets it to False). Output rows (window rows and
dropped-record reports) are checked equal between the two layouts; "rows out" counts both. Both
layouts emit windows with records only (the stage's ``emission="compact"``, set in
``SlicerStage``; the keyed table knows no other), so the baseline is like for like.
Last, the keyed state's size (bytes per key and window) at 1k, 10k and 100k records per second
of event time, for the last window count: flat, as it stores slices, not records.

Run: ``.venv/bin/python -m bench.slicer_keys [--quick] [--keys 10,100,1000,10000] [--windows 1,20,session]``
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pandas as pd

from bench.slicer_spark import LATENESS_MS, window_specs


def batches(n_batches: int, records: int, keys: int, seed: int = 3, rate: int = 1_000):
    """Key-group micro-batches as ``keygroups.StageInput`` objects (data rows in offset order);
    ``rate`` records per second of event time."""
    from dataflow_kafka.keygroups import StageInput

    rnd = np.random.default_rng(seed)
    base = 1_700_000_000_000
    wm = None
    for b in range(n_batches):
        i = np.arange(b * records, (b + 1) * records)
        ts = base + i * 1_000 // rate - np.where(rnd.random(records) < 0.1, rnd.integers(0, 1_000, records), 0)
        data = pd.DataFrame({
            "key": np.array([f"k{k}" for k in rnd.integers(0, keys, records)], dtype=object),
            "slicer_value": rnd.integers(1, 100, records).astype(np.float64),
            "event_time_ms": pd.array(ts, dtype="Int64"),
        })
        prev, wm = wm, int(base + (b + 1) * records * 1_000 // rate - 1_000)
        yield StageInput(0, data, [], wm, prev, None)


def run(stage, batch_list, warmup: int = 2):
    """Seconds for the timed batches (``process`` + ``dump_state``) and the output: window rows
    as a sorted frame, dropped-record reports as a sorted list of ``(key, reason, count)``."""
    state, spent, frames, drops = stage.new_state(), 0.0, [], []
    for j, batch in enumerate(batch_list):
        t0 = time.perf_counter()
        out = stage.process(state, batch)
        stage.dump_state(state)
        dt = time.perf_counter() - t0
        if j >= warmup:
            spent += dt
        if out.data is not None and len(out.data):
            frames.append(out.data)
        drops += [(d.key, d.reason, d.count) for d in out.dropped if d.count]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(rows):
        rows = rows.sort_values(["key", "query_id", "window_start_ms", "window_end_ms", "update", "is_retraction"],
                                kind="stable").reset_index(drop=True)
    return spent, rows, sorted(drops)


SESSION_GAP_MS = 10_000


def _stage(specs, keyed: bool | None = None):
    """The slicer stage of this benchmark; ``keyed=False``: one engine per key (the baseline);
    ``specs="session"``: one session window with Count."""
    from dataflow_kafka.windowing import Count, SessionWindow, SlidingWindow, Sum
    from dataflow_kafka.slicer.stage import SlicerStage

    if specs == "session":
        windows, aggs = [SessionWindow(SESSION_GAP_MS)], [Count()]
    else:
        windows, aggs = [SlidingWindow(size, slide) for size, slide in specs], [Sum()]
    stage = SlicerStage(key="key", value="slicer_value", windows=windows,
                        aggregations=aggs, allowed_lateness_ms=LATENESS_MS, num_key_groups=1, name="slicer")
    if keyed is not None:
        stage.keyed = keyed
    return stage


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="keys 100,1000; 3 timed batches")
    ap.add_argument("--keys", default=None, help="comma-separated keys per key group (default 10,100,1000,10000)")
    ap.add_argument("--windows", default="1,20", help="comma-separated window counts")
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--batches", type=int, default=None)
    args = ap.parse_args(argv)
    key_counts = [int(k) for k in (args.keys or ("100,1000" if args.quick else "10,100,1000,10000")).split(",")]
    timed = args.batches or (3 if args.quick else 5)
    print(f"{args.records} records per batch, {timed} timed batches after 2 warm-up; one key group, one core; "
          f"load avg {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'windows':>7} {'keys':>6} {'per-key rec/s':>14} {'keyed rec/s':>12} {'ratio':>7} {'rows out':>9}", flush=True)
    specs = []
    for w in args.windows.split(","):
        specs = "session" if w == "session" else window_specs(int(w))
        for keys in key_counts:
            data = list(batches(timed + 2, args.records, keys))
            per_key = _stage(specs, keyed=False)           # the baseline: one engine per key
            keyed = _stage(specs)
            assert keyed.keyed
            t_base, rows_base, drops_base = run(per_key, data)
            t_keyed, rows_keyed, drops_keyed = run(keyed, data)
            pd.testing.assert_frame_equal(rows_keyed, rows_base, check_exact=False, rtol=1e-9)
            assert drops_keyed == drops_base, "dropped-record reports differ between the layouts"
            n = timed * args.records
            print(f"{w:>7} {keys:>6} {n / t_base:>14,.0f} {n / t_keyed:>12,.0f} {t_base / t_keyed:>7.1f} "
                  f"{len(rows_base) + len(drops_base):>9,}", flush=True)
    if specs != "session":
        memory(specs)


def memory(specs, keys: int = 100, seconds: int = 20) -> None:
    """Keyed state size as the record rate grows: it holds (key, slice) partials, not records."""
    n_windows = len(specs)
    print(f"\nkeyed state, {keys} keys, {n_windows} windows, Sum, after {seconds} s of event time")
    print(f"{'rate rec/s':>11} {'records':>9} {'state bytes':>12} {'table rows':>11} {'bytes/(key, window)':>20}")
    for rate in (1_000, 10_000, 100_000):
        per_batch = rate // 2
        stage = _stage(specs)
        assert stage.keyed
        state = stage.new_state()
        for batch in batches(2 * seconds, per_batch, keys, rate=rate):
            stage.process(state, batch)
        size = len(stage.dump_state(state))
        print(f"{rate:>11,} {2 * seconds * per_batch:>9,} {size:>12,} {state.kc.size:>11,} "
              f"{size / (keys * n_windows):>20,.1f}", flush=True)


if __name__ == "__main__":
    main()
