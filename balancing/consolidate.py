"""The consolidate stage: partials merged into windows, grouped by key, not by slot (Enorm §4.2, §5, §6.1).

:class:`Consolidate` takes the pane partials of :class:`balancing.compute.PaneCompute` (rows
``key, pane_start_ms, sum, count, min, max``), grouped by the key's key group, so every partial of
a key meets in one place whichever slot computed it. It merges partials of the same (key, pane)
(after an instant migration two slots send one each), and when its input low watermark (the
minimum over the compute slots' punctuations) passes a window's end it combines the window's panes
and emits ``key, query_id, window_start_ms, window_end_ms, sum, count, min, max, mean`` (event time
``window_end_ms - 1``). Windows are time tumbling or sliding windows of :mod:`windowing`; the pane
(:func:`pane_of`) is the gcd of their lengths, slides and offsets, so every window is a whole
number of panes. Per batch it reports in a ``metrics`` row how many partial rows it got and how
many of them were merged into another partial of the same (key, pane): the temporary extra cost of
a migration (Enorm §5.1.1, ``MK_p * K_1``).

>>> from dataflow_kafka.windowing import SlidingWindow, TumblingWindow
>>> pane_of({"a": SlidingWindow(10_000, 4_000), "b": TumblingWindow(6_000)})
2000
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dataflow_kafka.balancing.compute import PARTIAL_COLUMNS
from dataflow_kafka.keygroups import Stage, StageInput, StageOutput
from dataflow_kafka.keygroups.state_view import state_item
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["Consolidate", "pane_of", "window_grid", "RESULT_COLUMNS"]

RESULT_COLUMNS = (("query_id", "string"), ("window_start_ms", "bigint"), ("window_end_ms", "bigint"),
                  *PARTIAL_COLUMNS, ("mean", "double"))
_NAMES = [c for c, _ in PARTIAL_COLUMNS]
_FAR = int(np.iinfo(np.int64).max) // 2          # "every window": the end of what _windows is asked for


def window_grid(window) -> tuple[int, int, int]:
    """``(size_ms, slide_ms, offset_ms)`` of a time tumbling or sliding window; ``ValueError`` otherwise."""
    grid = getattr(window, "grid", None)
    if grid is not None and getattr(window, "measure", "time") == "time":
        return tuple(int(v) for v in grid)  # type: ignore[return-value]
    raise InvalidArgumentError(f"consolidate: {window!r} is not a time TumblingWindow or SlidingWindow (panes need a "
                     "window grid known in advance)")


def pane_of(windows: dict) -> int:
    """The pane length: gcd of every window's length, slide and offset."""
    if not windows:
        raise InvalidArgumentError("consolidate: at least one window query is needed")
    return math.gcd(*[v for w in windows.values() for v in window_grid(w)])


