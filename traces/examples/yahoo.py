"""The Yahoo streaming benchmark query as a typed DAG (data-trace types §6, Figure 3).

Events ``{user_id, page_id, ad_id, event_type, ts}``; the query keeps the views, looks up each
ad's campaign in a table and counts, per campaign, the views of the last 10 s every 1 s:

- ``ViewsToCampaigns`` (OpStateless ``U(Ut, YItem) -> U(CID, Ut)``): filter, project, look up;
- ``WindowCount`` (OpKeyedUnordered ``U(CID, Ut) -> U(CID, (end_ms, count))``): the block count is
  the monoid (``+``); the state keeps the last ``window_blocks`` block counts; at every marker
  (period = the slide, 1 s) a campaign with views in the window emits ``(window end, count)``.

``python -m dataflow_kafka.traces.examples.yahoo`` produces events to the embedded broker, runs the DAG on Spark
(``format("dataflow-kafka")``) and prints the last windows next to ``run_local``'s.
"""

from __future__ import annotations

import json
import random

from dataflow_kafka.traces import Dag, OpKeyedUnordered, OpStateless, U

__all__ = ["ADS", "view_campaign", "ViewsToCampaigns", "WindowCount", "build", "events"]

CAMPAIGNS = 10
#: the ad -> campaign table (a database lookup in the benchmark)
ADS = {f"ad{i}": f"campaign{i % CAMPAIGNS}" for i in range(100)}
EVENT_TYPES = ("view", "click", "purchase")


def view_campaign(value: dict, ads: dict = ADS) -> str | None:
    """The campaign of a view event (None for clicks, purchases and unknown ads)."""
    return ads.get(value["ad_id"]) if value["event_type"] == "view" else None


class ViewsToCampaigns(OpStateless):
    """Filter views, project the ad id, look up its campaign; emits ``(campaign, 1)``."""

    input = U(None, "YItem")
    output = U("CID", None)

    def __init__(self, ads: dict | None = None) -> None:
        self.ads = ADS if ads is None else ads

    def on_item(self, key, value, emit):
        c = view_campaign(value, self.ads)
        if c is not None:
            emit(c, 1)


class WindowCount(OpKeyedUnordered):
    """Sliding count over the last ``window_blocks`` blocks, emitted at every marker."""

    input = U("CID", None)
    output = U("CID", "Count")

    def __init__(self, window_blocks: int = 10) -> None:
        self.window_blocks = window_blocks

    def in_(self, key, value):
        return 1

    def id(self):
        return 0

    def combine(self, x, y):
        return x + y

    def initial_state(self):
        return ()

    def update_state(self, old_state, agg):
        return (old_state + (agg,))[-self.window_blocks:]

    def on_marker(self, new_state, key, marker, emit):
        total = sum(new_state)
        if total:
            emit(key, (marker.timestamp, total))


def build(period_ms: int = 1_000, window_blocks: int = 10, partitions: int = 2, par: int = 2,
          ordering: str = "sort") -> Dag:
    """events -> ViewsToCampaigns -> WindowCount (10 s windows every 1 s by default) -> out."""
    dag = Dag(ordering)
    src = dag.source("events", period_ms=period_ms, partitions=partitions)
    views = dag.add_op(ViewsToCampaigns(), par, src, name="views")
    dag.sink("out", dag.add_op(WindowCount(window_blocks), par, views, name="window_count"))
    return dag


def events(n: int, base_ms: int, spacing_ms: float = 1.0, disorder_ms: int = 300, seed: int = 1):
    """``n`` benchmark events ``(key, value)``, ``spacing_ms`` apart, up to ``disorder_ms`` early."""
    rng = random.Random(seed)
    for i in range(n):
        yield None, {"user_id": f"u{rng.randrange(1000)}", "page_id": f"p{rng.randrange(100)}",
                     "ad_id": f"ad{rng.randrange(len(ADS))}", "event_type": rng.choice(EVENT_TYPES),
                     "ts": base_ms + int(i * spacing_ms) - rng.randrange(disorder_ms + 1)}


def main() -> None:   # pragma: no cover - an example run by hand
    from dataflow_kafka.traces.examples.run import run_example

    n = 3_000
    base = None

    def produce():
        nonlocal base
        import time

        base = int(time.time() * 1000) - n * 5
        return [(k, json.dumps(v).encode()) for k, v in events(n, base, spacing_ms=5)]

    run_example(build(), produce, partitions=2, show=8)


if __name__ == "__main__":   # pragma: no cover
    main()
