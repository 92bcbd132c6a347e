"""The control-topic command parser and query ids."""

from __future__ import annotations

import json

import pytest

from dataflow_kafka.windowing import AddWindow, RemoveWindow, SessionWindow, SlidingWindow, TumblingWindow, parse_command
from dataflow_kafka.windowing.commands import initial_queries, next_query_id


def test_add_window_command():
    cmd = {"op": "add_window", "id": "minute", "window": {"type": "sliding", "size_ms": 60000, "slide_ms": 10000}}
    assert parse_command(cmd) == AddWindow("minute", SlidingWindow(60_000, 10_000))
    assert parse_command(json.dumps(cmd)) == parse_command(json.dumps(cmd).encode()) == parse_command(cmd)
    assert parse_command(AddWindow("m", SessionWindow(5)).to_json()) == AddWindow("m", SessionWindow(5))


@pytest.mark.parametrize("kind, window", [
    ("tumbling", TumblingWindow(10)), ("fixed", TumblingWindow(10)), ("session", SessionWindow(10)),
    ("sessions", SessionWindow(10)),
])
def test_window_type_names(kind, window):
    field = "gap_ms" if "session" in kind else "size_ms"
    assert parse_command({"op": "add_window", "id": "q", "window": {"type": kind, field: 10}}).window == window


def test_remove_window_command():
    assert parse_command('{"op": "remove_window", "id": "minute"}') == RemoveWindow("minute")
    assert RemoveWindow("minute").to_json() == {"op": "remove_window", "id": "minute"}


@pytest.mark.parametrize("cmd", [
    {"op": "rebalance", "key_groups": {"3": "worker-1"}}, {"op": "pause"}, {"no_op": 1}, {"op": 7}, "{}",
])
def test_other_commands_are_not_window_commands(cmd):
    assert parse_command(cmd) is None


@pytest.mark.parametrize("cmd, message", [
    ('{"op": "add_window", ', "command '{\"op\": \"add_window\", ': not JSON"),
    ("[1, 2]", "command=[1, 2]: expected a JSON object with an 'op'"),
    ({"op": "add_window", "window": {"type": "tumbling", "size_ms": 5}}, "add_window.id=None: expected a non-empty string"),
    ({"op": "add_window", "id": 5, "window": {}}, "add_window.id=5: expected a non-empty string"),
    ({"op": "remove_window", "id": ""}, "remove_window.id='': expected a non-empty string"),
    ({"op": "add_window", "id": "q"}, "add_window.window: missing"),
    ({"op": "add_window", "id": "q", "window": {"type": "hopping"}},
     "add_window 'q': window.type='hopping': expected one of tumbling (fixed), sliding, session (sessions), global"),
    ({"op": "add_window", "id": "q", "window": {"type": "tumbling", "size_ms": -1}},
     "add_window 'q': TumblingWindow: size_ms=-1: expected a positive integer"),
    ({"op": "add_window", "id": "q", "window": {"type": "tumbling", "size_ms": 5}, "at": 3},
     "add_window.at=3: not a field of add_window (fields: id, op, window)"),
    ({"op": "remove_window", "id": "q", "window": {}}, "remove_window.window={}: not a field of remove_window"),
])
def test_malformed_window_commands_name_the_field_and_value(cmd, message):
    with pytest.raises(ValueError) as err:
        parse_command(cmd)
    assert str(err.value).startswith(message)


def test_query_ids():
    assert initial_queries([TumblingWindow(1), TumblingWindow(2)]) == [("0", TumblingWindow(1)), ("1", TumblingWindow(2))]
    assert initial_queries({"a": TumblingWindow(1)}) == [("a", TumblingWindow(1))]
    assert initial_queries(None) == []
    with pytest.raises(ValueError, match="query_id=3: expected a non-empty string"):
        initial_queries({3: TumblingWindow(1)})
    with pytest.raises(TypeError, match="expected a list of windows or a dict"):
        initial_queries(TumblingWindow(1))
    assert next_query_id(["0", "1", "3"], None, 0) == ("2", 3)
    assert next_query_id(["0"], "x", 1) == ("x", 1)
    with pytest.raises(ValueError, match="query_id='0': a query with this id exists"):
        next_query_id(["0"], "0", 1)
