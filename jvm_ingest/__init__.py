"""Spark's JVM Kafka connector for ingestion, this project's stages after it: :func:`punctuate`
turns ``spark.readStream.format("kafka")`` rows into the rows of the dataflow-kafka source's
schema (data, per-partition timestamp punctuations, modifications from a control topic), so a
``keygroups.Pipeline`` (every engine's stages) runs on them as on ``format("dataflow-kafka")``.

For heavy topics whose ingestion cost matters more than what only the Python source does (range
stats in the offset log, admission control by event time, ``endOfInput``); figures in
docs/benchmarks.md.
"""

from jvm_ingest.punctuate import punctuate

__all__ = ["punctuate"]
