"""A worked example of a stage: :class:`RunningCount`, per key a running count of rows.

It implements the four required hooks of :class:`keygroups.Stage` and little else:

- :meth:`~RunningCount.routing`: the key column (``"key"``, one of :meth:`~RunningCount.inputs`,
  whose SQL expression Spark evaluates before the shuffle); rows of one key meet in one key group;
- :meth:`~RunningCount.output_columns`: ``key`` and ``count`` (the row contract adds
  ``event_time_ms`` and the control columns);
- :meth:`~RunningCount.new_state`: a key group's counts, ``{key: count}``, written with the
  default state codec (pickle) once per key group and micro-batch;
- :meth:`~RunningCount.process`: one micro-batch of one key group: the commands first, then the
  data rows, and the output low watermark;
- optionally :meth:`~RunningCount.describe_state`: the state for people, one row per key
  (:func:`keygroups.state_view.read_state` shows it for a stopped query).

It also takes one control command, ``{"op": "reset", "stage": <name>}`` (``commands``), which
sets every count back to zero at the start of its batch, in every key group.

Run without Spark, on three micro-batches of one Kafka partition (``run_local``; the same stage in
``Pipeline([...]).apply(source_df)`` runs on Spark and gives the same rows):

>>> import pandas as pd
>>> from dataflow_kafka.keygroups import Pipeline
>>> from dataflow_kafka.keygroups.contract import control_frame
>>> def batch(records, punctuation_ms, command=None):
...     '''(offset, user, event_time_ms) records of partition 0 of topic "clicks", after a command
...     (JSON text, at control offset 0) if any, then the partition's punctuation.'''
...     control = [{"kind": "punctuation", "topic": "clicks", "partition": 0, "offset": 99,
...                 "punctuation_ms": punctuation_ms, "processing_time_ms": 0}]
...     if command:
...         control.insert(0, {"kind": "modification", "topic": "clicks", "partition": 0, "offset": 0,
...                            "modification": command, "control_offset": 0, "processing_time_ms": 0})
...     data = pd.DataFrame([{"kind": "data", "topic": "clicks", "partition": 0, "offset": o, "user": u,
...                           "event_time_ms": t, "processing_time_ms": 0} for o, u, t in records])
...     return pd.concat([control_frame(control), data], ignore_index=True)
>>> batches = [batch([(0, "ann", 1_000), (1, "bob", 1_200), (2, "ann", 1_500)], punctuation_ms=1_500),
...            batch([(3, "ann", 2_100), (4, "cid", 900)], punctuation_ms=2_100),
...            batch([(5, "bob", 2_500)], punctuation_ms=2_500, command='{"op": "reset"}')]
>>> out = Pipeline([RunningCount(key="user")]).run_local(batches)
>>> def counts(frame):
...     rows = frame[frame["kind"] == "data"].sort_values("key")
...     print(rows[["key", "count", "event_time_ms"]].to_string(index=False))
>>> counts(out[0])
key  count  event_time_ms
ann      2           1500
bob      1           1200
>>> counts(out[1])              # cid's row is late (900 < 1500): emitted at the previous watermark
key  count  event_time_ms
ann      3           2100
cid      1           1500
>>> out[1].loc[out[1]["kind"] == "punctuation", "punctuation_ms"].unique().tolist()   # output watermark
[2100]
>>> counts(out[2])              # the reset applies before the batch's rows, in every key group
key  count  event_time_ms
bob      1           2500
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pandas as pd

from dataflow_kafka.keygroups.pipeline import Stage
from dataflow_kafka.keygroups.stage import Dropped, StageInput, StageOutput
from dataflow_kafka.keygroups.state_view import state_item

__all__ = ["RunningCount"]


@dataclass
class RunningCount(Stage):
    """Per key, the number of rows seen so far; per micro-batch one row per key that got rows.

    ``key``: the key, a column name or SQL expression over the upstream rows (the output column is
    ``key``, of the key's type). Rows with a null key are not counted (a ``dropped`` row, reason
    ``null``). A count row's event time is the newest event time of the key's rows in the batch,
    at least the previous output watermark (a late row updates a count at that watermark, so the
    promise below holds). Output watermark: the input watermark. Command:
    ``{"op": "reset", "stage": <name>}`` sets every count to zero.
    """

    key: str = "key"
    num_key_groups: int = 4
    name: str | None = None
    key_type: str = "string"            # set by bind() to the key's Spark type
    commands = frozenset({"reset"})

    # -- input: a key column, hashed to a key group ------------------------------------------------
    def inputs(self) -> dict[str, str]:
        return {"key": self.key}

    def routing(self) -> str:
        return "key"

    def bind(self, input_types: dict[str, str]) -> "RunningCount":
        bound = copy.copy(self)
        bound.key_type = input_types.get("key", self.key_type)
        return bound

    # -- output: the key (so a stage keyed by it can fuse after this one) and its count -------------
    def output_columns(self) -> list[tuple[str, str]]:
        return [("key", self.key_type), ("count", "bigint")]

    def output_key_columns(self) -> list[str]:
        return ["key"]

    # -- state and processing ------------------------------------------------------------------------
    def new_state(self) -> dict:
        return {}

    def describe_state(self, state: dict) -> list[dict]:
        """What a stopped query's state shows of this stage (:func:`keygroups.state_view.read_state`):
        one ``count`` row per key."""
        return [state_item("count", key=key, count=n) for key, n in state.items()]

    def process(self, state: dict, batch: StageInput) -> StageOutput:
        for m in batch.modifications:                       # commands first: the start of the batch
            if m.command.get("op") == "reset" and m.command.get("stage", self.name) == self.name:
                state.clear()
        data = batch.data
        dropped: list[Dropped] = []
        rows = pd.DataFrame(columns=["key", "count", "event_time_ms"])
        if data is not None and len(data):
            nulls = int(data["key"].isna().sum())
            if nulls:
                dropped.append(Dropped(None, "null", nulls))
            per_key = data[data["key"].notna()].groupby("key", sort=True)["event_time_ms"].agg(["size", "max"])
            floor = batch.previous_watermark_ms
            out = []
            for key, n, newest in zip(per_key.index, per_key["size"], per_key["max"]):
                state[key] = state.get(key, 0) + int(n)
                out.append((key, state[key], int(newest) if floor is None else max(int(newest), floor)))
            rows = pd.DataFrame(out, columns=["key", "count", "event_time_ms"])
        return StageOutput(rows, watermark_ms=batch.watermark_ms, dropped=dropped)
