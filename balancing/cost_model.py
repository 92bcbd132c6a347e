"""Split or combine a windowed operator: Enorm's cost model (§5.1.1) and its decision rule (§5.1.2).

A windowed aggregation runs either **combined** (one stateful rigid component: every tuple is
executed once per overlapping window; a move ships the key group's state, disruptive migration)
or **split** (a flexible compute stage keeps partials per pane, a consolidate stage merges them;
a move ships nothing, instant migration, but the partials are sent downstream). Over ``p``, the
longest window of the operator (Enorm's notation; times in ms):

============  ===========================================================================
``T_p``       tuples processed within ``p``
``E``         average cost of the user logic for one tuple
``W``         number of overlapping windows (windows a tuple belongs to)
``PW_p``      partial windows (panes) within ``p``
``MK_p``      key groups migrated within ``p`` (load balancing)
``K_1``       cost of migrating a key group holding one copy of its state (``K_x = x * K_1``)
``L``         average latency of migrating a key group with its state
``G``         number of key groups (``#keygroups``)
============  ===========================================================================

* split CPU: ``T_p E + PW_p K_1 G + MK_p K_1``; split latency: negligible (0);
* combine CPU: ``T_p W E + MK_p K_1 PW_p``; combine latency: ``MK_p L``.

Decision (§5.1.2): the lower CPU cost, with the latency bounded by a user threshold (combine is
ruled out when ``MK_p L`` exceeds it), evaluated at most once every period ``p``
(:class:`SplitCombinePolicy`). ``K_1`` and ``L`` come from state sizes: ``state_bytes / bytes_per_ms``
(:func:`migration_cost_ms`).

>>> m = Measurement(tuples=600_000, tuple_cost_ms=0.002, overlapping_windows=6, partial_windows=30,
...                 migrated_key_groups=40, key_group_cost_ms=0.5, migration_latency_ms=20, key_groups=64)
>>> split_cpu_ms(m), combine_cpu_ms(m), combine_latency_ms(m)
(2180.0, 7800.0, 800.0)
>>> decide(m, max_latency_ms=1_000)
'split'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from functools import reduce
from typing import Iterable
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["Measurement", "split_cpu_ms", "combine_cpu_ms", "split_latency_ms", "combine_latency_ms",
           "decide", "window_shape", "migration_cost_ms", "SplitCombinePolicy", "Decision", "SPLIT", "COMBINE"]

SPLIT = "split"
COMBINE = "combine"


@dataclass(frozen=True)
class Measurement:
    """One operator's measured figures over the period ``p`` (Enorm §5.1.1's symbols in brackets).

    tuples [T_p], tuple_cost_ms [E], overlapping_windows [W], partial_windows [PW_p],
    migrated_key_groups [MK_p], key_group_cost_ms [K_1], migration_latency_ms [L], key_groups [G].
    """

    tuples: float
    tuple_cost_ms: float
    overlapping_windows: float
    partial_windows: float
    migrated_key_groups: float
    key_group_cost_ms: float
    migration_latency_ms: float
    key_groups: int

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InvalidArgumentError(f"Measurement.{f.name} must be a finite number >= 0, got {v!r}")
        if self.overlapping_windows < 1 or self.partial_windows < 1:
            raise InvalidArgumentError(f"Measurement: overlapping_windows and partial_windows must be >= 1, got "
                             f"{self.overlapping_windows!r} and {self.partial_windows!r}")


def split_cpu_ms(m: Measurement) -> float:
    """``T_p E + PW_p K_1 G + MK_p K_1`` (§5.1.1, split: tuples once, partials out, extra partials
    of moved key groups)."""
    return float(m.tuples * m.tuple_cost_ms + m.partial_windows * m.key_group_cost_ms * m.key_groups
                 + m.migrated_key_groups * m.key_group_cost_ms)


def combine_cpu_ms(m: Measurement) -> float:
    """``T_p W E + MK_p K_1 PW_p`` (§5.1.1, combine: tuples once per window, moves ship every pane)."""
    return float(m.tuples * m.overlapping_windows * m.tuple_cost_ms
                 + m.migrated_key_groups * m.key_group_cost_ms * m.partial_windows)


def split_latency_ms(m: Measurement) -> float:
    """0: partials are final when sent, a separate thread serialises them (§5.1.1)."""
    return 0.0


def combine_latency_ms(m: Measurement) -> float:
    """``MK_p L``: every move pauses its key group while the state travels (§5.1.1)."""
    return float(m.migrated_key_groups * m.migration_latency_ms)


def decide(m: Measurement, max_latency_ms: float = math.inf) -> str:
    """``"split"`` or ``"combine"``: the lower CPU cost among the plans whose latency is at most
    ``max_latency_ms`` (§5.1.2); split when the costs tie (it can move key groups instantly)."""
    if combine_latency_ms(m) > max_latency_ms:
        return SPLIT
    return COMBINE if combine_cpu_ms(m) < split_cpu_ms(m) else SPLIT


def window_shape(windows: Iterable) -> tuple[int, int, int, int]:
    """``(p_ms, pane_ms, PW_p, W)`` of a set of windows, each ``(size_ms, slide_ms)`` or an object
    with ``size_ms`` (and ``slide_ms``; tumbling without). ``p`` is the longest window, the pane the
    gcd of every size and slide (Enorm §2's partial windows, Scotty's slices), ``PW_p = p / pane``
    and ``W`` the number of windows a tuple belongs to, ``sum(ceil(size / slide))``.

    >>> window_shape([(300_000, 300_000), (600_000, 60_000)])
    (600000, 60000, 10, 11)
    """
    pairs = []
    for w in windows:
        if isinstance(w, tuple):
            size, slide = w
        else:
            size = getattr(w, "size_ms", None)
            slide = getattr(w, "slide_ms", size)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (size, slide)):
            raise InvalidArgumentError(f"window_shape: a window needs integer size_ms and slide_ms > 0, got {w!r}")
        pairs.append((size, slide))
    if not pairs:
        raise InvalidArgumentError("window_shape: no windows")
    p = max(s for s, _ in pairs)
    pane = reduce(math.gcd, [v for pair in pairs for v in pair])
    return p, pane, p // pane, sum(-(-s // d) for s, d in pairs)


def migration_cost_ms(state_bytes: float, bytes_per_ms: float) -> float:
    """Cost of moving ``state_bytes`` of state at a measured ``bytes_per_ms`` (serialise, send,
    install): Enorm's ``K_1`` for one copy of a key group's state, or ``L`` for its latency."""
    if not (math.isfinite(state_bytes) and state_bytes >= 0):
        raise InvalidArgumentError(f"migration_cost_ms: state_bytes must be a finite number >= 0, got {state_bytes!r}")
    if not (math.isfinite(bytes_per_ms) and bytes_per_ms > 0):
        raise InvalidArgumentError(f"migration_cost_ms: bytes_per_ms must be a finite number > 0, got {bytes_per_ms!r}")
    return state_bytes / bytes_per_ms


@dataclass(frozen=True)
class Decision:
    """A policy's verdict for one operator: ``plan`` (``"split"``/``"combine"``), whether it is a
    ``switch`` from the current plan, both plans' CPU cost and the combined plan's latency, and
    ``smooth_until_ms``: a switch runs the new plan beside the old until the longest window has
    passed (Enorm §4.5, smooth migration), i.e. ``at_ms + p``."""

    operator: str
    plan: str
    switch: bool
    split_cpu_ms: float
    combine_cpu_ms: float
    combine_latency_ms: float
    at_ms: int
    smooth_until_ms: int


class SplitCombinePolicy:
    """Evaluates operators with :func:`decide` at most once every ``period_ms`` each (Enorm §5.1.2:
    "after every period p"; ``p`` is the operator's longest window).

    >>> pol = SplitCombinePolicy(period_ms=600_000, max_latency_ms=1_000, initial=COMBINE)
    >>> m = Measurement(600_000, 0.002, 6, 30, 40, 0.5, 20, 64)
    >>> pol.evaluate("counts", m, now_ms=0).plan, pol.evaluate("counts", m, now_ms=1_000)
    ('split', None)
    """

    def __init__(self, period_ms: int, max_latency_ms: float = math.inf, initial: str = COMBINE) -> None:
        if not (isinstance(period_ms, int) and not isinstance(period_ms, bool) and period_ms > 0):
            raise InvalidArgumentError(f"SplitCombinePolicy.period_ms must be an integer > 0, got {period_ms!r}")
        if not (isinstance(max_latency_ms, (int, float)) and max_latency_ms >= 0):
            raise InvalidArgumentError(f"SplitCombinePolicy.max_latency_ms must be a number >= 0, got {max_latency_ms!r}")
        if initial not in (SPLIT, COMBINE):
            raise InvalidArgumentError(f"SplitCombinePolicy.initial must be {SPLIT!r} or {COMBINE!r}, got {initial!r}")
        self.period_ms = period_ms
        self.max_latency_ms = max_latency_ms
        self.initial = initial
        self._plan: dict[str, str] = {}
        self._last_ms: dict[str, int] = {}

    def plan(self, operator: str) -> str:
        """The operator's current plan."""
        return self._plan.get(operator, self.initial)

    def evaluate(self, operator: str, m: Measurement, now_ms: int) -> Decision | None:
        """A :class:`Decision` when ``period_ms`` has passed since this operator's last evaluation
        (or at its first), else None. ``now_ms`` comes from the data (a batch's processing time),
        not from a clock, so a replay decides the same."""
        last = self._last_ms.get(operator)
        if last is not None and now_ms - last < self.period_ms:
            return None
        self._last_ms[operator] = now_ms
        plan = decide(m, self.max_latency_ms)
        switch = plan != self.plan(operator)
        self._plan[operator] = plan
        return Decision(operator, plan, switch, split_cpu_ms(m), combine_cpu_ms(m), combine_latency_ms(m),
                        now_ms, now_ms + self.period_ms if switch else now_ms)
