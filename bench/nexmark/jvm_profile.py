"""``python -m bench.nexmark.jvm_profile``: what Spark's JVM spends its CPU on during one NEXMark arm.

py-spy (:mod:`bench.nexmark.profile`) sees the Python workers; this looks at the JVM with Java
Flight Recorder, which the JDK ships. ``run`` starts a fresh process (a broker, a Spark session,
the bids of :class:`~bench.nexmark.throughput.Harness`), runs one arm once to warm up and once
under a JFR recording started and dumped with ``jcmd``, and prints both arms' rows/s and CPU.
``summary`` reads a recording: the threads Java samples fell in, the innermost Spark frame of each
sample, the child processes the JVM started (Hadoop runs ``readlink`` and ``chmod`` in one on the
local file system), and the JIT compiler's totals. JFR samples Java code only: the compiler and
garbage-collector threads show in the compiler totals and in ``top -H``, not in the samples.

``JDK_JAVA_OPTIONS`` set for ``run`` reaches the JVMs it starts, e.g. ``-XX:TieredStopAtLevel=1``
to measure C1 alone.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter

__all__ = ["samples", "process_starts", "compiler_totals", "summary", "main"]

_FRAME = re.compile(r"^\s+([\w$.<>/]+)\(.*?\)\s+line:", re.M)
_THREAD = re.compile(r'sampledThread = "([^"]*)"')
_COMMAND = re.compile(r'command = "([^" ]+)')
#: frames of Spark's task and scheduling machinery, skipped when naming where a sample's work was
_PLUMBING = re.compile(r"org\.apache\.spark\.(util|rdd\.RDD|scheduler|executor\.Executor)")


def _events(text: str, name: str) -> list[str]:
    return text.split(name + " {")[1:]


def samples(text: str) -> tuple[Counter, Counter]:
    """``({thread kind: samples}, {innermost Spark frame: samples})`` of ``jfr print --events
    jdk.ExecutionSample`` output (digits in thread names become ``N``)."""
    threads, frames = Counter(), Counter()
    for ev in _events(text, "jdk.ExecutionSample"):
        stack = _FRAME.findall(ev)
        if not stack:
            continue
        t = _THREAD.search(ev)
        threads[re.sub(r"\d+", "N", t.group(1)) if t else "?"] += 1
        spark = [f for f in stack if f.startswith("org.apache.spark") and not _PLUMBING.match(f)]
        frames[spark[0] if spark else f"(no Spark frame) {stack[-1]}"] += 1
    return threads, frames


def process_starts(text: str) -> Counter:
    """``{program: starts}`` of ``jfr print --events jdk.ProcessStart`` output."""
    return Counter(m.group(1).rsplit("/", 1)[-1] for ev in _events(text, "jdk.ProcessStart")
                   if (m := _COMMAND.search(ev)))


def compiler_totals(text: str) -> dict[str, str]:
    """The last ``jdk.CompilerStatistics`` event's fields (compiles, time spent) as printed."""
    events = _events(text, "jdk.CompilerStatistics")
    if not events:
        return {}
    return dict(re.findall(r"^\s+(\w+) = (.+)$", events[-1], re.M))


def _jfr(path: str, event: str, depth: int = 64) -> str:
    return subprocess.run(["jfr", "print", "--events", event, "--stack-depth", str(depth), path],
                          capture_output=True, text=True, check=True).stdout


def summary(path: str, top: int = 15) -> str:
    threads, frames = samples(_jfr(path, "jdk.ExecutionSample"))
    total = sum(threads.values())
    n = total or 1
    lines = [f"{path}: {total} Java samples"]
    for title, c in (("threads", threads), ("innermost Spark frame", frames)):
        lines += [f"-- {title}"] + [f"{v:6d} {100 * v / n:5.1f}% {k}" for k, v in c.most_common(top)]
    starts = process_starts(_jfr(path, "jdk.ProcessStart", 1))
    lines += [f"-- child processes: {sum(starts.values())}"] + [f"{v:6d} {k}" for k, v in starts.most_common()]
    totals = compiler_totals(_jfr(path, "jdk.CompilerStatistics", 1))
    lines += ["-- JIT: " + ", ".join(f"{k} {totals[k]}" for k in ("compileCount", "totalTimeSpent", "peakTimeSpent",
                                                                    "nmethodCodeSize") if k in totals)]
    return "\n".join(lines)


def _run(a) -> None:
    from bench.nexmark.queries import get
    from bench.nexmark.throughput import Harness, session_extra
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    extra, connector = session_extra(argparse.ArgumentParser(), a.conf)
    q = get(a.query)
    with kafka_broker(workdir=tempfile.mkdtemp(prefix="nexmark-jfr-broker-")) as broker:
        spark = spark_session(master="local[2]", shuffle_partitions=2, extra=extra)
        try:
            h = Harness(spark, broker.bootstrap_servers, connector, a.events, log=lambda s: None)
            pid = str(h.cpu.jvm_pid)
            rows = [h.arm(q, a.side, a.variant, a.batch_size, -1)]
            subprocess.run(["jcmd", pid, "JFR.start", "name=arm", "settings=profile"], check=True, capture_output=True)
            rows.append(h.arm(q, a.side, a.variant, a.batch_size, 0))
            subprocess.run(["jcmd", pid, "JFR.dump", "name=arm", f"filename={a.out}"], check=True, capture_output=True)
        finally:
            spark.stop()
    for label, r in zip(("warm-up", "recorded"), rows):
        print(f"{label}: {r['query']} {r['side']} {r['variant']} at {a.batch_size}: {r['rows_per_s']} rows/s, CPU s "
              f"JVM {r['jvm_cpu_s']} + Python {r['python_cpu_s']}, correct {r['correct']}")
    print(f"recording: {a.out}; read it with python -m bench.nexmark.jvm_profile summary {a.out}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.nexmark.jvm_profile", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one arm twice in a fresh process, the second recorded")
    r.add_argument("--query", default="q5")
    r.add_argument("--side", default="ours", choices=("ours", "spark", "floor"))
    r.add_argument("--variant", default="slicer", help="ours: the variant; ignored for spark and floor")
    r.add_argument("--batch-size", type=int, default=50_000)
    r.add_argument("--events", type=int, default=1_000_000)
    r.add_argument("--out", default="bench/out/arm.jfr")
    r.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    s = sub.add_parser("summary", help="read a recording")
    s.add_argument("path")
    s.add_argument("--top", type=int, default=15)
    a = p.parse_args(argv)
    if a.cmd == "run":
        _run(a)
    else:
        print(summary(a.path, a.top))


if __name__ == "__main__":
    main(sys.argv[1:])
