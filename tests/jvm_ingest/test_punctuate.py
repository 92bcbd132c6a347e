"""``jvm_ingest.punctuate``'s ``mapInArrow`` function on Arrow batches shaped like Spark's Kafka
rows (no JVM): data, error and modification rows, one punctuation per topic-partition read, "no
guarantee yet" for the other listed partitions, the same rows for the same input."""

from __future__ import annotations

import pyarrow as pa
import pytest

from dataflow_kafka.jvm_ingest.punctuate import _Punctuator

US = pa.timestamp("us", tz="UTC")


def _batch(topic: str, partition: int, offsets: list[int], event_ms: list[int | None], processing_ms: int = 5_000):
    n = len(offsets)
    return pa.RecordBatch.from_pydict({
        "key": pa.array([None] * n, pa.binary()), "value": pa.array([b'{"op": "x"}'] * n),
        "topic": pa.array([topic] * n), "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(offsets, pa.int64()), "timestamp": pa.array([0] * n, US),
        "timestampType": pa.array([0] * n, pa.int32()),
        "event_time": pa.array([None if e is None else e * 1000 for e in event_ms], US),
        "processing_time": pa.array([processing_ms * 1000] * n, US)})


def _rows(batches) -> list[dict]:
    return [r for b in batches for r in b.to_pylist()]


def _ms(ts) -> int | None:
    return None if ts is None else int(ts.timestamp() * 1000)


def test_rows_punctuations_and_modifications():
    fn = _Punctuator((("docs", 3),), 100, "ctl", "ts")
    rows = _rows(fn(iter([_batch("docs", 1, [10, 11, 12], [500, None, 700]), _batch("ctl", 0, [3], [None])])))
    kinds = [(r["kind"], r["topic"], r["partition"], r["offset"]) for r in rows]
    assert kinds[:4] == [("data", "docs", 1, 10), ("error", "docs", 1, 11), ("data", "docs", 1, 12),
                         ("modification", "ctl", 0, 3)]
    assert rows[1]["error"] == "docs-1@11: no event time in ts" and rows[1]["event_time"] is None
    assert rows[3]["modification"] == '{"op": "x"}' and rows[3]["control_offset"] == 3
    assert [_ms(r["event_time"]) for r in rows if r["kind"] == "data"] == [500, 700]
    puncts = {(r["topic"], r["partition"]): (r["offset"], _ms(r["punctuation"])) for r in rows
              if r["kind"] == "punctuation"}
    # the partition read: newest event time - delay, end offset; the others: no guarantee yet
    assert puncts == {("docs", 1): (13, 600), ("docs", 0): (None, None), ("docs", 2): (None, None)}
    assert {_ms(r["processing_time"]) for r in rows} == {5_000}


def test_same_input_same_rows_and_no_rows_without_input():
    fn = _Punctuator((("docs", 2),), 0, None, "the record timestamp")
    batches = [_batch("docs", 0, [0, 1], [900, 800]), _batch("docs", 0, [2], [950])]
    first, again = _rows(fn(iter(batches))), _rows(fn(iter(batches)))
    assert first == again
    assert [(r["partition"], _ms(r["punctuation"])) for r in first if r["kind"] == "punctuation"] == [(0, 950), (1, None)]
    assert list(fn(iter([]))) == []


@pytest.mark.parametrize("bad", [{}, {"docs": 0}, {"docs": "4"}])
def test_partitions_must_name_counts(bad):
    from dataflow_kafka.jvm_ingest import punctuate

    with pytest.raises(ValueError, match="partitions"):
        punctuate(None, partitions=bad)
