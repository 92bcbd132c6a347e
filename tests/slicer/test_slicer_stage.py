"""SlicerStage without Spark: its rows equal one SlicingWindowOperator per key fed the same
micro-batches (both state layouts, 1-3 key groups), with a window query added halfway."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.slicer import SlicingWindowOperator
from dataflow_kafka.slicer.stage import SlicerStage
from tests.slicer.slicer_reference import same_rows
from tests.suite import examples
from dataflow_kafka.windowing import (
    M4, Count, Max, Mean, Median, SessionWindow, SlidingWindow, Sum, TumblingWindow, parse_command,
)

PARTS = 3
LATENESS = 700
CONFIGS = {
    "keyed": ({"a": SlidingWindow(2_000, 500), "b": TumblingWindow(1_000)}, [Sum(), Count(), Mean(), Max(), M4()]),
    "per_key": ({"a": SlidingWindow(2_000, 500), "s": SessionWindow(300)}, [Sum(), Count(), Median()]),
}
ADD = {"op": "add_window", "stage": "w", "id": "late_add", "window": {"type": "tumbling", "size_ms": 500}}


def _batches(seed: int, n: int = 7):
    rnd = random.Random(seed)
    offsets, newest, out = [0] * PARTS, [None] * PARTS, []
    for b in range(n):
        rows = []
        if b == 4:
            rows += [{"kind": "modification", "topic": "t", "partition": p, "offset": offsets[p],
                      "modification": json.dumps(ADD), "control_offset": 3, "processing_time_ms": b}
                     for p in range(PARTS)]
        for _ in range(rnd.randint(0, 30)):
            p = rnd.randrange(PARTS)
            t = b * 600 + rnd.randint(-1_500, 400)
            rows.append({"kind": "data", "topic": "t", "partition": p, "offset": offsets[p],
                         "k": f"k{rnd.randrange(2 + b)}", "v": None if rnd.random() < 0.05 else float(rnd.randint(1, 9)),
                         "event_time_ms": t, "processing_time_ms": b})
            offsets[p] += 1
            newest[p] = t if newest[p] is None else max(newest[p], t)
        rows += [{"kind": "punctuation", "topic": "t", "partition": p, "offset": offsets[p],
                  "punctuation_ms": newest[p], "processing_time_ms": b} for p in range(PARTS)]
        out.append(control_frame(rows).assign(k=[r.get("k") for r in rows], slicer_value=[r.get("v") for r in rows]))
    return out


def _stage(config: str, n: int) -> SlicerStage:
    windows, aggs = CONFIGS[config]
    return SlicerStage(key="k", value="v", windows=windows, aggregations=aggs, allowed_lateness_ms=LATENESS,
                       num_key_groups=n, name="w")


def _flat(values) -> tuple:
    return tuple(x for v in values for x in (tuple(v) if isinstance(v, (tuple, list)) else (v,)))


def _reference(config: str, batches) -> list[list[tuple]]:
    windows, aggs = CONFIGS[config]
    template = SlicingWindowOperator(windows, aggs, allowed_lateness_ms=LATENESS, emission="compact",
                                     drop_before_watermark=False)   # as the stage
    engines: dict = {}
    wm, out = None, []
    for frame in batches:
        for text in frame.loc[frame["kind"] == "modification", "modification"].unique():
            cmd = json.loads(text)
            cmd.pop("stage")
            for op in [template, *engines.values()]:
                op.apply(parse_command(cmd))
        prev = wm
        data = frame[frame["kind"] == "data"].sort_values(["topic", "partition", "offset"])
        rows = []
        per_key: dict = {}
        for k, v, t in zip(data["k"], data["slicer_value"], data["event_time_ms"]):
            per_key.setdefault(k, []).append((v, int(t)))
        for k, recs in per_key.items():
            if k not in engines:
                engines[k] = SlicingWindowOperator.from_bytes(template.to_bytes())
                if prev is not None:
                    engines[k].process_watermark(prev)
            before = engines[k].dropped_late
            good = [(v, t) for v, t in recs if v is not None and not math.isnan(v)]
            for v, t in good:
                engines[k].process_element(float(v), t)
            if engines[k].dropped_late - before:
                rows.append(("dropped", k, "late", engines[k].dropped_late - before))
            if len(recs) - len(good):
                rows.append(("dropped", k, "null", len(recs) - len(good)))
        puncts = frame[frame["kind"] == "punctuation"]["punctuation_ms"]
        if puncts.notna().all():
            wm = int(puncts.min()) if wm is None else max(wm, int(puncts.min()))
        if wm is not None:
            for k, op in engines.items():
                for r in op.process_watermark(wm):
                    rows.append(("window", k, r.query_id, r.start, r.end, r.update, r.retraction,
                                 *_flat(r.values)))
        out.append(sorted(rows, key=repr))
    return out


def _rows(outs, config: str) -> list[list[tuple]]:
    from dataflow_kafka.windowing.rows import aggregation_columns

    cols = [c for c, _ in aggregation_columns(CONFIGS[config][1])]
    got = []
    for o in outs:
        rows = [("dropped", r["dropped_key"], r["dropped_reason"], r["dropped_count"])
                for r in o[o["kind"] == "dropped"].to_dict("records")]
        rows += [("window", r["k"], r["query_id"], r["window_start_ms"], r["window_end_ms"], r["update"],
                  r["is_retraction"], *(r[c] for c in cols)) for r in o[o["kind"] == "data"].to_dict("records")]
        got.append(sorted(rows, key=repr))
    return got


@settings(max_examples=examples(6), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3), config=st.sampled_from(sorted(CONFIGS)))
def test_stage_equals_one_engine_per_key_with_a_query_added_halfway(seed, n, config):
    assert _stage(config, n).keyed == (config == "keyed")
    batches = _batches(seed)
    got, expected = _rows(Pipeline([_stage(config, n)]).run_local(batches), config), _reference(config, batches)
    for b, (g, e) in enumerate(zip(got, expected)):
        assert same_rows(g, e), f"batch {b}:\n{g}\n!=\n{e}"


def test_added_query_emits_and_output_watermark_holds():
    for config in CONFIGS:
        outs = Pipeline([_stage(config, 2)]).run_local(_batches(1))
        assert any((o["query_id"] == "late_add").any() for o in outs)
        previous = None
        for o in outs:
            data = o[o["kind"] == "data"]
            if previous is not None and len(data):
                assert data["event_time_ms"].min() >= previous
            p = o[o["kind"] == "punctuation"]["punctuation_ms"].dropna()
            previous = int(p.min()) if len(p) else previous


def test_configuration_errors():
    with pytest.raises(ValueError, match="at least one window"):
        SlicerStage(key="k", value="v", windows=[], aggregations=[Sum()])
    with pytest.raises(ValueError, match="at least one aggregation"):
        SlicerStage(key="k", value="v", windows=[TumblingWindow(10)], aggregations=[])
    with pytest.raises(ValueError, match="clash"):
        SlicerStage(key="update", value="v", windows=[TumblingWindow(10)], aggregations=[Sum()])
