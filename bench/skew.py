"""Skew and the balancer: a windowed aggregation whose hot key groups move between slots.

One query per mode, on the embedded broker, reading records produced in real time at ``--rate``
records/s (event time runs ``--speed`` times faster than the wall clock, so minutes of event time
pass in seconds):

* ``uniform``: keys drawn uniformly (the no-skew baseline);
* ``skew``: the key groups of one slot (of the initial routing table) get +50% load, the hot slot
  rotating every ``--rotate-s`` seconds of event time;
* ``balanced``: the same skew, with :class:`balancing.runner.BalancerRunner` +
  :class:`balancing.controller.FluxController` in the query's ``foreachBatch``, reading each
  batch's load from the compute stage's metrics rows and writing move commands to the control
  topic (they take effect in a later batch, instant migration).

The query: :func:`balancing.migration.windowed_aggregation` (router -> compute per slot ->
consolidate per key), ``--key-groups`` key groups on ``--slots`` slots over the session's shuffle
partitions. Per batch: ``durationMs.triggerExecution``, rows, moves applied (router metrics),
partial rows at the consolidate stage and how many of them were merged into another partial of
the same pane (the extra rows of a migration). End-to-end latency of a record: from its produce
time to the end of the ``foreachBatch`` of the batch that read it (the offset log says which).
The cost of a move: the duration of a batch in which moves took effect over the median of the up
to four nearest batches without moves. The first batch (planning, code generation) and the ``--warmup-s`` seconds after it are left out.

Run: ``flock /tmp/dfk-bench.lock .venv/bin/python -m bench.skew [--quick]``; writes
``docs/data/skew.csv`` (every batch) and ``docs/img/skew.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

MODES = ("uniform", "skew", "balanced")
KEY = "CAST(key AS STRING)"
VALUE = "get_json_object(CAST(value AS STRING), '$.v')"


class Producer(threading.Thread):
    """Records at ``rate``/s (``hot_factor`` on the keys of the hot slot's key groups, the hot slot
    rotating every ``rotate_ms`` of event time); remembers each record's produce time."""

    def __init__(self, bootstrap, topic, partitions, rate, keys, slot_of_key, slots, skew, speed, rotate_ms,
                 seed=1):
        super().__init__(daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self.p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "log_level": 3})
        self.topic, self.partitions, self.rate, self.keys = topic, partitions, rate, keys
        self.slot_of_key, self.slots, self.skew, self.speed, self.rotate_ms = slot_of_key, slots, skew, speed, rotate_ms
        self.rng = np.random.default_rng(seed)
        self.sent: dict[int, dict[int, float]] = {p: {} for p in range(partitions)}
        self._halt = threading.Event()
        self.t0 = time.time()
        self.event0 = int(self.t0 * 1000) - 3_600_000

    def event_ms(self, wall: float) -> int:
        return self.event0 + int((wall - self.t0) * 1000 * self.speed)

    def hot_slot(self, event_ms: int) -> int:
        return ((event_ms - self.event0) // self.rotate_ms) % self.slots

    def run(self) -> None:
        tick, i = 0.05, 0
        next_t = time.time()
        while not self._halt.is_set():
            now = time.time()
            ev = self.event_ms(now)
            weights = np.ones(len(self.keys))
            if self.skew:
                weights[self.slot_of_key == self.hot_slot(ev)] = 1.5
            n = self.rng.poisson(self.rate * tick)   # self.rate already holds the hot slot's +50%
            picks = self.rng.choice(len(self.keys), size=n, p=weights / weights.sum())
            late = self.rng.integers(0, 1_500, size=n)
            vals = self.rng.integers(1, 100, size=n)
            for k, lt, v in zip(picks, late, vals):
                part = i % self.partitions

                def done(err, msg, sent=now):
                    if err is None:
                        self.sent[msg.partition()][msg.offset()] = sent

                self.p.produce(self.topic, key=self.keys[k].encode(), partition=part, on_delivery=done,
                               value=json.dumps({"ts": ev - int(lt), "v": int(v)}).encode())
                i += 1
            self.p.poll(0)
            next_t += tick
            self._halt.wait(max(0.0, next_t - time.time()))
        self.p.flush(30)

    def stop(self) -> None:
        self._halt.set()
        self.join(60)


def run_mode(spark, bs: str, mode: str, args, table, keys, slot_of_key, seconds: float) -> list[dict]:
    from dataflow_kafka.balancing.controller import ControllerConfig, FluxController
    from dataflow_kafka.balancing.migration import consolidate_extra_rows, load_of, windowed_aggregation
    from dataflow_kafka.balancing.runner import BalancerRunner, ControlTopicWriter
    from bench._stream import create_topic
    from dataflow_kafka.windowing import SlidingWindow, TumblingWindow

    topic, control = create_topic(bs, args.partitions, f"skew-{mode}"), create_topic(bs, 1, f"skew-{mode}-ctl")
    windows = {"60s": SlidingWindow(60_000, 10_000), "30s": TumblingWindow(30_000)}
    pipe = windowed_aggregation(KEY, VALUE, windows, num_key_groups=args.key_groups, num_slots=args.slots,
                                num_partitions=args.partitions, table=table)
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bs)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("watermarkDelayMs", "2000").option("controlTopic", control).load())
    out = pipe.apply(src)
    ck = tempfile.mkdtemp(prefix=f"skew-{mode}-ck-")
    runner = None
    if mode == "balanced":
        controller = FluxController(dict(enumerate(table.assignment)), slots=range(args.slots),
                                    config=ControllerConfig(metric="rows", max_moves=4, cooldown_periods=2))
        runner = BalancerRunner(controller, ControlTopicWriter(bs, control), period_batches=1)
    batches: dict[int, dict] = {}

    def sink(df, batch_id):
        pdf = df.toPandas()
        done = time.time()
        load = load_of([pdf])
        router = pdf[(pdf["kind"] == "metrics") & (pdf["topic"] == "router")]
        moves = max([len(json.loads(m).get("moves", [])) for m in router["metrics"]] or [0])
        got, merged = consolidate_extra_rows([pdf])
        rows = {s: sum(r for r, _ in per.values()) for s, per in load.items()}
        batches[batch_id] = {"done": done, "moves": moves, "partials": got, "merged": merged,
                             "slot_rows": rows, "commands": len(runner.on_batch(batch_id, load)) if runner else 0}

    prod = Producer(bs, topic, args.partitions, args.rate * (1 + (0.5 / args.slots if mode != "uniform" else 0)),
                    keys, slot_of_key, args.slots, mode != "uniform", args.speed, args.rotate_s * 1000)
    q = out.writeStream.foreachBatch(sink).option("checkpointLocation", ck).start()
    prod.start()
    while not batches and q.isActive:             # the first batch plans and compiles: not timed
        time.sleep(0.2)
    t_first, first = time.time(), min(batches, default=None)
    time.sleep(seconds)
    prod.stop()
    produced = {p: max(offs) + 1 for p, offs in prod.sent.items() if offs}
    deadline = time.time() + 60                 # let the query drain, then stop it between batches
    while time.time() < deadline and q.isActive:
        end = ((q.lastProgress or {}).get("sources") or [{}])[0].get("endOffset") or {}
        ends = (json.loads(end) if isinstance(end, str) else end).get("partitions", {}).get(topic, {})
        if all(ends.get(str(p), {}).get("o", -1) >= o for p, o in produced.items()) and not q.status["isTriggerActive"]:
            break
        time.sleep(0.2)
    q.stop()
    progress = {p["batchId"]: p for p in q.recentProgress}
    rows = []
    for b in sorted(batches):
        p = progress.get(b)
        if p is None or p.get("numInputRows", 0) == 0 or b == first:
            continue
        info = batches[b]
        offsets = json.loads((Path(ck) / "offsets" / str(b)).read_text().splitlines()[-1])
        lat = [info["done"] - prod.sent[int(part)][o]
               for part, e in offsets["partitions"].get(topic, {}).items() for o in range(e["s"], e["o"])
               if o in prod.sent[int(part)]]
        rows.append({"mode": mode, "batch": b, "t_s": round(info["done"] - t_first, 3),
                     "duration_s": p["durationMs"]["triggerExecution"] / 1000, "rows": p["numInputRows"],
                     "moves": info["moves"], "commands": info["commands"], "partials": info["partials"],
                     "merged": info["merged"],
                     "max_slot_share": round(max(info["slot_rows"].values(), default=0)
                                             / max(1, sum(info["slot_rows"].values())), 4),
                     "e2e_p50_s": round(float(np.percentile(lat, 50)), 3) if lat else None,
                     "e2e_p99_s": round(float(np.percentile(lat, 99)), 3) if lat else None,
                     "_lat": lat})
    return rows


