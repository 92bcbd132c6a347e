"""The pooled consumer's prefetch: CPU and time per record of reading bounded ranges, per
``queued.min.messages``, against the prefetch of one size for every range (``CHUNK``) in the same run.

    python -m bench.prefetch [--events 400000] [--ranges 2500,12500,50000] [--rounds 3] [--csv F]
        [--setting NAME=V1,V2,...]

NEXMark's bids (:mod:`bench.nexmark.generator`, four partitions) on the embedded broker are read
as a task of the source reads them (``datasource.kafka_read.fetch_range(..., columns=True)`` and
``decode`` of the event-time field): ranges of ``--ranges`` records per partition, the partitions
one after another with one consumer, reassigned per range, as a micro-batch of four times that
many records reads them. Per range length every prefetch of ``kafka_read.PREFETCH`` runs, the
arms alternated in each round; ``chosen`` marks the class :func:`kafka_read.prefetch_for` picks.
CPU is the process's (librdkafka's threads included). Printed: per arm the median over rounds of
CPU microseconds per record and wall seconds, and the chosen class's CPU over ``CHUNK``'s.
``--setting fetch.queue.backoff.ms=10,1``: the arms are instead the values of that librdkafka
setting at the chosen class, each against the first value.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import time

from dataflow_kafka.brokers.launcher import kafka_broker
from dataflow_kafka.datasource import kafka_read

from bench import _stream
from bench.nexmark.generator import NexmarkConfig, generate, produce

PARTITIONS = 4


def process_cpu_s() -> float:
    """CPU seconds of this process, librdkafka's threads included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def produce_bids(bootstrap: str, name: str, events: int) -> tuple[str, dict[int, int]]:
    """``(topic, its partitions' log ends)``: NEXMark's bids of ``events`` events in ``PARTITIONS``
    partitions of a new topic named after ``name``."""
    topic = produce(bootstrap, f"{name}-{os.getpid()}", generate(NexmarkConfig(events=events), ("bid",)),
                    PARTITIONS, kinds=("bid",))["bid"]
    probe = kafka_read.consumer({"bootstrap.servers": bootstrap})
    ends = {p: kafka_read.watermarks(probe, topic, p)[1] for p in range(PARTITIONS)}
    probe.close()
    print(f"{sum(ends.values())} bids in {PARTITIONS} partitions; load {os.getloadavg()[0]:.1f}", flush=True)
    return topic, ends


def read_in_ranges(bootstrap: str, topic: str, ends: dict[int, int], range_len: int, prefetch: int,
                   batches: list | None = None, settings: dict | None = None,
                   read_range=None) -> tuple[int, float, float]:
    """``(records, CPU s, wall s)`` of reading every partition up to ``ends`` in ranges of
    ``range_len`` with one consumer of ``prefetch`` (and librdkafka ``settings`` over the
    source's), decoding the event times. ``batches``: each chunk is made an Arrow batch as well
    (``records_to_batch``, the rest of a task's read) and appended to it. ``read_range(consumer,
    topic, partition, start, end) -> records``: reads each range instead (``bench.column_reader``'s
    floors)."""
    c = kafka_read.consumer({"bootstrap.servers": bootstrap, **(settings or {})}, prefetch=prefetch)
    n, cpu0, wall0 = 0, process_cpu_s(), time.monotonic()
    pos = dict.fromkeys(ends, 0)
    try:
        while any(pos[p] < ends[p] for p in ends):
            for p in ends:
                start, end = pos[p], min(ends[p], pos[p] + range_len)
                if start >= end:
                    continue
                if read_range is not None:
                    n += read_range(c, topic, p, start, end)
                    pos[p] = end
                    continue
                for records, _ in kafka_read.fetch_range(c, topic, p, start, end, 30_000, True, columns=True):
                    n += len(records)
                    decoded = kafka_read.decode(records, topic, p, "dateTime")
                    if batches is not None:
                        batches.append(kafka_read.records_to_batch(decoded, False, 0))
                pos[p] = end
        return n, process_cpu_s() - cpu0, time.monotonic() - wall0
    finally:
        c.close()


