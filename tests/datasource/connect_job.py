"""The query of test_connect.py: run by the test in a classic session, and as a script in its own
process as a Spark Connect client (pyspark does not mix a classic and a Connect session in one
process: its column functions build one kind of column or the other).

Usage: python -m tests.datasource.connect_job URL BOOTSTRAP TOPIC OUT_TOPIC CHECKPOINT OUT_JSON
"""

from __future__ import annotations

import json
import sys

GAP_MS = 300


def user_of(click: dict) -> str:
    return click["user"]


def sessionise(state, click: dict):
    ts = click["ts"]
    state = (ts, ts, 1) if state is None or ts - state[1] > GAP_MS else (state[0], ts, state[2] + 1)
    return state, [(click["user"], click["page"], state[0], state[2])]


def session_columns(out: tuple) -> dict:
    user, page, start, depth = out
    return {"user": user, "page": page, "session_start_ms": start, "depth": depth}


def pipeline():
    from dataflow_kafka.keygroups import Pipeline
    from dataflow_kafka.optimistic import StatefulMap
    from dataflow_kafka.optimistic.stage import OptimisticStage
    from dataflow_kafka.slicer.stage import SlicerStage
    from dataflow_kafka.watermarks import AfterWatermark
    from dataflow_kafka.watermarks.stage import WindowingStage
    from dataflow_kafka.windowing import Count, Mean, SlidingWindow, Sum, TumblingWindow

    sessions = OptimisticStage(stage=StatefulMap(sessionise, key=user_of, initial=None), num_key_groups=2,
                               output=session_columns, output_key=("user",), name="sessions",
                               output_schema=(("user", "string"), ("page", "string"),
                                              ("session_start_ms", "bigint"), ("depth", "bigint")))
    windows = SlicerStage(key="page", value="depth", aggregations=[Count(), Mean()], allowed_lateness_ms=2_000,
                          windows={"2s": TumblingWindow(2_000), "4s": SlidingWindow(4_000, 2_000)},
                          num_key_groups=2, name="page_windows")
    panes = WindowingStage(key="page", value="count", select={"query_id": "2s"}, windows=TumblingWindow(6_000),
                           trigger=AfterWatermark(), allowed_lateness_ms=1_000, aggregations=[Sum()],
                           num_key_groups=2, name="panes")
    return Pipeline([sessions, windows, panes]).emit("page_windows")


def clicks(base: int, n: int) -> list[dict]:
    out = []
    for i in range(n):
        late = 1_500 if i % 11 == 10 else 0                   # within the slicer's lateness
        click = {"user": f"u{i % 7}", "page": f"/p{i % 3}", "ts": base + i * 40 - late}
        out.append({"value": json.dumps(click).encode(), "partition": i % 2})
    return out


def run(spark, bootstrap: str, topic: str, out_topic: str, checkpoint: str, listener=None):
    from pyspark.sql import functions as F

    if listener is not None:
        spark.streams.addListener(listener)
    src = (spark.readStream.format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").option("eventTimeField", "ts")
           .option("maxOffsetsPerTrigger", "150").option("endOfInput", "punctuate").load())
    rows = pipeline().apply(src)
    rows = rows.where(F.col("kind").isin("data", "result", "dropped")).drop("processing_time_ms")
    q = (rows.select(F.to_json(F.struct(*sorted(rows.columns))).alias("value")).writeStream
         .format("dataflow-kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert q.awaitTermination(600), "the query did not finish"
    assert q.exception() is None, q.exception()
    if listener is not None:
        spark.streams.removeListener(listener)
    return q



def main(argv: list[str]) -> None:
    from pyspark.sql.streaming import StreamingQueryListener

    from dataflow_kafka.datasource.connect import connect_session
    from dataflow_kafka.datasource.session import is_connect
    from dataflow_kafka.keygroups.metrics import progress_metrics

    url, bootstrap, topic, out_topic, checkpoint, out_json = argv
    heard: list = []

    class Collect(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            heard.append(progress_metrics(event.progress))

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    spark = connect_session(url)
    try:        # stopped on a failure too: the client's listener thread would keep the process alive
        assert is_connect(spark)
        q = run(spark, bootstrap, topic, out_topic, checkpoint, Collect())
        with open(out_json, "w") as f:
            json.dump({"heard": heard, "progress": [progress_metrics(p) for p in q.recentProgress]}, f, default=str)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
