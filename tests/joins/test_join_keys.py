"""A join input's key and columns are read from the expressions it names, never from an upstream
column that merely shares the output column's name: persons ``{id, name}`` and auctions ``{id,
seller}`` joined on ``persons.id = auctions.seller`` (the auction's own ``id`` would key it by the
wrong column and join nothing, silently), and NEXMark's flattened form, where the left key column
``person_id`` exists on every row and is null on auction rows. Locally (``run_local``) and on Spark
over Kafka, both giving the one expected joined row."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dataflow_kafka.joins.stage import JoinInput, WindowJoinStage, current_joins
from dataflow_kafka.keygroups import Pipeline
from dataflow_kafka.keygroups.contract import control_frame
from dataflow_kafka.windowing import TumblingWindow
from tests.support import BatchCollector

WINDOW = TumblingWindow(10_000)
PERSON = {"id": 1, "name": "alice", "ts": 1_000}
AUCTION = {"id": 7, "seller": 1, "ts": 2_000}


def _stage(nexmark_form: bool) -> WindowJoinStage:
    if nexmark_form:       # one flattened row type: person_id / auction_id / seller, null where absent
        persons = JoinInput("persons", key="person_id", columns={"name": "name"}, select={"topic": "persons"})
    else:
        persons = JoinInput("persons", key="id", columns={"name": "name"}, select={"topic": "persons"})
    auctions = JoinInput("auctions", key="seller", columns={"auction": "auction_id" if nexmark_form else "id"},
                         select={"topic": "auctions"})
    return WindowJoinStage(persons, auctions, window=WINDOW, num_key_groups=2)


def _row(topic: str, record: dict, nexmark_form: bool, offset: int) -> dict:
    if nexmark_form:
        cols = {"person_id": record["id"] if topic == "persons" else None, "name": record.get("name"),
                "auction_id": record["id"] if topic == "auctions" else None, "seller": record.get("seller")}
    else:
        cols = {"id": record["id"], "name": record.get("name"), "seller": record.get("seller")}
    return {"kind": "data", "topic": topic, "partition": 0, "offset": offset, "event_time_ms": record["ts"],
            "processing_time_ms": 0, **cols}


def _batch(nexmark_form: bool) -> list[pd.DataFrame]:
    data = pd.DataFrame([_row("persons", PERSON, nexmark_form, 0), _row("auctions", AUCTION, nexmark_form, 0)])
    data = data.astype({c: "Int64" for c in ("id", "seller", "person_id", "auction_id") if c in data.columns})
    marks = control_frame([{"kind": "punctuation", "topic": t, "partition": 0, "offset": 1,
                            "punctuation_ms": 60_000, "processing_time_ms": 0} for t in ("persons", "auctions")])
    return [pd.concat([data, marks], ignore_index=True)]


def _joined(frames, stage) -> dict:
    return {(k, w): sorted((lt[1], rt[1]) for (lt, rt), n in c.items() for _ in range(n) if lt and rt)
            for (k, w), c in current_joins(frames, stage).items()}


def _dropped(frames) -> int:
    return sum(int(f.loc[f["kind"] == "dropped", "count"].sum()) for f in frames if "count" in f.columns)


@pytest.mark.parametrize("nexmark_form", [False, True], ids=["own-id-column", "nexmark-null-key"])
def test_run_local_reads_each_input_key_from_its_own_expression(nexmark_form):
    stage = _stage(nexmark_form)
    out = Pipeline([stage]).run_local(_batch(nexmark_form))
    assert _joined(out, stage) == {(1, (0, 10_000)): [(("alice",), (7,))]}
    assert _dropped(out) == 0


@pytest.mark.parametrize("nexmark_form", [False, True], ids=["own-id-column", "nexmark-null-key"])
def test_spark_reads_each_input_key_from_its_own_expression(spark, kafka, tmp_path, nexmark_form):
    from pyspark.sql import functions as F

    topics = {s: kafka.topic(1, prefix=s) for s in ("persons", "auctions")}
    kafka.produce(topics["persons"], [{"value": json.dumps(PERSON).encode(), "partition": 0}])
    kafka.produce(topics["auctions"], [{"value": json.dumps(AUCTION).encode(), "partition": 0}])
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
           .option("subscribe", ",".join(topics.values())).option("startingOffsets", "earliest")
           .option("eventTimeField", "ts").option("endOfInput", "punctuate").load())
    field = lambda name: F.get_json_object(F.col("value").cast("string"), f"$.{name}")  # noqa: E731
    is_person = F.col("topic") == topics["persons"]
    if nexmark_form:
        src = src.withColumns({"person_id": F.when(is_person, field("id").cast("bigint")),
                               "auction_id": F.when(~is_person, field("id").cast("bigint"))})
    else:
        src = src.withColumn("id", field("id").cast("bigint"))
    src = src.withColumns({"name": field("name"), "seller": field("seller").cast("bigint"),
                           "topic": F.when(is_person, "persons").otherwise("auctions")})
    stage = _stage(nexmark_form)
    got = BatchCollector()
    q = (Pipeline([stage]).apply(src).writeStream.foreachBatch(got)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(300) and q.exception() is None, q.exception()
    frames = [pd.DataFrame(got.batches[b]) for b in sorted(got.batches)]
    assert _joined(frames, stage) == {(1, (0, 10_000)): [(("alice",), (7,))]}
    assert _dropped(frames) == 0


def test_run_local_reads_a_single_input_stage_key_from_its_own_expression():
    """The same rule for a one-input stage: its input ``k`` is the column ``user``, although the
    batch also has a column named ``k`` (the key a previous run used)."""
    from tests.keygroups.toy_stages import TumblingCount

    stage = TumblingCount(key="user", value="v", size_ms=10_000, num_key_groups=2)
    data = pd.DataFrame({"kind": "data", "topic": "t", "partition": 0, "offset": [0, 1, 2],
                         "user": ["a", "a", "b"], "k": ["x", "y", "z"], "v": [1, 1, 1],
                         "event_time_ms": [1_000, 2_000, 3_000], "processing_time_ms": 0})
    marks = control_frame([{"kind": "punctuation", "topic": "t", "partition": 0, "offset": 3,
                            "punctuation_ms": 60_000, "processing_time_ms": 0}])
    out = Pipeline([stage]).run_local([pd.concat([data, marks], ignore_index=True)])
    rows = pd.concat(out)
    counts = {r["k"]: r["count"] for r in rows[rows["kind"] == "data"].to_dict("records")}
    assert counts == {"a": 2, "b": 1}
