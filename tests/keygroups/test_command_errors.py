"""A malformed or inapplicable control command is one ``error`` row per stage, whatever the
number of key groups or router instances: every key group meets the same
commands, so the key group that forwards the modifications reports them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dataflow_kafka.balancing.routing_table import RoutingTable
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.balancing.slots import SlotRouter
from dataflow_kafka.slicer.stage import SlicerStage
from dataflow_kafka.watermarks.stage import WindowingStage
from dataflow_kafka.windowing import Median, Sum, TumblingWindow

PARTS = 3


def _batch(commands, records=()) -> pd.DataFrame:
    """Commands (each copied to every partition, as the source does), ``(key, t)`` records, a
    punctuation per partition."""
    rows = [{"kind": "modification", "topic": "t", "partition": p, "offset": 0, "modification": json.dumps(c),
             "control_offset": i, "processing_time_ms": 0} for i, c in enumerate(commands) for p in range(PARTS)]
    rows += [{"kind": "data", "topic": "t", "partition": i % PARTS, "offset": i, "event_time_ms": t,
              "processing_time_ms": 0} for i, (_, t) in enumerate(records)]
    rows += [{"kind": "punctuation", "topic": "t", "partition": p, "offset": 99, "punctuation_ms": 1000,
              "processing_time_ms": 0} for p in range(PARTS)]
    pad = len(commands) * PARTS
    return control_frame(rows).assign(k=[None] * pad + [k for k, _ in records] + [None] * PARTS,
                                      v=[None] * pad + [1.0] * len(records) + [None] * PARTS)


def _errors(stage, commands, records=()) -> list[str]:
    (out,) = Pipeline([stage]).run_local([_batch(commands, records)])
    return out[out["kind"] == "error"]["error"].tolist()


BAD_WINDOW = {"op": "add_window", "id": "x", "window": {"type": "tumbling"}}          # no size_ms
SESSION = {"op": "add_window", "id": "s", "window": {"type": "session", "gap_ms": 10}}
RECORDS = [(f"k{i}", 100 * i) for i in range(12)]          # keys in every key group


@pytest.mark.parametrize("n", [1, 4])
def test_a_malformed_window_command_is_one_error_row(n):
    stages = [SlicerStage(key="k", value="v", windows=[TumblingWindow(100)], aggregations=[Sum()], num_key_groups=n),
              SlicerStage(key="k", value="v", windows=[TumblingWindow(100)], aggregations=[Median()],
                          num_key_groups=n),
              WindowingStage(key="k", value="v", windows=TumblingWindow(100), aggregations=[Sum()], num_key_groups=n)]
    for stage in stages:
        errors = _errors(stage, [BAD_WINDOW], RECORDS)
        assert len(errors) == 1 and "malformed window command" in errors[0] and "size_ms" in errors[0]


@pytest.mark.parametrize("n", [1, 4])
def test_a_command_the_configuration_cannot_take_is_one_error_row(n):
    keyed = SlicerStage(key="k", value="v", windows=[TumblingWindow(100)], aggregations=[Sum()], num_key_groups=n)
    errors = _errors(keyed, [SESSION], RECORDS)
    assert len(errors) == 1 and "only time TumblingWindow / SlidingWindow" in errors[0]


def test_a_malformed_move_is_one_error_row_from_the_router_instances():
    router = SlotRouter(key="k", table=RoutingTable.uniform(8, 2, PARTS))      # one instance per partition
    errors = _errors(router, [{"op": "move", "key_group": 99, "to": 0}])
    assert len(errors) == 1 and "'key_group' must be an int in [0, 8)" in errors[0]
