"""``punctuate()``: rows of Spark's JVM Kafka connector as rows of the dataflow-kafka source.

What the Python source (``format("dataflow-kafka")``) puts in each micro-batch, rebuilt from
``spark.readStream.format("kafka")`` rows in one ``mapInArrow`` step:

* **data rows**: Spark's Kafka columns, ``kind = "data"``, ``event_time`` from a JSON field of the
  value (epoch ms) or the record timestamp, ``processing_time`` the batch's;
* **error rows** for records without a usable event time (the message names
  topic-partition@offset), never a failed query;
* **modification rows** for records of the control topic (subscribe to it beside the data topics;
  ``modification`` = the value's text, ``control_offset`` = its offset): the stage layer applies
  them at the start of the batch in every key group, deduplicated by offset;
* **one punctuation row per topic-partition a task read**: the newest event time of its records in
  the task minus ``watermark_delay_ms``. The stage layer keeps the newest punctuation per
  partition, so this equals the source's "newest event time so far - delay". Every task also
  sends a punctuation of ``None`` ("no guarantee yet") for each other partition of ``partitions``:
  a partition that has not delivered anything holds the low watermark back instead of being
  ignored (it never moves a punctuation back).

Replay: each value depends only on the task's rows, and Spark's offset log fixes every batch's
offset ranges, so a re-run batch gives the same rows; ``processing_time`` is Spark's
``current_timestamp()``, the batch timestamp recorded in the offset log.

What it does not do (use ``format("dataflow-kafka")`` for these): modification punctuations and
range stats recorded in the offset log, admission control by event time,
``maxEventTimeAheadMs``, ``endOfInput``, lost offsets reported as rows. It costs more than the
Python source, per micro-batch and per record (one more crossing of every row from the JVM to
Python and back; docs/benchmarks.md): use it when Spark's connector must stay, not for speed.

Example
-------
>>> rows = (spark.readStream.format("kafka")                                  # doctest: +SKIP
...         .option("kafka.bootstrap.servers", bs).option("subscribe", "events,events-control")
...         .option("startingOffsets", "earliest").load())
>>> events = punctuate(rows, partitions={"events": 4}, event_time_field="ts",  # doctest: +SKIP
...                    watermark_delay_ms=2000, control_topic="events-control")
>>> out = pipeline.apply(events)                                               # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["punctuate"]

_KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")


def punctuate(rows, *, partitions: Mapping[str, int], event_time_field: str | None = None,
              watermark_delay_ms: int = 0, control_topic: str | None = None):
    """Rows of the dataflow-kafka source's schema (module docstring) from ``format("kafka")``
    ``rows``.

    Parameters
    ----------
    partitions : mapping
        ``{data topic: number of partitions}``: every partition listed holds the low watermark at
        "no guarantee" until it delivers a record.
    event_time_field : str, optional
        JSON field of the value holding the event time in epoch ms; default: the record timestamp.
    watermark_delay_ms : int
        How far a punctuation trails the newest event time of its partition.
    control_topic : str, optional
        Records of this topic become modification rows (subscribe to it too).
    """
    from pyspark.sql import functions as F

    from dataflow_kafka.datasource.schema import source_schema

    if not partitions or any(not isinstance(n, int) or n < 1 for n in partitions.values()):
        raise InvalidArgumentError(f"partitions must map each data topic to its partition count, got {partitions!r}")
    if not isinstance(watermark_delay_ms, int) or watermark_delay_ms < 0:
        raise InvalidArgumentError(f"watermark_delay_ms must be an int >= 0, got {watermark_delay_ms!r}")
    if event_time_field is None:
        event_time = F.col("timestamp")
    else:
        path = "$." + event_time_field
        event_time = F.timestamp_millis(F.get_json_object(F.col("value").cast("string"), path).cast("bigint"))
    df = rows.select(*_KAFKA_COLUMNS, event_time.alias("event_time"),
                     F.current_timestamp().alias("processing_time"))
    fn = _Punctuator(tuple(sorted(partitions.items())), watermark_delay_ms, control_topic,
                     event_time_field or "the record timestamp")
    return df.mapInArrow(fn, source_schema(False))


@dataclass(frozen=True)
class _Punctuator:
    """The ``mapInArrow`` function (picklable, stateless between tasks)."""

    partitions: tuple[tuple[str, int], ...]
    delay_ms: int
    control_topic: str | None
    event_time_name: str

    def __call__(self, batches: Iterator) -> Iterator:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from dataflow_kafka.datasource.schema import arrow_schema

        schema = arrow_schema(False)
        us = pa.timestamp("us", tz="UTC")
        newest: dict[tuple[str, int], int | None] = {}      # (topic, partition) -> newest event time (us)
        ends: dict[tuple[str, int], int] = {}
        processing_us = None
        for rb in batches:
            n = rb.num_rows
            if n == 0:
                continue
            topic, part, offset = rb.column("topic"), rb.column("partition"), rb.column("offset")
            ev = rb.column("event_time").cast(us)
            processing_us = rb.column("processing_time").cast(us)[0].value
            control = (pc.equal(topic, self.control_topic) if self.control_topic
                       else pa.array(np.zeros(n, dtype=bool)))
            control = pc.fill_null(control, False)
            bad = pc.and_(pc.invert(control), pc.is_null(ev))
            kind = pc.if_else(control, "modification", pc.if_else(bad, "error", "data"))
            text = pc.cast(rb.column("value"), pa.string())
            error = (_error_text(topic, part, offset, bad, self.event_time_name) if pc.any(bad).as_py()
                     else pa.nulls(n, pa.string()))
            cols = {"key": rb.column("key"), "value": rb.column("value"), "topic": topic, "partition": part,
                    "offset": offset, "timestamp": rb.column("timestamp").cast(us),
                    "timestampType": rb.column("timestampType"), "kind": kind,
                    "event_time": pc.if_else(pc.equal(kind, "data"), ev, pa.nulls(n, us)),
                    "punctuation": pa.nulls(n, us),
                    "modification": pc.if_else(control, text, pa.nulls(n, pa.string())),
                    "processing_time": rb.column("processing_time").cast(us), "error": error,
                    "control_offset": pc.if_else(control, offset, pa.nulls(n, pa.int64()))}
            yield pa.RecordBatch.from_arrays([cols[f.name].cast(f.type) for f in schema], schema=schema)
            self._track(newest, ends, topic, part, offset, ev, control)
        if processing_us is None:
            return
        rows = []
        for (t, p), end in ends.items():
            best = newest.get((t, p))
            rows.append((t, p, end, None if best is None else best - self.delay_ms * 1000))
        seen = set(ends)
        for t, count in self.partitions:
            rows += [(t, p, None, None) for p in range(count) if (t, p) not in seen]
        m = len(rows)
        yield pa.RecordBatch.from_arrays([
            pa.array([r[0] for r in rows], pa.string()) if f.name == "topic"
            else pa.array([r[1] for r in rows], pa.int32()) if f.name == "partition"
            else pa.array([r[2] for r in rows], pa.int64()) if f.name == "offset"
            else pa.array(["punctuation"] * m, pa.string()) if f.name == "kind"
            else pa.array([r[3] for r in rows], pa.int64()).cast(us) if f.name == "punctuation"
            else pa.array([processing_us] * m, pa.int64()).cast(us) if f.name == "processing_time"
            else pa.nulls(m, f.type) for f in schema], schema=schema)

    @staticmethod
    def _track(newest, ends, topic, part, offset, ev, control) -> None:
        """Per data topic-partition of the batch: the end offset and the newest valid event time."""
        import numpy as np
        import pyarrow.compute as pc

        data = pc.invert(control)
        topics = np.asarray(topic.filter(data).to_pylist(), dtype=object)
        if len(topics) == 0:
            return
        parts = part.filter(data).to_numpy(zero_copy_only=False)
        offs = offset.filter(data).to_numpy(zero_copy_only=False)
        evd = ev.filter(data)
        valid = evd.is_valid().to_numpy(zero_copy_only=False)
        evs = pc.fill_null(evd.cast("int64"), 0).to_numpy(zero_copy_only=False)
        for t, p in set(zip(topics.tolist(), parts.tolist())):
            mask = (topics == t) & (parts == p)
            ends[(t, p)] = max(ends.get((t, p), 0), int(offs[mask].max()) + 1)
            good = evs[mask & valid]
            if len(good):
                best = int(good.max())
                prev = newest.get((t, p))
                newest[(t, p)] = best if prev is None else max(prev, best)


def _error_text(topic, part, offset, bad, name: str):
    import pyarrow as pa

    out = []
    for t, p, o, b in zip(topic.to_pylist(), part.to_pylist(), offset.to_pylist(), bad.to_pylist()):
        out.append(f"{t}-{p}@{o}: no event time in {name}" if b else None)
    return pa.array(out, pa.string())
