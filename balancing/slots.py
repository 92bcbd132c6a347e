"""Routing by slot: key groups that move between shuffle partitions at runtime (Enorm §4.4.2, §4.5).

A Pipeline normally groups a stateful operator by key group, whose shuffle partition is fixed for
the life of the checkpoint. To let key groups move, put a :class:`SlotRouter` first: it computes
each row's key group (``pmod(xxhash64(key), n)``, in the JVM) and its **slot** from a
:class:`balancing.routing_table.RoutingTable`, and the next stage (a *slot stage*, e.g.
:class:`balancing.compute.PaneCompute`) is grouped by slot: its ``key_group`` argument is the
slot's grouping value, and it keeps the state of each key group it serves inside the slot's state.

Where the table lives: routing happens before the shuffle, in tasks that keep no state, yet the
table is the fold of every move command so far. The router is therefore a small stateful operator
grouped by source partition (its state: the table; ``num_key_groups`` router instances): it
applies the batch's move commands at the batch start (modification rows come before data,
deduplicated by control offset), so a move takes effect for every key group at the same logical
point, and a replayed batch starts from the committed table and meets the same commands. The
price is one more stateful operator per batch; its input is packed per task (one shuffle row per
source partition and batch).

>>> from dataflow_kafka.balancing.routing_table import RoutingTable
>>> r = SlotRouter(key="CAST(key AS STRING)", columns=(("value", "CAST(value AS STRING)", "string"),),
...                table=RoutingTable.uniform(16, 4, 2))
>>> sorted(r.inputs())
['key', 'kg', 'src_partition', 'value']
>>> r.inputs()["kg"]
'pmod(xxhash64(CAST(key AS STRING)), 16)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dataflow_kafka.balancing.routing_table import RoutingTable
from dataflow_kafka.keygroups import PythonRouter, Stage, StageInput, StageOutput
from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["SlotRouter", "SlotStage", "by_slot", "KEY_GROUP_OF_ROW", "SLOT_COLUMN"]

KEY_GROUP_OF_ROW = "kg"     # a routed row's key group (the unit of state and of moves)
SLOT_COLUMN = "slot"        # its slot's grouping value


def by_slot(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The Python router of a slot stage: rows go to the slot the router wrote on them."""
    return frame, frame[SLOT_COLUMN].to_numpy(np.int64)


class SlotStage(Stage):
    """Base of a stage grouped by slot (after a :class:`SlotRouter`): set ``slot_ids`` (the
    table's) and ``input_columns`` (the router's data columns, ``(name, DDL type)``)."""

    slot_ids: tuple[int, ...] = ()
    input_columns: tuple[tuple[str, str], ...] = ()

    def routing(self) -> PythonRouter:
        """Rows go to the slot the router wrote on them; markers to every slot (``slot_ids``)."""
        return PythonRouter(by_slot, [*self.input_columns, (KEY_GROUP_OF_ROW, "int"), (SLOT_COLUMN, "int")],
                            group_ids=self.slot_ids)

    def slot_of_id(self, slot_id: int) -> int:
        """The slot index served by the instance with grouping value ``slot_id``."""
        return self.slot_ids.index(int(slot_id))


@dataclass
class SlotRouter(Stage):
    """Routes data rows to slots through a routing table held in state (see module docstring).

    ``key``: SQL expression of the key; ``columns``: ``(name, SQL expression, DDL type)`` of the
    other columns the slot stage needs; ``table``: the initial table (its ``num_key_groups`` is
    the number of key groups of the key, its ``num_partitions`` must be the query's
    ``spark.sql.shuffle.partitions`` for slots to land where the table says); ``key_type``: DDL
    type of the key expression. ``num_key_groups``: router instances (grouped by source partition).
    Move commands with a ``"stage"`` field apply only to the router of that name.
    """

    commands = frozenset({"move"})

    key: str = ""
    columns: tuple[tuple[str, str, str], ...] = ()
    table: Any = None
    key_type: str = "string"
    name: str | None = "router"
    num_key_groups: int = 2

    def __post_init__(self) -> None:
        if not self.key:
            raise InvalidArgumentError("SlotRouter: key (an SQL expression) is required")
        if self.table is None:
            raise InvalidArgumentError("SlotRouter: table (a balancing.routing_table.RoutingTable) is required")
        taken = {"key", KEY_GROUP_OF_ROW, SLOT_COLUMN, "src_partition", "event_time_ms"}
        for c in self.columns:
            if len(c) != 3 or c[0] in taken:
                raise InvalidArgumentError(f"SlotRouter: columns are (name, SQL expression, DDL type) with names other than "
                                 f"{sorted(taken)}, got {c!r}")

    def inputs(self) -> dict[str, str]:
        return {"key": self.key, **{n: e for n, e, _ in self.columns},
                KEY_GROUP_OF_ROW: f"pmod(xxhash64({self.key}), {self.table.num_key_groups})",
                "src_partition": "partition"}

    def routing(self) -> str:
        return "src_partition"

    def data_columns(self) -> list[tuple[str, str]]:
        """What a slot stage after this router gets (besides ``kg`` and ``slot``)."""
        return [("key", self.key_type)] + [(n, t) for n, _, t in self.columns]

    def output_columns(self) -> list[tuple[str, str]]:
        return self.data_columns() + [(KEY_GROUP_OF_ROW, "int"), (SLOT_COLUMN, "int")]

    def new_state(self) -> dict:
        return {"table": self.table}

    def dump_state(self, state: dict) -> bytes:
        return state["table"].to_json().encode()

    def load_state(self, blob: bytes) -> dict:
        table = RoutingTable.from_json(bytes(blob).decode())
        if (table.num_key_groups, table.slot_ids) != (self.table.num_key_groups, self.table.slot_ids):
            raise InvalidArgumentError(f"SlotRouter {self.name!r}: the checkpoint's routing table has "
                             f"{table.num_key_groups} key groups on slots {table.slot_ids}, the pipeline "
                             f"{self.table.num_key_groups} on {self.table.slot_ids} (pipeline changed?)")
        return {"table": table}

    def describe_state(self, state: dict) -> list[dict]:
        """The routing table: a ``route`` per key group (``key``: the key group) with its slot,
        and the control offset of the last move applied (``version``)."""
        table = state["table"]
        return [state_item("route", key=kg, slot=slot, slot_id=table.slot_ids[slot], version=table.version)
                for kg, slot in enumerate(table.assignment)]

    def process(self, state: dict, batch: StageInput) -> StageOutput:
        table, moves, errors = state["table"].apply(batch.modifications, self.name)
        state["table"] = table
        out = None
        data = batch.data
        if data is not None and len(data):
            kg = data[KEY_GROUP_OF_ROW].to_numpy(np.int64)
            cols = ["event_time_ms"] + [c for c, _ in self.data_columns()]
            out = data[cols].assign(**{KEY_GROUP_OF_ROW: kg, SLOT_COLUMN: table.slot_ids_of(kg)})
        metrics = {"moves": [[m.key_group, m.to] for m in moves], "version": table.version} if moves else None
        return StageOutput(out, watermark_ms=batch.watermark_ms, command_errors=errors, metrics=metrics)
