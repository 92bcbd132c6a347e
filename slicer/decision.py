"""When the engine keeps records: the decision tree of Scotty section 5.1 (Figure 4).

Records are kept (in addition to slice aggregates) for the time measure if

* a forward-context-aware window other than a session runs (in-order or not: its forward
  context adds edges in the past, which split slices), or, on an out-of-order stream,
* an aggregation is not commutative (an out-of-order record changes the combine order), or
* a context-aware window other than a session runs (backward context splits slices).

Sessions are the paper's exception (section 6.2): their splits fall into gaps. A punctuation
window keeps records on in-order streams too: its window ``[p, next)`` starts at the
punctuation's time, and records with that same time that arrived before it are already in the
previous slice (a tie, which a split must move). The count
measure on an out-of-order stream always keeps records (condition 3; an out-of-order record
shifts every later position); this engine keeps them for count windows on in-order streams
too, bounded by the allowed lateness. Holistic aggregations keep their values inside the
slice aggregate (sorted, section 5.4.1), which is not the same as keeping records.
"""

from __future__ import annotations

from typing import Iterable

from dataflow_kafka.slicer.windows import COUNT
from dataflow_kafka.windowing import AggregateFunction

__all__ = ["record_reasons"]


def record_reasons(queries: Iterable, aggregations: Iterable[AggregateFunction],
                   in_order: bool) -> list[str]:
    """Why time-measure slices need records; an empty list means aggregates suffice.

    ``queries``: the operator's :class:`~slicer.window_manager.Query` objects; the windows'
    capability attributes (``context_free``, ``splits_in_gaps_only``, ``forward_context_free``,
    ``in_order_record_reason``) decide."""
    reasons = []
    for q in queries:
        w = q.window
        if q.measure is COUNT or w.context_free or w.splits_in_gaps_only:
            continue
        if not w.forward_context_free:
            reasons.append(f"{q.spec!r} is forward context aware")
        elif not in_order:
            reasons.append(f"{q.spec!r} is context aware on an out-of-order stream")
        elif w.in_order_record_reason:
            reasons.append(f"{q.spec!r} {w.in_order_record_reason}")
    if not in_order:
        reasons += [f"{a.name} is not commutative on an out-of-order stream"
                    for a in aggregations if not a.commutative]
    return reasons
