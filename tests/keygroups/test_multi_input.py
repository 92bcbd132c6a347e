"""Multi-input stages on the stage layer without Spark: per-input watermarks (min over every
sender of every input, expected senders), modifications and pass-on rows once, fan-in from
upstream pipelines, fan-out, the pipeline's shape (names, plan, errors)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dataflow_kafka.keygroups import Input, InputWatermarks, Pipeline, PunctuationTracker
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.keygroups.operator import run_key_group
from tests.keygroups.toy_stages import InputCount, TumblingCount

BOTH = {"left": ("k", {"topic": "L"}), "right": ("k", {"topic": "R"})}


def frame(records=(), marks=(), mods=(), errors=(), pt=0) -> pd.DataFrame:
    """A source micro-batch: ``records`` = [(topic, partition, offset, k, event_time_ms)], ``marks`` =
    [(topic, partition, punctuation_ms)], ``mods`` = [(topic, partition, control offset, command)]."""
    data = pd.DataFrame([{"kind": "data", "topic": t, "partition": p, "offset": o, "k": k, "v": 1.0,
                          "event_time_ms": ts, "processing_time_ms": pt} for t, p, o, k, ts in records],
                        columns=["kind", "topic", "partition", "offset", "k", "v", "event_time_ms", "processing_time_ms"])
    ctl = control_frame([{"kind": "punctuation", "topic": t, "partition": p, "offset": 99, "punctuation_ms": w,
                          "processing_time_ms": pt} for t, p, w in marks]
                        + [{"kind": "modification", "topic": t, "partition": p, "offset": 0, "control_offset": c,
                            "modification": json.dumps(cmd), "processing_time_ms": pt} for t, p, c, cmd in mods]
                        + [{"kind": "error", "topic": t, "partition": 0, "error": e, "processing_time_ms": pt}
                           for t, e in errors])
    return pd.concat([ctl, data], ignore_index=True)


def rows(out: pd.DataFrame, kind: str = "data", cols=("k", "from_input", "count", "bumps")) -> list:
    d = out[out["kind"] == kind]
    return sorted(tuple(r) for r in d[list(cols)].itertuples(index=False))


# -- watermarks ----------------------------------------------------------------------------------
def test_input_watermarks_are_the_minimum_over_every_sender_of_every_input():
    w = InputWatermarks(["a", "b"])
    w.update("a", "t-0", 50)
    w.update("a", "t-1", 40)
    assert w.low_watermark_ms is None and w.per_input() == {"a": 40, "b": None}
    w.update("b", "u-0", 45)
    assert w.low_watermark_ms == 40
    w.update("a", "t-1", 90)
    assert w.low_watermark_ms == 45 and w.per_input() == {"a": 50, "b": 45}
    again = InputWatermarks.from_bytes(w.to_bytes())
    assert again.per_input() == w.per_input() and again.low_watermark_ms == 45
    with pytest.raises(ValueError, match="inputs are \\['a', 'b'\\]"):
        w.update("c", "x-0", 1)


def test_expected_senders_hold_the_minimum_until_they_punctuate():
    t = PunctuationTracker(expected=["up-0", "up-1"])
    t.update("up-0", 100, processing_time_ms=1_000)
    assert t.low_watermark_ms is None                     # up-1 has said nothing: it may be behind
    t.update("up-1", 70, processing_time_ms=1_000)
    assert t.low_watermark_ms == 70
    idle = PunctuationTracker(idle_timeout_ms=500, expected=["up-0", "up-1"])
    idle.update("up-0", 100, end_offset=1, processing_time_ms=1_000)
    assert idle.low_watermark_ms is None
    idle.update("up-0", 120, end_offset=2, processing_time_ms=1_600)     # up-1 silent for 600 ms: idle
    assert idle.low_watermark_ms == 120


def test_a_source_split_by_topic_gives_each_input_its_own_partitions_watermark():
    p = Pipeline([InputCount(BOTH, num_key_groups=3)])
    out = p.run_local([frame([("L", 0, 0, "a", 10)], [("L", 0, 50), ("L", 1, 60)]),
                       frame([("R", 0, 0, "a", 20)], [("R", 0, 30), ("L", 0, 80)]),
                       frame([], [("R", 0, 90), ("L", 1, 95)])])
    marks = [json.loads(m)["marks"] for o in out for m in o.loc[o.kind == "metrics", "metrics"][:1]]
    assert marks == [{"left": 50, "right": None}, {"left": 60, "right": 30}, {"left": 80, "right": 90}]
    assert [sorted(set(o.loc[o.kind == "punctuation", "punctuation_ms"].tolist()), key=str) for o in out] == \
        [[pd.NA], [30], [80]]


def test_an_upstream_operators_key_groups_are_expected_senders():
    up = TumblingCount(key="k", value="v", size_ms=10, num_key_groups=3, name="up")
    p = Pipeline.join(InputCount({"left": ("k", None), "right": ("k", None)}, name="both"), left=up)
    spec = p.specs()[0]
    assert spec.inputs == ("left", "right") and spec.expected == (("left", ("up-0", "up-1", "up-2")),)
    some = control_frame([{"kind": "punctuation", "topic": "up", "partition": g, "offset": 1, "punctuation_ms": 50,
                           "input": "left", "processing_time_ms": 0} for g in (0, 1)]
                         + [{"kind": "punctuation", "topic": "src", "partition": 0, "offset": 1, "punctuation_ms": 70,
                             "input": "right", "processing_time_ms": 0}])
    some["input"] = ["left", "left", "right"]
    out, blob = run_key_group(spec, 0, some, None)
    assert out.loc[out.kind == "punctuation", "punctuation_ms"].isna().all()       # up-2 not heard from
    last = some.iloc[:1].assign(partition=2, punctuation_ms=60)
    out, _ = run_key_group(spec, 0, last, blob)
    assert out.loc[out.kind == "punctuation", "punctuation_ms"].tolist() == [50]


# -- what reaches the stage once -----------------------------------------------------------------
def test_a_command_read_by_both_inputs_is_applied_once_and_forwarded_once():
    p = Pipeline([InputCount(BOTH, num_key_groups=3, name="both")])
    bump = {"op": "bump"}
    out = p.run_local([frame([("L", 0, 0, "a", 10), ("R", 0, 0, "b", 11)], [("L", 0, 20), ("R", 0, 20)],
                             mods=[("L", 0, 5, bump), ("R", 0, 5, bump)], errors=[("L", "bad record L-0@3")]),
                       frame([("L", 0, 1, "a", 30), ("R", 0, 1, "a", 31)], [("L", 0, 40), ("R", 0, 40)],
                             mods=[("L", 0, 5, bump), ("R", 0, 6, {"op": "nope"})])])
    assert rows(out[0]) == [("a", "left", 1, 1), ("b", "right", 1, 1)]
    assert rows(out[1]) == [("a", "left", 2, 1), ("a", "right", 1, 1)]      # offset 5 again: not re-applied
    assert rows(out[0], "modification", ("control_offset",)) == [(5,)]
    assert rows(out[0], "error", ("error",)) == [("bad record L-0@3",)]      # passed on once, not per input
    errors = rows(out[1], "error", ("error",))
    assert len(errors) == 1 and "op 'nope' is not a command of any stage" in errors[0][0]


def test_inputs_from_upstream_pipelines_and_one_upstream_on_both_inputs():
    up_l = TumblingCount(key="k", value="v", size_ms=10, num_key_groups=2, name="count")
    up_r = TumblingCount(key="k", value="v", size_ms=10, num_key_groups=3, name="count")   # same name: renamed
    both = InputCount({"left": ("k", None), "right": ("k", None)}, num_key_groups=2, name="both")
    joined = Pipeline.join(both, left=up_l, right=up_r)
    assert [s.name for s in joined.all_stages()] == ["count", "count_2", "both"]
    assert [[s.name for s in op] for op in joined.plan()] == [["count"], ["count_2"], ["both"]]
    batches = [frame([("L", 0, 0, "a", 3), ("R", 0, 0, "a", 4)], [("L", 0, 15), ("R", 0, 15)]),
               frame([("L", 0, 1, "b", 12)], [("L", 0, 25), ("R", 0, 25)])]
    out = joined.run_local(batches)
    assert rows(out[0]) == [("a", "left", 1, 0), ("a", "right", 1, 0)]      # each count of key a, from each input
    fan_out = Pipeline([up_l]).then(both)                                       # one upstream, both inputs
    assert [[s.name for s in op] for op in fan_out.plan()] == [["count"], ["both"]]
    assert rows(fan_out.run_local(batches)[0]) == rows(out[0])
    assert rows(Pipeline([up_l, both]).run_local(batches)[1]) == rows(fan_out.run_local(batches)[1])


def test_inputs_reading_two_sources():
    both = InputCount({"left": ("k", None), "right": ("k", None)}, num_key_groups=2)
    batches = {"left": [frame([("L", 0, 0, "a", 3)], [("L", 0, 15)])],
               "right": [frame([("R", 0, 0, "a", 4)], [("R", 0, 9)])]}
    out = Pipeline([both]).run_local(batches)
    assert rows(out[0]) == [("a", "left", 1, 0), ("a", "right", 1, 0)]
    assert set(out[0].loc[out[0].kind == "punctuation", "punctuation_ms"]) == {9}
    with pytest.raises(ValueError, match="no source given for input\\(s\\) \\['right'\\]"):
        Pipeline([both]).run_local({"left": batches["left"]})
    with pytest.raises(ValueError, match="same number of micro-batches"):
        Pipeline([both]).run_local({"left": batches["left"] * 2, "right": batches["right"]})


def test_the_shape_is_checked_when_the_pipeline_is_built():
    both = InputCount(BOTH)
    with pytest.raises(ValueError, match="\\['middle'\\] are not inputs of stage"):
        Pipeline.join(both, middle=TumblingCount())
    with pytest.raises(ValueError, match="is not a multi-input stage"):
        Pipeline.join(TumblingCount(), left=TumblingCount())
    with pytest.raises(ValueError, match="key must have one type in every input"):
        Pipeline.join(InputCount({"left": ("k", None), "right": ("count", None)}),
                      right=TumblingCount(name="up")).bound_specs({"k": "string", "v": "double"})
    with pytest.raises(ValueError, match="expected a non-empty dict"):
        Input("x", {})
    head = Pipeline([TumblingCount(name="up"), both, TumblingCount(key="k", value="count", name="after")])
    assert [s.name for s in head.stages] == [both.name or "input_count", "after"]
    assert list(head.upstreams) == ["left", "right"] and head.upstreams["left"] is head.upstreams["right"]


def test_docstring_examples():
    import doctest

    import dataflow_kafka.keygroups.punctuation as module
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
