"""Spark's JVM Kafka connector for ingestion, this project's stages after it: :func:`punctuate`
turns ``spark.readStream.format("kafka")`` rows into the rows of the dataflow-kafka source's
schema (data, per-partition timestamp punctuations, modifications from a control topic), so a
``keygroups.Pipeline`` (every engine's stages) runs on them as on ``format("dataflow-kafka")``.

For pipelines that must keep Spark's connector for ingestion. Measured on 2026-11-27 it is not
faster than ``format("dataflow-kafka")`` (docs/benchmarks.md), which stays the default and also
records modification punctuations and range stats in the offset log.
"""

from dataflow_kafka.errors import require_module_name

require_module_name(__name__, "dataflow_kafka.jvm_ingest")  # one name per file: never `import jvm_ingest`

from dataflow_kafka.jvm_ingest.punctuate import punctuate

__all__ = ["punctuate"]
