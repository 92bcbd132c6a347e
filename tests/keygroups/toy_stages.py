"""Small stages for testing the stage layer: a tumbling-window count keyed by columns, and a
Python-routed running total (and Q5's ``Hottest`` aggregation). Deliberately simple, so expected results
can be written by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dataflow_kafka.keygroups import Dropped, PythonRouter, Stage, StageInput, StageOutput, key_group_of
from dataflow_kafka.windowing import AggregateFunction


@dataclass
class TumblingCount(Stage):
    """Per key: the number of records (times ``weight``) per tumbling window of ``size_ms``,
    emitted once the input watermark passes the window's end; records behind the previous
    watermark are dropped (reason ``late``). Output watermark = input watermark. A modification
    ``{"op": "weight", "stage": <name>, "value": w}`` sets the weight of later records.

    ``key``/``value``: input expressions (``value`` null -> dropped, reason ``null``)."""

    key: str = "k"
    value: str = "v"
    size_ms: int = 1000
    num_key_groups: int = 3
    name: str | None = None

    def inputs(self):
        return {"k": self.key, "v": self.value}

    def routing(self):
        return "k"

    def output_columns(self):
        return [("k", "string"), ("window_start_ms", "bigint"), ("window_end_ms", "bigint"), ("count", "bigint")]

    def output_key_columns(self):
        return ["k"]

    def new_state(self):                    # the default state codec
        return {"weight": 1, "windows": {}}

    def process(self, state, batch: StageInput) -> StageOutput:
        for m in batch.modifications:
            cmd = m.command
            if cmd.get("op") == "weight" and cmd.get("stage", self.name) == self.name:
                state["weight"] = int(cmd["value"])
        dropped = {}
        data = batch.data
        if data is not None and len(data):
            for k, v, t in zip(data["k"], data["v"], data["event_time_ms"]):
                if v is None or pd.isna(v):
                    dropped[(k, "null")] = dropped.get((k, "null"), 0) + 1
                    continue
                t = int(t)
                if batch.previous_watermark_ms is not None and t < batch.previous_watermark_ms:
                    dropped[(k, "late")] = dropped.get((k, "late"), 0) + 1
                    continue
                start = t - t % self.size_ms
                state["windows"][(k, start)] = state["windows"].get((k, start), 0) + state["weight"]
        rows = []
        wm = batch.watermark_ms
        if wm is not None:
            for (k, start) in sorted(state["windows"]):
                if start + self.size_ms <= wm:
                    rows.append((k, start, start + self.size_ms, state["windows"].pop((k, start))))
        frame = pd.DataFrame(rows, columns=["k", "window_start_ms", "window_end_ms", "count"])
        frame["event_time_ms"] = frame["window_end_ms"] - 1
        return StageOutput(frame, wm, [Dropped(k, r, c) for (k, r), c in sorted(dropped.items())])


def _first_letter(row_key: str) -> str:
    return str(row_key)[:1]


@dataclass
class RunningTotal(Stage):
    """Python-routed: per ``key_fn(k)``, the running sum of the ``count`` column; per batch one row
    per group that got rows (its total, at the newest event time of those rows), so the result does
    not depend on the order rows arrive in (an OpKeyedUnordered, data-trace types §4). Output
    watermark = input watermark."""

    key_fn: object = _first_letter
    num_key_groups: int = 2
    name: str | None = None

    def routing(self):
        key_fn, n = self.key_fn, self.num_key_groups

        def route(data):
            frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
            keys = [key_fn(k) for k in frame["k"]]
            rows = pd.DataFrame({"group": keys, "count": frame["count"].to_numpy(),
                                 "event_time_ms": frame["event_time_ms"].to_numpy()})
            for c in ("topic", "partition", "offset"):
                if c in frame.columns:
                    rows[c] = frame[c].to_numpy()
            return rows, np.array([key_group_of(k, n) for k in keys], dtype=np.int64)
        return PythonRouter(route, [("group", "string"), ("count", "bigint")], fusable_after=self.fusable_after)

    def fusable_after(self, upstream):
        return False

    def output_columns(self):
        return [("group", "string"), ("total", "bigint")]

    def new_state(self):
        return {}

    def dump_state(self, state):
        return json.dumps(state).encode()

    def load_state(self, blob):
        return json.loads(blob)

    def process(self, state, batch: StageInput) -> StageOutput:
        data = batch.data
        touched: dict = {}
        if data is not None and len(data):
            for g, c, t in zip(data["group"], data["count"], data["event_time_ms"]):
                state[g] = state.get(g, 0) + int(c)
                touched[g] = max(touched.get(g, int(t)), int(t))
        rows = [(g, state[g], t) for g, t in sorted(touched.items())]
        return StageOutput(pd.DataFrame(rows, columns=["group", "total", "event_time_ms"]), batch.watermark_ms)


class Hottest(AggregateFunction):
    """Q5's aggregate: the ``{"auction":..,"count":..}`` text with the highest count (ties: the lowest
    auction)."""

    spark_type = "string"

    def lift(self, v):
        return v

    def combine(self, a, b):
        ka, kb = json.loads(a), json.loads(b)
        return a if (ka["count"], -ka["auction"]) >= (kb["count"], -kb["auction"]) else b


@dataclass
class InputCount(Stage):
    """A multi-input stage: per batch, one row per (key, input) that got data rows, with the count
    of the key's rows of that input so far and how many ``{"op": "bump"}`` commands the stage
    applied; its output watermark is the input watermark. Inputs: ``inputs`` = ``{name: (key
    expression, select)}``."""

    sources: dict = None        # type: ignore[assignment]
    num_key_groups: int = 2
    name: str | None = None
    commands = frozenset({"bump"})

    def stage_inputs(self):
        from dataflow_kafka.keygroups import Input

        return tuple(Input(n, {"k": key}, select) for n, (key, select) in self.sources.items())

    def routing(self):
        return "k"

    def output_columns(self):
        return [("k", "string"), ("from_input", "string"), ("count", "bigint"), ("bumps", "bigint")]

    def output_key_columns(self):
        return ["k"]

    def new_state(self):
        return {"bumps": 0, "counts": {}, "marks": []}

    def process(self, state, batch: StageInput) -> StageOutput:
        state["bumps"] += sum(1 for m in batch.modifications if m.command.get("op") == "bump")
        state["marks"].append(dict(batch.input_watermarks))
        rows = {}
        data = batch.data
        if data is not None and len(data):
            for k, inp, t in zip(data["k"], data["input"], data["event_time_ms"]):
                c = state["counts"][(k, inp)] = state["counts"].get((k, inp), 0) + 1
                rows[(k, inp)] = (c, max(int(t), rows.get((k, inp), (0, int(t)))[1]))
        frame = pd.DataFrame([(k, i, c, state["bumps"], t) for (k, i), (c, t) in sorted(rows.items())],
                             columns=["k", "from_input", "count", "bumps", "event_time_ms"])
        return StageOutput(frame, batch.watermark_ms, metrics={"marks": state["marks"][-1]})
