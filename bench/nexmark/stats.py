"""What the NEXMark benchmarks tally about a run, shared by ``python -m bench.nexmark``, the
joins' benchmark (:mod:`bench.nexmark.queries.q8`) and the steady-state throughput harness
(:mod:`bench.nexmark.throughput`): the machine's load average, percentiles of latencies, the
rows missing or extra against a reference (multisets), and the CSV of a run's rows."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

__all__ = ["load1", "percentile", "multiset_diff", "write_rows"]


def load1() -> float:
    """The 1-minute load average."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def percentile(xs: list[int], q: float) -> float | None:
    """The ``q`` quantile of ``xs`` (nearest rank), None when empty."""
    if not xs:
        return None
    xs = sorted(xs)
    return float(xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))])


def multiset_diff(expected: list[tuple], got: list[tuple]) -> tuple[int, int]:
    """``(missing, extra)``: rows of ``expected`` not in ``got`` and the other way round, as multisets."""
    e, g = Counter(expected), Counter(got)
    return sum((e - g).values()), sum((g - e).values())


def write_rows(path: str, fields: list[str], rows: list[dict]) -> Path:
    """``rows`` as a CSV of the columns ``fields`` (missing ones empty), folders created."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in fields})
    return p
