"""``bench.source_throughput._cpu_split``: a process tree's CPU per role, read from /proc."""

import os
import subprocess
import sys
import time

import pytest

from bench.source_throughput import CPU_ROLES, _cpu_seconds, _cpu_split

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")

_BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"

# The root: starts a long-lived child named like pyspark's daemon (it burns 0.3 s of CPU, then
# waits on stdin), and a short child that burns 0.4 s and exits (reaped by the root's wait), then
# says "ready" and waits.
_ROOT = f"""
import subprocess, sys
daemon = subprocess.Popen([sys.executable, "-c", {_BURN.format(s=0.3) + "import sys; sys.stdin.read()"!r},
                           "-m", "pyspark.daemon"], stdin=subprocess.PIPE)
subprocess.run([sys.executable, "-c", {_BURN.format(s=0.4)!r}], check=True)
print("ready", flush=True)
sys.stdin.read()
daemon.stdin.close()
daemon.wait()
"""


def test_the_split_files_each_process_under_its_role_and_sums_to_the_total():
    root = subprocess.Popen([sys.executable, "-c", _ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10       # until the daemon-named child has burned its 0.3 s
        while (_cpu_split([root.pid]) or {}).get("python_workers", 0) < 0.28 and time.monotonic() < deadline:
            time.sleep(0.05)
        split = _cpu_split([root.pid])
        total = _cpu_seconds([root.pid])
    finally:
        root.stdin.close()
        root.wait(timeout=10)
    assert set(split) == set(CPU_ROLES)
    assert split["python_workers"] >= 0.28
    assert split["exited_children"] >= 0.38          # the short child, reaped by the root
    assert split["jvm"] < 0.28                       # the root only started processes
    assert split["python_other"] < 0.05
    assert total == pytest.approx(sum(split.values()))


def _row(repeat, variant, jvm, workers, planner, exited):
    return {"repeat": repeat, "variant": variant, "spark_cpu_s": jvm + workers + planner + exited, "jvm_cpu_s": jvm,
            "python_workers_cpu_s": workers, "python_other_cpu_s": planner, "exited_children_cpu_s": exited}


def test_the_cpu_summary_gives_each_repeat_against_its_spark_twin_whole_and_per_record():
    from bench.source_throughput import cpu_summary

    rows = [_row(1, "spark-10", 2.0, 0.0, 0.0, 0.5), _row(1, "json-10", 2.0, 1.0, 0.6, 0.4),
            _row(2, "spark-10", 3.0, 0.0, 0.0, 1.0), _row(2, "json-10", 2.0, 1.0, 0.0, 1.0)]
    lines = cpu_summary(rows, ["spark-10", "json-10"])
    assert len(lines) == 3
    assert lines[1].split()[:2] == ["spark-10", "3.25"]             # no twin of its own: no ratios
    assert "/ spark-10" not in lines[1]
    # json-10: whole 4.0 / 2.5 = 1.60 and 4.0 / 4.0 = 1.00; the JVM and workers (the planner, alive or
    # exited, left out) 3.0 / 2.0 and 3.0 / 3.0
    assert "/ spark-10: 1.60 1.00 (median 1.30); JVM and Python workers only 1.50 1.00 (median 1.25)" in lines[2]
    assert cpu_summary([{**r, "spark_cpu_s": None} for r in rows], ["json-10"]) == []
