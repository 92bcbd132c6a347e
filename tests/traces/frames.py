"""Source micro-batches (frames of the row contract) from records, for the stage layer's local runner."""

from __future__ import annotations

import json

import pandas as pd


def source_frames(batches, partitions: int, topic: str = "t", start_ms: int = 0) -> list[pd.DataFrame]:
    """``batches``: lists of ``(partition, ts, key, value)``; per batch one punctuation row per
    partition (its newest event time so far, None before its first record), as the source does."""
    offsets, newest, frames = [0] * partitions, [None] * partitions, []
    for i, batch in enumerate(batches):
        rows = []
        for p, ts, key, value in sorted(batch, key=lambda r: r[0]):
            rows.append({"kind": "data", "topic": topic, "partition": p, "offset": offsets[p],
                         "key": key.encode(), "value": json.dumps(value).encode(), "event_time_ms": ts,
                         "processing_time_ms": start_ms + i})
            offsets[p] += 1
            newest[p] = ts if newest[p] is None else max(newest[p], ts)
        for p in range(partitions):
            rows.append({"kind": "punctuation", "topic": topic, "partition": p, "offset": offsets[p],
                         "punctuation_ms": newest[p], "processing_time_ms": start_ms + i})
        frames.append(pd.DataFrame(rows))
    return frames
