"""``python -m bench.nexmark.across_runs``: one query at one batch size over many runs of the
throughput harness (:mod:`bench.nexmark.throughput`), read from their CSVs; nothing is run.

Per run (one CSV): ours / Spark's rows/s for our best form (each form, Spark's arm and the floor
the median over the run's repeats), ours / the floor, and the floor / Spark's (the floor: the same
query shape with no-op Python stateful operators on Spark's connector, ``--floor``); then the
medians and ranges over the runs, and in how many runs ours reached Spark's. One run's cell
moves with the machine (docs/nexmark.md); over many runs the floor shows whether a target sits
above what any Python operator reaches on Spark, or where ours stands against it.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["RunRatios", "run_ratios", "summary"]


@dataclass(frozen=True)
class RunRatios:
    """One run's figures for one query and batch size (``floor`` None when the run had none)."""

    source: str
    started: str
    best_form: str
    ours_over_spark: float
    ours_over_floor: float | None
    floor_over_spark: float | None


def run_ratios(rows: Iterable[dict], query: str, batch_size: int, source: str = "",
               column: str = "rows_per_s") -> RunRatios | None:
    """The ratios of one run's CSV rows (the harness's columns), or None when the run has no
    arm of ours or no Spark arm for ``query`` at ``batch_size``. Arms that were wrong, or ran
    with py-spy attached (``--profile``), are left out, and so are arms without ``column`` (the
    rate compared: ``rows_per_s``, or ``late_rows_per_s``, which runs before 2026-12-02 16:30 lack)."""
    rates: dict[tuple[str, str], list[float]] = defaultdict(list)
    dates = []
    for r in rows:
        if (r["query"] != query or int(r["batch_size"]) != batch_size or r.get("correct") == "False"
                or r.get("profile") or not r.get(column)):        # py-spy attached to our workers: not comparable
            continue
        dates.append(r["date"])
        form = r["variant"] if r["side"] == "ours" else ""
        rates[(r["side"], form)].append(float(r[column]))
    medians = {k: statistics.median(v) for k, v in rates.items()}
    ours = {form: v for (side, form), v in medians.items() if side == "ours"}
    spark = medians.get(("spark", ""))
    if not ours or spark is None:
        return None
    best_form = max(ours, key=ours.get)
    floor = medians.get(("floor", ""))
    return RunRatios(source, min(dates), best_form, ours[best_form] / spark,
                     None if floor is None else ours[best_form] / floor,
                     None if floor is None else floor / spark)


def summary(runs: Sequence[RunRatios]) -> dict[str, float | int]:
    """Medians and ranges over ``runs`` (the floor's over the runs that had one), and the runs in
    which ours reached Spark's rows/s."""
    out: dict[str, float | int] = {"runs": len(runs), "ours_reached_spark": sum(r.ours_over_spark >= 1.0 for r in runs)}
    for name in ("ours_over_spark", "ours_over_floor", "floor_over_spark"):
        xs = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        if xs:
            out[f"{name}_median"], out[f"{name}_min"], out[f"{name}_max"] = statistics.median(xs), min(xs), max(xs)
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.nexmark.across_runs", description=__doc__.split("\n\n")[0])
    p.add_argument("csvs", nargs="+", help="CSVs of the throughput harness, one run each")
    p.add_argument("--query", required=True, help="e.g. q11")
    p.add_argument("--batch-size", type=int, required=True, help="e.g. 10000")
    p.add_argument("--since", default="", help="only runs started at or after this ISO time")
    p.add_argument("--late", action="store_true", help="compare the rates of the steady batches' later half "
                   "(late_rows_per_s: the JIT compiler's work for each arm mostly done); runs without it are skipped")
    args = p.parse_args(argv)
    column = "late_rows_per_s" if args.late else "rows_per_s"
    runs = []
    for path in args.csvs:
        with open(path, newline="") as f:
            r = run_ratios(csv.DictReader(f), args.query, args.batch_size, Path(path).name, column)
        if r is not None and r.started >= args.since:
            runs.append(r)
    runs.sort(key=lambda r: r.started)
    print(f"{args.query} at {args.batch_size:,} records per batch{', late half' if args.late else ''}: "
          "ours (best form) / Spark's, ours / floor, floor / Spark's")
    for r in runs:
        print(f"{r.started}  {_fmt(r.ours_over_spark)}  {_fmt(r.ours_over_floor)}  {_fmt(r.floor_over_spark)}  "
              f"{r.best_form:9s} {r.source}")
    s = summary(runs)
    print(f"{s['runs']} runs; ours reached Spark's in {s['ours_reached_spark']}")
    for name in ("ours_over_spark", "ours_over_floor", "floor_over_spark"):
        if f"{name}_median" in s:
            print(f"  {name.replace('_', ' ')}: median {s[f'{name}_median']:.2f}, "
                  f"{s[f'{name}_min']:.2f}-{s[f'{name}_max']:.2f}")


if __name__ == "__main__":
    main()
