"""When the engine keeps records: the decision tree of Scotty section 5.1 (Figure 4).

Records are kept (in addition to slice aggregates) for the time measure if

* a forward-context-aware window other than a session runs (in-order or not: its forward
  context adds edges in the past, which split slices), or, on an out-of-order stream,
* an aggregation is not commutative (an out-of-order record changes the combine order), or
* a context-aware window other than a session runs (backward context splits slices).

Sessions are the paper's exception (section 6.2): their splits fall into gaps. The count
measure on an out-of-order stream always keeps records (condition 3; an out-of-order record
shifts every later position); this engine keeps them for count windows on in-order streams
too, bounded by the allowed lateness. Holistic aggregations keep their values inside the
slice aggregate (sorted, section 5.4.1), which is not the same as keeping records.
"""

from __future__ import annotations

from typing import Iterable

from slicer.aggregates import AggregateFunction
from slicer.context_windows import ContextAwareWindow, SessionWindow
from slicer.windows import Count, Window

__all__ = ["record_reasons"]


def record_reasons(windows: Iterable[Window], aggregations: Iterable[AggregateFunction],
                   in_order: bool) -> list[str]:
    """Why time-measure slices need records; an empty list means aggregates suffice."""
    reasons = []
    for w in windows:
        if w.measure is Count or isinstance(w, SessionWindow) or not isinstance(w, ContextAwareWindow):
            continue
        if not w.forward_context_free:
            reasons.append(f"{w!r} is forward context aware")
        elif not in_order:
            reasons.append(f"{w!r} is context aware on an out-of-order stream")
    if not in_order:
        reasons += [f"{a.name} is not commutative on an out-of-order stream"
                    for a in aggregations if not a.commutative]
    return reasons