def ranged_read_args(prog: str, doc: str, ranges: str, ranges_help: str, argv: list[str] | None,
                     settings: bool = False, floor: bool = False):
    """The arguments of a benchmark of ranged reads (this one, ``bench.column_reader``): ``--events``,
    ``--ranges`` (default ``ranges``), ``--rounds``, ``--csv``; ``settings``: ``--setting`` too;
    ``floor``: ``--floor`` too."""
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=400_000, help="NEXMark events generated (46 of 50 are bids)")
    ap.add_argument("--ranges", default=ranges, help=ranges_help)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--csv", default=None)
    if settings:
        ap.add_argument("--setting", default=None, metavar="NAME=V1,V2,...",
                        help="arms: these values of one librdkafka setting, at the chosen prefetch class "
                             "(the first value is the baseline), instead of the prefetch classes")
    if floor:
        ap.add_argument("--floor", action="store_true",
                        help="also librdkafka's poll with nothing kept, and the C read without decoding")
    return ap.parse_args(argv)


def _label(arm: tuple[int, str]) -> str:
    return f"prefetch={arm[0]}" + (f" {arm[1]}" if arm[1] else "")


def main(argv: list[str] | None = None) -> None:
    args = ranged_read_args("python -m bench.prefetch", __doc__, "2500,12500,50000", "records per range and partition",
                            argv, settings=True)
    rows = []
    with kafka_broker() as broker:
        bootstrap = broker.bootstrap_servers
        topic, ends = produce_bids(bootstrap, "prefetch", args.events)
        for range_len in (int(x) for x in args.ranges.split(",")):
            chosen = kafka_read.prefetch_for(range_len)
            # an arm: (prefetch class, "name=value" of a librdkafka setting or ""), as in the CSV's rows
            if args.setting:   # one setting's values at the chosen class, each against the first
                name, values = args.setting.split("=", 1)
                arms = [(chosen, f"{name}={v}") for v in values.split(",")]
                compared, base = arms, arms[0]
            else:              # every prefetch class with the source's settings; the chosen one against CHUNK's
                arms = [(q, "") for q in kafka_read.PREFETCH]
                compared, base = [(chosen, "")], (kafka_read.CHUNK, "")
            for rnd in range(args.rounds):
                for prefetch, setting in arms if rnd % 2 == 0 else arms[::-1]:
                    n, cpu, wall = read_in_ranges(bootstrap, topic, ends, range_len, prefetch,
                                                  settings=dict([setting.split("=", 1)]) if setting else None)
                    rows.append({"date": datetime.datetime.now().isoformat(timespec="seconds"), "range": range_len,
                                 "prefetch": prefetch, "settings": setting, "chosen": prefetch == chosen,
                                 "round": rnd, "records": n, "cpu_us_per_record": round(cpu / n * 1e6, 3),
                                 "wall_s": round(wall, 3), "load": round(os.getloadavg()[0], 2)})
                    print(f"  range={range_len} {_label((prefetch, setting))} round={rnd} "
                          f"cpu_us/record={cpu / n * 1e6:.2f} wall_s={wall:.2f}", flush=True)
            med = {arm: tuple(statistics.median(r[col] for r in rows if r["range"] == range_len
                                                and (r["prefetch"], r["settings"]) == arm)
                              for col in ("cpu_us_per_record", "wall_s"))
                   for arm in arms}
            for arm, (cpu, wall) in med.items():
                print(f"range={range_len} {_label(arm)}: cpu_us/record {cpu:.2f}, wall {wall:.2f} s"
                      f"{'  <- chosen' if arm == (chosen, '') else ''}")
            for arm in compared:
                print(f"range={range_len}: {_label(arm)} / {_label(base)}: CPU {med[arm][0] / med[base][0]:.2f}, "
                      f"wall {med[arm][1] / med[base][1]:.2f}", flush=True)
    if args.csv:
        print(f"wrote {_stream.write_csv(args.csv, rows)}")


if __name__ == "__main__":
    main()
