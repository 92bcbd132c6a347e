"""Control commands that no stage of the query takes become ``error`` rows: an unknown
op, a command naming a stage that is not in the query, an op its stage does not take. The query
goes on, the commands a stage takes still apply, and a replayed batch reports the same."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import Modification
from dataflow_kafka.keygroups.operator import unclaimed_command
from dataflow_kafka.slicer.stage import SlicerStage
from tests.support import BatchCollector, forget_batches_from, now_ms
from dataflow_kafka.windowing import Count, TumblingWindow

CLAIMS = (("windows", frozenset({"add_window", "remove_window"})), ("tail", frozenset()))
ADD = {"op": "add_window", "id": "2s", "window": {"type": "tumbling", "size_ms": 2000}}


@pytest.mark.parametrize("command, expected", [
    (ADD, None),
    (dict(ADD, stage="windows"), None),
    ({"op": "noop"}, "op 'noop' is not a command of any stage of this query (commands taken here: "
                     "['add_window', 'remove_window']); ignored"),
    (dict(ADD, stage="nope"), "names stage 'nope', which is not in this query (its stages: ['tail', 'windows']); "
                              "ignored"),
    ({"op": "add_window", "stage": "tail"}, "stage 'tail' does not take op 'add_window' (it takes: no commands); "
                                            "ignored"),
    ({"op": "move", "key_group": 1, "to": 0}, "op 'move' is not a command of any stage of this query"),
])
def test_unclaimed_command_names_the_control_offset_and_why(command, expected):
    text = json.dumps(command)
    got = unclaimed_command(Modification(7, text), CLAIMS)
    if expected is None:
        assert got is None
    else:
        assert got.startswith(f"control record @7: {text}: ") and expected in got


def test_no_stage_takes_commands_every_command_is_reported():
    assert "commands taken here: none" in unclaimed_command(Modification(0, '{"op": "add_window"}'),
                                                            (("only", frozenset()),))


def _pipeline(key: str = "CAST(key AS STRING)", value: str = "1") -> Pipeline:
    return Pipeline([SlicerStage(key=key, value=value, aggregations=[Count()],
                                 windows={"1s": TumblingWindow(1_000)}, name="windows", num_key_groups=2)])


def _local_batch(mods: list[str]) -> pd.DataFrame:
    rows = [{"kind": "modification", "topic": "t", "partition": 0, "offset": 0, "modification": m,
             "control_offset": i, "processing_time_ms": 1} for i, m in enumerate(mods)]
    rows += [{"kind": "data", "topic": "t", "partition": 0, "offset": 0, "k": "a", "v": 1.0,
              "event_time_ms": 500, "processing_time_ms": 1},
             {"kind": "punctuation", "topic": "t", "partition": 0, "offset": 1, "punctuation_ms": 5_000,
              "processing_time_ms": 1}]
    return pd.DataFrame(rows)


def test_local_run_reports_each_unclaimed_command_once_and_applies_the_others():
    mods = [json.dumps({"op": "noop"}), json.dumps(ADD), json.dumps(dict(ADD, stage="nope"))]
    (out,) = _pipeline("k", "v").run_local([_local_batch(mods)])
    errors = out[out["kind"] == "error"]["error"].tolist()
    assert [e.split(":")[0] for e in errors] == ["control record @0", "control record @2"]
    data = out[out["kind"] == "data"]
    assert set(data["query_id"]) == {"1s", "2s"}          # the add_window took effect


def test_unclaimed_commands_are_error_rows_on_spark_and_on_replay(spark, kafka, tmp_path):
    topic, control = kafka.topic(1), kafka.topic(1, prefix="ctl")
    t = now_ms() - 10_000
    kafka.produce(topic, [{"key": b"a", "value": json.dumps({"ts": t}).encode()}])
    ck, out = str(tmp_path / "ck"), BatchCollector()

    def run():
        src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
               .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
               .option("controlTopic", control).load())
        q = (_pipeline().apply(src).writeStream.foreachBatch(out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(240)
        assert q.exception() is None

    run()
    kafka.produce(control, [{"value": json.dumps(c).encode()}
                            for c in ({"op": "noop"}, ADD, {"op": "remove_window", "id": "x", "stage": "nope"})])
    kafka.produce(topic, [{"key": b"a", "value": json.dumps({"ts": t + 3_000}).encode()}])
    run()
    batch = max(out.batches)
    errors = sorted(r["error"] for r in out.batches[batch] if r["kind"] == "error")
    assert len(errors) == 2
    assert errors[0].startswith('control record @0: {"op": "noop"}: op \'noop\' is not a command of any stage')
    assert errors[1].startswith("control record @2: ") and "names stage 'nope'" in errors[1]
    before = sorted(map(repr, out.batches[batch]))
    forget_batches_from(ck, batch)
    run()
    assert sorted(map(repr, out.batches[batch])) == before
