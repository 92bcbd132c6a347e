"""``python -m bench.nexmark.packing_cpu``: CPU of the source's work after a poll for NEXMark's
bids, when the first stage is packed in the source (``keyGroupPacking``): decoding the event
times, the Arrow batch, and the first stage's routing and packing (``SourcePacking``), with the
stage's JSON fields parsed in the event times' own ``pyarrow.json`` pass (``shared``, what the
source does) against parsed again by the packing (``separate``, the path of a source chunk the
shared pass refuses), alternated in one process; best of ``--repeats``, ratio shared / separate.

    python -m bench.nexmark.packing_cpu [--events 200000] [--repeats 5] [--queries q5,q7,q11]

No broker and no Spark: the polls are prebuilt (``kafka_read.RecordColumns`` of 20,000 bids, as a
consume returns them), so the consume itself is not in the figure.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from bench.nexmark.generator import NexmarkConfig, generate
from bench.nexmark.queries import get
from bench.nexmark.query import Settings

CHUNK = 20_000


def polls(events: int) -> list:
    """The bids of ``events`` NEXMark events as consumed chunks of ``CHUNK`` records."""
    from dataflow_kafka.datasource import kafka_read

    values = [e.value() for e in generate(NexmarkConfig(events=events)) if e.kind == "bid"]
    out = []
    for a in range(0, len(values), CHUNK):
        v = values[a:a + CHUNK]
        ts = np.tile(np.array([[1, 1_767_225_600_000]], np.int64), (len(v), 1))
        out.append(kafka_read.RecordColumns([None] * len(v), v, np.arange(a, a + len(v), dtype=np.int64), ts,
                                            [None] * len(v)))
    return out


def cpu_s(chunks: list, packing, shared: bool) -> float:
    """Process CPU seconds of decoding, batching and packing ``chunks`` (event time ``dateTime``)."""
    from dataflow_kafka.datasource import kafka_read

    also = packing.json_fields("value") if shared else None

    def batches():
        for records in chunks:
            rec = kafka_read.decode(records, "bids", 0, "dateTime", None, also)
            yield kafka_read.records_to_batch(rec, False, 1_767_225_700_000)

    start = time.process_time()
    for _ in packing.pack(batches()):
        pass
    return time.process_time() - start


def main(argv=None) -> None:
    from dataflow_kafka.keygroups.source_packing import SourcePacking

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--queries", default="q5,q7,q11")
    a = p.parse_args(argv)
    chunks = polls(a.events)
    bids = sum(len(c) for c in chunks)
    print(f"{bids:,} bids in polls of {CHUNK:,}; load avg {os.getloadavg()[0]:.1f}")
    for name in a.queries.split(","):
        q = get(name)
        for variant in q.variants:
            packing = SourcePacking.of(q.pipeline(variant, Settings()).chain.operators()[0][0])
            if packing is None or not packing.json_fields("value"):
                continue
            runs = {True: [], False: []}
            for r in range(a.repeats):
                for shared in ((True, False) if r % 2 == 0 else (False, True)):
                    runs[shared].append(cpu_s(chunks, packing, shared))
            on, off = min(runs[True]), min(runs[False])
            print(f"{name} {variant:9s} shared {on:.3f} s  separate {off:.3f} s  shared / separate {on / off:.2f}"
                  f"  ({on / bids * 1e6:.2f} against {off / bids * 1e6:.2f} us per bid)")
    print(f"load avg at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
