"""``bench.nexmark.across_runs``: the ratios of one query and batch size per harness CSV, and their
medians over runs (no Spark: rows as the harness writes them)."""

from __future__ import annotations

import csv

import pytest

from bench.nexmark.across_runs import main, run_ratios, summary


def _row(side, variant, rate, query="q11", batch_size=10_000, date="2026-12-02T08:00:00", profile="", correct="True"):
    return {"date": date, "batch_size": str(batch_size), "query": query, "side": side, "variant": variant,
            "rows_per_s": str(rate), "profile": profile, "correct": correct}


RUN = [_row("ours", "slicer", 90), _row("ours", "slicer", 110), _row("ours", "slicer", 130),   # median 110
       _row("ours", "dataflow", 95), _row("spark", "withWatermark 5 seconds", 100),
       _row("spark", "withWatermark 5 seconds", 120), _row("floor", "no-op", 125, date="2026-12-02T07:59:00"),
       _row("ours", "slicer", 999, query="q5"), _row("ours", "slicer", 999, batch_size=50_000),
       _row("ours", "dataflow", 999, profile="bench/out/prof"), _row("ours", "dataflow", 999, correct="False")]


def _csvs(folder, runs: dict) -> list[str]:
    """Each run's rows written as a harness CSV named by its key in ``folder``; their paths."""
    paths = []
    for name, rows in runs.items():
        paths.append(str(folder / name))
        with open(paths[-1], "w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return paths


def test_one_run_takes_each_arms_median_and_our_best_form():
    r = run_ratios(RUN, "q11", 10_000, "a.csv")
    assert (r.source, r.best_form, r.started) == ("a.csv", "slicer", "2026-12-02T07:59:00")
    assert r.ours_over_spark == pytest.approx(110 / 110)          # Spark's median of 100 and 120
    assert r.ours_over_floor == pytest.approx(110 / 125) and r.floor_over_spark == pytest.approx(125 / 110)


def test_a_run_without_spark_or_ours_gives_nothing_and_without_a_floor_no_floor_ratios():
    assert run_ratios([r for r in RUN if r["side"] != "spark"], "q11", 10_000) is None
    assert run_ratios(RUN, "q7", 10_000) is None
    r = run_ratios([r for r in RUN if r["side"] != "floor"], "q11", 10_000)
    assert r.ours_over_floor is None and r.floor_over_spark is None


def test_summary_over_runs_and_the_command(tmp_path, capsys):
    slow = [dict(r, rows_per_s=str(float(r["rows_per_s"]) * (0.5 if r["side"] == "ours" else 1))) for r in RUN]
    runs = [run_ratios(RUN, "q11", 10_000), run_ratios(slow, "q11", 10_000)]
    s = summary(runs)
    assert s["runs"] == 2 and s["ours_reached_spark"] == 1
    assert s["ours_over_spark_min"] == pytest.approx(0.5) and s["ours_over_spark_max"] == pytest.approx(1.0)
    main(["--query", "q11", "--batch-size", "10000", *_csvs(tmp_path, {"fast.csv": RUN, "slow.csv": slow})])
    out = capsys.readouterr().out
    assert "2 runs; ours reached Spark's in 1" in out and "ours over spark: median 0.75, 0.50-1.00" in out


def test_late_compares_the_late_half_and_skips_runs_without_it(tmp_path, capsys):
    late = [dict(r, late_rows_per_s=str(float(r["rows_per_s"]) * (2 if r["side"] == "ours" else 1))) for r in RUN]
    r = run_ratios(late, "q11", 10_000, column="late_rows_per_s")
    assert r.ours_over_spark == pytest.approx(220 / 110) and r.floor_over_spark == pytest.approx(125 / 110)
    assert run_ratios(RUN, "q11", 10_000, column="late_rows_per_s") is None      # a run from before the column
    main(["--query", "q11", "--batch-size", "10000", "--late", *_csvs(tmp_path, {"old.csv": RUN, "new.csv": late})])
    out = capsys.readouterr().out
    assert "late half" in out and "1 runs; ours reached Spark's in 1" in out and "new.csv" in out and "old.csv" not in out