@dataclass
class Consolidate(Stage):
    """Merges pane partials into windows per key; see the module docstring.

    ``windows``: ``{query id: TumblingWindow | SlidingWindow}``; ``key_type``: DDL type of the key.
    """

    windows: dict = field(default_factory=dict)
    key_type: str = "string"
    name: str | None = "consolidate"
    num_key_groups: int = 2

    def __post_init__(self) -> None:
        self.pane_ms = pane_of(self.windows)
        self._grid = [(str(q), *window_grid(w)) for q, w in self.windows.items()]

    def inputs(self) -> dict[str, str]:
        return {"key": "key", "pane_start_ms": "pane_start_ms", **{c: c for c in _NAMES}}

    def routing(self) -> list[str]:
        return ["key"]

    def output_columns(self) -> list[tuple[str, str]]:
        return [("key", self.key_type), *RESULT_COLUMNS]

    def output_key_columns(self) -> list[str]:
        return ["key"]

    # -- state: pane table (one row per key and pane) and the watermark (the default codec) ----------
    def new_state(self) -> dict:
        return {"wm": None, "panes": _empty()}

    def describe_state(self, state: dict) -> list[dict]:
        """Per key the panes held (``pane``: ``[start_ms, end_ms)``, ``count`` records, partial
        ``sum``/``min``/``max``) and the windows not yet emitted that hold panes (``window``:
        ending after the watermark; ``count``, ``sum``, ``min``, ``max``, ``mean`` so far); ``watermark``: the
        stage's."""
        panes, wm = state["panes"], state["wm"]
        ps = panes["ps"]
        rows = [state_item("watermark", start_ms=wm)]
        rows += [state_item("pane", key=k, start_ms=s, end_ms=s + self.pane_ms, count=n, sum=sm, min=mn, max=mx)
                 for k, s, n, sm, mn, mx in zip(panes["key"].tolist(), ps.tolist(), panes["count"].tolist(),
                                                panes["sum"].tolist(), panes["min"].tolist(), panes["max"].tolist())]
        open_ = self._windows(panes, wm, _FAR) if ps.size else None
        for r in ([] if open_ is None else open_.to_dict("records")):
            rows.append(state_item("window", key=r["key"], query_id=r["query_id"], start_ms=r["window_start_ms"],
                                   end_ms=r["window_end_ms"], count=r["count"], state="pending",
                                   **{c: r[c] for c in ("sum", "min", "max", "mean")}))
        return rows

    def process(self, state: dict, batch: StageInput) -> StageOutput:
        panes = state["panes"]
        held, got = len(panes["key"]), 0
        data = batch.data
        if data is not None and len(data):
            got = len(data)
            new = {"key": data["key"].to_numpy(object), "ps": data["pane_start_ms"].to_numpy(np.int64),
                   **{c: data[c].to_numpy(np.float64, na_value=np.nan) for c in _NAMES}}
            panes = _merge({c: np.concatenate([panes[c], new[c]]) for c in panes})
        merged = held + got - len(panes["key"])
        out = None
        wm, prev = batch.watermark_ms, state["wm"]
        if wm is not None and (prev is None or wm > prev):
            out = self._windows(panes, prev, wm)
            state["wm"] = wm
            horizon = wm - max(size for _, size, _, _ in self._grid)
            keep = panes["ps"] >= horizon
            panes = {c: v[keep] for c, v in panes.items()}
        state["panes"] = panes
        return StageOutput(out, watermark_ms=state["wm"], metrics={"partials": got, "merged": int(merged)})

    def _windows(self, panes: dict, prev: int | None, wm: int) -> pd.DataFrame | None:
        """Every window ending in ``(prev, wm]`` that holds a pane, combined from its panes."""
        ps = panes["ps"]
        if ps.size == 0:
            return None
        codes, uniques = pd.factorize(panes["key"], use_na_sentinel=False)
        rows_q, rows_s, rows_i = [], [], []
        for qi, (_, size, slide, off) in enumerate(self._grid):
            base = ps - (ps - off) % slide                  # latest window start at or before the pane
            for j in range(-(-size // slide)):
                s = base - j * slide
                e = s + size
                sel = np.flatnonzero((e > ps) & (e <= wm) & (True if prev is None else e > prev))
                rows_q.append(np.full(sel.size, qi, np.int64))
                rows_s.append(s[sel])
                rows_i.append(sel)
        q, s, i = np.concatenate(rows_q), np.concatenate(rows_s), np.concatenate(rows_i)
        if i.size == 0:
            return None
        c = codes[i]
        order = np.lexsort((c, q, s + self._sizes()[q]))          # by end, query, key
        q, s, i, c = q[order], s[order], i[order], c[order]
        first = np.ones(i.size, bool)
        first[1:] = (q[1:] != q[:-1]) | (s[1:] != s[:-1]) | (c[1:] != c[:-1])
        starts = np.flatnonzero(first)
        agg = {"sum": np.add.reduceat(panes["sum"][i], starts), "count": np.add.reduceat(panes["count"][i], starts),
               "min": np.minimum.reduceat(panes["min"][i], starts), "max": np.maximum.reduceat(panes["max"][i], starts)}
        q0, s0 = q[starts], s[starts]
        end = s0 + self._sizes()[q0]
        ids = np.array([g[0] for g in self._grid], dtype=object)
        return pd.DataFrame({"event_time_ms": end - 1, "key": np.asarray(uniques, object)[c[starts]],
                             "query_id": ids[q0], "window_start_ms": s0, "window_end_ms": end,
                             "sum": agg["sum"], "count": agg["count"].astype(np.int64),
                             "min": agg["min"], "max": agg["max"], "mean": agg["sum"] / agg["count"]})

    def _sizes(self) -> np.ndarray:
        return np.array([g[1] for g in self._grid], np.int64)


def _empty() -> dict:
    return {"key": np.zeros(0, object), "ps": np.zeros(0, np.int64), **{c: np.zeros(0) for c in _NAMES}}


def _merge(panes: dict) -> dict:
    """One row per (key, pane): partials of the same pane combined."""
    if panes["ps"].size < 2:
        return panes
    codes, _ = pd.factorize(panes["key"], use_na_sentinel=False)
    order = np.lexsort((panes["ps"], codes))
    c, ps = codes[order], panes["ps"][order]
    first = np.ones(c.size, bool)
    first[1:] = (c[1:] != c[:-1]) | (ps[1:] != ps[:-1])
    if first.all():
        return {k: v[order] for k, v in panes.items()}
    starts = np.flatnonzero(first)
    out = {"key": panes["key"][order][starts], "ps": ps[starts]}
    for name, ufunc in (("sum", np.add), ("count", np.add), ("min", np.minimum), ("max", np.maximum)):
        out[name] = ufunc.reduceat(panes[name][order], starts)
    return out
