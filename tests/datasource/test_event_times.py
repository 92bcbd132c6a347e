"""The source's event times from a JSON field: small chunks are parsed record by record, larger ones
in one ``pyarrow.json`` pass; both give the same times and validity for any value (pure, no
broker, no JVM)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
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


_ALSO = st.sampled_from([{"a": "bigint"}, {"a": "bigint", "b": "bigint"}, {"ts": "bigint", "a": "bigint"},
                         {"ts": "string"}, {"a": "string"}, {"b": "double"}])


@st.composite
def _object(draw, any_type: bool = True) -> bytes:
    """A JSON object value with fields ``ts``, ``a``, ``b``, ``c``, each missing, an integer or (when
    ``any_type``) a text, a float, null or a boolean."""
    field = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(0, 9),
                      *([st.sampled_from(["x", 1.5, None, True])] if any_type else []))
    return json.dumps(draw(st.dictionaries(st.sampled_from(["ts", "a", "b", "c"]), field))).encode()


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.one_of(_object(), _object(), _object(), _value()),
                min_size=kafka_read.SMALL_CHUNK, max_size=kafka_read.SMALL_CHUNK + 8) | st.lists(
           _object(any_type=False), min_size=kafka_read.SMALL_CHUNK, max_size=kafka_read.SMALL_CHUNK + 8), _ALSO)
def test_fields_parsed_with_the_event_times_are_the_fields_parsed_alone(values, also):
    """``event_times_and_fields``: the event times of the pass alone, whatever else it reads; each
    field it returns equals what the stage's own Arrow parse gives for those values
    (``keygroups.computed.json_fields_of_arrow``), which must then take them; None when the shared
    pass was refused."""
    from dataflow_kafka.keygroups.computed import arrow_type_of, json_fields_of_arrow

    ev_a, ok_a = kafka_read._event_times_vectorised(values, "ts")
    ev_b, ok_b, parsed = kafka_read.event_times_and_fields(values, "ts", {f: arrow_type_of(t) for f, t in also.items()})
    assert ok_a.tolist() == ok_b.tolist() and ev_a[ok_a].tolist() == ev_b[ok_b].tolist()
    if parsed is not None:
        assert sorted(parsed) == sorted(also)
        alone = json_fields_of_arrow(pa.array(values, pa.binary()), also)
        for f in also:
            assert parsed[f].equals(alone[f]), f


def test_clean_values_get_their_fields_from_the_shared_pass():
    values = [json.dumps({"ts": 1_700_000_000_000 + i, "a": i, "b": "x"}).encode() for i in range(100)]
    from dataflow_kafka.keygroups.computed import arrow_type_of

    ev, ok, parsed = kafka_read.event_times_and_fields(values, "ts", {"a": arrow_type_of("bigint")})
    assert ok.all() and parsed["a"].to_pylist() == list(range(100))
    # a field of another type than the values hold: the event times alone, the field left to the stage
    ev2, ok2, refused = kafka_read.event_times_and_fields(values, "ts", {"b": arrow_type_of("bigint")})
    assert refused is None and ok2.all() and ev2.tolist() == ev.tolist()


# -- the C scan of integer fields (datasource/_jsonints.c): pyarrow.json's answer or none ----------

_SCALARS = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-2**70, 2**70), st.integers(0, 9),
                     st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
                     st.text(max_size=4), st.text(alphabet='"\\/\b\f\n\r\t\x01ab', max_size=4))


@st.composite
def _any_json(draw) -> bytes:
    """A JSON value as a source may see it: flat or nested objects of the fields ``ts``, ``a``,
    ``b`` and others with values of every kind, in several spacings, or a broken variant."""
    fields = st.sampled_from(["ts", "a", "b", "c", "t", "tsx", ""])
    inner = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=2), st.dictionaries(fields, _SCALARS, max_size=2))
    obj = draw(st.dictionaries(fields, st.one_of(_SCALARS, _SCALARS, inner), max_size=5))
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", " :  ")])))
    if draw(st.booleans()):
        return text.encode()
    edit = draw(st.sampled_from(["cut", "duplicate", "escaped key", "lead", "trail", "garbage", "float"]))
    if edit == "cut":
        return text.encode()[:draw(st.integers(0, max(0, len(text.encode()) - 1)))]
    return {"duplicate": text[:-1] + (', "ts": 5}' if obj else '"ts": 5, "ts": 6}'),
            "escaped key": text.replace('"ts"', '"t\\u0073"'), "lead": " \t" + text, "trail": text + " ",
            "garbage": text + "x", "float": text.replace("1", "1.0", 1)}[edit].encode()


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_any_json(), min_size=1, max_size=12), _ALSO)
def test_the_c_scan_answers_only_as_pyarrow_json_does(values, also):
    """Where ``_jsonints`` answers, the event times, their validity and the fields equal those of the
    ``pyarrow.json`` pass (or its record-by-record fallback) on the same values; where it is not
    certain it answers None and that pass runs."""
    import pytest

    from dataflow_kafka.keygroups.computed import arrow_type_of

    types = {f: arrow_type_of(t) for f, t in also.items()}
    with_c = kafka_read._event_times_pass(values, "ts", types)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kafka_read, "_json_ints", lambda: None)
        without = kafka_read._event_times_pass(values, "ts", types)
    assert with_c[1].tolist() == without[1].tolist()
    assert with_c[0][with_c[1]].tolist() == without[0][without[1]].tolist()
    if with_c[2] is not None and without[2] is not None:
        assert sorted(with_c[2]) == sorted(without[2])
        for f in with_c[2]:
            assert with_c[2][f].equals(without[2][f]), f


def test_flat_values_are_read_by_the_c_scan_and_the_rest_left_to_pyarrow_json():
    flat = [json.dumps({"a": i, "ts": 1_700_000_000_000 + i, "b": -i, "s": 'x"\\y', "f": 1.5, "n": None,
                        "t": True}).encode() for i in range(100)] + [b'{}', b'{"ts": null}', b'{"ts":-0}']
    scanned = kafka_read._int_fields_in_c(pa.array(flat, pa.binary()), ["ts", "a"])
    assert scanned is not None, "the extension datasource/_jsonints.c was not built"
    ts, present = scanned["ts"]
    assert present.tolist() == [True] * 100 + [False, False, True]
    assert ts[:100].tolist() == [1_700_000_000_000 + i for i in range(100)] and int(ts[102]) == 0
    assert scanned["a"][0][:100].tolist() == list(range(100))
    sliced = pa.array(flat, pa.binary()).slice(40, 10)        # an array's offset into its buffers
    assert kafka_read._int_fields_in_c(sliced, ["a"])["a"][0].tolist() == list(range(40, 50))
    for refused in (b'{"ts": {"x": 1}}', b'{"ts": [1]}', b'{"x": {"y": 1}, "ts": 1}', '{"ts": 1, "é": 2}'.encode(),
                    b'{"ts": 1,\n "a": 2}', b'{"t\\u0073": 1}', b'{"ts": 1.5}', b'{"ts": 1e3}', b'{"ts": 1, "ts": 2}',
                    b'{"ts": 9223372036854775808}', b'{"ts": "1"}', b'{"ts": true}', b'[1]', b'', b'{"ts": 1} x',
                    b'{"ts": 01}', b'{"ts": 1,}', b'{"a": "\x01"}'):
        assert kafka_read._int_fields_in_c(pa.array([flat[0], refused], pa.binary()), ["ts"]) is None, refused
    big = kafka_read._int_fields_in_c(pa.array([b'{"ts": -9223372036854775808}', b'{"ts":9223372036854775807}']),
                                      ["ts"])
    assert big["ts"][0].tolist() == [-2**63, 2**63 - 1]
