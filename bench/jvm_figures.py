"""Figures of the comparison with Spark's JVM connector, drawn from the committed data:

    python -m bench.jvm_figures [--data docs/data] [--img docs/img]

* ``jvm_source_throughput.png`` from ``source_throughput-kafka*.csv`` (``bench.source_throughput``):
  rows/s per variant and repeat, ours beside Spark's connector;
* ``jvm_connector_cost.png`` from ``connector_cost*.csv`` (``bench.connector_cost``, both shapes):
  median micro-batch per query and cycle;
* ``jvm_latency.png`` from ``latency_jvm-*.csv`` (``bench/latency_experiment.py``): p50 and p99
  per variant, rate and invocation;
* ``jvm_windows.png`` from ``slicer_spark_jvm*.json`` (``bench.slicer_spark``): rows/s and state
  size against the number of windows.

A figure whose data file is missing is skipped.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
    return path


def source_throughput(data: Path, img: Path) -> None:
    import matplotlib.pyplot as plt

    files = sorted(data.glob("source_throughput-kafka*.csv"))
    if not files:
        return
    fig, axes = plt.subplots(len(files), 1, figsize=(11, 4.2 * len(files)), squeeze=False)
    for ax, path in zip(axes[:, 0], files):
        rows = _rows(path)
        variants = list(dict.fromkeys(r["variant"] for r in rows))
        reps = sorted({int(r["repeat"]) for r in rows})
        width = 0.8 / len(reps)
        colors = ["tab:brown" if v.startswith("spark") else "tab:grey" if v.startswith("floor")
                  else "tab:pink" if v.startswith("punct") else "tab:purple" for v in variants]
        for j, rep in enumerate(reps):
            by = {r["variant"]: float(r["rows_per_s"]) for r in rows if int(r["repeat"]) == rep}
            xs = [i + (j - (len(reps) - 1) / 2) * width for i in range(len(variants))]
            ax.bar(xs, [by.get(v, 0) / 1000 for v in variants], width * 0.9, color=colors)
        ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right")
        ax.set_ylabel("rows/s (thousands), a bar per repeat")
        loads = sorted({r["loadavg_start"].split()[0] for r in rows} | {r["loadavg_end"].split()[0] for r in rows},
                       key=float)
        ax.set_title(f"{path.name}: 1M records on Apache Kafka, {rows[0]['started'][:16]}, load {loads[0]}-{loads[-1]}; "
                     "purple dataflow-kafka, brown format(kafka), pink punctuate, grey floor", fontsize=9)
    _save(fig, img / "jvm_source_throughput.png")


def connector_cost(data: Path, img: Path) -> None:
    import matplotlib.pyplot as plt

    files = sorted(data.glob("connector_cost*.csv"))
    if not files:
        return
    rows_n = (len(files) + 1) // 2
    fig, axes = plt.subplots(rows_n, 2, figsize=(13, 4.4 * rows_n), squeeze=False)
    for ax in axes.flat[len(files):]:
        ax.set_visible(False)
    for ax, path in zip(axes.flat, files):
        rows = [r for r in _rows(path) if not r["arm"].startswith("ratio")]
        arms = list(dict.fromkeys(r["arm"] for r in rows))
        per = defaultdict(list)
        for r in rows:
            per[r["arm"]].append(float(r["median_trigger_ms"]))
        for i, a in enumerate(arms):
            color = ("tab:pink" if "punctuate" in a else "tab:grey" if a.startswith("floor")
                     else "tab:brown" if "spark" in a or a.startswith("kafka") else "tab:purple")
            ax.bar(i, sorted(per[a])[len(per[a]) // 2], 0.6, color=color)
            ax.plot([i] * len(per[a]), per[a], "k.", ms=5)
        ax.set_xticks(range(len(arms)), [a.replace(", ", ",\n").replace(" -> ", "\n-> ") for a in arms], fontsize=7)
        ax.set_ylabel("median micro-batch, ms (dots: cycles)")
        ax.set_title(f"{path.stem} ({rows[0]['date']}, load {rows[0]['loadavg_start'].split()[0]})", fontsize=9)
    _save(fig, img / "jvm_connector_cost.png")


def latency(data: Path, img: Path) -> None:
    import matplotlib.pyplot as plt

    files = sorted(data.glob("latency_jvm-*.csv"))
    if not files:
        return
    runs = [(f.stem, r) for f in files for r in _rows(f)]
    rates = sorted({float(r["rate"]) for _, r in runs})
    fig, axes = plt.subplots(1, len(rates), figsize=(6.5 * len(rates), 4.2), squeeze=False)
    colors = {"fused": "tab:purple", "spark-jvm": "tab:brown", "spark-py": "tab:orange", "fused-jvm": "tab:pink",
              "native": "tab:red"}
    for ax, rate in zip(axes[0], rates):
        pts = [(stem, r) for stem, r in runs if float(r["rate"]) == rate]
        for i, (stem, r) in enumerate(pts):
            c = colors.get(r["variant"], "tab:grey")
            ax.bar(i, float(r["p50_ms"]) / 1000, 0.7, color=c)
            ax.errorbar([i], [float(r["p50_ms"]) / 1000], yerr=[[0], [(float(r["p99_ms"]) - float(r["p50_ms"])) / 1000]],
                        fmt="none", ecolor="black", capsize=3, lw=1)
        ax.set_xticks(range(len(pts)), [f"{r['variant']} {stem[-1]}" for stem, r in pts], fontsize=7, rotation=45,
                      ha="right")
        ax.set_ylabel("end-to-end latency, s (bar p50, whisker p99)")
        ax.set_title(f"{rate:g} docs/s, 2 stages, 2:1; the digit: invocation (order)", fontsize=9)
    _save(fig, img / "jvm_latency.png")


def windows(data: Path, img: Path) -> None:
    import matplotlib.pyplot as plt

    files = sorted(data.glob("slicer_spark_jvm*.json"))
    if not files:
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for path, ls in zip(files, ("-", ":", "-.")):
        doc = json.loads(path.read_text())
        res = doc["results"]
        ws = [r["windows"] for r in res]
        tag = f"{doc['date'][11:]}, load {res[0]['loadavg']}"
        for side, c in (("slicer", "tab:purple"), (doc["baseline"], "tab:brown")):
            a.plot(ws, [r[f"{side}_rows_s"] for r in res], "o" + ls, color=c, label=f"{side} ({tag})")
            b.plot(ws, [r[f"{side}_state_disk_bytes"] / 1e3 for r in res], "o" + ls, color=c,
                   label=f"{side}, checkpoint ({tag})")
            b.plot(ws, [max(r[f"{side}_state_memory_bytes"], 1) / 1e3 for r in res], "x" + ls, color=c, alpha=0.6,
                   label=f"{side}, state store memory ({tag})")
    for ax, label in ((a, "rows/s"), (b, "state at the end, kB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("concurrent sliding windows")
        ax.set_ylabel(label)
        ax.legend(fontsize=6)
    a.set_title(f"{doc['records']:,} records, {doc['keys']} keys, 2026-11-27", fontsize=9)
    _save(fig, img / "jvm_windows.png")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT / "docs" / "data"))
    ap.add_argument("--img", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    data, img = Path(args.data), Path(args.img)
    img.mkdir(parents=True, exist_ok=True)
    for fn in (source_throughput, connector_cost, latency, windows):
        fn(data, img)


if __name__ == "__main__":
    main()
