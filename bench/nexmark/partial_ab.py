"""``python -m bench.nexmark.partial_ab``: NEXMark Q5 and Q7 with their partial stage
(``Pipeline.then(stage, fuse="partial")``: the top per window of each key group, then the top of
those after the shuffle) against the two-stage form they had before (the last stage shuffles
every row of the first), alternated in one Spark session, each query beside Spark's native form.

Both forms run this tree's engines; only the pipeline's shape differs (the two-stage form is the
three-stage pipeline without its partial stage, its last stage keyed by the first stage's window
end). Every arm is checked against the reference as in :mod:`bench.nexmark.throughput`, whose
harness runs the arms (steady state: batch 0 left out).

Run: ``.venv/bin/python -m bench.nexmark.partial_ab [--events 1000000] [--batch-size 50000] [--repeats 2]``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile

from dataflow_kafka.keygroups import Pipeline

from bench.nexmark import throughput as T
from bench.nexmark.queries.q5 import Q5
from bench.nexmark.queries.q7 import Q7
from bench.nexmark.query import Settings


def two_stage(query):
    """``query`` (a Q5 or Q7) in the two-stage form: its pipeline without the partial stage, the last
    stage taking the first stage's rows; everything else (reference, results, Spark plan) its own."""

    class TwoStage(type(query)):
        def pipeline(self, variant, settings=Settings()):
            first, partial, last = super().pipeline(variant, settings).stages
            return Pipeline([first, dataclasses.replace(last, key={"w": "window_end_ms"}, value=partial.value)])

    return TwoStage()


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
                forms = [("partial", q), ("two-stage", two_stage(q))]
                for variant in q.variants:
                    for form, query in forms if r % 2 == 0 else forms[::-1]:
                        row = h.arm(query, "ours", variant, a.batch_size, r)
                        print(f"{q.name} {variant:8} {form:9} repeat {r}: rows/s {row['rows_per_s']}, JVM CPU "
                              f"{row['jvm_cpu_s']} s, Python CPU {row['python_cpu_s']} s, correct {row['correct']}, "
                              f"load {os.getloadavg()[0]:.1f}", flush=True)
                row = h.arm(q, "spark", T._native_label(q), a.batch_size, r)
                print(f"{q.name} Spark native        repeat {r}: rows/s {row['rows_per_s']}, JVM CPU {row['jvm_cpu_s']} s, "
                      f"correct {row['correct']}", flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
