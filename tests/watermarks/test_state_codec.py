"""The Dataflow drivers' state codec (``watermarks._codec``): values decode back, equal values
encode to equal bytes however their objects are shared, and state written by earlier formats
still loads: the varint format (checkpoints of releases before 2026-12-01,
``data/state_codec_varint.json``) and the per-element driver's format 3, every key's windows in
one pickle (``data/state_codec_rows_format3.json``, written by 0d59a8b; format 4 encodes each key's
windows on their own)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.errors import InvalidArgumentError
from dataflow_kafka.watermarks import AfterCount, AfterWatermark, DefaultTrigger, _codec
from dataflow_kafka.watermarks.multi import MultiQueryDriver
from dataflow_kafka.windowing import Count, SessionWindow, Sum, TumblingWindow

VARINT = json.loads((Path(__file__).parent / "data" / "state_codec_varint.json").read_text())
ROWS_FORMAT3 = json.loads((Path(__file__).parent / "data" / "state_codec_rows_format3.json").read_text())

INT64 = st.integers(-2**63, 2**63 - 1)
ANY_INT = st.one_of(INT64, st.integers(-2**70, 2**70), st.integers(-200, 200))
SCALAR = st.one_of(st.none(), st.booleans(), ANY_INT, st.floats(allow_nan=False), st.text(max_size=4),
                   st.binary(max_size=4))
PLAIN = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.lists(inner, max_size=5).map(tuple),
    st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-5, 5)), inner, max_size=4)), max_leaves=40)

#: values the varint format wrote (the fixture holds their bytes): edges of its varints, its numpy
#: pass over rows of integer tuples, and an object it pickled
SAMPLES = [None, True, False, 0, -1, 127, 128, -65, 2**63 - 1, -2**63, 2**70, 1.5, "", "snö", b"\x00\xff",
           [1, (2, "x"), {"k": [None]}], [(i, 1767225600000 + 7 * i) for i in range(40)],
           OrderedDict(a=1)]


@settings(max_examples=300, deadline=None)
@given(PLAIN)
def test_values_decode_back(value):
    assert _codec.decode(_codec.encode(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.lists(PLAIN, min_size=1, max_size=4))
def test_equal_values_encode_to_equal_bytes_however_objects_are_shared(parts):
    shared = (parts[0], parts[0], parts)              # one object twice: a memoising pickler writes a reference
    def fresh(v):                                     # an equal value made of new objects
        return _codec.decode(_codec.encode(v))
    separate = (fresh(parts[0]), fresh(parts[0]), fresh(parts))
    assert separate == shared
    assert _codec.encode(shared) == _codec.encode(separate)


def test_the_varint_format_still_decodes():
    for value, hexed in zip(SAMPLES, VARINT["samples"], strict=True):
        assert _codec.decode(bytes.fromhex(hexed)) == value


def test_corrupt_bytes_are_named():
    with pytest.raises(InvalidArgumentError, match="trailing"):
        _codec.decode(bytes.fromhex(VARINT["samples"][3]) + b"\x00")
    with pytest.raises(InvalidArgumentError, match="trailing"):
        _codec.decode(_codec.encode([1, 2]) + b"\x00")


# -- drivers' state written in earlier formats -----------------------------------------------------

def _sessions() -> tuple[MultiQueryDriver, list, list]:
    """A merging query, per-element driver: sessions (gap 10) fired at the watermark and per
    late element, accumulating; int and text keys. After the fixture, a late element fuses two
    sessions already fired."""
    d = MultiQueryDriver([SessionWindow(10)], AfterWatermark(late=AfterCount(1)), "accumulating",
                         allowed_lateness_ms=100, combiner=Count())
    written = [("add", [(1, 3), (2, 8), (3, 30)], 7), ("add", [(4, 5)], "b"), ("wm", 25), ("add", [(5, 20)], 7)]
    after = [("wm", 60), ("add", [(7, 25)], 7), ("add", [(6, 12)], "b"), ("wm", 400)]
    return d, written, after


def _tumbling() -> tuple[MultiQueryDriver, list, list]:
    """A non-merging query on integral values (the columnar driver) beside a session query."""
    d = MultiQueryDriver({"t": TumblingWindow(10), "s": SessionWindow(5)}, DefaultTrigger(), "accumulating",
                         allowed_lateness_ms=10, combiner=Sum(), integral_values=True)
    written = [("add", [(1, 5), (2, 25), (4, 41)], "k"), ("add", [(7, 30)], "j"), ("wm", 33)]
    after = [("add", [(9, 36)], "k"), ("wm", 200)]
    return d, written, after


def _run(d: MultiQueryDriver, steps: list) -> list:
    out = []
    for step in steps:
        out += d.add(step[1], key=step[2]) if step[0] == "add" else d.advance_watermark(step[1])
    return out


def scenario() -> dict:
    """Per scenario a builder of its driver after the steps the fixture's state was written at."""
    def build(make):
        d, written, _ = make()
        _run(d, written)
        return d
    return {"sessions": lambda: build(_sessions), "tumbling": lambda: build(_tumbling)}


@pytest.mark.parametrize("written", ["varint", "rows format 3"])
@pytest.mark.parametrize("name, make", [("sessions", _sessions), ("tumbling", _tumbling)])
def test_a_driver_state_written_in_an_earlier_format_loads_and_runs_on(name, make, written):
    fixture, ref = {"varint": VARINT, "rows format 3": ROWS_FORMAT3}[written][name], scenario()[name]()
    _, _, after = make()
    whole = make()[0]
    whole.load_bytes(bytes.fromhex(fixture["whole"]))
    logged = make()[0]
    logged.load_bytes(bytes.fromhex(fixture["logged"]), {int(i): bytes.fromhex(b) for i, b in
                                                         fixture["segments"].items()})
    for d in (whole, logged):
        assert d.to_bytes() == ref.to_bytes()          # the same state, now written in the new format
    expected = _run(ref, after)
    assert expected
    assert _run(whole, after) == expected
    assert _run(logged, after) == expected
