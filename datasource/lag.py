"""Consumer lag of a dataflow-kafka query: records behind the latest offset, per partition.

A Python source cannot add custom metrics to ``StreamingQueryProgress``, but Spark puts the
source's end offset and its reported latest offset (``reportLatestOffset``) into every progress
event. :func:`consumer_lag` reads them::

    >>> lag = consumer_lag(query.lastProgress)            # doctest: +SKIP
    >>> lag
    {('events', 0): 0, ('events', 1): 1200}

It works on a progress dict from ``query.lastProgress``, ``query.recentProgress`` or a
``StreamingQueryListener``'s ``event.progress.jsonValue()``.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["consumer_lag"]


def consumer_lag(progress: dict[str, Any] | None) -> dict[tuple[str, int], int]:
    """Per (topic, partition): latest offset minus the offset the query has read up to."""
    if not progress:
        return {}
    out: dict[tuple[str, int], int] = {}
    for src in progress.get("sources", []):
        end, latest = src.get("endOffset"), src.get("latestOffset")
        if isinstance(end, str):
            end = json.loads(end)
        if isinstance(latest, str):
            latest = json.loads(latest)
        if not isinstance(end, dict) or "partitions" not in end or not isinstance(latest, dict):
            continue
        for topic, parts in end["partitions"].items():
            for p, entry in parts.items():
                hi = latest.get(topic, {}).get(p)
                if hi is not None:
                    out[(topic, int(p))] = max(0, int(hi) - int(entry["o"]))
    return out
