"""Interval join: the engine's vectorised probe against the same engine probing row by row in
Python (``bisect``), on the same input. Run by hand: ``python -m tests.joins.bench_interval``."""

from __future__ import annotations

import bisect
import random
import time

import numpy as np

from dataflow_kafka.joins import LEFT, RIGHT, IntervalJoin, Joined, SidePunctuation, Row
from dataflow_kafka.joins.interval_join import IntervalJoinEngine


class RowByRow(IntervalJoinEngine):
    """The same state and freeing, matching each new row with a Python loop (the baseline)."""

    def _match(self, key, l_ts, l_vals, r_ts, r_vals):
        lower, upper = self.spec.lower_bound_ms, self.spec.upper_bound_ms
        old_l, old_r = self._state.setdefault(key, (type(self._empty())(), type(self._empty())()))
        out = []
        lt, rt = old_l.ts.tolist(), old_r.ts.tolist()
        l_m, r_m = [False] * len(l_ts), [False] * len(r_ts)
        for i, t in enumerate(l_ts.tolist()):
            for ts, vals, flags, new in ((rt, old_r.values, old_r.matched, False), (r_ts.tolist(), r_vals, r_m, True)):
                for j in range(bisect.bisect_left(ts, t + lower), bisect.bisect_right(ts, t + upper)):
                    out.append(Joined(key, (t, l_vals[i]), (ts[j], vals[j])))
                    l_m[i] = True
                    flags[j] = True
        for i, t in enumerate(r_ts.tolist()):
            for j in range(bisect.bisect_left(lt, t - upper), bisect.bisect_right(lt, t - lower)):
                out.append(Joined(key, (lt[j], old_l.values[j]), (t, r_vals[i])))
                r_m[i] = True
                old_l.matched[j] = True
        old_l.insert(l_ts, l_vals, np.asarray(l_m, bool))
        old_r.insert(r_ts, r_vals, np.asarray(r_m, bool))
        return out

    @staticmethod
    def _empty():
        from dataflow_kafka.joins.interval_join import _Buffer

        return _Buffer()


def workload(rows_per_side: int, keys: int, batch: int, seed: int = 1):
    rng = random.Random(seed)
    out, t = [], 0
    rows = []
    for i in range(rows_per_side):
        t += 1
        for side in (LEFT, RIGHT):
            rows.append(Row(side, f"k{rng.randrange(keys)}", t - rng.randrange(30), i))
    for b in range(0, len(rows), batch):
        part = rows[b:b + batch]
        wm = max(r.ts_ms for r in part) - 40
        out.append((part, [SidePunctuation(LEFT, wm), SidePunctuation(RIGHT, wm)]))
    return out


def run(cls, join, batches) -> tuple[float, int]:
    e = cls(join)
    start = time.perf_counter()
    n = sum(len(e.process(rows, puncts).rows) for rows, puncts in batches)
    return time.perf_counter() - start, n


def main() -> None:   # pragma: no cover - by hand
    join = IntervalJoin.between(-2, 2, how="full_outer")
    for rows, keys, batch in ((20_000, 20, 4_000), (20_000, 500, 4_000), (100_000, 20, 10_000)):
        batches = workload(rows, keys, batch)
        times = {}
        for name, cls in (("numpy", IntervalJoinEngine), ("row by row", RowByRow), ("numpy ", IntervalJoinEngine),
                          ("row by row ", RowByRow)):
            times.setdefault(name.strip(), []).append(run(cls, join, batches))
        (tn, n1), (tr, n2) = min(times["numpy"]), min(times["row by row"])
        assert n1 == n2
        print(f"{rows:>7} rows/side, {keys:>3} keys, batches of {batch:>6}: {n1:>7} joined rows; numpy {tn:.3f} s, "
              f"row by row {tr:.3f} s, ratio {tr / tn:.2f}")


if __name__ == "__main__":   # pragma: no cover
    main()
