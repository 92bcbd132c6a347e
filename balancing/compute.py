"""The compute stage of a split windowed aggregation: partial aggregates per (slot, key, pane) (Enorm §4.2, §4.5).

Enorm splits a windowed reduce into **compute** (stateful, *flexible*: it does not care which keys
it gets) and **consolidate** (merges partials into windows). :class:`PaneCompute` is the compute
side as a slot stage (:mod:`balancing.slots`): grouped by slot, it keeps, for every key group the
slot serves, one :class:`slicer.keyed.KeyedSlicingOperator` whose only query is a tumbling window
of one **pane** (the gcd of the window lengths and slides): its slices are the partial aggregates
(sum, count, min, max) that overlapping windows share (Scotty; Enorm §3.3). When the input low
watermark passes a pane's end, the pane's partial leaves as a data row
(``key, pane_start_ms, sum, count, min, max``, event time ``pane_end - 1``), for
:class:`balancing.consolidate.Consolidate` to merge.

**Instant migration** (§4.5, §5): after a move the key group's rows reach the new slot, which
starts an empty operator for it (at the slot's watermark, so lateness is decided as before); the
old slot keeps the key group's open panes and emits their partials when they close, then forgets
them. No state moves; for a while one (key, pane) has partials from two slots, which the
consolidate stage merges (Enorm's ``MK_p * K_1`` term; it counts them in its metrics).

Lateness: a record older than the slot's watermark (the input low watermark of the previous
batch) is dropped and reported as a ``dropped`` row (reason ``late``); its pane was emitted
already. Every slot sees the same punctuations, so a move does not change what is late.

Load per batch (no second pass over the data): a ``metrics`` row per slot,
``{"slot": i, "load": {key_group: [rows, processor_ms]}}``; :func:`balancing.migration.load_of`
folds them into the controller's ``{slot: {key_group: (rows, processor_ms)}}``.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
import numpy as np
import pandas as pd

from dataflow_kafka.balancing.slots import KEY_GROUP_OF_ROW, SlotStage
from dataflow_kafka.keygroups.stage import Dropped, StageInput, StageOutput
from dataflow_kafka.keygroups.state_view import concat_rows, state_item
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["PaneCompute", "PARTIAL_COLUMNS"]

#: the partial aggregates of a pane, as the slicer names them
PARTIAL_COLUMNS = (("sum", "double"), ("count", "bigint"), ("min", "double"), ("max", "double"))


def _template(pane_ms: int):
    from dataflow_kafka.slicer import SlicingWindowOperator
    from dataflow_kafka.windowing import Count, Max, Min, Sum, TumblingWindow

    return SlicingWindowOperator({"pane": TumblingWindow(pane_ms)}, [Sum(), Count(), Min(), Max()],
                                 allowed_lateness_ms=0)


@dataclass
class PaneCompute(SlotStage):
    """Partials per (key group, key, pane) inside each slot's state; see the module docstring.

    ``pane_ms``: pane length (:func:`balancing.consolidate.pane_of`); ``slot_ids``: the routing
    table's; ``key_type``: DDL type of the key; ``input_columns``: the router's data columns
    (the key and a double ``value``).
    """

    pane_ms: int = 1_000
    slot_ids: tuple[int, ...] = ()
    key_type: str = "string"
    value: str = "value"
    name: str | None = "compute"
    num_key_groups: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.pane_ms, int) or self.pane_ms < 1:
            raise InvalidArgumentError(f"PaneCompute: pane_ms must be a positive int, got {self.pane_ms!r}")
        if not self.slot_ids:
            raise InvalidArgumentError("PaneCompute: slot_ids (the routing table's) are required")
        self.slot_ids = tuple(int(s) for s in self.slot_ids)
        self.num_key_groups = len(self.slot_ids)
        self.input_columns = (("key", self.key_type), (self.value, "double"))

    def output_columns(self) -> list[tuple[str, str]]:
        return [("key", self.key_type), ("pane_start_ms", "bigint"), *PARTIAL_COLUMNS, (KEY_GROUP_OF_ROW, "int")]

    # -- state: {"wm": slot watermark, "ops": {key group: KeyedSlicingOperator}} ----------------------
    def new_state(self) -> dict:
        return {"wm": None, "ops": {}}

    def dump_state(self, state: dict) -> bytes:
        return pickle.dumps((state["wm"], {kg: op.to_bytes() for kg, op in state["ops"].items()}), protocol=5)

    def load_state(self, blob: bytes) -> dict:
        from dataflow_kafka.slicer.keyed import KeyedSlicingOperator

        wm, ops = pickle.loads(bytes(blob))
        template = _template(self.pane_ms)
        return {"wm": wm, "ops": {kg: KeyedSlicingOperator.from_bytes(b, template) for kg, b in ops.items()}}

    def describe_state(self, state: dict) -> pd.DataFrame:
        """Per key group the slot serves (``kg`` in the detail; the view's ``key_group`` is the
        slot's grouping value): its pane query, the panes (slices) it holds per key and the panes
        still open (:mod:`slicer.describe`); ``watermark``: the slot's."""
        from dataflow_kafka.slicer.describe import describe_keyed

        parts = [pd.DataFrame.from_records([state_item("watermark", start_ms=state["wm"])])]
        parts += [describe_keyed(state["ops"][kg], kg=kg) for kg in sorted(state["ops"])]
        return concat_rows(parts)

    def _operator(self, state: dict, kg: int):
        op = state["ops"].get(kg)
        if op is None:
            from dataflow_kafka.slicer.keyed import KeyedSlicingOperator

            op = state["ops"][kg] = KeyedSlicingOperator(_template(self.pane_ms))
            if state["wm"] is not None:          # a key group new here starts at the slot's watermark
                op.process_watermark(state["wm"])
        return op

    def process(self, state: dict, batch: StageInput) -> StageOutput:
        load: dict[int, list] = {}
        dropped: list[Dropped] = []
        data = batch.data
        if data is not None and len(data):
            kgs = data[KEY_GROUP_OF_ROW].to_numpy(np.int64)
            values = data[self.value].to_numpy(np.float64, na_value=np.nan)
            ts = data["event_time_ms"].to_numpy(np.int64)
            keys = data["key"].to_numpy(object)
            null = np.isnan(values)
            if null.any():
                dropped += _counts(keys[null], "null")
            order = np.argsort(kgs, kind="stable")
            cuts = np.flatnonzero(np.diff(kgs[order])) + 1
            for idx in np.split(order, cuts):
                t0 = time.perf_counter()
                kg, rows = int(kgs[idx[0]]), len(idx)
                idx = idx[~null[idx]]
                op = self._operator(state, kg)
                if len(idx):
                    codes, uniques = pd.factorize(keys[idx], use_na_sentinel=False)
                    codes = op.codes_of(list(uniques))[codes]
                    late = op.process_elements(codes, values[idx], ts[idx])
                    for code in np.flatnonzero(late):
                        dropped.append(Dropped(op.keys[code], "late", int(late[code])))
                load[kg] = [rows, (time.perf_counter() - t0) * 1e3]
        parts = []
        wm = batch.watermark_ms
        if wm is not None and (state["wm"] is None or wm > state["wm"]):
            state["wm"] = wm
            for kg in sorted(state["ops"]):
                t0 = time.perf_counter()
                op = state["ops"][kg]
                keys_out, res = op.process_watermark(wm)
                if len(res):
                    parts.append((kg, keys_out, res))
                if op.kc.size == 0:
                    del state["ops"][kg]                     # nothing open: forget the key group here
                entry = load.setdefault(kg, [0, 0.0])
                entry[1] += (time.perf_counter() - t0) * 1e3
        slot = self.slot_of_id(batch.key_group)
        metrics = {"slot": slot, "load": {str(kg): [r, round(ms, 3)] for kg, (r, ms) in sorted(load.items())}}
        return StageOutput(_partials(parts), watermark_ms=state["wm"], dropped=dropped, metrics=metrics)


def _counts(keys: np.ndarray, reason: str) -> list[Dropped]:
    codes, uniques = pd.factorize(keys, use_na_sentinel=False)
    return [Dropped(k, reason, int(n)) for k, n in zip(uniques, np.bincount(codes))]


def _partials(parts: list) -> pd.DataFrame | None:
    """Pane results of the key groups' operators as partial rows."""
    if not parts:
        return None
    frames = []
    for kg, keys, res in parts:
        sm, cnt, mn, mx = res.values
        frames.append(pd.DataFrame({"event_time_ms": res.end - 1, "key": keys, "pane_start_ms": res.start,
                                    "sum": sm, "count": cnt.astype(np.int64), "min": mn, "max": mx,
                                    KEY_GROUP_OF_ROW: np.full(len(res), kg, np.int64)}))
    return pd.concat(frames, ignore_index=True)


