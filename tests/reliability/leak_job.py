"""A driver that runs a dataflow-kafka query (source with range stats -> dataflow-kafka sink) on
its own embedded broker, stops the query and the session, then stops the broker, and prints
(as one JSON line) what of ours still runs: run as a separate process by test_leaks.py."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path



def _cpu_s(pgid: int) -> float:
    """CPU seconds used so far by the live processes of process group ``pgid``."""
    from dataflow_kafka.brokers.launcher import proc_stats

    ticks = sum(int(f[11]) + int(f[12]) for _, f in proc_stats() if int(f[2]) == pgid)
    return ticks / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[str]:
    """Command lines of the live descendants of ``pid``."""
    from dataflow_kafka.brokers.launcher import proc_stats

    children: dict[int, list[int]] = {}
    for child, f in proc_stats():
        if f[0] != "Z":
            children.setdefault(int(f[1]), []).append(child)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        try:
            out.append((Path("/proc") / str(p) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200])
        except OSError:
            continue
        todo += children.get(p, [])
    return out


def _starts_this_python(folder: Path) -> bool:
    """Whether the wrapper in ``folder`` starts this process's interpreter (unreadable: counted)."""
    try:
        return sys.executable in (folder / "python").read_text(errors="replace")
    except OSError:
        return True


def _kafka_threads() -> list[str]:
    names = []
    for t in Path("/proc/self/task").iterdir():
        try:
            names.append((t / "comm").read_text().strip())
        except OSError:
            pass
    return [n for n in names if n.startswith("rdk:")]


def main() -> None:
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session
    from tests.support import KafkaHelper, own_broker_kind

    wrappers_before = set(Path(tempfile.gettempdir()).glob("dataflow-kafka-python-*"))
    report: dict = {}
    with kafka_broker(own_broker_kind(), workdir=tempfile.mkdtemp(prefix="dfk-leak-")) as broker:
        kafka = KafkaHelper(broker.bootstrap_servers)
        src, dst = kafka.topic(2, prefix="leak-in"), kafka.topic(1, prefix="leak-out")
        kafka.produce(src, [{"value": b"%d" % i, "partition": i % 2} for i in range(100)])
        spark = spark_session(master="local[2]", shuffle_partitions=1)
        q = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", broker.bootstrap_servers)
             .option("subscribe", src).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40")
             .load().filter("kind = 'data'").selectExpr("value").writeStream.format("dataflow-kafka")
             .option("kafka.bootstrap.servers", broker.bootstrap_servers).option("topic", dst)
             .option("checkpointLocation", tempfile.mkdtemp(prefix="dfk-leak-ck-")).trigger(processingTime="200 milliseconds")
             .start())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(kafka.consume_all(dst)) < 100:
            time.sleep(0.5)
        report["written"] = len(kafka.consume_all(dst))
        q.stop()
        cpu0 = _cpu_s(broker._proc.pid)
        time.sleep(3)
        report["broker_cpu_share_after_query_stop"] = round((_cpu_s(broker._proc.pid) - cpu0) / 3, 3)
        spark.stop()
        time.sleep(1)
        report["kafka_threads_in_driver"] = _kafka_threads()
        report["python_workers_left"] = [c for c in _descendants(os.getpid()) if "pyspark" in c and "java" not in c]
        print("BROKER STOPPING", file=sys.stderr, flush=True)
    time.sleep(3)          # a client left open would now log "Connection refused" on stderr
    print("CHECK DONE", file=sys.stderr, flush=True)
    # the one content-addressed wrapper folder is shared by every session and process (made on a
    # machine's first session: CI's clean machine has none before); anything else would be per session
    from dataflow_kafka.datasource.session import python_without_pyspark_zip
    shared = python_without_pyspark_zip()
    allowed = {Path(shared).parent} if shared else set()
    # tests running beside this job (another pytest-xdist worker) make wrappers for other
    # interpreters (a fresh virtualenv's): only wrappers that start this job's Python are its own
    report["new_wrapper_dirs"] = sorted(str(p) for p in set(Path(tempfile.gettempdir()).glob(
        "dataflow-kafka-python-*")) - wrappers_before - allowed if _starts_this_python(p))
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
