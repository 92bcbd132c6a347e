"""The source's event times from a JSON field: small chunks are parsed record by record, larger ones
in one ``pyarrow.json`` pass; both give the same times and validity for any value (pure, no
broker, no JVM)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.datasource import kafka_read
from tests.suite import examples

_times = st.one_of(st.integers(kafka_read.MIN_EVENT_MS, kafka_read.MAX_EVENT_MS),
                   st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                   st.none(), st.text(max_size=5), st.lists(st.integers(), max_size=2))


@st.composite
def _value(draw) -> bytes | None:
    kind = draw(st.sampled_from(["object", "object", "object", "no field", "nested", "array", "not json",
                                 "empty", "null", "two lines"]))
    if kind == "object":
        obj = {"ts": draw(_times), **draw(st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2))}
        return json.dumps(obj).encode()
    return {"no field": b'{"x": 1}', "nested": b'{"x": {"ts": 5}}', "array": b"[1, 2]",
            "not json": b"\xff{ts", "empty": b"", "null": None, "two lines": b'{"ts":\n 7}'}[kind]


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(_value(), min_size=1, max_size=kafka_read.SMALL_CHUNK + 8))
def test_the_small_chunk_path_and_the_vectorised_path_agree(values):
    now = np.zeros(len(values), np.int64)
    ev_a, ok_a = kafka_read._event_times_per_record(values, "ts")
    ev_b, ok_b = kafka_read._event_times_vectorised(values, "ts")
    assert ok_a.tolist() == ok_b.tolist()
    assert ev_a[ok_a].tolist() == ev_b[ok_b].tolist()
    ev, ok = kafka_read.event_times(values, "ts", now)      # whichever path the chunk's size picks
    assert (ok.tolist(), ev[ok].tolist()) == (ok_a.tolist(), ev_a[ok_a].tolist())


def test_a_small_chunk_does_not_call_the_json_reader(monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("pyarrow.json called for a small chunk")

    monkeypatch.setattr(kafka_read.pajson, "read_json", refuse)
    ev, ok = kafka_read.event_times([b'{"ts": 5}', b'{"ts": "x"}'], "ts", np.zeros(2, np.int64))
    assert ok.tolist() == [True, False] and int(ev[0]) == 5
