"""Disruptive migration for state that cannot be split: a keyed ordered operator (Enorm §4.5, §5).

A keyed ordered operator (here :class:`RunningTotal`: per key, in event-time order, the running
sum of the values so far) has one state per key that must see every record of the key in order:
it cannot be split into partials like a windowed aggregation. Moving its key group ships the
state (Enorm's *disruptive migration*):

1. batch ``m`` brings the move command (every slot sees it first, and every slot keeps the same
   routing table as the router, so all agree who the old slot is). The **old slot** writes the
   key group's state to the hand-off channel under ``(key group, control offset of the move)``
   and drops it; the **new slot** starts holding the key group's rows (the router sends them to
   it from batch ``m`` on);
2. batch ``m + 1``: the new slot reads the hand-off record, installs the state, processes the
   held rows, then that batch's rows.

Replays stay exact: a replay of batch ``m`` starts from the committed state (the key group still
on the old slot), which writes the same record again (a reader takes the first one with that
name); a replay of ``m + 1`` starts from the committed "holding" state and reads the record again.
The channel must outlive the query: :class:`KafkaHandoff` (a topic; records are flushed before
the batch ends), or :class:`MemoryHandoff` for runs in one process (``Pipeline.run_local``).
A second move of a key group while it is in flight is refused (an ``error`` row naming the
command); the controller's cooldown avoids it.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dataflow_kafka.balancing.slots import KEY_GROUP_OF_ROW, SlotStage
from dataflow_kafka.keygroups.stage import StageInput, StageOutput
from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.errors import InvalidArgumentError, KafkaClientError

__all__ = ["RunningTotal", "MemoryHandoff", "KafkaHandoff", "ordered_pipeline"]

_MEMORY: dict[str, dict[str, bytes]] = {}


@dataclass(frozen=True)
class MemoryHandoff:
    """Hand-off records in this process (named channel), for local runs and tests."""

    channel: str

    def put(self, name: str, blob: bytes) -> None:
        _MEMORY.setdefault(self.channel, {}).setdefault(name, blob)

    def get(self, name: str) -> bytes | None:
        return _MEMORY.get(self.channel, {}).get(name)


@dataclass(frozen=True)
class KafkaHandoff:
    """Hand-off records on a Kafka topic (one partition), key = record name; the first record of a
    name wins (a replay writes an identical one)."""

    bootstrap_servers: str
    topic: str
    timeout_s: float = 30.0

    def put(self, name: str, blob: bytes) -> None:
        from confluent_kafka import Producer

        errors: list = []
        p = Producer({"bootstrap.servers": self.bootstrap_servers, "acks": "all", "linger.ms": 0,
                      "message.max.bytes": 100_000_000, "log_level": 3})
        p.produce(self.topic, key=name.encode(), value=blob, partition=0,
                  on_delivery=lambda err, msg: err and errors.append(err))
        left = p.flush(self.timeout_s)
        if errors or left:
            raise KafkaClientError(f"hand-off topic {self.topic!r}: state {name!r} not delivered ({errors or left})")

    def get(self, name: str) -> bytes | None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "dfk-handoff",
                      "enable.auto.commit": False, "receive.message.max.bytes": 400_000_000, "log_level": 3})
        try:
            _, high = c.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=self.timeout_s)
            c.assign([TopicPartition(self.topic, 0, 0)])
            pos = 0
            while pos < high:
                got = c.consume(int(min(high - pos, 10_000)), self.timeout_s)   # returns once they are read
                if not got:
                    raise KafkaClientError(f"hand-off topic {self.topic!r}: nothing read at offset {pos} (end {high}) "
                                       f"within {self.timeout_s} s")
                for m in got:
                    if m.error():
                        raise KafkaClientError(f"hand-off topic {self.topic!r}: {m.error()}")
                    pos = m.offset() + 1
                    if m.key() == name.encode():
                        return bytes(m.value())
            return None
        finally:
            c.close()


def _name(kg: int, version: int | None) -> str:
    return f"kg{kg}@{version}"


@dataclass
class RunningTotal(SlotStage):
    """Per key, in (event time, arrival) order: the running sum of ``value``; disruptive migration.

    ``table``: the router's initial routing table; ``handoff``: :class:`KafkaHandoff` or
    :class:`MemoryHandoff`; ``router``: the router's stage name (moves addressed to another
    router are not ours). Output rows: ``key, value, total`` (event time of the record).
    """

    table: Any = None
    handoff: Any = None
    key_type: str = "string"
    router: str = "router"
    name: str | None = "running_total"
    num_key_groups: int = 0

    def __post_init__(self) -> None:
        if self.table is None or self.handoff is None:
            raise InvalidArgumentError("RunningTotal: table (the router's RoutingTable) and handoff are required")
        self.slot_ids = tuple(self.table.slot_ids)
        self.num_key_groups = len(self.slot_ids)
        self.input_columns = (("key", self.key_type), ("value", "double"))

    def output_columns(self) -> list[tuple[str, str]]:
        return [("key", self.key_type), ("value", "double"), ("total", "double")]

    # state: table, per key group {key: total}, held rows and awaited hand-offs per key group
    def new_state(self) -> dict:
        return {"table": self.table, "groups": {}, "held": {}, "awaiting": {}}

    def dump_state(self, state: dict) -> bytes:
        return pickle.dumps({**state, "table": state["table"].to_json()}, protocol=5)

    def load_state(self, blob: bytes) -> dict:
        from dataflow_kafka.balancing.routing_table import RoutingTable

        st = pickle.loads(bytes(blob))
        return {**st, "table": RoutingTable.from_json(st["table"])}

    def describe_state(self, state: dict) -> list[dict]:
        """Per key group the slot serves (``kg`` in the detail): each key's running
        ``total``; rows ``held`` while the key group's state is on its way (``awaiting``: the
        hand-off it waits for)."""
        rows = [state_item("total", key=k, kg=kg, total=t)
                for kg in sorted(state["groups"]) for k, t in state["groups"][kg].items()]
        rows += [state_item("awaiting", kg=kg, handoff=name) for kg, name in sorted(state["awaiting"].items())]
        for kg, held in sorted(state["held"].items()):
            ts = held["event_time_ms"]
            rows.append(state_item("held", start_ms=ts.min(), end_ms=ts.max() + 1, count=len(held), kg=kg))
        return rows

    def process(self, state: dict, batch: StageInput) -> StageOutput:
        me = self.slot_of_id(batch.key_group)
        errors: list[str] = []
        out: list[pd.DataFrame] = []
        for kg, name in sorted(state["awaiting"].items()):      # shipped in an earlier batch: install
            groups = self._fetch(name)
            if groups is None:
                errors.append(f"key group {kg}: hand-off state {name!r} not found in {self.handoff!r}; "
                              "its rows stay held")
                continue
            del state["awaiting"][kg]
            state["groups"][kg] = groups
            held = state["held"].pop(kg, None)
            if held is not None:
                out.append(self._run(state, kg, held))
        table = state["table"]
        for m in batch.modifications:                            # this batch's moves (the router reports errors)
            after, applied, _ = table.apply([m], self.router)
            for move in applied:
                kg, old, name = move.key_group, table.slot_of(move.key_group), _name(move.key_group, after.version)
                if old == move.to:
                    continue
                if old == me and kg in state["awaiting"]:        # moved here and on in one batch: forward
                    self.handoff.put(name, pickle.dumps(("forward", state["awaiting"].pop(kg))))
                elif old == me:
                    self.handoff.put(name, pickle.dumps(("state", state["groups"].pop(kg, {}))))
                elif move.to == me:
                    state["awaiting"][kg] = name
            table = after
        state["table"] = table
        data = batch.data
        if data is not None and len(data):
            for kg, rows in data.groupby(KEY_GROUP_OF_ROW, sort=True):
                kg = int(kg)
                if kg in state["awaiting"]:
                    prev = state["held"].get(kg)
                    state["held"][kg] = rows if prev is None else pd.concat([prev, rows], ignore_index=True)
                else:
                    out.append(self._run(state, kg, rows))
        wm = batch.watermark_ms
        held_min = min((int(h["event_time_ms"].min()) for h in state["held"].values() if len(h)), default=None)
        if held_min is not None and wm is not None:
            wm = min(wm, held_min - 1)
        frames = [f for f in out if len(f)]
        return StageOutput(pd.concat(frames, ignore_index=True) if frames else None, watermark_ms=wm, errors=errors)

    def _fetch(self, name: str) -> dict | None:
        """The state shipped under ``name``, following forwards."""
        for _ in range(64):
            blob = self.handoff.get(name)
            if blob is None:
                return None
            kind, value = pickle.loads(blob)
            if kind == "state":
                return value
            name = value
        raise KafkaClientError(f"hand-off {name!r}: more than 64 forwards")

    def _run(self, state: dict, kg: int, rows: pd.DataFrame) -> pd.DataFrame:
        """Running totals of ``rows`` (one key group) in (event time, arrival) order."""
        totals = state["groups"].setdefault(kg, {})
        rows = rows.sort_values(["event_time_ms"], kind="stable")
        v = rows["value"].to_numpy(np.float64, na_value=0.0)
        keys = rows["key"].to_numpy(object)
        run = pd.Series(v).groupby(keys, sort=False).cumsum().to_numpy()
        base = np.array([totals.get(k, 0.0) for k in keys])
        total = base + run
        for k, t in zip(keys, total):
            totals[k] = float(t)
        return pd.DataFrame({"event_time_ms": rows["event_time_ms"].to_numpy(np.int64), "key": keys,
                             "value": v, "total": total})


def ordered_pipeline(key: str, value: str, table, handoff, *, routers: int = 2, key_type: str = "string"):
    """Router -> :class:`RunningTotal` (grouped by slot): a keyed ordered operator whose key groups
    move by disruptive migration. ``key``, ``value``: SQL expressions over the source rows."""
    from dataflow_kafka.keygroups.pipeline import Pipeline
    from dataflow_kafka.balancing.slots import SlotRouter

    router = SlotRouter(key=key, columns=(("value", f"CAST({value} AS DOUBLE)", "double"),), table=table,
                        key_type=key_type, num_key_groups=routers)
    return Pipeline([router, RunningTotal(table=table, handoff=handoff, key_type=key_type, router=router.name)])
