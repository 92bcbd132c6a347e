"""``python -m bench.nexmark.engine_cpu``: CPU seconds of the NEXMark queries' stages without Spark,
this tree against another commit of the project, alternated in one run.

What is timed is ``Query.local`` (``keygroups.Pipeline.run_local``: key-group routing, every
stage's ``process`` and state codec per key group and micro-batch, as the Spark operator runs
them, minus Spark) on the bids (a join: the persons and auctions; ``--batch`` counts those) of ``--events`` generated NEXMark events (10% delayed up to 5 s,
10,000 events per second of event time, as ``bench.nexmark.throughput``) cut into micro-batches of
``--batch`` records, CPU time of the process (``time.process_time``), the events generated before
the clock starts. Each arm runs in a child process whose ``dataflow_kafka`` is the tree's:
``--before REV`` (and ``--after REV``, by default this working tree) is extracted with ``git archive`` and imported through a package of links to its
folders (the layout of ``pyproject.toml``'s ``package-dir``); the queries' code (``bench/nexmark``)
is each arm's own tree's (the queries follow the API of their tree; with ``--state-log``, this
tree's in both arms). Arms alternate (the order swapped every other repeat); each arm's
result is checked against the brute-force reference. Prints per query and variant the best CPU
seconds of each arm and after / before, with the load average; ``--csv`` writes every run.

``--state-log hit`` / ``miss`` runs the operators with a state log per key group as the Spark
processor does (every load finding the key group's live state in the process, or none: a Spark
Python worker that ran other key groups).

Run: ``.venv/bin/python -m bench.nexmark.engine_cpu --before main --queries q5,q11 [--events 200000]
[--batch 50000] [--repeats 3] [--state-log miss]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def extract(rev: str, into: Path) -> Path:
    """The tree of ``rev`` under ``into/tree`` and an importable ``dataflow_kafka`` for it under
    ``into/pkg`` (links to the tree's folders, as ``package-dir`` maps them); returns ``into/pkg``."""
    tree, pkg = into / "tree", into / "pkg"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(tree, filter="data")
    dirs = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    (pkg / "dataflow_kafka").mkdir(parents=True)
    for name, folder in dirs.items():
        parts = name.split(".")
        if len(parts) == 1:
            for f in (tree / folder).iterdir():
                (pkg / "dataflow_kafka" / f.name).symlink_to(f)
        else:
            (pkg / "dataflow_kafka" / parts[1]).symlink_to(tree / folder)
    return pkg


def child(query: str, variant: str, events: int, batch: int, state_log: str = "none") -> dict:
    """One timed ``Query.local`` run (in this process); what the parent reads. ``state_log``
    ``hit`` / ``miss``: the operators keep their stages' append-only parts in a
    :class:`~keygroups.operator.StateLog` per key group, as on Spark, and every load finds the
    key group's live state in the process (``hit``) or none (``miss``: the process's live states
    dropped before each batch, as in a Spark Python worker that ran another task's key groups)."""
    import dataflow_kafka
    from bench.nexmark.generator import NexmarkConfig, bids, generate
    from bench.nexmark.queries import get
    from bench.nexmark.queries.q3 import PersonAuctionJoin, join_batches
    from bench.nexmark.runs import local_batches

    q = get(query)
    cfg = NexmarkConfig(events=events, seed=1, events_per_s=10_000, delayed=0.1)
    if isinstance(q, PersonAuctionJoin):        # a join reads the persons and auctions (4 in 50 events)
        ev = generate(cfg, kinds=q.kinds)
        batches, records = join_batches(ev, batch), ev
    else:
        ev = generate(cfg)
        batches, records = local_batches(ev, batch), bids(ev)
    if state_log != "none":
        batches = list(batches)
    t0 = time.process_time()
    out = q.local(variant, batches) if state_log == "none" else _run_logged(q, variant, batches, state_log == "miss")
    cpu = time.process_time() - t0
    return {"cpu_s": cpu, "correct": q.results(variant, out) == q.reference(records, variant),
            "package": str(Path(dataflow_kafka.__file__).resolve().parent)}


def _run_logged(q, variant: str, batches, miss: bool) -> list:
    """``Query.local``'s run with a state log per key group (``keygroups.frames.run_chain_local``);
    ``miss``: no live state kept between batches."""
    from dataflow_kafka.keygroups import operator
    from dataflow_kafka.keygroups.contract import KIND_DATA
    from dataflow_kafka.keygroups.frames import run_chain_local
    from dataflow_kafka.keygroups.plan import frame_types

    pipeline = q.pipeline(variant)
    specs = pipeline.chain.specs(True, None, frame_types(next(b for b in batches if (b["kind"] == KIND_DATA).any())))
    states: list[dict] = [{} for _ in specs]
    logs: list[dict] = [{} for _ in specs]
    out = []
    for b in batches:
        if miss:
            operator._CACHE.clear()
        out.append(run_chain_local(b, specs, states, logs=logs))
    return out


def run_arm(pkg: Path | None, query: str, variant: str, events: int, batch: int, state_log: str = "none") -> dict:
    env = dict(os.environ)
    # each arm's own bench code beside its package (the queries follow the API of their tree); with
    # a state log this tree's (the arms' commits must run it)
    bench = str(pkg.parent / "tree") if pkg and state_log == "none" else str(ROOT)
    env["PYTHONPATH"] = os.pathsep.join([str(pkg), bench] if pkg else [str(ROOT)])
    code = ("import json, sys; from bench.nexmark.engine_cpu import child; "
            f"print(json.dumps(child({query!r}, {variant!r}, {events}, {batch}, {state_log!r})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tempfile.gettempdir(), check=True,
                         capture_output=True, text=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="main", help="the commit to compare with (git rev)")
    p.add_argument("--after", default=None, help="a commit for the other arm (default: this working tree)")
    p.add_argument("--queries", default="q5,q11")
    p.add_argument("--variants", default="slicer,dataflow,join")
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--state-log", choices=("none", "hit", "miss"), default="none",
                   help="keep the stages' append-only parts in a state log as on Spark; every load finding "
                        "the live state (hit) or none (miss)")
    p.add_argument("--csv", default=None)
    args = p.parse_args(argv)
    from bench.nexmark.queries import get
    from bench.nexmark.stats import write_rows

    with tempfile.TemporaryDirectory(prefix="engine-cpu-") as tmp:
        before = extract(args.before, Path(tmp) / "before")
        after = extract(args.after, Path(tmp) / "after") if args.after else None
        arms = {"before": before, "after": after}
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.before], check=True,
                             capture_output=True, text=True).stdout.strip()
        print(f"before: {args.before} ({rev}); after: {args.after or 'this tree'}; {args.events} events, batches of {args.batch}; "
              f"state log: {args.state_log}; "
              f"load avg {os.getloadavg()[0]:.1f}", flush=True)
        rows = []
        for name in args.queries.split(","):
            for variant in [v for v in args.variants.split(",") if v in get(name).variants]:
                runs: dict = {a: [] for a in arms}
                for r in range(args.repeats):
                    for arm in (("before", "after") if r % 2 == 0 else ("after", "before")):
                        load = os.getloadavg()[0]
                        got = run_arm(arms[arm], name, variant, args.events, args.batch, args.state_log)
                        assert got["correct"], f"{name} {variant} {arm}: result differs from the reference"
                        runs[arm].append(got["cpu_s"])
                        rows.append({"query": name, "variant": variant, "state_log": args.state_log, "arm": arm, "repeat": r,
                                     "cpu_s": round(got["cpu_s"], 3), "load": round(load, 1),
                                     "package": got["package"]})
                b, a = min(runs["before"]), min(runs["after"])
                print(f"{name:4s} {variant:9s} before {b:6.2f} s  after {a:6.2f} s  after/before {a / b:5.2f}  "
                      f"(runs before {' '.join(f'{x:.2f}' for x in runs['before'])}; "
                      f"after {' '.join(f'{x:.2f}' for x in runs['after'])})", flush=True)
        print(f"load avg at the end {os.getloadavg()[0]:.1f}")
        if args.csv:
            print(f"wrote {write_rows(args.csv, list(rows[0]), rows)}")


if __name__ == "__main__":
    main()
