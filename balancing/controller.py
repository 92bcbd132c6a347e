"""A Flux-style load-balancing controller over key groups (Enorm §4.4.2, §4.5; Flux, Shah et al. 2003).

The unit of state and of load is the **key group**; a routing table maps each key group to a
**slot** (what the stateful operator groups by). Per period the controller is given the measured
load of every key group, ``{slot: {key_group: (rows, processor_ms)}}`` (the slot where the rows
were processed, summed over the period's micro-batches), and answers with move commands in the
control topic's format, ``{"op": "move", "key_group": 17, "to": 3}``.

One period (:meth:`FluxController.step`):

1. each key group's load (``processor_ms`` or ``rows``, :class:`ControllerConfig.metric`) is
   smoothed, ``s = a * x + (1 - a) * s_prev`` (``a`` = ``smoothing``; a key group's first
   observation is taken as it is), and slot loads are the sums over the controller's routing
   table: moves it issued count at once (they are in the control topic and will take effect);
   otherwise a key group that ran rows on one slot in the period is on that slot (so a restarted
   controller, or moves issued by someone else, are picked up; ``cooldown_periods`` must cover
   the time a command takes to take effect);
2. hysteresis: balancing starts when ``max / mean`` slot load exceeds ``1 + start_imbalance``
   and goes on, period after period, until it is at most ``1 + stop_imbalance``;
3. Flux rounds: slots sorted by load; the i-th most loaded is paired with the i-th least loaded;
   for a pair whose gap ``d`` exceeds ``stop_imbalance * mean`` the key group of load ``x`` with
   ``0 < x < d`` that lowers the variance most is moved (the variance falls by ``2x(d - x)/n``:
   the largest key group up to half the gap, else the smallest above it); a key group moved in
   the last ``cooldown_periods`` periods stays put; rounds repeat until no pair moves or
   ``max_moves`` moves were issued.

Every move lowers the variance of the slot loads the controller sees, and no move raises the
largest slot load, so on a steady load the routing table reaches a fixed point (finitely many
tables, each move strictly lowers the variance) and then no command is issued.

>>> c = FluxController({0: 0, 1: 0, 2: 1, 3: 1}, slots=[0, 1], config=ControllerConfig(metric="rows"))
>>> c.step({0: {0: (900, 0), 1: (500, 0)}, 1: {2: (100, 0), 3: (100, 0)}})
[{'op': 'move', 'key_group': 1, 'to': 1}]
>>> c.step({0: {0: (900, 0), 1: (500, 0)}, 1: {2: (100, 0), 3: (100, 0)}})   # fixed point
[]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

from dataflow_kafka.balancing.routing_table import move_command  # the one command format (also parsed there)
from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["ControllerConfig", "FluxController", "Load", "plan_moves", "move_command", "key_group_loads"]

#: ``{slot: {key_group: (rows, processor_ms)}}``: one period's measured load.
Load = Mapping[int, Mapping[int, tuple[float, float]]]

_METRICS = ("processor_ms", "rows")


@dataclass(frozen=True)
class ControllerConfig:
    """Settings of :class:`FluxController` (validated; errors name the option and the value).

    metric : ``"processor_ms"`` (default) or ``"rows"``: which measure is a key group's load.
    smoothing : weight of the newest period in the moving average, ``0 < smoothing <= 1``.
    start_imbalance : balancing starts when max/mean slot load > ``1 + start_imbalance``.
    stop_imbalance : and stops at ``<= 1 + stop_imbalance``; a slot pair is balanced only when its
        gap exceeds ``stop_imbalance * mean`` (``0 <= stop_imbalance <= start_imbalance``).
    max_moves : moves per period at most (>= 0).
    cooldown_periods : a moved key group is not moved again, nor placed where it was measured, for
        this many periods (>= 0): cover the time a command takes to take effect.
    """

    metric: str = "processor_ms"
    smoothing: float = 0.5
    start_imbalance: float = 0.10
    stop_imbalance: float = 0.05
    max_moves: int = 4
    cooldown_periods: int = 2

    def __post_init__(self) -> None:
        if self.metric not in _METRICS:
            raise InvalidArgumentError(f"ControllerConfig.metric must be one of {_METRICS}, got {self.metric!r}")
        if not (isinstance(self.smoothing, (int, float)) and 0 < self.smoothing <= 1):
            raise InvalidArgumentError(f"ControllerConfig.smoothing must be in (0, 1], got {self.smoothing!r}")
        for name in ("start_imbalance", "stop_imbalance"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InvalidArgumentError(f"ControllerConfig.{name} must be a finite number >= 0, got {v!r}")
        if self.stop_imbalance > self.start_imbalance:
            raise InvalidArgumentError(f"ControllerConfig.stop_imbalance ({self.stop_imbalance!r}) must not exceed "
                             f"start_imbalance ({self.start_imbalance!r})")
        for name in ("max_moves", "cooldown_periods"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
                raise InvalidArgumentError(f"ControllerConfig.{name} must be an integer >= 0, got {v!r}")


def key_group_loads(load: Load, metric: str = "processor_ms") -> dict[int, float]:
    """Each key group's load in one period, summed over the slots that processed it (a key group
    that moved during the period shows up under two slots). Bad entries raise a ValueError
    naming the slot and key group."""
    if metric not in _METRICS:
        raise InvalidArgumentError(f"metric must be one of {_METRICS}, got {metric!r}")
    col = 1 if metric == "processor_ms" else 0
    out: dict[int, float] = {}
    for slot, groups in load.items():
        for kg, measured in groups.items():
            try:
                rows, ms = measured
                v = float((rows, ms)[col])
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"load of slot {slot!r}, key group {kg!r}: expected (rows, processor_ms), "
                                 f"got {measured!r}") from None
            if not (math.isfinite(v) and v >= 0):
                raise InvalidArgumentError(f"load of slot {slot!r}, key group {kg!r}: {metric} must be a finite number "
                                 f">= 0, got {v!r}")
            out[int(kg)] = out.get(int(kg), 0.0) + v
    return out


def plan_moves(loads: Mapping[int, float], routing: Mapping[int, int], slots: Iterable[int], *,
               max_moves: int, min_gap: float = 0.0, frozen: Iterable[int] = ()) -> list[tuple[int, int, int]]:
    """Flux rounds over fixed key-group loads (no smoothing, no hysteresis): ``[(key_group, from,
    to), ...]`` in the order they are applied, at most ``max_moves``.

    Slots sorted by load (ties by slot id), the i-th most loaded paired with the i-th least
    loaded; a pair with gap ``d > min_gap`` moves the key group (not in ``frozen``) of load
    ``0 < x < d`` (beyond rounding) with the largest variance drop ``x(d - x)`` (ties: larger ``x``, then smaller key
    group); rounds repeat on the updated loads until a round moves nothing.
    """
    slot_ids = sorted({int(s) for s in slots})
    if not slot_ids:
        raise InvalidArgumentError("plan_moves: no slots")
    index = {s: i for i, s in enumerate(slot_ids)}
    kgs = np.array(sorted(routing), dtype=np.int64)
    for kg in kgs:
        if int(routing[kg]) not in index:
            raise InvalidArgumentError(f"routing table: key group {kg} is on slot {routing[kg]}, not one of the slots {slot_ids}")
    where = np.array([index[int(routing[kg])] for kg in kgs], dtype=np.int64)
    x = np.array([float(loads.get(int(kg), 0.0)) for kg in kgs])
    movable = ~np.isin(kgs, np.array(list(frozen), dtype=np.int64))
    slot_load = np.bincount(where, weights=x, minlength=len(slot_ids)) if len(kgs) else np.zeros(len(slot_ids))
    # smoothed loads carry rounding: a move must beat it, or a swap of two equal slots (x == d)
    # would look like a gain and flap back and forth
    tol = 1e-9 * max(1.0, float(np.abs(x).sum()))
    moves: list[tuple[int, int, int]] = []
    while len(moves) < max_moves:
        order = np.lexsort((np.arange(len(slot_ids)), -slot_load))      # most loaded first
        moved = False
        for i in range(len(slot_ids) // 2):
            if len(moves) >= max_moves:
                break
            hi, lo = order[i], order[-1 - i]
            d = slot_load[hi] - slot_load[lo]
            if not d > min_gap:
                continue
            cand = np.flatnonzero((where == hi) & movable & (x > tol) & (x < d - tol))
            if not len(cand):
                continue
            gain = x[cand] * (d - x[cand])
            best = cand[np.lexsort((kgs[cand], -x[cand], -gain))[0]]
            where[best] = lo
            slot_load[hi] -= x[best]
            slot_load[lo] += x[best]
            movable[best] = False                                      # once per period
            moves.append((int(kgs[best]), slot_ids[hi], slot_ids[lo]))
            moved = True
        if not moved:
            break
    return moves


class FluxController:
    """Flux over key groups with smoothing, hysteresis and a cooldown; see the module docstring.

    Parameters
    ----------
    routing : the current routing table ``{key_group: slot}``; the controller keeps its own copy,
        updates it with every move it issues and with where key groups ran (:attr:`routing`).
    slots : every slot (an idle slot has no load entries); default: the slots of ``routing``.
    config : :class:`ControllerConfig`.
    """

    def __init__(self, routing: Mapping[int, int], slots: Iterable[int] | None = None, *,
                 config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self._routing = {int(k): int(s) for k, s in routing.items()}
        self.slots = sorted({int(s) for s in (slots if slots is not None else self._routing.values())})
        if not self.slots:
            raise InvalidArgumentError("FluxController: no slots (give slots= or a non-empty routing table)")
        bad = {k: s for k, s in self._routing.items() if s not in self.slots}
        if bad:
            k = next(iter(bad))
            raise InvalidArgumentError(f"routing table: key group {k} is on slot {bad[k]}, not one of the slots {self.slots}")
        self._smoothed: dict[int, float] = {}
        self._moved_at: dict[int, int] = {}
        self._period = 0
        self.balancing = False

    @property
    def routing(self) -> dict[int, int]:
        """The routing table as the controller sees it (with the moves it issued)."""
        return dict(self._routing)

    @property
    def loads(self) -> dict[int, float]:
        """The smoothed load of every key group seen so far."""
        return dict(self._smoothed)

    def slot_loads(self) -> dict[int, float]:
        """Smoothed load per slot under :attr:`routing`."""
        out = {s: 0.0 for s in self.slots}
        for kg, s in self._routing.items():
            out[s] += self._smoothed.get(kg, 0.0)
        return out

    def step(self, load: Load) -> list[dict]:
        """One period: fold in ``load`` (``{slot: {key_group: (rows, processor_ms)}}``) and return
        the move commands to write to the control topic (at most ``max_moves``)."""
        cfg = self.config
        self._period += 1
        ran_on: dict[int, set[int]] = {}
        for slot in load:
            if int(slot) not in self.slots:
                raise InvalidArgumentError(f"load names slot {slot!r}, not one of the slots {self.slots}")
        measured = key_group_loads(load, cfg.metric)   # validates every entry
        for slot, groups in load.items():
            for kg, (rows, _ms) in groups.items():
                if rows > 0:   # a slot that only closed a moved key group's old panes is not where it runs
                    ran_on.setdefault(int(kg), set()).add(int(slot))
        for kg, where in ran_on.items():
            # where a key group ran (on one slot) is where it is, unless a move of ours is in flight:
            # a restarted controller and moves issued by others are picked up from the measurements
            moved = self._moved_at.get(kg)
            if len(where) == 1 and (moved is None or self._period - moved > cfg.cooldown_periods):
                self._routing[kg] = next(iter(where))
        a = cfg.smoothing
        for kg in self._routing:
            x = measured.get(kg, 0.0)
            prev = self._smoothed.get(kg)
            self._smoothed[kg] = x if prev is None else a * x + (1 - a) * prev
        per_slot = np.array(list(self.slot_loads().values()))
        mean = float(per_slot.mean())
        if mean <= 0:
            self.balancing = False
            return []
        ratio = float(per_slot.max()) / mean
        if self.balancing and ratio <= 1 + cfg.stop_imbalance:
            self.balancing = False
        elif not self.balancing and ratio > 1 + cfg.start_imbalance:
            self.balancing = True
        if not self.balancing:
            return []
        frozen = [kg for kg, p in self._moved_at.items() if self._period - p <= cfg.cooldown_periods]
        moves = plan_moves(self._smoothed, self._routing, self.slots, max_moves=cfg.max_moves,
                           min_gap=cfg.stop_imbalance * mean, frozen=frozen)
        for kg, _, to in moves:
            self._routing[kg] = to
            self._moved_at[kg] = self._period
        return [move_command(kg, to) for kg, _, to in moves]
