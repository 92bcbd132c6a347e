"""Garbage-collector statistics of every Python process that starts with this folder on its
``PYTHONPATH`` (Spark's Python workers inherit the driver's environment on a local master), for
``python -m bench.gc_workers``: collections and the thread CPU time they took, per generation and
per part of the code that was running when one started (``source``: ``datasource/``; ``stage``:
the stage layer, the engines and ``bench/``; ``other``: pyspark, pandas, pyarrow). Each process
writes ``<pid>.json`` under ``$DATAFLOW_GC_STATS_DIR`` at most twice a second while it collects.

    DATAFLOW_GC_STATS_DIR=/tmp/gc PYTHONPATH=bench/gc_hook python -m bench.nexmark.throughput ...
"""

import gc
import json
import os
import sys
import time

_DIR = os.environ.get("DATAFLOW_GC_STATS_DIR")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SOURCE = (os.path.join(_ROOT, "datasource"),)
_STAGE = tuple(os.path.join(_ROOT, d) for d in ("keygroups", "windowing", "slicer", "watermarks", "optimistic",
                                                 "joins", "bench"))
_stats: dict = {}
_state = {"start": 0.0, "part": "other", "written": 0.0}


def _part() -> str:
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith(_SOURCE) or "datasource_ab" in name:
            return "source"
        if name.startswith(_STAGE) and not name.endswith("sitecustomize.py"):
            return "stage"
        f = f.f_back
    return "other"


def _callback(phase: str, info: dict) -> None:
    if phase == "start":
        _state["start"], _state["part"] = time.thread_time(), _part()
        return
    entry = _stats.setdefault(f"{_state['part']}-{info['generation']}", [0, 0.0])
    entry[0] += 1
    entry[1] += time.thread_time() - _state["start"]
    now = time.monotonic()
    if now - _state["written"] > 0.5:
        _state["written"] = now
        with open(os.path.join(_DIR, f"{os.getpid()}.json"), "w") as out:
            json.dump({"argv": sys.argv[:3], "collections": _stats, "cpu_s": time.process_time()}, out)


if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    gc.callbacks.append(_callback)
