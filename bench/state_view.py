"""What describing a slicer stage's state costs (``keygroups.state_view.local_state``) against running
the micro-batches that built it (``Pipeline.run_local``, the baseline, same run), as keys grow.

Workload: one key group, ``--batches`` micro-batches of ``--records`` records (random keys among
``--keys``, event times up to 1.5 s out of order), a watermark per batch, a 10 s sliding window
sliding by 100 ms (100 instances per record) and a 1 s tumbling window, Sum and Count, allowed
lateness 1 s. Timed: the local run of every batch (baseline); the description of the final state
(every open window and slice: rows in ``StateView.rows``, typed fields); the ``detail`` text of
every row (made only when ``items`` is read). Printed: seconds, rows, and description / run.

Run: ``.venv/bin/python -m bench.state_view [--keys 1000,10000] [--records 20000] [--batches 5]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def frames(keys: int, n_batches: int, records: int, seed: int = 1) -> list[pd.DataFrame]:
    from dataflow_kafka.keygroups.contract import control_frame

    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        data = pd.DataFrame({"kind": "data", "topic": "t", "partition": 0,
                             "offset": np.arange(records) + b * records,
                             "key": [f"k{i}" for i in rng.integers(0, keys, records)],
                             "slicer_value": rng.random(records),
                             "event_time_ms": b * 2_000 + rng.integers(-1_500, 500, records), "processing_time_ms": b})
        marks = control_frame([{"kind": "punctuation", "topic": "t", "partition": 0, "offset": (b + 1) * records,
                                "punctuation_ms": b * 2_000, "processing_time_ms": b}])
        out.append(pd.concat([data, marks], ignore_index=True))
    return out


def main() -> None:
    from dataflow_kafka.keygroups import Pipeline
    from dataflow_kafka.keygroups.state_view import local_state
    from dataflow_kafka.slicer.stage import SlicerStage
    from dataflow_kafka.windowing import Count, SlidingWindow, Sum, TumblingWindow

    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", default="1000,10000")
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; {args.batches} batches x {args.records} records")
    for keys in (int(k) for k in args.keys.split(",")):
        stage = SlicerStage(key="key", value="slicer_value", windows={"long": SlidingWindow(10_000, 100),
                                                                       "t": TumblingWindow(1_000)},
                            aggregations=[Sum(), Count()], allowed_lateness_ms=1_000, num_key_groups=1, name="w")
        batches = frames(keys, args.batches, args.records)
        states: dict = {}
        t0 = time.perf_counter()
        Pipeline([stage]).run_local(batches, states=states)
        t1 = time.perf_counter()
        view = local_state(Pipeline([stage]), states)
        t2 = time.perf_counter()
        _ = view.items
        t3 = time.perf_counter()
        counts = view.rows.groupby("item").size().to_dict()
        print(f"{keys:>6} keys: run {t1 - t0:.2f} s (baseline), describe {t2 - t1:.2f} s "
              f"({t2 - t1:.2f}/{t1 - t0:.2f} = {(t2 - t1) / (t1 - t0):.2f}), detail text of every row "
              f"{t3 - t2:.2f} s; rows {counts}")


if __name__ == "__main__":
    main()