def summary(rows: list[dict], warmup_s: float) -> dict:
    steady = [r for r in rows if r["t_s"] >= warmup_s]
    d = [r["duration_s"] for r in steady] or [float("nan")]
    lat = [x for r in steady for x in r["_lat"]]
    move_ratios = []
    for i, r in enumerate(rows):
        if r["moves"] and r["t_s"] >= warmup_s:
            near = [x["duration_s"] for x in rows[max(0, i - 2):i] + rows[i + 1:i + 3]
                    if not x["moves"] and x.get("round") == r.get("round")]
            if near:
                move_ratios.append(r["duration_s"] / statistics.median(near))
    return {"batches": len(d), "p50": float(np.percentile(d, 50)), "p99": float(np.percentile(d, 99)),
            "e2e_p99": float(np.percentile(lat, 99)) if lat else float("nan"),
            "moves": sum(r["moves"] for r in steady), "move_ratio": statistics.median(move_ratios) if move_ratios else None,
            "partials": sum(r["partials"] for r in steady), "merged": sum(r["merged"] for r in steady),
            "max_slot_share": statistics.median([r["max_slot_share"] for r in steady]) if steady else None}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for mode in MODES:
        rs = [r for r in rows if r["mode"] == mode and r.get("round", 0) == 0]
        a.plot([r["t_s"] for r in rs], [r["duration_s"] for r in rs], marker=".", label=mode)
        b.plot([r["t_s"] for r in rs], [r["max_slot_share"] for r in rs], marker=".", label=mode)
        mv = [r for r in rs if r["moves"]]
        a.scatter([r["t_s"] for r in mv], [r["duration_s"] for r in mv], marker="x", color="k", zorder=3)
    a.set_ylabel("batch duration (s)")
    a.legend()
    a.set_title("windowed aggregation, +50% load rotating between slots (round 0; x: batch with moves)")
    b.set_ylabel("largest slot's share of rows")
    b.set_xlabel("wall time since the first batch (s)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    ap.add_argument("--rate", type=float, default=3_000, help="records/s without skew")
    ap.add_argument("--seconds", type=float, default=80)
    ap.add_argument("--warmup-s", type=float, default=15)
    ap.add_argument("--speed", type=float, default=10, help="event time per wall time")
    ap.add_argument("--rotate-s", type=float, default=120, help="event-time seconds between hot slots")
    ap.add_argument("--keys", type=int, default=4_000)
    ap.add_argument("--key-groups", type=int, default=64)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=2, help="every mode once per round, order reversed every round")
    ap.add_argument("--csv", default="docs/data/skew.csv")
    ap.add_argument("--png", default="docs/img/skew.png")
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup_s, args.rate, args.rounds = 40, 10, 1_000, 1
        args.csv, args.png = "bench/out/skew-quick.csv", "bench/out/skew-quick.png"

    from dataflow_kafka.balancing.routing_table import RoutingTable
    from bench._stream import loadavg, write_csv
    from dataflow_kafka.brokers import kafka_broker
    from dataflow_kafka.datasource.session import spark_session
    from dataflow_kafka.keygroups import key_group_of

    table = RoutingTable.uniform(args.key_groups, args.slots, args.partitions)
    keys = [f"k{i}" for i in range(args.keys)]
    slot_of_key = np.array([table.slot_of(key_group_of(k, args.key_groups)) for k in keys])
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        spark = spark_session(shuffle_partitions=args.partitions,
                              extra={"spark.sql.streaming.numRecentProgressUpdates": "1000"})
        print(f"{args.rate:.0f} records/s, {args.keys} keys, {args.key_groups} key groups on {args.slots} slots, "
              f"{args.partitions} partitions, {args.seconds:.0f} s per mode; loadavg {loadavg()}")
        run_mode(spark, bs, "uniform", args, table, keys, slot_of_key, 10)      # warms the session: discarded
        rows, sums, modes = [], {}, args.modes.split(",")
        for r in range(args.rounds):
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                rs = run_mode(spark, bs, mode, args, table, keys, slot_of_key, args.seconds)
                rows += [dict(x, round=r) for x in rs]
                s = summary(rs, args.warmup_s)
                print(f"round {r} {mode:9s}: {s['batches']} batches, batch p50 {s['p50']:.2f} s p99 {s['p99']:.2f} s, "
                      f"e2e p99 {s['e2e_p99']:.2f} s, moves {s['moves']}; loadavg {loadavg()}")
        for mode in modes:
            rs = [x for x in rows if x["mode"] == mode]
            s = sums[mode] = summary(rs, args.warmup_s)
            print(f"{mode:9s}: {s['batches']} batches, batch p50 {s['p50']:.2f} s p99 {s['p99']:.2f} s, "
                  f"e2e p99 {s['e2e_p99']:.2f} s, largest slot share (median) {s['max_slot_share']}, "
                  f"moves {s['moves']}, move batch / neighbours {s['move_ratio']}, "
                  f"consolidate partials {s['partials']} of which merged {s['merged']}; loadavg {loadavg()}")
        if "uniform" in sums:
            base = sums["uniform"]["p99"]
            for mode in ("skew", "balanced"):
                if mode in sums:
                    print(f"{mode} p99 batch / uniform p99 batch: {sums[mode]['p99'] / base:.2f}"
                          + (" (target <= 1.2)" if mode == "balanced" else ""))
        write_csv(args.csv, [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
        plot(rows, Path(args.png))
        print(f"wrote {args.csv} and {args.png}")
        spark.stop()


if __name__ == "__main__":
    main()
