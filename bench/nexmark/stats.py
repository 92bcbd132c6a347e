"""What the NEXMark benchmarks tally about a run, shared by ``python -m bench.nexmark``, the
joins' benchmark (:mod:`bench.nexmark.queries.q8`) and the steady-state throughput harness
(:mod:`bench.nexmark.throughput`): the machine's load average, percentiles of latencies, and
the rows missing or extra against a reference (multisets)."""

from __future__ import annotations

from collections import Counter

__all__ = ["load1", "percentile", "multiset_diff"]


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
