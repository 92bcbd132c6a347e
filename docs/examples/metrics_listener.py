"""A StreamingQueryListener that prints each stage's metrics after every micro-batch.

Every stage of a pipeline reports, per batch, its input and output low watermarks, the records it
took and emitted, its retractions and the records it dropped by reason; ``Pipeline.apply`` folds
them into the query's progress (``observedMetrics["dataflow-kafka:<stage>"]``), so anything that
listens to Spark's progress sees them. ``dk.progress_metrics`` reads them back, with the consumer
lag of each source and Spark's own state size per operator.

    spark.streams.addListener(PrintStageMetrics(pipeline))
"""

from __future__ import annotations

from pyspark.sql.streaming import StreamingQueryListener

import dataflow_kafka as dk


class PrintStageMetrics(StreamingQueryListener):
    """Prints one line per stage and batch; keeps what it printed in ``self.seen``."""

    def __init__(self, pipeline=None) -> None:
        self.pipeline = pipeline
        self.seen: list[dict] = []

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        m = dk.progress_metrics(event.progress, self.pipeline)
        self.seen.append(m)
        lag = sum(s["total_lag"] or 0 for s in m["sources"])
        for stage, v in sorted(m["stages"].items()):
            print(f"batch {m['batch_id']} {stage}: watermark in {v['watermark_in_ms']} out {v['watermark_out_ms']}, "
                  f"records {v['records_in']} -> {v['records_out']} ({v['retractions']} retractions), dropped late "
                  f"{v['dropped_late']} null {v['dropped_null']}; consumer lag {lag}")

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass
