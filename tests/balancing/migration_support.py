"""Shared by the migration tests: source micro-batches for the router -> compute -> consolidate
pipeline (column inputs computed as the router's SQL expressions compute them), canonical rows,
and a brute-force reference of the windowed aggregation."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups import key_group_of
from dataflow_kafka.keygroups.contract import control_frame

RESULT = ("key", "query_id", "window_start_ms", "window_end_ms", "sum", "count", "min", "max", "mean")


def source_batch(records, punctuations, num_key_groups: int, mods=(), pt: int = 0, topic: str = "t") -> pd.DataFrame:
    """``records`` = [(partition, offset, key, value, event_time_ms)]; ``punctuations`` =
    {partition: punctuation_ms}; ``mods`` = [(control_offset, command dict)], one copy per partition."""
    rows = []
    for off, cmd in mods:
        for p in punctuations:
            rows.append({"kind": "modification", "topic": topic, "partition": p, "offset": 0,
                         "modification": json.dumps(cmd), "control_offset": off, "processing_time_ms": pt})
    for p, w in punctuations.items():
        rows.append({"kind": "punctuation", "topic": topic, "partition": p, "offset": 10**9, "punctuation_ms": w,
                     "processing_time_ms": pt})
    frames = [control_frame(rows)]
    if records:
        frames.append(pd.DataFrame([{"kind": "data", "topic": topic, "partition": p, "offset": o, "key": k,
                                     "value": v, "event_time_ms": t, "processing_time_ms": pt,
                                     "kg": key_group_of(k, num_key_groups), "src_partition": p}
                                    for p, o, k, v, t in records]))
    return pd.concat(frames, ignore_index=True)


def canonical(x):
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return None
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float):
        x = round(x, 9)
        return int(x) if x.is_integer() else x
    return x


def results(frame: pd.DataFrame) -> list[tuple]:
    """The window results (data rows) of one output batch, sorted, values canonical."""
    d = frame[frame["kind"] == "data"]
    return sorted(tuple(canonical(v) for v in r) for r in d[list(RESULT)].itertuples(index=False))


def reference(batches: list[list[tuple]], watermarks: list[int | None], windows: dict) -> list[list[tuple]]:
    """Brute force: per batch, the windows (with records) whose end passes the batch's watermark,
    from records not late (event time >= the watermark before their batch)."""
    from dataflow_kafka.balancing.consolidate import window_grid

    kept, out, wm = [], [], None
    for recs, new_wm in zip(batches, watermarks):
        kept += [(k, v, t) for _, _, k, v, t in recs if v is not None and (wm is None or t >= wm)]
        rows = []
        if new_wm is not None and (wm is None or new_wm > wm):
            for qid, w in windows.items():
                size, slide, off = window_grid(w)
                found: dict = {}
                for k, v, t in kept:
                    s = t - (t - off) % slide
                    while s + size > t:
                        if s + size <= new_wm and (wm is None or s + size > wm):
                            found.setdefault((k, s), []).append(v)
                        s -= slide
                for (k, s), vs in found.items():
                    rows.append(tuple(canonical(x) for x in (k, qid, s, s + size, float(sum(vs)), len(vs),
                                                             float(min(vs)), float(max(vs)), sum(vs) / len(vs))))
            wm = new_wm
        out.append(sorted(rows))
    return out


def low_watermarks(punctuations: list[dict]) -> list[int | None]:
    """The low watermark after each batch: min over partitions of their newest punctuation."""
    newest: dict = {}
    out = []
    for p in punctuations:
        newest.update(p)
        vals = list(newest.values())
        out.append(None if any(v is None for v in vals) else int(np.min(vals)))
    return out


def batches_with_moves(batches, puncts, moves: dict, num_key_groups: int) -> list[pd.DataFrame]:
    """Source micro-batches; ``moves`` = {batch index: [(key group, to slot)]} sent as control
    commands in that batch (control offsets 0, 1, ...)."""
    from dataflow_kafka.balancing.routing_table import move_command

    frames, off = [], 0
    for b, (recs, p) in enumerate(zip(batches, puncts)):
        mods = []
        for kg, to in moves.get(b, []):
            mods.append((off, move_command(kg, to)))
            off += 1
        frames.append(source_batch(recs, p, num_key_groups, mods, pt=b))
    return frames


def source_df(spark, options: dict):
    """``format("dataflow-kafka")`` with ``options``."""
    reader = spark.readStream.format("dataflow-kafka")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def available_now(out_df, checkpoint: str, collector):
    """A function that runs ``out_df`` into ``collector`` as one AvailableNow query from ``checkpoint``."""
    def run():
        q = out_df.writeStream.foreachBatch(collector).option("checkpointLocation", checkpoint) \
            .trigger(availableNow=True).start()
        assert q.awaitTermination(300)
        assert q.exception() is None, q.exception()
    return run
