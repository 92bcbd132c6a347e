"""Switching a windowed aggregation between split and combine on Spark: Enorm's smooth migration (§5.1).

A Spark query cannot change its plan in place, so a switch (a :class:`balancing.cost_model.Decision`
with ``switch=True``) starts the new plan as a second query beside the old one, and the two share
the windows out by their start ``T``:

* ``T`` (:func:`switch_time`): the smallest pane boundary (gcd of the window sizes, slides and
  offsets; every window starts on it) strictly above the newest event time the old query has
  read through the batch ``b`` of the decision. The newest event time comes from the old query's
  offset log (``p`` of batch ``b``, the newest before its range) and the records of that range
  (:func:`newest_event_ms`), so a replay finds the same ``T``.
* The **new** query starts at batch ``b``'s end offsets (:func:`starting_offsets`) and keeps the
  windows with ``window_start_ms >= T``: no record with event time ``>= T`` lies before those
  offsets, so it sees every record of those windows. Its watermark is at most the old one's, and
  equal once above ``T`` (every partition then has a record newer than ``T`` after the offsets),
  so records at or after ``T`` are late in it exactly when they are late in the old query.
* The **old** query keeps the windows with ``window_start_ms < T`` and stops once its output
  watermark reaches ``T + p`` (``p`` the longest window): every window it owns ends by then
  (:meth:`SwitchPlan.old_done`).

Only window results (``data`` rows) are shared out; the queries' other rows (punctuation,
dropped, error, metrics) reach the sink from both while both run, tagged with the plan's name.

The filters run in each query's ``foreachBatch`` (driver-side Python, which can change while the
query runs), not in its plan: :class:`SmoothSwitch` starts every plan's query itself, persists the
switch (``T``, ``b``, the offsets) in its state directory before the new query starts, and applies
it again after a restart. The pure part (:func:`switch_time`, :func:`starting_offsets`,
:class:`SwitchPlan`, :func:`fold_output_watermark`) imports no Spark.

>>> from dataflow_kafka.windowing import SlidingWindow, TumblingWindow
>>> w = {"s": SlidingWindow(2_000, 1_000), "t": TumblingWindow(3_000)}
>>> switch_time(12_345, w), longest_window_ms(w)
(13000, 3000)
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from dataflow_kafka.balancing.consolidate import pane_of, window_grid
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["switch_time", "longest_window_ms", "starting_offsets", "newest_in_offset", "newest_event_ms",
           "SwitchPlan", "fold_output_watermark", "read_offset_log", "last_committed_batch", "SmoothSwitch",
           "NOTHING_READ"]

#: ``T`` when the old query has read no data record: the new plan owns every window.
NOTHING_READ = -(2**62)


def _windows(windows) -> dict:
    return dict(windows) if isinstance(windows, dict) else {str(i): w for i, w in enumerate(windows)}


def longest_window_ms(windows) -> int:
    """``p``: the longest window's size (Enorm's period of the split/combine decision)."""
    return max(window_grid(w)[0] for w in _windows(windows).values())


def switch_time(newest_ms: int | None, windows) -> int:
    """``T``: the smallest pane boundary strictly above ``newest_ms`` (the newest event time the
    old query read); :data:`NOTHING_READ` when it read none."""
    if newest_ms is None:
        return NOTHING_READ
    pane = pane_of(_windows(windows))
    return (int(newest_ms) // pane + 1) * pane


def starting_offsets(offset: dict) -> dict[str, dict[str, int]]:
    """``startingOffsets`` of the new query (``{topic: {partition: offset}}``) from the old query's
    source offset of batch ``b`` (the ``dataflow-kafka`` offset: ``partitions`` -> ``{"o": end}``)."""
    try:
        return {t: {str(p): int(e["o"]) for p, e in ps.items()} for t, ps in offset["partitions"].items()}
    except (KeyError, TypeError, AttributeError) as e:
        raise InvalidArgumentError(f"switch: not a dataflow-kafka source offset (no partitions -> o): {offset!r}") from e


def newest_in_offset(offset: dict) -> int | None:
    """The newest event time before the offset's ranges (the largest ``p``), None without one."""
    ps = [e.get("p") for ps in offset.get("partitions", {}).values() for e in ps.values()]
    ps = [int(p) for p in ps if p is not None]
    return max(ps) if ps else None


