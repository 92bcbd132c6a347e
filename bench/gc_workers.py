"""``python -m bench.gc_workers DIR``: what Python's garbage collector cost each process that
ran with ``bench/gc_hook`` on its ``PYTHONPATH`` and ``DATAFLOW_GC_STATS_DIR=DIR`` (see
``bench/gc_hook/sitecustomize.py``): per process its role (Spark's Python worker, a data source
planner, the driver), its CPU seconds, and the collections with their CPU seconds per generation
and per part of the code (``source``, ``stage``, ``other``), then the share of its CPU that went to
the collector. Processes under ``--min-cpu`` CPU seconds (default 2) are left out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def summary(directory: str | Path, min_cpu_s: float = 2.0) -> list[str]:
    lines = []
    for f in sorted(Path(directory).glob("*.json")):
        d = json.loads(f.read_text())
        if d["cpu_s"] < min_cpu_s:
            continue
        role = next((a for a in d["argv"][1:] if a.startswith(("pyspark.", "--"))), d["argv"][0])
        total = sum(s for _, s in d["collections"].values())
        parts = ", ".join(f"{k} {n} in {s:.2f} s" for k, (n, s) in sorted(d["collections"].items()))
        lines.append(f"{f.stem} {role}: cpu {d['cpu_s']:.2f} s, collector {total:.2f} s "
                     f"({100 * total / d['cpu_s']:.0f}%): {parts}")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory")
    p.add_argument("--min-cpu", type=float, default=2.0)
    args = p.parse_args(argv)
    print("\n".join(summary(args.directory, args.min_cpu)))


if __name__ == "__main__":
    main()
