"""The routing table (pure): slot placement by Spark's hash, move commands, versioning."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataflow_kafka.balancing.routing_table import RoutingTable, murmur3_int, parse_move, slot_ids_for
from dataflow_kafka.keygroups import Modification


def test_murmur3_known_values():
    # Spark: SELECT hash(CAST(0 AS INT)), hash(CAST(1 AS INT)), hash(CAST(-1 AS INT)) (checked on
    # Spark in test_migration_spark.py for more values)
    assert murmur3_int(0) == 933211791
    assert murmur3_int(1) == -559580957
    assert murmur3_int(-1) == -1604776387


@given(st.integers(1, 40), st.integers(1, 8))
def test_slot_i_lands_on_partition_i_mod_n_with_distinct_ids(slots, n):
    ids = slot_ids_for(slots, n)
    assert len(set(ids)) == slots and all(i >= 0 for i in ids)
    assert [murmur3_int(s) % n for s in ids] == [i % n for i in range(slots)]


def _mods(*commands, start=0):
    return [Modification(start + i, json.dumps(c)) for i, c in enumerate(commands)]


def test_moves_apply_in_order_once_and_only_to_their_stage():
    t = RoutingTable.uniform(8, 4, 2)
    t2, applied, errors = t.apply(_mods({"op": "move", "key_group": 1, "to": 3},
                                        {"op": "add_window", "id": "x"},
                                        {"op": "move", "key_group": 1, "to": 2},
                                        {"op": "move", "key_group": 5, "to": 0, "stage": "other"}), stage="router")
    assert [(m.key_group, m.to) for m in applied] == [(1, 3), (1, 2)] and not errors
    assert t2.slot_of(1) == 2 and t2.slot_of(5) == 1 and t2.version == 2
    assert t2.slot_ids_of([1, 2]).tolist() == [t2.slot_ids[2], t2.slot_ids[2]]
    again, applied, _ = t2.apply(_mods({"op": "move", "key_group": 1, "to": 0}))   # offsets 0: applied before
    assert again == t2 and not applied
    assert RoutingTable.from_json(t2.to_json()) == t2


@pytest.mark.parametrize("cmd, message", [
    ('{"op": "move", "key_group": 8, "to": 0}', "'key_group' must be an int in [0, 8), got 8"),
    ('{"op": "move", "key_group": 1, "to": -1}', "'to' must be an int in [0, 4), got -1"),
    ('{"op": "move", "key_group": "1", "to": 0}', "'key_group' must be an int in [0, 8), got '1'"),
    ('{"op": "move", "key_group": 1, "to": 0, "stage": 3}', "'stage' must be a string"),
    ("not json", "not JSON"),
])
def test_malformed_moves_name_the_command(cmd, message):
    with pytest.raises(ValueError, match="control command @7") as e:
        parse_move(cmd, 7, 8, 4)
    assert message in str(e.value)
    _, applied, errors = RoutingTable.uniform(8, 4, 2).apply([Modification(7, cmd)])
    assert not applied and len(errors) == 1 and message in errors[0]


def test_bad_tables_are_rejected():
    with pytest.raises(ValueError, match="num_slots must be a positive int"):
        RoutingTable.uniform(8, 0, 2)
    with pytest.raises(ValueError, match="assignment names slot 4, there are 4 slots"):
        RoutingTable(2, slot_ids_for(4, 2), (0, 4))
