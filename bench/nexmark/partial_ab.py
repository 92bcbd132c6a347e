"""``python -m bench.nexmark.partial_ab``: the slicer forms of NEXMark Q5 and Q7 in two shapes,
alternated in one Spark session, each query beside Spark's native form:

* ``one key group``: the keyed table and the top per window in one operator and one key group
  (the form's default since 2026-12-01, ``Settings.top_key_groups``);
* ``partial``: in 4 key groups, the top per window of each where the table is
  (``Pipeline.then(stage, fuse="partial")``), then the top of those after the shuffle.

Both run this tree's engines; only the pipeline's shape differs. Every arm is checked against the
reference as in :mod:`bench.nexmark.throughput`, whose harness runs the arms (steady state: batch 0
left out). Until 2026-12-01 a third arm ran the form from before the partial stage (the last stage
shuffling every row of the first); its last stage could no longer read the partial stage's tuple
entries, and it went.

Run: ``.venv/bin/python -m bench.nexmark.partial_ab [--events 1000000] [--batch-size 50000] [--repeats 2]``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile

from bench.nexmark import throughput as T
from bench.nexmark.queries.q5 import Q5
from bench.nexmark.queries.q7 import Q7
from bench.nexmark.query import Settings


def top_key_groups(query, n: int):
    """``query`` (a Q5 or Q7) with its slicer form's top taken in ``n`` key groups, whatever the
    harness's settings say."""

    class InKeyGroups(type(query)):
        def pipeline(self, variant, settings=Settings()):
            return super().pipeline(variant, dataclasses.replace(settings, top_key_groups=n))

        def results(self, variant, frames, settings=Settings()):
            return super().results(variant, frames, dataclasses.replace(settings, top_key_groups=n))

    return InKeyGroups()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--batch-size", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args(argv)
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session

    extra, connector = T.session_extra(p, [])
    with kafka_broker(workdir=tempfile.mkdtemp(prefix="partial-ab-broker-")) as broker:
        spark = spark_session(master="local[2]", shuffle_partitions=2, extra=extra)
        h = T.Harness(spark, broker.bootstrap_servers, connector, a.events)
        for r in range(a.repeats):
            for q in (Q5(), Q7()):
                forms = [("one key group", top_key_groups(q, 1)), ("partial", top_key_groups(q, 4))]
                for form, query in forms if r % 2 == 0 else forms[::-1]:
                    row = h.arm(query, "ours", "slicer", a.batch_size, r)
                    print(f"{q.name} slicer   {form:13} repeat {r}: rows/s {row['rows_per_s']}, JVM CPU "
                          f"{row['jvm_cpu_s']} s, Python CPU {row['python_cpu_s']} s, correct {row['correct']}, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
                row = h.arm(q, "spark", T._native_label(q), a.batch_size, r)
                print(f"{q.name} Spark native        repeat {r}: rows/s {row['rows_per_s']}, JVM CPU {row['jvm_cpu_s']} s, "
                      f"correct {row['correct']}", flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