def newest_event_ms(offset: dict, range_newest: int | None) -> int | None:
    """Newest event time the old query read through the batch of ``offset``: ``max(p, newest of
    the batch's ranges [s, o))``, both replay-deterministic (offset log and the logged ranges)."""
    vals = [v for v in (newest_in_offset(offset), range_newest) if v is not None]
    return max(vals) if vals else None


@dataclass(frozen=True)
class SwitchPlan:
    """One switch from plan ``old`` to plan ``new`` after the old query's batch ``after_batch``:
    windows starting before ``t_ms`` are the old plan's, the others the new plan's; the old query
    is done when its output watermark reaches ``t_ms + longest_ms``."""

    old: str
    new: str
    after_batch: int
    t_ms: int
    longest_ms: int
    starting_offsets: dict

    def __post_init__(self) -> None:
        if self.old == self.new:
            raise InvalidArgumentError(f"SwitchPlan: old and new plan are both {self.old!r}")
        if self.longest_ms <= 0:
            raise InvalidArgumentError(f"SwitchPlan.longest_ms must be > 0, got {self.longest_ms!r}")

    @property
    def stop_at_ms(self) -> int:
        """The old query's output watermark at which every window it owns has been emitted."""
        return self.t_ms + self.longest_ms

    def keeps(self, plan: str, frame: pd.DataFrame) -> np.ndarray:
        """Rows of an output batch of ``plan`` that go to the sink: its own windows and every
        row that is not a window result. A plan neither old nor new keeps nothing."""
        if plan not in (self.old, self.new):
            return np.zeros(len(frame), dtype=bool)
        data = (frame["kind"] == "data").to_numpy()
        start = pd.to_numeric(frame["window_start_ms"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        if (data & np.isnan(start)).any():
            raise InvalidArgumentError(f"switch: a window result of plan {plan!r} without window_start_ms")
        mine = start < self.t_ms if plan == self.old else start >= self.t_ms
        return ~data | mine

    def keep_sql(self, plan: str) -> str:
        """:meth:`keeps` as a Spark SQL condition (the ``foreachBatch`` filter)."""
        if plan not in (self.old, self.new):
            return "false"
        op = "<" if plan == self.old else ">="
        return f"kind <> 'data' OR window_start_ms {op} {int(self.t_ms)}"

    def old_done(self, output_watermark_ms: int | None) -> bool:
        """Whether the old query has emitted every window it owns."""
        return output_watermark_ms is not None and output_watermark_ms >= self.stop_at_ms

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "SwitchPlan":
        return cls(**json.loads(text))


def fold_output_watermark(newest: dict, frame: pd.DataFrame) -> int | None:
    """Fold an output batch's punctuation rows into ``newest`` (``{(topic, partition): ms}``,
    updated in place) and return the output low watermark: the minimum over the senders, None
    while one has none."""
    p = frame[frame["kind"] == "punctuation"]
    for t, part, ms in zip(p["topic"], p["partition"], p["punctuation_ms"]):
        key = (t, int(part))
        if ms is None or pd.isna(ms):
            newest.setdefault(key, None)
        elif newest.get(key) is None or int(ms) > newest[key]:
            newest[key] = int(ms)
    if not newest or any(v is None for v in newest.values()):
        return None
    return min(newest.values())


def read_offset_log(checkpoint: str, batch_id: int) -> dict:
    """The source offset of ``batch_id`` in a query's checkpoint (``offsets/<batch_id>``: a
    version line, the batch metadata, one line per source; a switch needs exactly one source)."""
    path = os.path.join(checkpoint, "offsets", str(batch_id))
    try:
        with open(path, encoding="utf-8") as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
    except FileNotFoundError as e:
        raise InvalidArgumentError(f"switch: no offset log for batch {batch_id} in {checkpoint!r}") from e
    if len(lines) != 3:
        raise InvalidArgumentError(f"switch: {path} has {len(lines) - 2} sources; a switch needs a query with one source")
    return json.loads(lines[2])


def last_committed_batch(checkpoint: str) -> int | None:
    """The newest batch id with a commit in the checkpoint, None before the first."""
    d = os.path.join(checkpoint, "commits")
    ids = [int(n) for n in os.listdir(d) if n.isdigit()] if os.path.isdir(d) else []
    return max(ids) if ids else None


# -- Spark ------------------------------------------------------------------------------------------

#: Options of the old query the batch read of batch ``b``'s ranges keeps (how records are read and
#: timed); streaming-only options (triggers, control topic, punctuations) are left out.
_READ_OPTIONS = ("subscribe", "subscribepattern", "assign", "eventtimefield", "maxeventtimeaheadms",
                 "failondataloss", "groupidprefix")


class SmoothSwitch:
    """Runs the plans of one windowed aggregation as Spark queries into one sink and switches
    between them smoothly (module docstring).

    ``sink(df, plan, batch_id)``: called from each query's ``foreachBatch`` with the rows the
    plan keeps (``columns`` selected, when given, so both plans deliver one schema); batch ids are
    per query, so an idempotent sink keys by ``(plan, batch_id)``. ``windows``: the operator's
    windows; ``state_dir``: where the switch is persisted (``switch.json``).
    """

    def __init__(self, spark, sink: Callable[[Any, str, int], None], windows, state_dir: str, *,
                 columns: list[str] | None = None) -> None:
        self.spark = spark
        self.sink = sink
        self.windows = _windows(windows)
        self.state_dir = state_dir
        self.columns = columns
        self.queries: dict[str, Any] = {}
        self.checkpoints: dict[str, str] = {}
        self.options: dict[str, dict] = {}
        self.old_done = threading.Event()
        self._watermarks: dict[str, dict] = {}
        os.makedirs(state_dir, exist_ok=True)
        path = self._path()
        self.plan: SwitchPlan | None = SwitchPlan.from_json(open(path, encoding="utf-8").read()) \
            if os.path.exists(path) else None

    def _path(self) -> str:
        return os.path.join(self.state_dir, "switch.json")

    def _reader(self, options: dict):
        r = self.spark.readStream.format("dataflow-kafka")
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    def start(self, name: str, pipeline, source_options: dict, checkpoint: str, *, trigger: dict | None = None):
        """Start (or restart from ``checkpoint``) plan ``name``: ``pipeline.apply`` over the
        ``dataflow-kafka`` source with ``source_options``; ``trigger``: ``writeStream.trigger``'s
        keyword arguments (default: as fast as possible). The new plan of a persisted switch starts
        at the offsets the switch recorded."""
        opts = dict(source_options)
        if self.plan is not None and name == self.plan.new:
            opts = {k: v for k, v in opts.items() if k.lower() not in ("startingoffsets", "startingtimestamp",
                                                                        "startingoffsetsbytimestamp")}
            opts["startingOffsets"] = json.dumps(self.plan.starting_offsets)
        self.options[name] = dict(source_options)
        self.checkpoints[name] = checkpoint
        self._watermarks[name] = {}
        w = pipeline.apply(self._reader(opts)).writeStream.foreachBatch(self._batch_fn(name)) \
            .option("checkpointLocation", checkpoint)
        if trigger:
            w = w.trigger(**trigger)
        q = self.queries[name] = w.start()
        return q

    def switch(self, new: str, pipeline, *, after_batch: int | None = None, trigger: dict | None = None,
               checkpoint: str) -> SwitchPlan:
        """Switch from the running (or last started) plan to ``new`` after the old query's batch
        ``after_batch`` (default: its last committed batch): compute ``T`` from its offset log and
        that batch's records, persist the switch, start ``new`` from ``checkpoint``. The old query
        is stopped by its own ``foreachBatch`` once its output watermark reaches ``T + p``."""
        if self.plan is not None:
            raise InvalidArgumentError(f"switch: already switching {self.plan.old!r} -> {self.plan.new!r} "
                             f"(persisted in {self._path()})")
        if len(self.checkpoints) != 1:
            raise InvalidArgumentError(f"switch: needs exactly one running plan, have {sorted(self.checkpoints)}")
        (old, old_ck), = self.checkpoints.items()
        b = last_committed_batch(old_ck) if after_batch is None else after_batch
        if b is None:
            raise InvalidArgumentError(f"switch: plan {old!r} has committed no batch yet in {old_ck!r}")
        offset = read_offset_log(old_ck, b)
        newest = newest_event_ms(offset, self._range_newest(self.options[old], offset))
        plan = SwitchPlan(old, new, b, switch_time(newest, self.windows), longest_window_ms(self.windows),
                          starting_offsets(offset))
        offsets_dir = os.path.join(checkpoint, "offsets")
        if os.path.isdir(offsets_dir) and os.listdir(offsets_dir):
            raise InvalidArgumentError(f"switch: checkpoint {checkpoint!r} of the new plan already has batches; "
                             "its startingOffsets would be ignored")
        tmp = self._path() + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(plan.to_json())
        os.replace(tmp, self._path())                  # persisted before the new query reads anything
        self.plan = plan
        self.start(new, pipeline, self.options[old], checkpoint, trigger=trigger)
        return plan

    def follow(self, decision, pipelines: dict, *, checkpoint: str, after_batch: int | None = None,
               trigger: dict | None = None) -> SwitchPlan | None:
        """Carry out a :class:`balancing.cost_model.Decision`: None when it is no switch, else
        :meth:`switch` to ``pipelines[decision.plan]`` (plans are named ``"split"``/``"combine"``)."""
        if not decision.switch:
            return None
        if decision.plan not in pipelines:
            raise InvalidArgumentError(f"switch: the decision for {decision.operator!r} switches to {decision.plan!r}, "
                             f"but no pipeline is given for it (have {sorted(pipelines)})")
        return self.switch(decision.plan, pipelines[decision.plan], after_batch=after_batch, trigger=trigger,
                           checkpoint=checkpoint)

    def _range_newest(self, options: dict, offset: dict) -> int | None:
        """Newest data event time in batch ``b``'s ranges ``[s, o)``: a batch read with the old
        query's reading options."""
        from pyspark.sql import functions as F

        starts = {t: {p: int(e.get("s", e["o"])) for p, e in ps.items()} for t, ps in offset["partitions"].items()}
        ends = starting_offsets(offset)
        if all(starts[t][p] >= ends[t][p] for t in ends for p in ends[t]):
            return None
        r = self.spark.read.format("dataflow-kafka")
        for k, v in options.items():
            if k.lower() in _READ_OPTIONS or k.lower().startswith("kafka."):
                r = r.option(k, v)
        row = r.option("startingOffsets", json.dumps(starts)).option("endingOffsets", json.dumps(ends)).load() \
            .where("kind = 'data'").agg(F.max(F.unix_millis("event_time")).alias("newest")).collect()[0]
        return None if row["newest"] is None else int(row["newest"])

    def _batch_fn(self, name: str):
        def run(df, batch_id: int) -> None:
            plan = self.plan
            df.persist()
            try:
                done = False
                if plan is not None and name == plan.old:
                    marks = df.where("kind = 'punctuation'").select("kind", "topic", "partition", "punctuation_ms")
                    done = plan.old_done(fold_output_watermark(self._watermarks[name], marks.toPandas()))
                out = df if plan is None else df.where(plan.keep_sql(name))
                self.sink(out if self.columns is None else out.select(*self.columns), name, batch_id)
                if done:                               # after the sink: this batch's windows are out
                    self._finish_old()
            finally:
                df.unpersist()
        return run

    def _finish_old(self) -> None:
        """Stop the old query from another thread (a query cannot stop itself in its foreachBatch)."""
        if self.old_done.is_set():
            return
        self.old_done.set()
        q = self.queries.get(self.plan.old)
        if q is not None:
            threading.Thread(target=q.stop, name="smooth-switch-stop-old", daemon=True).start()
