"""The source's read with the C reader (``kafka_read.column_reader``, ``datasource/_rdcolumns.c``)
against the same read through ``Consumer.consume``'s messages, in the same run.

    python -m bench.column_reader [--events 400000] [--ranges 2500,12500,50000,0] [--rounds 3] [--csv F]

NEXMark's bids (:func:`bench.prefetch.produce_bids`, four partitions) on the embedded broker are read as
a task of the source reads them: ``kafka_read.fetch_range(..., columns=True)``, ``decode`` of the
event-time field and ``records_to_batch``, in ranges of ``--ranges`` records per partition (0: each
partition as one range), with one consumer of the range's prefetch class
(``kafka_read.prefetch_for``; :func:`bench.prefetch.read_in_ranges`). The two arms alternate in every round, and the first round checks
that both give the same Arrow batches. CPU is the process's (librdkafka's threads included).
Printed: per range length and arm the median over rounds of CPU microseconds per record and wall
seconds, and the C reader's over the messages'.

``--floor`` adds two arms that are not the source's read, to show what its CPU is made of:
``librdkafka`` polls the same ranges through the C reader's poll with nothing kept (every
record's offset past the poll's end: librdkafka's fetch, its message per record and their
release, nothing copied; the floor of any read on librdkafka), and ``c-undecoded`` is the C
reader's ``fetch_range`` without the event times' decoding and the Arrow batch.
"""

from __future__ import annotations

import datetime
import os
import statistics
import time

import pyarrow as pa

from dataflow_kafka.brokers.launcher import kafka_broker
from dataflow_kafka.datasource import kafka_read

from bench import _stream
from bench.prefetch import produce_bids, ranged_read_args, read_in_ranges

ARMS = ("c", "consume")


def _use(arm: str) -> None:
    os.environ["DATAFLOW_KAFKA_C_READER"] = "1" if arm == "c" else "0"
    kafka_read.column_reader.cache_clear()
    if (kafka_read.column_reader() is not None) != (arm == "c"):
        raise SystemExit("the C reader (datasource/_rdcolumns.c) is not built: make setup")


def _undecoded(c, topic: str, p: int, start: int, end: int) -> int:
    """The C reader's read of one range, its columns not decoded: the records read."""
    return sum(len(records) for records, _ in kafka_read.fetch_range(c, topic, p, start, end, 30_000, True,
                                                                       columns=True))


def _librdkafka(c, topic: str, p: int, start: int, end: int) -> int:
    """One range polled through the C reader's poll with nothing kept (every record's offset past
    the poll's end): librdkafka's own work; the records polled."""
    from confluent_kafka import TopicPartition

    poll = kafka_read.column_reader()
    c.assign([TopicPartition(topic, p, start)])
    n, position, deadline = 0, start, time.monotonic() + 30
    while position < end:       # the bids' offsets are dense: first + records is the next
        polled, first, errors, _ = poll(c, min(kafka_read.CHUNK, end - position), 500, -1)
        got = polled - len(errors)
        if first is not None:
            n += min(got, end - first)
            position = first + got
        if time.monotonic() > deadline:
            raise SystemExit(f"{topic}-{p}: offsets [{position}, {end}) not read in 30 s")
    return n


FLOOR_READS = {"librdkafka": _librdkafka, "c-undecoded": _undecoded}


def main(argv: list[str] | None = None) -> None:
    args = ranged_read_args("python -m bench.column_reader", __doc__, "2500,12500,50000,0",
                            "records per range and partition (0: whole)", argv, floor=True)
    arms = ARMS + (tuple(FLOOR_READS) if args.floor else ())     # the floor arms after the readers
    rows = []
    with kafka_broker() as broker:
        bootstrap = broker.bootstrap_servers
        topic, ends = produce_bids(bootstrap, "column-reader", args.events)
        for range_len in (int(x) for x in args.ranges.split(",")):
            longest = range_len or max(ends.values())
            for rnd in range(args.rounds):
                tables = {}
                for arm in arms if rnd % 2 == 0 else arms[::-1]:
                    _use("consume" if arm == "consume" else "c")
                    batches: list[pa.RecordBatch] = []
                    n, cpu, wall = read_in_ranges(bootstrap, topic, ends, longest, kafka_read.prefetch_for(longest),
                                                  batches, read_range=FLOOR_READS.get(arm))
                    if n != sum(ends.values()):
                        raise SystemExit(f"range={range_len} {arm}: {n} records, not {sum(ends.values())}")
                    if rnd == 0 and arm in ARMS:
                        tables[arm] = pa.Table.from_batches(batches)
                    rows.append({"date": datetime.datetime.now().isoformat(timespec="seconds"), "range": range_len,
                                 "arm": arm, "round": rnd, "records": n,
                                 "cpu_us_per_record": round(cpu / n * 1e6, 3), "wall_s": round(wall, 3),
                                 "load": round(os.getloadavg()[0], 2)})
                    print(f"  range={range_len or 'whole'} {arm} round={rnd} cpu_us/record={cpu / n * 1e6:.2f} "
                          f"wall_s={wall:.2f}", flush=True)
                if tables and not tables["c"].equals(tables["consume"]):
                    raise SystemExit(f"range={range_len}: the two readers gave different batches")
            med = {a: (statistics.median(r["cpu_us_per_record"] for r in rows if r["range"] == range_len and r["arm"] == a),
                       statistics.median(r["wall_s"] for r in rows if r["range"] == range_len and r["arm"] == a))
                   for a in arms}
            for a, (cpu, wall) in med.items():
                print(f"range={range_len or 'whole'} {a}: cpu_us/record {cpu:.2f}, wall {wall:.2f} s")
            print(f"range={range_len or 'whole'}: c / consume: CPU {med['c'][0] / med['consume'][0]:.2f}, "
                  f"wall {med['c'][1] / med['consume'][1]:.2f} (same batches)", flush=True)
            for a in arms[len(ARMS):]:
                print(f"range={range_len or 'whole'}: {a} / c: CPU {med[a][0] / med['c'][0]:.2f}", flush=True)
    os.environ.pop("DATAFLOW_KAFKA_C_READER", None)
    if args.csv:
        print(f"wrote {_stream.write_csv(args.csv, rows)}")


if __name__ == "__main__":
    main()
